"""The bearer token: with ``CCWEB_TOKEN`` set, every path but ``/healthz`` needs it (and
``/metrics`` too, unless ``CCWEB_METRICS_PUBLIC`` opens it on a loopback bind)."""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers, QueryParams
from starlette.types import ASGIApp, Receive, Scope, Send

from ccweb_store.http.payloads import http_error
from ccweb_store.protocol import jsonrpc
from ccweb_store.services import credentials

#: Set in the ASGI scope by ``BearerAuth`` when a request carries the operator token.
OPERATOR_SCOPE_KEY = "ccweb.operator"


class BearerAuth:
    """With ``CCWEB_TOKEN`` set, every path but ``/healthz`` needs ``Authorization: Bearer``.

    The operator token opens everything (and marks the request, ``OPERATOR_SCOPE_KEY``). A
    conversation credential (``credentials.py``, in the header or in ``?credential=``) is let
    through to ``/mcp`` and ``/events`` only, whose endpoints check it; it never opens
    ``/rpc``. A refusal is a 401 whose body is a JSON-RPC error saying which token to send.
    """

    OPEN_PATHS = frozenset({"/healthz"})
    #: Where a conversation credential is let through (the endpoint checks it).
    CREDENTIAL_PATHS = frozenset({"/mcp", "/events"})

    def __init__(self, app: ASGIApp, token: str, open_paths: frozenset[str] = OPEN_PATHS) -> None:
        self.app = app
        self.expected = token.encode()
        #: The paths that need no token (``/metrics`` too when ``CCWEB_METRICS_PUBLIC``).
        self.open_paths = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        given = Headers(scope=scope).get("authorization", "")
        scheme, _, value = given.partition(" ")
        bearer = value.strip() if scheme.lower() == "bearer" else ""
        if bearer and hmac.compare_digest(bearer.encode("latin-1"), self.expected):
            scope[OPERATOR_SCOPE_KEY] = True
            await self.app(scope, receive, send)
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
