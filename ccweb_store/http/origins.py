"""The ``Origin`` checks: the loose one that keeps web pages (DNS rebinding) away from
``/mcp`` and ``/rpc``, and the exact one the console's form POSTs pass.

On ``/mcp`` and ``/rpc`` requests without an ``Origin`` (agents, CLIs, servers) pass. An
allowed origin written without a port (the defaults: ``http://localhost``,
``http://127.0.0.1``…) matches any port; one with a port matches only that port; ``*``
allows every origin. ``origin_checked`` puts an endpoint behind the check; the app's route
table says which endpoints are.

A console action is exact (``same_origin``): its ``Origin`` must be the console's own (the
scheme, host and port the request came to) or an entry of ``CCWEB_ALLOWED_ORIGINS`` with the
same port, a port left out being its scheme's default. Any page on another loopback port is
another origin, and so is ``null``; the defaults (loopback names without a port) and ``*``
open no console action.
"""

from __future__ import annotations

import functools
from urllib.parse import urlsplit

from ccweb_store.config import is_loopback_host
from ccweb_store.http.asgi import Answer, AnswerFunction, Incoming
from ccweb_store.http.payloads import JSONResponse, http_error
from ccweb_store.protocol import jsonrpc


def origin_checked(answer: AnswerFunction, allowed: tuple[str, ...]) -> AnswerFunction:
    """``answer``, answering a 403 instead when the request's ``Origin`` is not allowed."""

    @functools.wraps(answer)
    async def checked(incoming: Incoming) -> Answer:
        rejection = origin_rejection(incoming.header(b"origin"), allowed)
        if rejection is not None:
            return rejection
        return await answer(incoming)

    return checked


def origin_allowed(origin: str, allowed: tuple[str, ...]) -> bool:
    """Whether a browser ``Origin`` value matches one of ``allowed``."""
    try:
        given = urlsplit(origin.strip())
        given_port = given.port
    except ValueError:
        return False
    if not given.scheme or not given.hostname or not _plain_netloc(given.netloc, given_port):
        return False
    for entry in allowed:
        if entry == "*":
            return True
        try:
            rule = urlsplit(entry)
            rule_port = rule.port
        except ValueError:
            continue
        if rule.scheme.lower() != given.scheme.lower() or rule.hostname != given.hostname:
            continue
        if rule_port is None or rule_port == given_port:
            return True
    return False


#: The port an origin means when it names none.
DEFAULT_PORTS = {"http": 80, "https": 443}


def exact_origin(value: str) -> tuple[str, str, int] | None:
    """An origin as ``(scheme, host, port)``, lower case, the port filled in from the scheme;
    None when ``value`` is no plain ``http``/``https`` origin (``null``, a path, a user)."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    if not _plain_netloc(parts.netloc, port) or parts.path not in ("", "/"):
        return None
    if parts.query or parts.fragment:
        return None
    return scheme, parts.hostname.lower(), DEFAULT_PORTS[scheme] if port is None else port


def same_origin(origin: str, own: str, allowed: tuple[str, ...]) -> bool:
    """Whether a console action's ``Origin`` is ``own`` (the console's origin, as the request
    reached it) or an entry of ``allowed`` with its exact port."""
    given = exact_origin(origin)
    if given is None:
        return False
    if exact_origin(own) == given:
        return True
    return any(_exact_entry(entry) == given for entry in allowed)


def _exact_entry(entry: str) -> tuple[str, str, int] | None:
    """An allowed origin as the exact check reads it: a loopback entry without a port (the
    defaults) means every port, so no port in particular, and ``*`` no origin at all."""
    parts = exact_origin(entry) if entry != "*" else None
    if parts is None or (is_loopback_host(parts[1]) and urlsplit(entry).port is None):
        return None
    return parts


def _plain_netloc(netloc: str, port: int | None) -> bool:
    """Whether ``netloc`` is just a host and a port, as browsers write an Origin: not
    ``user@host``, not ``[::1].evil.example`` (whose parsed hostname would be ``::1``)."""
    host = urlsplit(f"//{netloc}").hostname or ""
    bracketed = f"[{host}]" if ":" in host else host
    expected = bracketed if port is None else f"{bracketed}:{port}"
    return netloc.lower() == expected


def origin_rejection(origin: str | None, allowed: tuple[str, ...]) -> JSONResponse | None:
    """A 403 naming the setting to change when a request's ``Origin`` is not allowed."""
    if origin is None or origin_allowed(origin, allowed):
        return None
    return http_error(
        403,
        jsonrpc.INVALID_REQUEST,
        f"origin {origin!r} is not allowed: add it to CCWEB_ALLOWED_ORIGINS",
    )
