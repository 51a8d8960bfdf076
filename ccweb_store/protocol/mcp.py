"""The MCP protocol, in both eras, independent of the transport (SPEC §2).

*Legacy* revisions (2025-03-26, 2025-06-18, 2025-11-25) open with an ``initialize``
handshake; this server answers it but keeps nothing, so ``tools/list`` and ``tools/call`` also
work without it. The *modern* revision 2026-07-28 has no handshake: every request carries its
protocol version and client capabilities in ``params._meta``, and ``server/discover`` tells a
client which versions this server speaks. Each message is served in the era it announces:
modern when its ``_meta`` names a protocol version or its ``MCP-Protocol-Version`` header names
2026-07-28, legacy otherwise (a request without the header counts as 2025-03-26). Over HTTP a
modern request's routing headers (``MCP-Protocol-Version``, ``Mcp-Method``, ``Mcp-Name``) must
match its body.

``handle_mcp_payload`` answers a decoded message or batch; the HTTP endpoint
(``mcp_http.py``) and the stdio server (``stdio.py``) both call it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import orjson

from ccweb_store import __version__
from ccweb_store.domain.context import Source
from ccweb_store.domain.errors import DomainError
from ccweb_store.protocol import jsonrpc, registry
from ccweb_store.protocol.call_labels import note_method, note_tool
from ccweb_store.protocol.mcp_wire import (
    BATCH_VERSION,
    CLIENT_CAPABILITIES_KEY,
    LATEST_LEGACY_VERSION,
    LEGACY_VERSIONS,
    METHOD_HEADER,
    MODERN_VERSIONS,
    NAME_HEADER,
    NAMED_PARAMS,
    PROTOCOL_VERSION_HEADER,
    PROTOCOL_VERSION_KEY,
    ROUTING_HEADERS,
    SERVER_INFO_KEY,
    SUPPORTED_VERSIONS,
    decode_header_value,
    is_header_safe,
    is_modern,
)
from ccweb_store.protocol.operation import UnknownTool
from ccweb_store.store.uow import Store

#: The methods each era answers, counted by name in the metrics.
LEGACY_METHODS = frozenset({"initialize", "ping", "tools/list", "tools/call"})
MODERN_METHODS = frozenset({"server/discover", "tools/list", "tools/call"})

HEADER_MISMATCH = -32020
UNSUPPORTED_PROTOCOL_VERSION = -32022
#: HTTP status of a modern request's JSON-RPC error; other codes answer 200.
MODERN_ERROR_STATUS = {
    jsonrpc.PARSE_ERROR: 400,
    jsonrpc.INVALID_REQUEST: 400,
    jsonrpc.INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    jsonrpc.METHOD_NOT_FOUND: 404,
}

SERVER_NAME = "ccweb-store"
SERVER_INFO = {"name": SERVER_NAME, "title": "ccweb", "version": __version__}
CAPABILITIES = {"tools": {"listChanged": False}}
#: Caching hints of ``tools/list`` and ``server/discover`` (2026-07-28): both change only when
#: the server is upgraded; private because a shared cache must not hand them out without the
#: bearer token.
CACHE_HINTS = {"ttlMs": 300_000, "cacheScope": "private"}
INSTRUCTIONS = (
    "ccweb tools let this conversation talk to other cc-web conversations. Use "
    "ccweb_send_message with replyMode return_and_continue whenever you need the target's "
    "result; its reply comes back automatically and this conversation runs again."
)


def tool_result(payload: Mapping[str, Any], *, is_error: bool = False) -> dict[str, Any]:
    """A ``tools/call`` result (SPEC §2.1): the payload as text and as structured content.

    The payload is encoded once: its JSON is the text, and goes into the answer as it is
    (``orjson.Fragment``) rather than being encoded a second time. Whatever writes an answer
    uses ``jsonrpc.dumps``.
    """
    encoded = jsonrpc.dumps(payload)
    return {
        "content": [{"type": "text", "text": encoded.decode()}],
        "structuredContent": orjson.Fragment(encoded),
        "isError": is_error,
    }


def negotiate_version(requested: object) -> str:
    """``initialize``: echo a supported legacy version, else answer the latest legacy one."""
    if isinstance(requested, str) and requested in LEGACY_VERSIONS:
        return requested
    return LATEST_LEGACY_VERSION


def legacy_dispatcher(store: Store, source: Source) -> jsonrpc.Dispatch:
    """The legacy-era MCP methods for one request from ``source``."""

    async def dispatch(method: str, params: Mapping[str, Any]) -> Any:
        if method == "tools/call":  # the busiest first
            note_method(method)
            return await answer_tools_call(store, source, params)
        if method.startswith("notifications/"):
            note_method("notifications/*")
            return None  # nothing to do: we keep no per-client state
        if method in LEGACY_METHODS:
            note_method(method)
        if method == "initialize":
            return {
                "protocolVersion": negotiate_version(params.get("protocolVersion")),
                "capabilities": CAPABILITIES,
                "serverInfo": SERVER_INFO,
                "instructions": INSTRUCTIONS,
            }
        if method == "ping":
            return {}
        if method == "tools/list":
            return list_tools_page(params.get("cursor"))
        raise jsonrpc.RpcError(
            jsonrpc.METHOD_NOT_FOUND, f"method not found: {method!r}", {"method": method}
        )

    return dispatch


def modern_dispatcher(
    store: Store, source: Source, headers: Mapping[str, str] | None
) -> jsonrpc.Dispatch:
    """The 2026-07-28 methods for one request: its envelope checked first, its result stamped
    with ``resultType`` and the server's identity."""

    async def dispatch(method: str, params: Mapping[str, Any]) -> Any:
        if method in MODERN_METHODS:
            note_method(method)
        check_envelope(method, params, headers)
        if method == "server/discover":
            result = discover_result()
        elif method == "tools/list":
            result = {**list_tools_page(params.get("cursor")), **CACHE_HINTS}
        elif method == "tools/call":
            result = await answer_tools_call(store, source, params)
        else:
            raise jsonrpc.RpcError(
                jsonrpc.METHOD_NOT_FOUND,
                f"method not found: {method!r}; in MCP 2026-07-28 this server answers "
                "server/discover, tools/list and tools/call (initialize, ping and "
                "logging/setLevel belong to the 2025 revisions)",
                {"method": method},
            )
        return {**result, "resultType": "complete", "_meta": {SERVER_INFO_KEY: SERVER_INFO}}

    return dispatch


def discover_result() -> dict[str, Any]:
    """``server/discover``: the versions, capabilities and instructions of this server."""
    return {
        "supportedVersions": list(SUPPORTED_VERSIONS),
        "capabilities": CAPABILITIES,
        "instructions": INSTRUCTIONS,
        **CACHE_HINTS,
    }


def list_tools_page(cursor: object, page_size: int = 50) -> dict[str, Any]:
    """One page of ``tools/list``; ``nextCursor`` names the next page's offset."""
    listed = registry.public_tools()
    start = 0
    if cursor is not None:
        if not isinstance(cursor, str) or not cursor.isdigit() or int(cursor) > len(listed):
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, f"invalid cursor {cursor!r}")
        start = int(cursor)
    end = start + page_size
    page: dict[str, Any] = {"tools": listed[start:end]}
    if end < len(listed):
        page["nextCursor"] = str(end)
    return page


async def answer_tools_call(
    store: Store, source: Source, params: Mapping[str, Any]
) -> dict[str, Any]:
    """``tools/call``: a domain error is a tool error the model can read and correct."""
    name = params.get("name")
    try:
        payload = await registry.call_tool(store, source, name, params.get("arguments"))
    except UnknownTool as exc:
        raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, str(exc), {"tool": name}) from exc
    except DomainError as exc:
        note_tool(str(name), failed=True)
        return tool_result({"error": exc.to_dict()}, is_error=True)
    return tool_result(payload)


# The 2026-07-28 request envelope.


def unsupported_version(requested: str) -> jsonrpc.RpcError:
    """-32022, naming the versions this server speaks so the client can pick one."""
    return jsonrpc.RpcError(
        UNSUPPORTED_PROTOCOL_VERSION,
        f"unsupported MCP protocol version {requested!r}: "
        f"this server speaks {', '.join(SUPPORTED_VERSIONS)}",
        {"supported": list(SUPPORTED_VERSIONS), "requested": requested},
    )


def check_envelope(
    method: str, params: Mapping[str, Any], headers: Mapping[str, str] | None
) -> None:
    """Raise the JSON-RPC error a modern request earns when its ``params._meta`` envelope or
    (over HTTP, when ``headers`` are given) its routing headers do not hold up."""
    meta = params.get("_meta")
    if not isinstance(meta, Mapping):
        raise jsonrpc.RpcError(
            jsonrpc.INVALID_PARAMS,
            "invalid params: a 2026-07-28 request carries params._meta with "
            f"{PROTOCOL_VERSION_KEY!r} and {CLIENT_CAPABILITIES_KEY!r}",
        )
    missing = [key for key in (PROTOCOL_VERSION_KEY, CLIENT_CAPABILITIES_KEY) if key not in meta]
    if missing:
        raise jsonrpc.RpcError(
            jsonrpc.INVALID_PARAMS, f"invalid params: params._meta lacks {', '.join(missing)}"
        )
    version = meta[PROTOCOL_VERSION_KEY]
    if not isinstance(version, str) or not isinstance(meta[CLIENT_CAPABILITIES_KEY], Mapping):
        raise jsonrpc.RpcError(
            jsonrpc.INVALID_PARAMS,
            f"invalid params: in params._meta, {PROTOCOL_VERSION_KEY!r} must be a string and "
            f"{CLIENT_CAPABILITIES_KEY!r} an object",
        )
    if headers is not None and (mismatch := header_mismatch(method, params, version, headers)):
        raise jsonrpc.RpcError(HEADER_MISMATCH, f"header mismatch: {mismatch}")
    if version not in MODERN_VERSIONS:
        raise unsupported_version(version)


def header_mismatch(
    method: str, params: Mapping[str, Any], version: str, headers: Mapping[str, str]
) -> str | None:
    """Why a modern request's routing headers disagree with its body, or ``None``."""
    for name in ROUTING_HEADERS:
        value = headers.get(name)
        if value is not None and not is_header_safe(value):
            return f"the {name} header holds characters a header value may not carry"
    expected: list[tuple[str, Any]] = [(PROTOCOL_VERSION_HEADER, version), (METHOD_HEADER, method)]
    named = NAMED_PARAMS.get(method)
    if named is not None and params.get(named) is not None:
        expected.append((NAME_HEADER, params[named]))
    for name, body_value in expected:
        given = headers.get(name)
        if given is None:
            return f"the {name} header is missing; it must repeat the body's {body_value!r}"
        if name == NAME_HEADER:
            decoded = decode_header_value(given)
            if decoded is None:
                return f"the {name} header {given!r} is not valid =?base64?…?= encoding"
            given = decoded
        if given != body_value:
            return f"the {name} header {given!r} does not match the body's {body_value!r}"
    return None


# Answering a decoded payload.


class Reply(NamedTuple):
    """What a payload is owed: a JSON-RPC ``body`` (``None``: nothing, HTTP 202) and the HTTP
    ``status`` to send it with."""

    body: Any | None
    status: int = 200


async def handle_mcp_payload(
    store: Store, source: Source, payload: Any, headers: Mapping[str, str] | None = None
) -> Reply:
    """Answer a decoded MCP message or batch. ``headers`` are an HTTP request's routing headers
    (see ``routing_headers``); the stdio transport passes none."""
    header_version = headers.get(PROTOCOL_VERSION_HEADER) if headers is not None else None
    if header_version is not None and header_version not in SUPPORTED_VERSIONS:
        error = unsupported_version(header_version)
        return Reply(error_body(_request_id(payload), error, modern=True), 400)
    if isinstance(payload, list):
        return await answer_batch(store, source, payload, header_version)
    if is_modern(payload, header_version):
        return await answer_modern(store, source, payload, headers)
    answer = await jsonrpc.handle_message(payload, legacy_dispatcher(store, source))
    return Reply(answer, 200 if answer is not None else 202)


async def answer_modern(
    store: Store, source: Source, message: Any, headers: Mapping[str, str] | None
) -> Reply:
    """One 2026-07-28 message: a request is answered, a notification accepted and dropped
    (the revision defines none a client sends over HTTP), a posted response refused."""
    if not isinstance(message, dict) or "method" not in message:
        error = jsonrpc.RpcError(
            jsonrpc.INVALID_REQUEST,
            "invalid request: a 2026-07-28 message is one JSON-RPC request or notification",
        )
        return Reply(error_body(_request_id(message), error, modern=True), 400)
    if "id" not in message:
        return Reply(None, 202)
    answer = await jsonrpc.handle_message(message, modern_dispatcher(store, source, headers))
    if answer is None:
        return Reply(None, 202)
    if "error" not in answer:
        return Reply(answer)
    if answer.get("id") is None:
        answer.pop("id", None)  # the 2026-07-28 schema has no null id: leave an unknown one out
    return Reply(answer, MODERN_ERROR_STATUS.get(answer["error"]["code"], 200))


async def answer_batch(
    store: Store, source: Source, batch: list[Any], header_version: str | None
) -> Reply:
    """A JSON-RPC batch: only 2025-03-26 has them (also what a POST without the version header
    speaks); each message in it is a legacy one."""
    if header_version not in (None, BATCH_VERSION):
        error = jsonrpc.RpcError(
            jsonrpc.INVALID_REQUEST,
            f"invalid request: MCP {header_version} has no JSON-RPC batches; "
            "send one message per POST",
        )
        return Reply(error_body(None, error, modern=header_version in MODERN_VERSIONS), 400)
    refusal = jsonrpc.batch_refusal(batch)
    if refusal is not None:
        return Reply(jsonrpc.error_response(None, refusal))
    in_batch = jsonrpc.RpcError(
        jsonrpc.INVALID_REQUEST, "invalid request: a 2026-07-28 request cannot be part of a batch"
    )
    answers = [
        error_body(_request_id(message), in_batch, modern=True)
        if is_modern(message, None)
        else await jsonrpc.handle_message(message, legacy_dispatcher(store, source))
        for message in batch
    ]
    answered = [answer for answer in answers if answer is not None]
    return Reply(answered or None, 200 if answered else 202)


def error_body(request_id: Any, error: jsonrpc.RpcError, *, modern: bool) -> dict[str, Any]:
    """A JSON-RPC error response; an unknown id is null, except in 2026-07-28, whose schema
    has no null id and leaves it out."""
    response = jsonrpc.error_response(request_id, error)
    if modern and request_id is None:
        del response["id"]
    return response


def _request_id(message: Any) -> str | int | orjson.Fragment | None:
    """The id of ``message`` when it has a usable one."""
    request_id = message.get("id") if isinstance(message, dict) else None
    if isinstance(request_id, str | orjson.Fragment) or (
        isinstance(request_id, int) and not isinstance(request_id, bool)
    ):
        return request_id
    return None
