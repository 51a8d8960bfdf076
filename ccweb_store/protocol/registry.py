"""THE registry: every MCP tool and every host method, once.

A row names the call, its input model and its output type (``contract``), the service that
answers it, and who may call it: an agent (a tool, listed), anyone who knows it (a hidden alias:
callable everywhere, listed nowhere) or the host (a ``/rpc`` method). ``tools/list`` (HTTP and
stdio), ``tools/call``, the host's ``tools.*`` listings, ``/rpc`` dispatch, the published schemas
(each tool's ``inputSchema`` and ``outputSchema``, the host API's OpenRPC document) and the
docs' method table are all read from ``OPERATIONS``. A call's input is validated by its model
once, where it enters (``Operation.parse``); the service takes the model and returns the
output, which ``Operation.dump`` writes as the wire's JSON values.

A new call is one input model, one output model, a handler, and one row here.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, TypeAdapter

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
from ccweb_store.contract import tools as agent
from ccweb_store.contract.base import Input, NoParams
from ccweb_store.contract.schemas import input_schema, output_schema
from ccweb_store.domain.arguments import reject_nul, require_mapping
from ccweb_store.domain.context import Source
from ccweb_store.domain.kinds import ReplyMode
from ccweb_store.protocol.argument_errors import parsed
from ccweb_store.protocol.call_labels import note_tool
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


def dumped(value: BaseModel) -> Any:
    """An output model as the wire's JSON values, outside a call (the console, the CLI)."""
    return value.model_dump(by_alias=True)


class Audience(StrEnum):
    """Who may call an operation, and where it is listed."""

    #: An MCP tool an agent calls: listed by ``tools/list`` and the host's ``tools.*``.
    AGENT = "agent"
    #: An MCP tool kept for old threads: callable everywhere, listed nowhere.
    HIDDEN = "hidden"
    #: A host API method on ``/rpc``.
    HOST = "host"


class UnknownTool(LookupError):
    """No tool of that name exists (the protocols answer JSON-RPC -32602)."""

    def __init__(self, name: object) -> None:
        super().__init__(f"unknown tool {name!r}")
        self.name = name


@dataclass(frozen=True)
class Operation:
    """One call: its name, its two models, the service that answers it, who may call it,
    and for a tool its title, description and annotations."""

    name: str
    input: type[Input]
    output: Any
    handler: Callable[..., Awaitable[Any]]
    audience: Audience = Audience.HOST
    title: str = ""
    description: str = ""
    read_only: bool = False
    #: A tool of the host's dynamic-tool whitelist (``tools.dynamic``).
    communication: bool = False
    # Made on first use, so that a command that runs one call builds only its own.

    @functools.cached_property
    def input_schema(self) -> dict[str, Any]:
        """The published schema of the input (a tool's ``inputSchema``)."""
        return input_schema(self.input, self.input.published_required)

    @functools.cached_property
    def output_schema(self) -> dict[str, Any]:
        """The published schema of the output; a tool's (its ``outputSchema``) admits its
        failure, ``agent.ToolError``, too."""
        if self.is_tool:
            return output_schema(self.output | agent.ToolError)
        return output_schema(self.output)

    @functools.cached_property
    def _reads(self) -> TypeAdapter[Any]:
        return TypeAdapter(self.input)

    @functools.cached_property
    def _writes(self) -> TypeAdapter[Any]:
        return TypeAdapter(self.output)

    @property
    def is_tool(self) -> bool:
        return self.audience is not Audience.HOST

    @property
    def public(self) -> bool:
        """A tool the listings show."""
        return self.audience is Audience.AGENT

    def parse(self, params: object, *, checked: bool = False) -> Any:
        """``params`` as the input model, or ``invalid_arguments`` naming the first problem
        (a tool's led by its name); a text holding U+0000 is refused too, after the model's
        checks for a tool's arguments, before them for a method's params. ``checked``: the
        caller refused NUL characters already (``tools.call``'s params hold the arguments)."""
        if not self.is_tool:
            if not checked:
                reject_nul(params, f"{self.name}: a parameter")
            return parsed(self._reads, require_mapping(params, "params"))
        given = require_mapping(params, f"{self.name}: arguments")
        call = parsed(self._reads, given, self.name)
        if not checked:
            reject_nul(given, f"{self.name}: an argument")
        return call

    def dump(self, result: Any) -> Any:
        """``result`` as the wire's JSON values (camelCase keys, times as text)."""
        return self._writes.dump_python(result, by_alias=True)

    def definition(self) -> agent.ToolDefinition:
        """The tool as ``tools/list`` shows it."""
        annotations = agent.ToolAnnotations(
            title=self.title,
            read_only_hint=self.read_only,
            destructive_hint=False,
            open_world_hint=False,
        )
        return agent.ToolDefinition(
            name=self.name,
            title=self.title,
            description=self.description,
            input_schema=self.input_schema,
            output_schema=self.output_schema,
            annotations=annotations,
        )


def tool(name: str, title: str, description: str, model: type[Input], output: Any,
         handler: Callable[..., Awaitable[Any]], **options: Any) -> Operation:  # fmt: skip
    """A tool's row (``Audience.AGENT`` unless ``audience`` says)."""
    options.setdefault("audience", Audience.AGENT)
    return Operation(name, model, output, handler, title=title, description=description,
                     **options)  # fmt: skip


def method(name: str, model: type[Input], output: Any,
           handler: Callable[..., Awaitable[Any]]) -> Operation:  # fmt: skip
    """A host method's row."""
    return Operation(name, model, output, handler)


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
         SEND_MESSAGE_DESCRIPTION, agent.SendMessage, agent.SendAnswer,
         messaging.send_message, communication=True),
    tool("ccweb_create_conversation", "Create a conversation",
         "Create a new cc-web conversation, optionally sending it a first message. With "
         "content, requestReply=true returns its result to you automatically "
         "(return_and_continue); otherwise the message is one_way. Returns at once.",
         agent.CreateConversation, agent.CreatedConversation, messaging.create_conversation,
         communication=True),
    tool("ccweb_list_conversations", "List conversations",
         "List cc-web conversations, newest activity first: id, title, agent, timestamps, "
         "whether one is running, its message count and whether it is you. Metadata only, "
         "never message text.",
         agent.ListConversations, agent.ConversationListing, conversations.list_conversations,
         read_only=True, communication=True),
    tool("ccweb_get_pending_reply", "Show reply requests",
         "Show the status of a return_and_continue request by requestId, or without one list "
         "this conversation's open requests. Replies are delivered automatically; use this "
         "only to check on them.",
         agent.GetPendingReply, agent.PendingReplyAnswer, messaging.get_pending_reply,
         read_only=True, communication=True),
    tool("ccweb_list_user_inputs", "Read the user's own messages",
         "Read the user's own recent messages in a conversation (this one by default), oldest "
         "first, within a character budget. Use it to recover what the user actually asked "
         "for. Read-only.",
         agent.ListUserInputs, agent.UserInputs, user_inputs.list_user_inputs,
         read_only=True, communication=True),
    tool("ccweb_prompt_user", "Ask the user a form",
         "Show the user a short form (1-10 questions, with optional choices) in this "
         "conversation. The answers arrive later as an ordinary user message.",
         agent.PromptUser, agent.PromptCard, prompt_forms.prompt_user),
    tool("ccweb_request_reply", "Send a message and get the reply (deprecated)",
         'Deprecated alias of ccweb_send_message with replyMode "return_and_continue".',
         agent.RequestReply, agent.SendAnswer, _request_reply, audience=Audience.HIDDEN),
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
def _definitions() -> tuple[agent.ToolDefinition, ...]:
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


async def _list_tools(store: Store, call: NoParams) -> list[agent.ToolDefinition]:
    """``tools.list``: the public tools, exactly as MCP ``tools/list`` shows them."""
    return list(_definitions())


def dynamic_tools() -> list[agent.DynamicToolDefinition]:
    """The host's dynamic tools: the public communication tools with ``namespace: "ccweb"``."""
    return [
        agent.DynamicToolDefinition(**dict(definition), namespace=NAMESPACE)
        for operation, definition in zip(_PUBLIC, _definitions(), strict=True)
        if operation.communication
    ]


def composer_items() -> list[agent.ComposerItem]:
    """The composer's ``/`` candidates, one per public tool."""
    return [
        agent.ComposerItem(
            id=f"mcp:{NAMESPACE}/{operation.name}",
            name=operation.name,
            description=operation.description,
        )
        for operation in _PUBLIC
    ]


async def _list_dynamic_tools(store: Store, call: NoParams) -> list[agent.DynamicToolDefinition]:
    """``tools.dynamic``: the communication tools with ``namespace: "ccweb"``."""
    return dynamic_tools()


async def _composer_items(store: Store, call: NoParams) -> list[agent.ComposerItem]:
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
    agent.SendAnswer
    | agent.CreatedConversation
    | agent.ConversationListing
    | agent.PendingReplyAnswer
    | agent.UserInputs
    | agent.PromptCard
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
    method("tools.list", NoParams, list[agent.ToolDefinition], _list_tools),
    method("tools.dynamic", NoParams, list[agent.DynamicToolDefinition], _list_dynamic_tools),
    method("tools.composerItems", NoParams, list[agent.ComposerItem], _composer_items),
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
