"""THE registry: every MCP tool and every host method, once.

A row names the call, its input model and its output type (``contract``), the service that
answers it, and who may call it: an agent (a tool, listed), anyone who knows it (a hidden alias:
callable everywhere, listed nowhere) or the host (a ``/rpc`` method). ``tools/list`` (HTTP and
stdio), ``tools/call``, the host's ``tools.*`` listings, ``/rpc`` dispatch, the published schemas
(each tool's ``inputSchema`` and ``outputSchema``, the host API's OpenRPC document) and the
docs' method table are all read from ``OPERATIONS``. A call's input is validated by its model
once, where it enters (``Operation.parse``); the service takes the model and returns the
output, which ``Operation.dump`` writes as the wire's JSON values.

A new call is one input model, one output model, a handler, and one row here (what a row
is: ``operation``).
"""

from __future__ import annotations

import functools
from typing import Any

from ccweb_store.contract import (
    credentials,
    events,
    messages,
    objects,
    operator,
    prompts,
    replies,
    runs,
    sessions,
)
from ccweb_store.contract import tool_answers as answers
from ccweb_store.contract import tools as agent
from ccweb_store.contract.base import NoParams
from ccweb_store.domain.context import Source
from ccweb_store.domain.kinds import ReplyMode
from ccweb_store.protocol.call_labels import note_tool
from ccweb_store.protocol.operation import (
    Audience,
    Operation,
    UnknownTool,
    dumped,
    method,
    tool,
)
from ccweb_store.services import (
    conversations,
    doctor,
    event_reads,
    messaging,
    prompt_forms,
    user_inputs,
)
from ccweb_store.services import credentials as credential_service
from ccweb_store.services import (
    operator as operator_views,
)
from ccweb_store.services import (
    replies as reply_service,
)
from ccweb_store.services import (
    runs as run_service,
)
from ccweb_store.store.uow import Store

NAMESPACE = "ccweb"


SEND_MESSAGE_DESCRIPTION = """\
Send a message to another cc-web conversation (the target), which then runs an agent turn \
on it. The call returns at once and never waits for the target to finish.

Choose replyMode every time:
- "return_and_continue": the target's final output of that turn is returned to this \
conversation automatically, and this conversation runs again to continue the work. You MUST \
use it for analysis, implementation, testing, acceptance/review, "report back when done", or \
any follow-up of yours that depends on the target's result.
- "one_way": a notification only. Use it ONLY when this conversation does not need the \
target's result at all; nothing will come back.

When unsure, use "return_and_continue". Do not poll or call this tool again to fetch the \
answer: a return_and_continue reply arrives on its own (ccweb_get_pending_reply shows its \
status). Fails with target_busy when the target already has a queued or running turn."""


async def _request_reply(store: Store, source: Source, args: agent.RequestReply) -> Any:
    """The hidden alias: ``ccweb_send_message`` fixed to ``return_and_continue``."""
    send = agent.SendMessage(
        target_conversation_id=args.target_conversation_id,
        content=args.content,
        reply_mode=ReplyMode.RETURN_AND_CONTINUE,
    )
    return await messaging.send_message(store, source, send)


TOOLS: tuple[Operation, ...] = (
    tool("ccweb_send_message", "Send a message to another conversation",
         SEND_MESSAGE_DESCRIPTION, agent.SendMessage, answers.SendAnswer,
         messaging.send_message, communication=True),
    tool("ccweb_create_conversation", "Create a conversation",
         "Create a new cc-web conversation, optionally sending it a first message. With "
         "content, requestReply=true returns its result to you automatically "
         "(return_and_continue); otherwise the message is one_way. Returns at once.",
         agent.CreateConversation, answers.CreatedConversation, messaging.create_conversation,
         communication=True),
    tool("ccweb_list_conversations", "List conversations",
         "List cc-web conversations, newest activity first: id, title, agent, timestamps, "
         "whether one is running, its message count and whether it is you. Metadata only, "
         "never message text.",
         agent.ListConversations, answers.ConversationListing, conversations.list_conversations,
         read_only=True, communication=True),
    tool("ccweb_get_pending_reply", "Show reply requests",
         "Show the status of a return_and_continue request by requestId, or without one list "
         "this conversation's open requests. Replies are delivered automatically; use this "
         "only to check on them.",
         agent.GetPendingReply, answers.PendingReplyAnswer, messaging.get_pending_reply,
         read_only=True, communication=True),
    tool("ccweb_list_user_inputs", "Read the user's own messages",
         "Read the user's own recent messages in a conversation (this one by default), oldest "
         "first, within a character budget. Use it to recover what the user actually asked "
         "for. Read-only.",
         agent.ListUserInputs, answers.UserInputs, user_inputs.list_user_inputs,
         read_only=True, communication=True),
    tool("ccweb_prompt_user", "Ask the user a form",
         "Show the user a short form (1-10 questions, with optional choices) in this "
         "conversation. The answers arrive later as an ordinary user message.",
         agent.PromptUser, answers.PromptCard, prompt_forms.prompt_user),
    tool("ccweb_request_reply", "Send a message and get the reply (deprecated)",
         'Deprecated alias of ccweb_send_message with replyMode "return_and_continue".',
         agent.RequestReply, answers.SendAnswer, _request_reply, audience=Audience.HIDDEN),
)  # fmt: skip

_TOOLS_BY_NAME = {operation.name: operation for operation in TOOLS}


def get_tool(name: object) -> Operation:
    """The tool called ``name`` (public or hidden), or ``UnknownTool``."""
    operation = _TOOLS_BY_NAME.get(name) if isinstance(name, str) else None
    if operation is None:
        raise UnknownTool(name)
    return operation


def public_tools() -> list[dict[str, Any]]:
    """The listed tools as MCP ``tools/list`` writes them (the JSON of ``tools.list``)."""
    return list(_listed())


@functools.cache
def _definitions() -> tuple[answers.ToolDefinition, ...]:
    """The public tools' definitions, built once: every list hands out the same ones."""
    return tuple(operation.definition() for operation in _PUBLIC)


@functools.cache
def _listed() -> tuple[dict[str, Any], ...]:
    return tuple(dumped(definition) for definition in _definitions())


async def call_tool(
    store: Store, source: Source, name: object, args: object, *, checked: bool = False
) -> Any:
    """Run a tool (hidden aliases included) and return its answer as JSON values.

    Raises ``UnknownTool`` for an unknown name and ``DomainError`` for a tool failure
    (arguments the tool's model refuses are ``invalid_arguments``, or the code of the
    model's check)."""
    operation, answer = await _run_tool(store, source, name, args, checked=checked)
    return operation.dump(answer)


async def _run_tool(
    store: Store, source: Source, name: object, args: object, *, checked: bool = False
) -> tuple[Operation, Any]:
    """The tool called ``name`` and its answer (its output model) to ``args``."""
    try:
        operation = get_tool(name)
    except UnknownTool:
        note_tool("other")
        raise
    note_tool(operation.name)
    call = operation.parse(args, checked=checked)
    return operation, await operation.handler(store, source, call)


async def _list_tools(store: Store, call: NoParams) -> list[answers.ToolDefinition]:
    """``tools.list``: the public tools, exactly as MCP ``tools/list`` shows them."""
    return list(_definitions())


def dynamic_tools() -> list[answers.DynamicToolDefinition]:
    """The host's dynamic tools: the public communication tools with ``namespace: "ccweb"``."""
    return [
        answers.DynamicToolDefinition(**dict(definition), namespace=NAMESPACE)
        for operation, definition in zip(_PUBLIC, _definitions(), strict=True)
        if operation.communication
    ]


def composer_items() -> list[answers.ComposerItem]:
    """The composer's ``/`` candidates, one per public tool."""
    return [
        answers.ComposerItem(
            id=f"mcp:{NAMESPACE}/{operation.name}",
            name=operation.name,
            description=operation.description,
        )
        for operation in _PUBLIC
    ]


async def _list_dynamic_tools(store: Store, call: NoParams) -> list[answers.DynamicToolDefinition]:
    """``tools.dynamic``: the communication tools with ``namespace: "ccweb"``."""
    return dynamic_tools()


async def _composer_items(store: Store, call: NoParams) -> list[answers.ComposerItem]:
    """``tools.composerItems``: ``[{id: "mcp:ccweb/<name>", name, description}]``."""
    return composer_items()


async def _tools_call(store: Store, call: agent.ToolsCall) -> Any:
    """``tools.call`` / ``tools.callDynamic``: run a tool for a source conversation; hidden
    aliases are callable here too. The method's params were checked for NUL already."""
    _, answer = await _run_tool(
        store, call.source, call.tool_name, call.tool_arguments, checked=True
    )
    return answer


#: What any tool answers (``tools.call``'s output).
ToolAnswer = (
    answers.SendAnswer
    | answers.CreatedConversation
    | answers.ConversationListing
    | answers.PendingReplyAnswer
    | answers.UserInputs
    | answers.PromptCard
)

_HOST_METHODS = (
    method("session.create", sessions.CreateSession, objects.Session,
           conversations.create_session),
    method("session.get", sessions.GetSession, objects.Session, conversations.get_session),
    method("session.list", sessions.ListSessions, sessions.SessionPage,
           conversations.list_sessions),
    method("session.update", sessions.UpdateSession, objects.Session,
           conversations.update_session),
    method("session.archive", sessions.ArchiveSession, objects.Session,
           conversations.archive_session),
    method("message.append", messages.AppendMessage, objects.Message,
           conversations.append_message),
    method("message.list", messages.ListMessages, messages.MessagesAfter,
           conversations.list_messages),
    method("message.recent", messages.RecentMessages, messages.MessagesBefore,
           conversations.recent_messages),
    method("run.start", runs.StartRun, objects.Run, run_service.start_run),
    method("run.enqueue", runs.EnqueueRun, objects.Run, run_service.enqueue_run),
    method("run.claim", runs.ClaimRun, runs.Claim, run_service.claim_run),
    method("run.heartbeat", runs.HeartbeatRun, objects.Run, run_service.heartbeat_run),
    method("run.complete", runs.CompleteRun, runs.Completion, run_service.complete_run),
    method("run.list", runs.ListRuns, runs.RunList, run_service.list_runs),
    method("run.requeue", runs.RequeueRun, objects.Run, run_service.requeue_run),
    method("run.cancel", runs.CancelRun, runs.Completion, run_service.cancel_run),
    method("events.list", events.ListEvents, events.EventPage, event_reads.list_events),
    method("reply.list", replies.ListReplies, replies.ReplyPage, reply_service.list_replies),
    method("reply.get", replies.GetReply, objects.Reply, reply_service.get_reply),
    method("reply.retry", replies.RetryReply, objects.Reply, reply_service.retry_reply),
    method("reply.fail", replies.FailReply, objects.Reply, reply_service.fail_reply),
    method("reply.expire", replies.ExpireReplies, replies.Expired,
           reply_service.expire_replies),
    method("prompt.respond", prompts.RespondToPrompt, prompts.PromptResponse,
           prompt_forms.respond),
    method("credential.mint", credentials.MintCredential, credentials.Minted,
           credential_service.mint_credential),
    method("credential.list", credentials.ListCredentials, credentials.CredentialList,
           credential_service.list_credentials),
    method("credential.revoke", credentials.RevokeCredential, objects.Credential,
           credential_service.revoke_credential),
    method("operator.conversations", operator.OperatorConversations,
           operator.ConversationsPage, operator_views.list_conversations),
    method("operator.conversation", operator.OperatorConversation,
           operator.ConversationDetail, operator_views.show_conversation),
    method("operator.pendingReplies", operator.OperatorPendingReplies,
           operator.PendingReplies, operator_views.pending_replies),
    method("operator.replyStory", operator.OperatorReplyStory, operator.ReplyStory,
           operator_views.reply_story),
    method("operator.doctor", operator.OperatorDoctor, operator.DoctorReport,
           doctor.run_doctor),
    method("tools.list", NoParams, list[answers.ToolDefinition], _list_tools),
    method("tools.dynamic", NoParams, list[answers.DynamicToolDefinition], _list_dynamic_tools),
    method("tools.composerItems", NoParams, list[answers.ComposerItem], _composer_items),
    method("tools.call", agent.ToolsCall, ToolAnswer, _tools_call),
    method("tools.callDynamic", agent.ToolsCall, ToolAnswer, _tools_call),
)  # fmt: skip

#: The host methods by name (what ``/rpc`` dispatches).
METHODS: dict[str, Operation] = {operation.name: operation for operation in _HOST_METHODS}
#: Every call: the tools, then the host methods.
OPERATIONS: tuple[Operation, ...] = (*TOOLS, *_HOST_METHODS)
_PUBLIC = tuple(operation for operation in TOOLS if operation.audience is Audience.AGENT)


def get_method(name: str) -> Operation | None:
    """The host method called ``name``, or None."""
    return METHODS.get(name)


async def call_method(store: Store, operation: Operation, params: object) -> Any:
    """Run a host method and return its answer as JSON values."""
    return operation.dump(await operation.handler(store, operation.parse(params)))
