"""``POST /rpc``: the host API (SPEC §3), JSON-RPC 2.0 over the registry's host methods
(``protocol.registry``): a call's params are validated into its input model once, its service
answers with its output model, written as JSON. A ``DomainError`` it raises becomes
``{"code": -32000, "message": …, "data": {"code": "<snake_case>"}}``. ``rpc.discover`` answers
the OpenRPC document of every method (``protocol.openrpc``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

from starlette.responses import Response

from ccweb_store.config import Settings
from ccweb_store.http.asgi import Answer, Incoming, JSONAnswer
from ccweb_store.http.metrics import note_call
from ccweb_store.http.payloads import Rejected, read_payload
from ccweb_store.protocol import jsonrpc, openrpc, registry
from ccweb_store.protocol.call_labels import note_method, noting
from ccweb_store.protocol.operation import UnknownTool
from ccweb_store.store.uow import Store

#: What the 405 answer to any method but ``POST`` adds.
NOT_ALLOWED = "send JSON-RPC with POST"

_T = TypeVar("_T")


def dispatcher(store: Store) -> jsonrpc.Dispatch:
    """Route a JSON-RPC method to its row of the registry (``rpc.discover``: the OpenRPC
    document of them all)."""

    async def dispatch(method: str, params: Mapping[str, Any]) -> Any:
        operation = registry.get_method(method)
        if operation is None:
            if method == openrpc.DISCOVER:
                note_method(method)
                return openrpc.document()
            raise jsonrpc.RpcError(
                jsonrpc.METHOD_NOT_FOUND, f"method not found: {method!r}", {"method": method}
            )
        note_method(method)
        try:
            return await registry.call_method(store, operation, params)
        except UnknownTool as exc:  # tools.call naming no tool
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, str(exc), {"tool": exc.name}) from exc

    return dispatch


async def answer_rpc(incoming: Incoming) -> Answer:
    """``POST /rpc``: answer a JSON-RPC request or batch (204 when only notifications came)."""
    settings: Settings = incoming.state.settings
    try:
        payload = await read_payload(incoming, settings.max_body_bytes)
    except Rejected as rejected:
        return rejected.response
    with noting() as labels:
        handling = jsonrpc.handle_payload(payload, dispatcher(incoming.state.store))
        if may_wait(payload):
            answer = await _unless_disconnected(incoming, handling)
        else:
            answer = await handling
    note_call(incoming.scope, payload, answer, labels)
    if answer is None:
        return Response(status_code=204)
    return JSONAnswer(answer)


def may_wait(payload: Any) -> bool:
    """Whether the request holds a call that may wait (a long-polling ``run.claim``)."""
    calls = payload if isinstance(payload, list) else (payload,)
    for call in calls:
        if isinstance(call, dict) and call.get("method") == "run.claim":
            params = call.get("params")
            if isinstance(params, dict) and params.get("waitSeconds"):
                return True
    return False


async def _unless_disconnected(incoming: Incoming, handling: Awaitable[_T]) -> _T | None:
    """``handling``'s result, or None once the client hung up: a long poll whose client left
    is cancelled at once (its unit of work rolls back), so it holds no waiter for nobody."""
    work = asyncio.ensure_future(handling)
    gone = asyncio.ensure_future(_disconnect(incoming))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
        gone.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await gone
    return None if work.cancelled() else work.result()


async def _disconnect(incoming: Incoming) -> None:
    """Return when the client disconnects (the request's body was read already)."""
    while (await incoming.receive())["type"] != "http.disconnect":
        pass
