"""The ``Host`` check that keeps DNS rebinding away from every route.

A page on ``rebind.evil.example`` whose name a hostile DNS server points at 127.0.0.1 reaches
this server from the user's browser as a same-origin request: the browser sends no ``Origin``
on a GET, so only the ``Host`` header tells the request apart. Every request must name an
allowed host: a loopback name (``localhost``, ``127.0.0.1`` or any 127.0.0.0/8 address,
``[::1]``) on any port, the bind address, the hosts of ``CCWEB_ALLOWED_ORIGINS`` and
``CCWEB_ALLOWED_HOSTS`` (``*`` there allows every host). Anything else is a 421 whose JSON
body names the setting, before any route, the bearer token or the console runs.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from ccweb_store.config import Settings, is_loopback_host
from ccweb_store.http.payloads import http_error
from ccweb_store.protocol import jsonrpc

#: The binds that listen on every address: they name no host of their own.
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", "[::]", ""})


def allowed_hosts(settings: Settings) -> frozenset[str]:
    """The host names (lower case, IPv6 without brackets) requests may name besides loopback;
    ``*`` in the set allows every host."""
    hosts = {host.strip().lower().strip("[]") for host in settings.allowed_hosts}
    if settings.host.strip("[]") not in WILDCARD_BINDS:
        hosts.add(settings.host.lower().strip("[]"))
    for origin in settings.allowed_origins:
        if origin == "*":
            continue
        try:
            name = urlsplit(origin).hostname
        except ValueError:
            continue
        if name:
            hosts.add(name.lower())
    hosts.discard("")
    return frozenset(hosts)


def host_name(header: str) -> str | None:
    """The host of a ``Host`` header (``name``, ``name:port``, ``[v6]:port``), lower case and
    without brackets; None for a value that is no host."""
    try:
        parts = urlsplit(f"//{header.strip()}")
        parts.port  # noqa: B018 - a port that is not a number makes the header invalid
    except ValueError:
        return None
    if parts.username is not None or parts.path or parts.query or parts.fragment:
        return None
    return parts.hostname or None


class HostCheck:
    """Refuse (421) a request whose ``Host`` names no allowed host; see the module docstring."""

    def __init__(self, app: ASGIApp, allowed: frozenset[str]) -> None:
        self.app = app
        self.allowed = allowed
        self.any_host = "*" in allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.any_host:
            await self.app(scope, receive, send)
            return
        header = None
        for name, value in scope["headers"]:
            if name == b"host":
                header = value.decode("latin-1")
                break
        if header is None:  # HTTP/1.0 without Host: no browser sends that
            await self.app(scope, receive, send)
            return
        host = host_name(header)
        if host is not None and (host in self.allowed or is_loopback_host(host)):
            await self.app(scope, receive, send)
            return
        response = http_error(
            421,
            jsonrpc.INVALID_REQUEST,
            f"host {header!r} is not served here (a page that rebound its name to this "
            "server, or a name this server was not told about): connect to 127.0.0.1 or "
            "localhost, or add the name to CCWEB_ALLOWED_HOSTS",
            {"code": "host_not_allowed"},
        )
        await response(scope, receive, send)
