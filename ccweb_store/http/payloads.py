"""JSON-RPC over HTTP, shared by ``POST /mcp`` and ``POST /rpc``: the request body read as a
JSON-RPC payload, and the refusals before dispatch as JSON-RPC errors.

Answers are Starlette's ``JSONResponse`` encoded by ``jsonrpc.dumps``, which writes every id
exactly as the client sent it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette import responses
from starlette.requests import Request

from ccweb_store.http.asgi import BodyTooLarge, Incoming, read_body
from ccweb_store.protocol.jsonrpc import INVALID_REQUEST, RpcError, dumps, error_response, parse


class JSONResponse(responses.JSONResponse):
    """Starlette's JSON response, encoded by ``jsonrpc.dumps``."""

    def render(self, content: Any) -> bytes:
        return dumps(content)


def http_error(
    status_code: int,
    code: int,
    message: str,
    data: Any = None,
    *,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """An HTTP error whose body is a JSON-RPC error (``id: null``), as MCP clients expect."""
    return JSONResponse(
        error_response(None, RpcError(code, message, data)),
        status_code=status_code,
        headers=headers,
    )


class Rejected(Exception):
    """A request refused before dispatch; ``response`` is the HTTP answer to send."""

    def __init__(self, response: JSONResponse) -> None:
        super().__init__(response.status_code)
        self.response = response


async def read_payload(incoming: Incoming, limit: int, *, parse_error_status: int = 200) -> Any:
    """The parsed JSON-RPC payload of the request; raises ``Rejected`` with a 415 for a body
    not declared as ``application/json``, a 413 for an oversized body and a -32700 answer
    (with ``parse_error_status``) for malformed JSON."""
    content_type = incoming.header(b"content-type")
    if content_type is None or not is_json_media_type(content_type):
        declared = "no Content-Type" if content_type is None else f"Content-Type {content_type!r}"
        raise Rejected(
            http_error(
                415,
                INVALID_REQUEST,
                f"unsupported media type ({declared}): "
                "send the JSON-RPC body with Content-Type: application/json",
            )
        )
    try:
        body = await read_body(incoming, limit)
    except BodyTooLarge:
        raise Rejected(too_large(limit)) from None
    try:
        return parse(body)
    except RpcError as error:
        raise Rejected(
            JSONResponse(error_response(None, error), status_code=parse_error_status)
        ) from None


def is_json_media_type(content_type: str) -> bool:
    """Whether a ``Content-Type`` value is ``application/json`` (any parameters, any case).

    Nothing else is read as JSON: a browser sends a cross-origin POST without asking the
    server first (no CORS preflight) only when its type is absent, ``text/plain`` or a form's,
    so a page on another port cannot make one that passes."""
    if content_type == JSON_MEDIA_TYPE:  # the usual spelling, without a parameter
        return True
    return content_type.split(";", 1)[0].strip().lower() == JSON_MEDIA_TYPE


JSON_MEDIA_TYPE = "application/json"


def method_not_allowed(request: Request, detail: str) -> JSONResponse:
    """The 405 answer to anything but ``POST`` on a JSON-RPC endpoint."""
    return http_error(
        405,
        INVALID_REQUEST,
        f"{request.method} {request.url.path} is not supported: {detail}",
        headers={"Allow": "POST"},
    )


def too_large(limit: int) -> JSONResponse:
    """The 413 answer to an oversized body."""
    return http_error(
        413,
        INVALID_REQUEST,
        f"request body too large: the limit is {limit} bytes (CCWEB_MAX_BODY_BYTES)",
    )
