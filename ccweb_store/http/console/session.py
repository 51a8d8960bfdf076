"""The console's login: a cookie that stands for the operator token for a while, and a key
that binds it to the console's own origin.

The login form's POST checks the token and sets ``ccweb_console`` (``HttpOnly``,
``SameSite=Strict``, ``Path=/``; ``Secure`` over HTTPS): ``v2.<expiry>.<nonce>.<HMAC-SHA256>``
keyed by the token, so the cookie holds no token, the server keeps no session table (any
number of server processes accept it), and changing ``CCWEB_TOKEN`` ends every login.

Browsers send a host's cookies to every port of that host, so the cookie alone opens nothing
but the page's empty frame. Each login also has a key (``login_key``: an HMAC of the cookie's
expiry and nonce), handed to the page once in the fragment of the address the login redirects
to, which browsers never send. The page's script keeps it in ``localStorage``, which belongs
to the console's own origin (scheme, host and port), and sends it with every request: in
``KEY_HEADER`` when it reads a page or ``/events``, in the ``KEY_FIELD`` of every form it
posts. A request with the cookie and its key is ``bound`` (``BOUND_SCOPE_KEY``): it sees and
changes the console's data. A server on another port of the host receives the cookie, never
the key. ``/rpc`` and ``/mcp`` still need the token itself.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

from starlette.datastructures import Headers
from starlette.types import Scope

COOKIE = "ccweb_console"
#: The header that carries the login's key on a page's reads and on ``/events``.
KEY_HEADER = "x-ccweb-console-key"
#: The form field that carries it on the console's actions.
KEY_FIELD = "consoleKey"
#: The name of the key in the fragment of the address the login redirects to.
KEY_FRAGMENT = "key"
#: Set in the ASGI scope (by ``auth.BearerAuth``) when a request carries the operator token,
#: or the login cookie with its key in ``KEY_HEADER``.
BOUND_SCOPE_KEY = "ccweb.console_bound"
#: How long a login lasts, in seconds.
LOGIN_SECONDS = 12 * 3600
_VERSION = "v2"


def _mac(token: str, purpose: str, expires: str, nonce: str) -> str:
    message = f"ccweb-console-{purpose}:{expires}.{nonce}".encode()
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()


def cookie_value(token: str, *, now: float | None = None) -> str:
    """A new login's cookie value, valid for ``LOGIN_SECONDS`` from ``now``."""
    expires = str(int(now if now is not None else time.time()) + LOGIN_SECONDS)
    nonce = secrets.token_hex(16)
    return f"{_VERSION}.{expires}.{nonce}.{_mac(token, 'login', expires, nonce)}"


def _parts(value: str) -> tuple[str, str, str] | None:
    """A cookie value's expiry, nonce and signature, if it has the form of one."""
    version, expires, nonce, signature = ([*value.split("."), "", "", ""])[:4]
    if value.count(".") != 3 or version != _VERSION:
        return None
    if not expires.isdigit() or len(expires) > 12 or len(nonce) != 32:
        return None
    return expires, nonce, signature


def cookie_valid(token: str, value: str, *, now: float | None = None) -> bool:
    """Whether ``value`` is a login cookie made with ``token`` that has not expired."""
    parts = _parts(value)
    if parts is None:
        return False
    expires, nonce, signature = parts
    if int(expires) <= (now if now is not None else time.time()):
        return False
    expected = _mac(token, "login", expires, nonce)
    return hmac.compare_digest(signature.encode(), expected.encode())


def login_key(token: str, value: str) -> str:
    """The key of the login whose cookie is ``value`` (a valid one)."""
    parts = _parts(value)
    assert parts is not None, "a login key of a value that is no login cookie"
    expires, nonce, _ = parts
    return _mac(token, "key", expires, nonce)


def key_valid(token: str, value: str, key: str | None) -> bool:
    """Whether ``key`` is the key of the valid login cookie ``value``."""
    if not key or not cookie_valid(token, value):
        return False
    return hmac.compare_digest(key.encode(), login_key(token, value).encode())


def cookie_of(headers: Headers) -> str | None:
    """The login cookie's value in a request's ``Cookie`` header, if any."""
    for header in headers.getlist("cookie"):
        for part in header.split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE:
                return value
    return None


def bound(token: str | None, scope: Scope, headers: Headers, key: str | None = None) -> bool:
    """Whether a request may see and change the console's data: no token is set, or it
    carries the token itself, or the login cookie with its key (in ``KEY_HEADER``, or ``key``
    as a form gave it)."""
    if token is None or scope.get(BOUND_SCOPE_KEY):
        return True
    cookie = cookie_of(headers)
    return cookie is not None and key_valid(token, cookie, key)


def set_cookie_header(value: str, *, secure: bool) -> str:
    attributes = f"{COOKIE}={value}; Path=/; Max-Age={LOGIN_SECONDS}; HttpOnly; SameSite=Strict"
    return attributes + ("; Secure" if secure else "")


def clear_cookie_header(*, secure: bool) -> str:
    attributes = f"{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"
    return attributes + ("; Secure" if secure else "")
