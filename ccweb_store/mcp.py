"""``POST /mcp``: MCP over Streamable HTTP, stateless (SPEC §2).

No session id is issued or required: every request stands alone, so ``tools/list`` and
``tools/call`` work without a prior ``initialize``. The source conversation comes from the
query string (``sourceSessionId``/``sourceConversationId``, ``sourceHopCount``). The stdio
server answers with the same ``handle_mcp_payload``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ccweb_store import __version__, jsonrpc, tools
from ccweb_store.config import Settings
from ccweb_store.context import Source
from ccweb_store.errors import DomainError
from ccweb_store.origins import origin_rejection
from ccweb_store.uow import Store

SUPPORTED_VERSIONS = ("2025-03-26", "2025-06-18", "2025-11-25")
LATEST_VERSION = SUPPORTED_VERSIONS[-1]
SERVER_NAME = "ccweb-store"
PROTOCOL_VERSION_HEADER = "mcp-protocol-version"
INSTRUCTIONS = (
    "ccweb tools let this conversation talk to other cc-web conversations. Use "
    "ccweb_send_message with replyMode return_and_continue whenever you need the target's "
    "result; its reply comes back automatically and this conversation runs again."
)


class SourceError(ValueError):
    """The query string's source context is malformed."""


def tool_result(payload: Mapping[str, Any], *, is_error: bool = False) -> dict[str, Any]:
    """A ``tools/call`` result (SPEC §2.1): the payload as text and as structured content."""
    return {
        "content": [{"type": "text", "text": jsonrpc.dumps(payload).decode()}],
        "structuredContent": payload,
        "isError": is_error,
    }


def negotiate_version(requested: object) -> str:
    """Echo a supported protocol version, else answer the latest."""
    if isinstance(requested, str) and requested in SUPPORTED_VERSIONS:
        return requested
    return LATEST_VERSION


def dispatcher(store: Store, source: Source) -> jsonrpc.Dispatch:
    """The MCP methods for one request from ``source``."""

    async def dispatch(method: str, params: Mapping[str, Any]) -> Any:
        if method == "initialize":
            return {
                "protocolVersion": negotiate_version(params.get("protocolVersion")),
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": SERVER_NAME, "title": "ccweb", "version": __version__},
                "instructions": INSTRUCTIONS,
            }
        if method == "ping":
            return {}
        if method.startswith("notifications/"):
            return None  # nothing to do: we keep no per-client state
        if method == "tools/list":
            return list_tools_page(params.get("cursor"))
        if method == "tools/call":
            return await call_tool(store, source, params)
        raise jsonrpc.RpcError(
            jsonrpc.METHOD_NOT_FOUND, f"method not found: {method!r}", {"method": method}
        )

    return dispatch


def list_tools_page(cursor: object, page_size: int = 50) -> dict[str, Any]:
    """One page of ``tools/list``; ``nextCursor`` names the next page's offset."""
    listed = tools.public_tools()
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


async def call_tool(store: Store, source: Source, params: Mapping[str, Any]) -> dict[str, Any]:
    """``tools/call``: a domain error is a tool error the model can read and correct."""
    name = params.get("name")
    try:
        payload = await tools.call_tool(store, source, name, params.get("arguments"))
    except tools.UnknownTool as exc:
        raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, str(exc), {"tool": name}) from exc
    except DomainError as exc:
        return tool_result({"error": exc.to_dict()}, is_error=True)
    return tool_result(payload)


async def handle_mcp_payload(store: Store, source: Source, payload: Any) -> Any | None:
    """Answer a decoded MCP message or batch; ``None`` when nothing is due."""
    return await jsonrpc.handle_payload(payload, dispatcher(store, source))


def source_from_query(query: Mapping[str, str]) -> Source:
    """The caller's source conversation and hop count, from the query string."""
    session_id = query.get("sourceSessionId") or query.get("sourceConversationId") or None
    raw_hops = query.get("sourceHopCount")
    hop_count = 0
    if raw_hops not in (None, ""):
        if not raw_hops.isascii() or not raw_hops.isdigit():
            raise SourceError(
                f"sourceHopCount must be a non-negative integer, got {raw_hops!r}: "
                "leave it out for a conversation a person started (0)"
            )
        hop_count = int(raw_hops)
    return Source(session_id, hop_count)


def _wants_sse_only(accept: str | None) -> bool | None:
    """False: answer JSON; True: answer one SSE event; None: the client accepts neither."""
    if not accept or not accept.strip():
        return False
    types = {part.split(";", 1)[0].strip().lower() for part in accept.split(",")}
    if types & {"application/json", "application/*", "*/*"}:
        return False
    if "text/event-stream" in types:
        return True
    return None


async def mcp_endpoint(request: Request) -> Response:
    """``POST /mcp`` (``GET``/``DELETE`` answer 405: there is no stream and no session)."""
    if request.method != "POST":
        return jsonrpc.http_error(
            405,
            jsonrpc.INVALID_REQUEST,
            f"{request.method} /mcp is not supported: this server is stateless "
            "(no stream, no session); send JSON-RPC with POST",
            headers={"Allow": "POST"},
        )
    settings: Settings = request.app.state.settings
    rejection = origin_rejection(request, settings)
    if rejection is not None:
        return rejection
    version = request.headers.get(PROTOCOL_VERSION_HEADER)
    if version is not None and version not in SUPPORTED_VERSIONS:
        return jsonrpc.http_error(
            400,
            jsonrpc.INVALID_REQUEST,
            f"unsupported MCP-Protocol-Version {version!r}: "
            f"this server speaks {', '.join(SUPPORTED_VERSIONS)}",
            {"supported": list(SUPPORTED_VERSIONS)},
        )
    sse = _wants_sse_only(request.headers.get("accept"))
    if sse is None:
        return jsonrpc.http_error(
            406,
            jsonrpc.INVALID_REQUEST,
            "not acceptable: accept application/json or text/event-stream",
        )
    try:
        source = source_from_query(request.query_params)
    except SourceError as exc:
        return jsonrpc.http_error(400, jsonrpc.INVALID_REQUEST, str(exc))
    try:
        payload = await jsonrpc.read_payload(
            request, settings.max_body_bytes, parse_error_status=400
        )
    except jsonrpc.Rejected as rejected:
        return rejected.response
    answer = await handle_mcp_payload(request.app.state.store, source, payload)
    if answer is None:
        return Response(status_code=202)
    if sse:
        data = jsonrpc.dumps(answer).decode()
        return Response(
            f"event: message\ndata: {data}\n\n",
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )
    return jsonrpc.JSONResponse(answer)
