"""The ``Origin`` check that keeps web pages (DNS rebinding) away from ``/mcp`` and ``/rpc``.

Requests without an ``Origin`` (agents, CLIs, servers) pass. An allowed origin written
without a port (the defaults: ``http://localhost``, ``http://127.0.0.1``…) matches any
port; one with a port matches only that port; ``*`` allows every origin. ``origin_checked``
puts an endpoint behind the check; the app's route table says which endpoints are.
"""

from __future__ import annotations

import functools
from urllib.parse import urlsplit

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
