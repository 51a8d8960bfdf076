"""The console's login: a cookie that stands for the operator token for a while.

The login form's POST checks the token and sets ``ccweb_console`` (``HttpOnly``,
``SameSite=Strict``, ``Path=/``; ``Secure`` over HTTPS): ``v1.<expiry>.<HMAC-SHA256>`` keyed
by the token, so the cookie holds no token, the server keeps no session table (any number
of server processes accept it), and changing ``CCWEB_TOKEN`` ends every login. It opens the
console's own paths and ``GET /events``; ``/rpc`` and ``/mcp`` still need the token itself,
so no other site's form can reach them with it.
"""

from __future__ import annotations

import hashlib
import hmac
import time

from starlette.datastructures import Headers

COOKIE = "ccweb_console"
#: How long a login lasts, in seconds.
LOGIN_SECONDS = 12 * 3600
_VERSION = "v1"


def _signature(token: str, expires: int) -> str:
    message = f"ccweb-console-login:{expires}".encode()
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()


def cookie_value(token: str, *, now: float | None = None) -> str:
    """A login's cookie value, valid for ``LOGIN_SECONDS`` from ``now``."""
    expires = int(now if now is not None else time.time()) + LOGIN_SECONDS
    return f"{_VERSION}.{expires}.{_signature(token, expires)}"


def cookie_valid(token: str, value: str, *, now: float | None = None) -> bool:
    """Whether ``value`` is a login cookie made with ``token`` that has not expired."""
    version, _, rest = value.partition(".")
    expires_text, _, signature = rest.partition(".")
    if version != _VERSION or not expires_text.isdigit() or len(expires_text) > 12:
        return False
    expires = int(expires_text)
    if expires <= (now if now is not None else time.time()):
        return False
    return hmac.compare_digest(signature.encode(), _signature(token, expires).encode())


def cookie_of(headers: Headers) -> str | None:
    """The login cookie's value in a request's ``Cookie`` header, if any."""
    for header in headers.getlist("cookie"):
        for part in header.split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE:
                return value
    return None


def set_cookie_header(value: str, *, secure: bool) -> str:
    attributes = f"{COOKIE}={value}; Path=/; Max-Age={LOGIN_SECONDS}; HttpOnly; SameSite=Strict"
    return attributes + ("; Secure" if secure else "")


def clear_cookie_header(*, secure: bool) -> str:
    attributes = f"{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"
    return attributes + ("; Secure" if secure else "")
