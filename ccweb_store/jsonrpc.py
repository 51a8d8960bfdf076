"""A thin JSON-RPC 2.0 core shared by ``/mcp``, ``/rpc`` and the stdio server.

It parses, validates the envelope, dispatches to an async handler and maps failures to
error objects. Notifications get no response; a batch gets an array (an empty one is an
invalid request). A handler's ``DomainError`` becomes ``-32000`` with ``data.code``; any
other exception becomes ``-32603`` with the traceback logged, never sent.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson
from starlette import responses
from starlette.requests import Request

from ccweb_store.errors import DomainError

log = logging.getLogger("ccweb_store.jsonrpc")

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
DOMAIN_ERROR = -32000
UNAUTHORIZED = -32001
FORBIDDEN = -32003

#: ``dispatch(method, params)``: runs one method and returns its result.
Dispatch = Callable[[str, Mapping[str, Any]], Awaitable[Any]]


class RpcError(Exception):
    """A JSON-RPC error to send back as is."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_dict(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


def error_response(request_id: Any, error: RpcError) -> dict[str, Any]:
    """A JSON-RPC error response object."""
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_dict()}


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON, as Starlette writes it, but by orjson: several times faster than
    the ``json`` module on the service's answers, which every request pays for."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)


class JSONResponse(responses.JSONResponse):
    """Starlette's JSON response, encoded by ``dumps``."""

    def render(self, content: Any) -> bytes:
        return dumps(content)


def parse(body: bytes | str) -> Any:
    """Decode a JSON-RPC payload, or raise ``-32700``."""
    try:
        return orjson.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RpcError(PARSE_ERROR, f"parse error: the body is not valid JSON ({exc})") from exc


async def handle_payload(payload: Any, dispatch: Dispatch) -> Any | None:
    """Answer a decoded payload: a response, a list of them, or ``None`` when none is due."""
    if isinstance(payload, list):
        if not payload:
            return error_response(
                None, RpcError(INVALID_REQUEST, "invalid request: an empty batch")
            )
        responses = [await handle_message(message, dispatch) for message in payload]
        answered = [response for response in responses if response is not None]
        return answered or None
    return await handle_message(payload, dispatch)


async def handle_message(message: Any, dispatch: Dispatch) -> dict[str, Any] | None:
    """Answer one JSON-RPC message; ``None`` for notifications and client responses."""
    if not isinstance(message, dict):
        return error_response(
            None, RpcError(INVALID_REQUEST, "invalid request: expected a JSON object")
        )
    if "method" not in message and ("result" in message or "error" in message):
        return None  # a response from the client: nothing to answer
    is_notification = "id" not in message
    request_id = message.get("id")
    try:
        method, params = _validate(message)
    except RpcError as error:  # a malformed message is answered even without an id
        valid_id = isinstance(request_id, str | int) and not isinstance(request_id, bool)
        return error_response(request_id if valid_id else None, error)
    try:
        result = await dispatch(method, params)
    except RpcError as error:
        return None if is_notification else error_response(request_id, error)
    except DomainError as exc:
        failure = RpcError(DOMAIN_ERROR, exc.message, {"code": exc.code})
        return None if is_notification else error_response(request_id, failure)
    except Exception:
        log.exception("internal error in JSON-RPC method %r", method)
        failure = RpcError(INTERNAL_ERROR, "internal error: the server logged the details")
        return None if is_notification else error_response(request_id, failure)
    if is_notification:
        return None
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _validate(message: dict[str, Any]) -> tuple[str, Mapping[str, Any]]:
    if message.get("jsonrpc") != "2.0":
        raise RpcError(INVALID_REQUEST, 'invalid request: "jsonrpc" must be "2.0"')
    request_id = message.get("id")
    if "id" in message and (
        isinstance(request_id, bool) or not isinstance(request_id, str | int | float | None)
    ):
        raise RpcError(INVALID_REQUEST, 'invalid request: "id" must be a string or a number')
    method = message.get("method")
    if not isinstance(method, str) or not method:
        raise RpcError(INVALID_REQUEST, 'invalid request: "method" must be a non-empty string')
    params = message.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, 'invalid params: "params" must be an object')
    return method, params


# HTTP plumbing shared by /mcp and /rpc.


class BodyTooLarge(Exception):
    """The request body is over the configured limit."""


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused before it is parsed when it exceeds ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


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


async def read_payload(request: Request, limit: int, *, parse_error_status: int = 200) -> Any:
    """The parsed JSON-RPC payload of ``request``; raises ``Rejected`` with a 415 for a body
    declared as something else than JSON, a 413 for an oversized body and a -32700 answer
    (with ``parse_error_status``) for malformed JSON."""
    content_type = request.headers.get("content-type", "")
    if not is_json_media_type(content_type):
        raise Rejected(
            http_error(
                415,
                INVALID_REQUEST,
                f"unsupported media type {content_type!r}: "
                "send the JSON-RPC body with Content-Type: application/json",
            )
        )
    try:
        body = await read_body(request, limit)
    except BodyTooLarge:
        raise Rejected(too_large(limit)) from None
    try:
        return parse(body)
    except RpcError as error:
        raise Rejected(
            JSONResponse(error_response(None, error), status_code=parse_error_status)
        ) from None


def is_json_media_type(content_type: str) -> bool:
    """Whether a ``Content-Type`` value declares JSON: ``application/json`` (any parameters),
    ``application/json-rpc``, a ``+json`` type, or nothing at all (read as JSON)."""
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type in JSON_MEDIA_TYPES or media_type.endswith("+json")


JSON_MEDIA_TYPES = frozenset({"", "application/json", "application/json-rpc"})


def method_not_allowed(request: Request, detail: str) -> JSONResponse:
    """The 405 answer to anything but ``POST``."""
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
