"""A thin JSON-RPC 2.0 core shared by ``/mcp``, ``/rpc`` and the stdio server.

It parses, validates the envelope, dispatches to an async handler and maps failures to
error objects. Notifications get no response; a batch gets an array (an empty one is an
invalid request). A handler's ``DomainError`` becomes its ``rpc_code`` (``-32000`` unless it
says otherwise) with ``data.code`` and its ``data``; any other exception becomes ``-32603``
with the traceback logged, never sent. The HTTP side of ``/mcp`` and ``/rpc`` (headers,
body, answers) is in ``http/``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson

from ccweb_store.domain import json_values
from ccweb_store.domain.errors import DomainError

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
    """Compact UTF-8 JSON, as Starlette writes it, but by orjson, which every answer goes
    through. A key that is not a string (which ``json`` writes as one) takes a second pass with
    orjson's option for it, kept off the first pass, which every other answer would pay for.
    What orjson cannot write at all (an id beyond 64 bits, a stored value that breaks the JSON
    rule) takes ``_dumps_rare``."""
    try:
        return orjson.dumps(value)
    except TypeError:
        pass
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return _dumps_rare(value)


def _dumps_rare(value: Any) -> bytes:
    """``dumps`` of an answer orjson refused: a response's integer id beyond 64 bits is written
    exactly, as it came; a value that breaks the JSON rule (a row stored before it) is
    answered kept as text, and logged (``json_values.readable``)."""
    if type(value) is list:
        return b"[" + b",".join(dumps(item) for item in value) + b"]"
    if type(value) is dict and type(value.get("id")) is int:
        rest = dumps({key: item for key, item in value.items() if key != "id"})
        exact_id = b'{"id":' + str(value["id"]).encode()
        return exact_id + (b"}" if rest == b"{}" else b"," + rest[1:])
    kept = json_values.readable(value, "an answer")
    return orjson.dumps(kept, option=orjson.OPT_NON_STR_KEYS)


#: How deep a JSON-RPC message may nest: the message, its params and a tool's arguments
#: around a value of ``json_values.MAX_DEPTH`` levels.
MESSAGE_DEPTH = json_values.MAX_DEPTH + 3
#: A run of 19 digits: the text may hold an integer beyond 64 bits, which orjson reads as a
#: float (so it is read again by the ``json`` module, which keeps it exact).
_LONG_DIGITS = re.compile(rb"[0-9]{19}")


def parse(body: bytes | str) -> Any:
    """Decode a JSON-RPC payload, or raise ``-32700`` (not JSON) or ``-32600`` (nested
    deeper than ``MESSAGE_DEPTH``).

    A message whose members break the JSON rule (``json_values``) comes back as a
    ``Refused`` message, which ``handle_message`` answers with its error and its id; every
    id comes back exactly as it was written, integers beyond 64 bits included.
    """
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        reason = str(exc).lower()
        if "depth" in reason or "recursion" in reason:  # orjson reads 1,024 levels at most
            raise too_deep() from exc
        raise RpcError(PARSE_ERROR, f"parse error: the body is not valid JSON ({exc})") from exc
    raw = body if isinstance(body, bytes) else body.encode()
    long_digits = _LONG_DIGITS.search(raw) is not None
    if long_digits:
        try:
            payload = json.loads(raw)
        except RecursionError:
            raise too_deep() from None
    if _has_float_id(payload):
        _keep_float_ids_as_written(raw, payload)
    if not long_digits and raw.count(b"[") + raw.count(b"{") <= MESSAGE_DEPTH:
        return payload  # too few brackets to nest too deep, and no integer beyond 64 bits
    if type(payload) is list:
        return [_screened(message) for message in payload]
    return _screened(payload)


def _has_float_id(payload: Any) -> bool:
    if type(payload) is dict:
        return type(payload.get("id")) is float
    return type(payload) is list and any(_has_float_id(message) for message in payload)


def _keep_float_ids_as_written(raw: bytes, payload: Any) -> None:
    """Put each message's id that is a float back as the text it was written as
    (``orjson.Fragment``), so that an answer echoes it exactly: a float cannot hold every
    number JSON can write (``1e-400``, thirty digits)."""
    try:
        written = json.loads(raw, parse_float=_float_as_written)
    except RecursionError:
        raise too_deep() from None
    pairs = zip(payload, written, strict=False) if type(payload) is list else [(payload, written)]
    for message, as_written in pairs:
        if type(message) is dict and type(message.get("id")) is float:
            message["id"] = as_written["id"]


def _float_as_written(text: str) -> orjson.Fragment:
    return orjson.Fragment(text)


def too_deep() -> RpcError:
    """``-32600`` for a body nested too deep to be read as a message."""
    return RpcError(
        INVALID_REQUEST,
        f"invalid request: the message nests deeper than {MESSAGE_DEPTH} levels of arrays "
        f"and objects (a stored value may nest {json_values.MAX_DEPTH})",
        {"code": json_values.INVALID_JSON_VALUE, "limit": f"{MESSAGE_DEPTH} levels"},
    )


class Refused(dict[str, Any]):
    """A message refused while it was parsed: ``handle_message`` answers ``error`` to its
    id. It is the message's envelope (``jsonrpc``, ``id``), so that whatever looks at a
    message before it is answered sees an ordinary one."""

    def __init__(self, message: dict[str, Any], error: RpcError) -> None:
        super().__init__({key: message[key] for key in ("jsonrpc", "id") if key in message})
        self.error = error


def _screened(message: Any) -> Any:
    """``message``, or a ``Refused`` one when a member but its id breaks the JSON rule."""
    if type(message) is not dict:
        return message
    members = {key: value for key, value in message.items() if key != "id"}
    problem = json_values.find_problem(members, "", max_depth=MESSAGE_DEPTH)
    if problem is None:
        return message
    code = INVALID_PARAMS if problem.path.startswith("params") else INVALID_REQUEST
    error = problem.error()
    return Refused(message, RpcError(code, error.message, {"code": error.code, **error.data}))


#: The most calls one batch may hold: each is a unit of work, and a client with more to say
#: sends several batches, so that no single request holds the server for long.
MAX_BATCH_CALLS = 100


def batch_refusal(batch: list[Any]) -> RpcError | None:
    """Why a batch is refused whole (empty, or over ``MAX_BATCH_CALLS``), or None."""
    if not batch:
        return RpcError(INVALID_REQUEST, "invalid request: an empty batch")
    if len(batch) > MAX_BATCH_CALLS:
        return RpcError(
            INVALID_REQUEST,
            f"invalid request: a batch of {len(batch)} calls is over the limit of "
            f"{MAX_BATCH_CALLS}: send them in batches of at most {MAX_BATCH_CALLS}",
            {"limit": MAX_BATCH_CALLS},
        )
    return None


async def handle_payload(payload: Any, dispatch: Dispatch) -> Any | None:
    """Answer a decoded payload: a response, a list of them, or ``None`` when none is due."""
    if isinstance(payload, list):
        refusal = batch_refusal(payload)
        if refusal is not None:
            return error_response(None, refusal)
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
    if type(message) is Refused:
        return None if is_notification else error_response(_usable(request_id), message.error)
    try:
        method, params = _validate(message)
    except RpcError as error:  # a malformed message is answered even without an id
        return error_response(_usable(request_id), error)
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


def _usable(request_id: Any) -> str | int | orjson.Fragment | None:
    """A refused message's id, when it is one an answer can carry (else null)."""
    if isinstance(request_id, str | int | orjson.Fragment) and not isinstance(request_id, bool):
        return request_id
    return None


def _validate(message: dict[str, Any]) -> tuple[str, Mapping[str, Any]]:
    if message.get("jsonrpc") != "2.0":
        raise RpcError(INVALID_REQUEST, 'invalid request: "jsonrpc" must be "2.0"')
    request_id = message.get("id")
    if "id" in message and (
        isinstance(request_id, bool)
        or not isinstance(request_id, str | int | float | orjson.Fragment | None)
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
