"""The bearer token: with ``CCWEB_TOKEN`` set, every path but ``/healthz`` and the console's
login form needs it (or the console's login cookie, where that stands for it), and
``/metrics`` too, unless ``CCWEB_METRICS_PUBLIC`` opens it on a loopback bind."""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers, QueryParams
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ccweb_store.http.console import LOGIN_PATH, STATIC_PREFIX, is_console_path, session
from ccweb_store.http.payloads import http_error
from ccweb_store.http.throttle import LoginThrottle, client_address, throttled_message
from ccweb_store.protocol import jsonrpc
from ccweb_store.services import credentials

#: Set in the ASGI scope by ``BearerAuth`` when a request carries the operator token.
OPERATOR_SCOPE_KEY = "ccweb.operator"


class BearerAuth:
    """With ``CCWEB_TOKEN`` set, every path but ``/healthz`` needs ``Authorization: Bearer``.

    The operator token opens everything (and marks the request, ``OPERATOR_SCOPE_KEY``). A
    conversation credential (``credentials.py``, in the header or in ``?credential=``) is let
    through to ``/mcp`` and ``/events`` only, whose endpoints check it; it never opens
    ``/rpc`` nor the console. The console's login cookie (``console/session.py``) stands for
    the operator token on the console's paths, and on ``/events`` with the login's key; on a
    console page without the key it opens only the page's empty frame
    (``session.BOUND_SCOPE_KEY`` unset). A refusal is a 401 whose body
    is a JSON-RPC error saying which token to send; a browser asking for a console page
    without a login is sent to the login form instead. Wrong operator tokens are counted per
    client address (``throttle.LoginThrottle``): past the limit, a token is answered 429.
    """

    #: The login form and the console's script and style sheet are open too.
    OPEN_PATHS = frozenset({"/healthz", LOGIN_PATH})
    #: Where the console's login cookie stands for the token, besides the console's paths.
    COOKIE_PATHS = frozenset({"/events"})
    #: Where a conversation credential is let through (the endpoint checks it).
    CREDENTIAL_PATHS = frozenset({"/mcp", "/events"})

    def __init__(
        self,
        app: ASGIApp,
        token: str,
        open_paths: frozenset[str] = OPEN_PATHS,
        throttle: LoginThrottle | None = None,
    ) -> None:
        self.app = app
        self.token = token
        self.expected = token.encode()
        #: The paths that need no token (``/metrics`` too when ``CCWEB_METRICS_PUBLIC``).
        self.open_paths = open_paths
        self.throttle = throttle or LoginThrottle()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"] if scope["type"] == "http" else ""
        if scope["type"] != "http" or path in self.open_paths or path.startswith(STATIC_PREFIX):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        given = headers.get("authorization", "")
        scheme, _, value = given.partition(" ")
        bearer = value.strip() if scheme.lower() == "bearer" else ""
        operator_attempt = bool(bearer) and not credentials.looks_like_token(bearer)
        address = client_address(scope.get("client"))
        if operator_attempt:
            wait = self.throttle.retry_after(address)
            if wait is not None:
                response = http_error(
                    429,
                    jsonrpc.UNAUTHORIZED,
                    throttled_message(wait),
                    {"retryAfter": wait},
                    headers={"Retry-After": str(wait)},
                )
                await response(scope, receive, send)
                return
        if bearer and hmac.compare_digest(bearer.encode("latin-1"), self.expected):
            scope[OPERATOR_SCOPE_KEY] = True
            scope[session.BOUND_SCOPE_KEY] = True
            await self.app(scope, receive, send)
            return
        if operator_attempt:
            self.throttle.failed(address)
        console = is_console_path(path)
        if not given and (console or path in self.COOKIE_PATHS):
            cookie = session.cookie_of(headers)
            if cookie is not None and session.cookie_valid(self.token, cookie):
                key = headers.get(session.KEY_HEADER)
                bound = session.key_valid(self.token, cookie, key)
                if bound or console:  # a console page without the key shows no data
                    scope[OPERATOR_SCOPE_KEY] = True
                    scope[session.BOUND_SCOPE_KEY] = bound
                    await self.app(scope, receive, send)
                    return
                message = (
                    "the console's login cookie opens /events only with the console's key, "
                    "which the console's own page sends: open the console (log in again if "
                    "it asks)"
                )
                response = http_error(401, jsonrpc.UNAUTHORIZED, message)
                await response(scope, receive, send)
                return
            if console and scope["method"] == "GET" and "text/html" in headers.get("accept", ""):
                await RedirectResponse(LOGIN_PATH, status_code=303)(scope, receive, send)
                return
        conversation_credential = credentials.looks_like_token(bearer) or (
            credentials.QUERY_PARAMETER in QueryParams(scope.get("query_string", b""))
        )
        if conversation_credential and scope["path"] in self.CREDENTIAL_PATHS:
            await self.app(scope, receive, send)
            return
        if conversation_credential:
            message = (
                "a conversation credential opens /mcp and /events only: the host API needs "
                "the operator token, 'Authorization: Bearer <CCWEB_TOKEN>'"
            )
        elif not given:
            message = (
                "missing bearer token: an agent connects with its conversation's credential "
                "URL (/mcp?credential=…, from `ccweb-store conversation-url ID`; see "
                "docs/credentials.md); the host and the operator send "
                "'Authorization: Bearer <CCWEB_TOKEN>'"
            )
        else:
            message = (
                "invalid bearer token: an agent uses its conversation's credential URL "
                "(`ccweb-store conversation-url ID`; docs/credentials.md); the host and the "
                "operator use the token configured as CCWEB_TOKEN"
            )
        response = http_error(
            401, jsonrpc.UNAUTHORIZED, message, headers={"WWW-Authenticate": "Bearer"}
        )
        await response(scope, receive, send)
