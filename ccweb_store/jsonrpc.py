"""A thin JSON-RPC 2.0 core shared by ``/mcp``, ``/rpc`` and the stdio server.

It parses, validates the envelope, dispatches to an async handler and maps failures to
error objects. Notifications get no response; a batch gets an array (an empty one is an
invalid request). A handler's ``DomainError`` becomes its ``rpc_code`` (``-32000`` unless it says
otherwise) with ``data.code`` and its ``data``; any
other exception becomes ``-32603`` with the traceback logged, never sent. The HTTP side of
``/mcp`` and ``/rpc`` (headers, body, answers) is ``asgi.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson

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
    the ``json`` module on the service's answers, which every request pays for. A key that is
    not a string (which ``json`` writes as one) takes a second pass with orjson's option for
    it, which would slow down every other answer by a tenth."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)


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
        failure = RpcError(exc.rpc_code, exc.message, {"code": exc.code, **exc.data})
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
