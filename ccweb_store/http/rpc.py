"""``POST /rpc``: the host API (SPEC §3), JSON-RPC 2.0 over one method table.

Every entry of ``METHODS`` is ``async def fn(store, params) -> result``; a ``DomainError`` it
raises becomes ``{"code": -32000, "message": …, "data": {"code": "<snake_case>"}}``.
Add a method by adding a row that points at the service function. A method whose call has a
model (``domain/host_calls``) is a ``typed`` row: its params are validated into the model
here, once, and the service takes the model; its answer is shaped for the wire here too.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, get_type_hints

from pydantic import TypeAdapter
from starlette.responses import Response

from ccweb_store.config import Settings
from ccweb_store.domain.arguments import reject_nul, require_mapping
from ccweb_store.domain.call_models import CallModel
from ccweb_store.domain.host_calls import (
    AppendMessage,
    ArchiveSession,
    CancelRun,
    ClaimRun,
    CompleteRun,
    CreateSession,
    EnqueueRun,
    ExpireReplies,
    FailReply,
    GetReply,
    GetSession,
    HeartbeatRun,
    ListCredentials,
    ListEvents,
    ListMessages,
    ListReplies,
    ListRuns,
    ListSessions,
    MintCredential,
    NoParams,
    OperatorConversation,
    OperatorConversations,
    OperatorDoctor,
    OperatorPendingReplies,
    OperatorReplyStory,
    RecentMessages,
    RequeueRun,
    RespondToPrompt,
    RetryReply,
    RevokeCredential,
    StartRun,
    ToolsCall,
    UpdateSession,
)
from ccweb_store.http.asgi import Answer, Incoming, JSONAnswer
from ccweb_store.http.metrics import note_call
from ccweb_store.http.payloads import Rejected, read_payload
from ccweb_store.protocol import jsonrpc, shapes, tools
from ccweb_store.protocol.argument_errors import parsed
from ccweb_store.services import (
    conversations,
    credentials,
    doctor,
    event_reads,
    operator,
    prompt_forms,
    replies,
    runs,
)
from ccweb_store.store.uow import Store

#: What the 405 answer to any method but ``POST`` adds.
NOT_ALLOWED = "send JSON-RPC with POST"

_T = TypeVar("_T")

_M = TypeVar("_M", bound=CallModel)
_R = TypeVar("_R")


@dataclass(frozen=True)
class TypedMethod(Generic[_M, _R]):
    """A method whose params are validated into ``arguments`` before ``handler`` runs (a
    non-object ``params`` is ``invalid_arguments`` too), its result shaped by ``shown``.

    ``result`` is the model of its answer: the return annotation of ``shown`` (a ``TypedDict``
    of ``shapes``), else of ``handler``; the tests validate real answers with it.
    """

    arguments: type[_M]
    handler: Callable[[Store, _M], Awaitable[_R]]
    shown: Callable[[_R], Any] | None = None
    adapter: TypeAdapter[_M] = field(init=False, repr=False, compare=False)
    result: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "adapter", TypeAdapter(self.arguments))
        answered_by = self.shown if self.shown is not None else self.handler
        object.__setattr__(self, "result", get_type_hints(answered_by)["return"])

    async def __call__(self, store: Store, params: Mapping[str, Any]) -> Any:
        call = parsed(self.adapter, require_mapping(params, "params"))
        result = await self.handler(store, call)
        return self.shown(result) if self.shown is not None else result


def typed(
    model: type[_M],
    handler: Callable[[Store, _M], Awaitable[_R]],
    shown: Callable[[_R], Any] | None = None,
) -> TypedMethod[_M, _R]:
    """A ``METHODS`` row: ``model`` validates the params, ``handler`` answers, ``shown``
    shapes the answer for the wire."""
    return TypedMethod(model, handler, shown)


async def list_tools(store: Store, call: NoParams) -> list[tools.ToolDefinition]:
    """``tools.list``: the public tools, exactly as MCP ``tools/list`` shows them."""
    return tools.public_tools()


async def list_dynamic_tools(store: Store, call: NoParams) -> list[tools.DynamicToolDefinition]:
    """``tools.dynamic``: the communication tools with ``namespace: "ccweb"``."""
    return tools.dynamic_tools()


async def list_composer_items(store: Store, call: NoParams) -> list[tools.ComposerItem]:
    """``tools.composerItems``: ``[{id: "mcp:ccweb/<name>", name, description}]``."""
    return tools.composer_items()


async def tools_call_method(store: Store, call: ToolsCall) -> tools.ToolAnswer:
    """``tools.call`` / ``tools.callDynamic``: run a tool for a source conversation; hidden
    aliases are callable here too."""
    try:
        return await tools.call_tool(store, call.source, call.tool_name, call.tool_arguments)
    except tools.UnknownTool as exc:
        raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, str(exc), {"tool": call.tool_name}) from exc


METHODS: dict[str, TypedMethod[Any, Any]] = {
    "session.create": typed(CreateSession, conversations.create_session, shapes.session_view_out),
    "session.get": typed(GetSession, conversations.get_session, shapes.session_view_out),
    "session.list": typed(ListSessions, conversations.list_sessions, shapes.session_page_out),
    "session.update": typed(UpdateSession, conversations.update_session, shapes.session_view_out),
    "session.archive": typed(
        ArchiveSession, conversations.archive_session, shapes.session_view_out
    ),
    "message.append": typed(AppendMessage, conversations.append_message, shapes.message_out),
    "message.list": typed(ListMessages, conversations.list_messages, shapes.messages_after_out),
    "message.recent": typed(
        RecentMessages, conversations.recent_messages, shapes.messages_before_out
    ),
    "run.start": typed(StartRun, runs.start_run, shapes.run_out),
    "run.enqueue": typed(EnqueueRun, runs.enqueue_run, shapes.run_out),
    "run.claim": typed(ClaimRun, runs.claim_run, shapes.claim_out),
    "run.heartbeat": typed(HeartbeatRun, runs.heartbeat_run, shapes.run_out),
    "run.complete": typed(CompleteRun, runs.complete_run, shapes.completion_out),
    "run.list": typed(ListRuns, runs.list_runs, shapes.runs_out),
    "run.requeue": typed(RequeueRun, runs.requeue_run, shapes.run_out),
    "run.cancel": typed(CancelRun, runs.cancel_run, shapes.completion_out),
    "events.list": typed(ListEvents, event_reads.list_events, shapes.event_page_out),
    "reply.list": typed(ListReplies, replies.list_replies, shapes.reply_page_out),
    "reply.get": typed(GetReply, replies.get_reply, shapes.reply_out),
    "reply.retry": typed(RetryReply, replies.retry_reply, shapes.reply_out),
    "reply.fail": typed(FailReply, replies.fail_reply, shapes.reply_out),
    "reply.expire": typed(ExpireReplies, replies.expire_replies, shapes.expired_out),
    "prompt.respond": typed(RespondToPrompt, prompt_forms.respond, shapes.prompt_answer_out),
    "credential.mint": typed(MintCredential, credentials.mint_credential, shapes.minted_out),
    "credential.list": typed(ListCredentials, credentials.list_credentials, shapes.credentials_out),
    "credential.revoke": typed(
        RevokeCredential, credentials.revoke_credential, shapes.credential_out
    ),
    "operator.conversations": typed(
        OperatorConversations, operator.list_conversations, shapes.conversations_page_out
    ),
    "operator.conversation": typed(
        OperatorConversation, operator.show_conversation, shapes.conversation_detail_out
    ),
    "operator.pendingReplies": typed(
        OperatorPendingReplies, operator.pending_replies, shapes.pending_replies_out
    ),
    "operator.replyStory": typed(OperatorReplyStory, operator.reply_story, shapes.reply_story_out),
    "operator.doctor": typed(OperatorDoctor, doctor.run_doctor, shapes.doctor_report_out),
    "tools.list": typed(NoParams, list_tools),
    "tools.dynamic": typed(NoParams, list_dynamic_tools),
    "tools.composerItems": typed(NoParams, list_composer_items),
    "tools.call": typed(ToolsCall, tools_call_method),
    "tools.callDynamic": typed(ToolsCall, tools_call_method),
}


def dispatcher(store: Store) -> jsonrpc.Dispatch:
    """Route a JSON-RPC method to its ``METHODS`` entry."""

    async def dispatch(method: str, params: Mapping[str, Any]) -> Any:
        handler = METHODS.get(method)
        if handler is None:
            raise jsonrpc.RpcError(
                jsonrpc.METHOD_NOT_FOUND, f"method not found: {method!r}", {"method": method}
            )
        reject_nul(params, f"{method}: a parameter")
        return await handler(store, params)

    return dispatch


async def answer_rpc(incoming: Incoming) -> Answer:
    """``POST /rpc``: answer a JSON-RPC request or batch (204 when only notifications came)."""
    settings: Settings = incoming.state.settings
    try:
        payload = await read_payload(incoming, settings.max_body_bytes)
    except Rejected as rejected:
        return rejected.response
    handling = jsonrpc.handle_payload(payload, dispatcher(incoming.state.store))
    if may_wait(payload):
        answer = await _unless_disconnected(incoming, handling)
    else:
        answer = await handling
    note_call(incoming.scope, payload, answer, METHODS)
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
