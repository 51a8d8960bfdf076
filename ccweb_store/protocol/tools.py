"""THE tool registry: every ccweb tool is defined once, here.

``tools/list`` (HTTP and stdio), the host's ``tools.list``, ``tools.dynamic`` and
``tools.composerItems`` are all derived from ``TOOLS``; nothing else copies a description
or a schema. A tool's ``inputSchema`` is generated from its arguments' model
(``domain.tool_arguments``), and a call's arguments are validated by that model once, here,
by a ``TypeAdapter`` built at import (the habit of the MCP SDK's ``FuncMetadata``): the
service gets the typed model. The hidden alias ``ccweb_request_reply`` is callable
everywhere and listed nowhere, so threads that loaded the old tool keep working while new
calls never see it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar, get_type_hints

from pydantic import TypeAdapter
from typing_extensions import TypedDict

from ccweb_store.domain import tool_arguments as arguments
from ccweb_store.domain.arguments import reject_nul
from ccweb_store.domain.context import Source
from ccweb_store.domain.errors import InvalidInput
from ccweb_store.domain.kinds import ReplyMode
from ccweb_store.protocol import shapes
from ccweb_store.protocol.argument_errors import parsed
from ccweb_store.protocol.shapes.conversations import ConversationListingAnswer, UserInputsAnswer
from ccweb_store.protocol.shapes.prompt_forms import PromptCardAnswer
from ccweb_store.protocol.shapes.replies import (
    CreatedConversationAnswer,
    PendingReplyToolAnswer,
    SendAnswer,
)
from ccweb_store.protocol.shapes.wire import closed
from ccweb_store.services import conversations, messaging, prompt_forms, user_inputs
from ccweb_store.store.uow import Store

A = TypeVar("A", bound=arguments.ToolArguments)
R = TypeVar("R")

NAMESPACE = "ccweb"


class UnknownTool(LookupError):
    """No tool of that name exists (the protocols answer JSON-RPC -32602)."""

    def __init__(self, name: object) -> None:
        super().__init__(f"unknown tool {name!r}")
        self.name = name


#: What a tool answers: one of the tools' answer models (``Tool.result`` names each one's).
ToolAnswer = (
    SendAnswer
    | CreatedConversationAnswer
    | ConversationListingAnswer
    | PendingReplyToolAnswer
    | UserInputsAnswer
    | PromptCardAnswer
)


@closed
class ToolAnnotations(TypedDict):
    """A tool's MCP annotations."""

    title: str
    readOnlyHint: bool
    destructiveHint: Literal[False]
    openWorldHint: Literal[False]


@closed
class ToolDefinition(TypedDict):
    """A tool as ``tools/list`` and the host's ``tools.list`` show it."""

    name: str
    title: str
    description: str
    inputSchema: dict[str, Any]
    annotations: ToolAnnotations


@closed
class DynamicToolDefinition(ToolDefinition):
    """A tool as the host's ``tools.dynamic`` shows it."""

    namespace: str


@closed
class ComposerItem(TypedDict):
    """One of the composer's ``/`` candidates (``tools.composerItems``)."""

    id: str
    name: str
    description: str


def published_schema(model: type[arguments.ToolArguments]) -> dict[str, Any]:
    """``model``'s JSON schema as MCP clients read it best: one object with its nested
    schemas inlined (no ``$defs``), an optional argument as its plain type (no
    ``anyOf … null``, no ``default: null``), no generated titles or docstrings, and the
    arguments the model keeps a compatibility default for listed as required, that default
    unshown."""
    schema = model.model_json_schema(by_alias=True)
    definitions = schema.pop("$defs", {})
    for definition in definitions.values():
        definition.pop("description", None)
    schema.pop("description", None)
    plain = _plain(schema, definitions)
    assert isinstance(plain, dict)
    for name in model.published_required:
        plain["properties"][name].pop("default", None)
    required = set(plain.get("required", ())) | set(model.published_required)
    if required:
        plain["required"] = [name for name in plain["properties"] if name in required]
    return plain


def _plain(node: Any, definitions: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_plain(item, definitions) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = definitions[node["$ref"].rsplit("/", 1)[-1]]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    options = node.get("anyOf")
    if isinstance(options, list) and {"type": "null"} in options and len(options) == 2:
        (kept,) = [option for option in options if option != {"type": "null"}]
        node = {**{k: v for k, v in node.items() if k != "anyOf"}, **kept}
        if node.get("default", 0) is None:
            del node["default"]
    return {
        key: (
            {name: _plain(value, definitions) for name, value in item.items()}
            if key == "properties"
            else _plain(item, definitions)
        )
        for key, item in node.items()
        if not (key == "title" and isinstance(item, str))
    }


@dataclass(frozen=True)
class Tool(Generic[A, R]):
    """One tool: its wire definition, the model of its arguments, the service function that
    runs it and how its result is shown (``shapes``); the answer's model (``result``) is the
    return annotation of ``shown``."""

    name: str
    title: str
    description: str
    arguments: type[A]
    handler: Callable[[Store, Source, A], Awaitable[R]]
    shown: Callable[[R], ToolAnswer]
    read_only: bool = False
    public: bool = True
    communication: bool = False
    input_schema: dict[str, Any] = field(init=False, repr=False, compare=False)
    definition: ToolDefinition = field(init=False, repr=False, compare=False)
    #: The model of the answer (a ``TypedDict`` of ``shapes``, or a union of them), which
    #: the tests validate real answers with.
    result: Any = field(init=False, repr=False, compare=False)
    #: Validates a call's arguments into ``arguments`` (built once, at import).
    adapter: TypeAdapter[A] = field(init=False, repr=False, compare=False)

    def parse(self, args: Mapping[str, Any]) -> A:
        """The call's arguments as the tool's model, or ``invalid_arguments`` naming the
        first problem. Only the wire's camelCase names are read."""
        return parsed(self.adapter, args, self.name)

    def __post_init__(self) -> None:
        object.__setattr__(self, "input_schema", published_schema(self.arguments))
        object.__setattr__(self, "adapter", TypeAdapter(self.arguments))
        object.__setattr__(self, "result", get_type_hints(self.shown)["return"])
        annotations: ToolAnnotations = {
            "title": self.title,
            "readOnlyHint": self.read_only,
            "destructiveHint": False,
            "openWorldHint": False,
        }
        # Built once, so every list hands out the very same description and schema objects.
        definition: ToolDefinition = {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.input_schema,
            "annotations": annotations,
        }
        object.__setattr__(self, "definition", definition)


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


async def _request_reply(
    store: Store, source: Source, args: arguments.RequestReply
) -> messaging.SendResult:
    """The hidden alias: ``ccweb_send_message`` fixed to ``return_and_continue``."""
    send = arguments.SendMessage(
        target_conversation_id=args.target_conversation_id,
        content=args.content,
        reply_mode=ReplyMode.RETURN_AND_CONTINUE,
    )
    return await messaging.send_message(store, source, send)


TOOLS: tuple[Tool[Any, Any], ...] = (
    Tool(
        name="ccweb_send_message",
        title="Send a message to another conversation",
        description=SEND_MESSAGE_DESCRIPTION,
        arguments=arguments.SendMessage,
        handler=messaging.send_message,
        shown=shapes.send_out,
        communication=True,
    ),
    Tool(
        name="ccweb_create_conversation",
        title="Create a conversation",
        description="Create a new cc-web conversation, optionally sending it a first message. "
        "With content, requestReply=true returns its result to you automatically "
        "(return_and_continue); otherwise the message is one_way. Returns at once.",
        arguments=arguments.CreateConversation,
        handler=messaging.create_conversation,
        shown=shapes.created_conversation_out,
        communication=True,
    ),
    Tool(
        name="ccweb_list_conversations",
        title="List conversations",
        description="List cc-web conversations, newest activity first: id, title, agent, "
        "timestamps, whether one is running, its message count and whether it is you. "
        "Metadata only, never message text.",
        arguments=arguments.ListConversations,
        handler=conversations.list_conversations,
        shown=shapes.conversation_listing_out,
        read_only=True,
        communication=True,
    ),
    Tool(
        name="ccweb_get_pending_reply",
        title="Show reply requests",
        description="Show the status of a return_and_continue request by requestId, or without "
        "one list this conversation's open requests. Replies are delivered automatically; "
        "use this only to check on them.",
        arguments=arguments.GetPendingReply,
        handler=messaging.get_pending_reply,
        shown=shapes.pending_reply_answer_out,
        read_only=True,
        communication=True,
    ),
    Tool(
        name="ccweb_list_user_inputs",
        title="Read the user's own messages",
        description="Read the user's own recent messages in a conversation (this one by "
        "default), oldest first, within a character budget. Use it to recover what the user "
        "actually asked for. Read-only.",
        arguments=arguments.ListUserInputs,
        handler=user_inputs.list_user_inputs,
        shown=shapes.user_inputs_out,
        read_only=True,
        communication=True,
    ),
    Tool(
        name="ccweb_prompt_user",
        title="Ask the user a form",
        description="Show the user a short form (1-10 questions, with optional choices) in this "
        "conversation. The answers arrive later as an ordinary user message.",
        arguments=arguments.PromptUser,
        handler=prompt_forms.prompt_user,
        shown=shapes.prompt_card_out,
    ),
    Tool(
        name="ccweb_request_reply",
        title="Send a message and get the reply (deprecated)",
        description='Deprecated alias of ccweb_send_message with replyMode "return_and_continue".',
        arguments=arguments.RequestReply,
        handler=_request_reply,
        shown=shapes.send_out,
        public=False,
    ),
)

_BY_NAME: dict[str, Tool[Any, Any]] = {tool.name: tool for tool in TOOLS}


def get_tool(name: object) -> Tool[Any, Any]:
    """The tool called ``name`` (public or hidden), or ``UnknownTool``."""
    tool = _BY_NAME.get(name) if isinstance(name, str) else None
    if tool is None:
        raise UnknownTool(name)
    return tool


def public_tools() -> list[ToolDefinition]:
    """The listed tools, as MCP ``tools/list`` and the host's ``tools.list`` show them."""
    return [tool.definition for tool in TOOLS if tool.public]


def dynamic_tools() -> list[DynamicToolDefinition]:
    """The host's dynamic tools: the public communication tools with ``namespace: "ccweb"``."""
    return [
        {**tool.definition, "namespace": NAMESPACE}
        for tool in TOOLS
        if tool.public and tool.communication
    ]


def composer_items() -> list[ComposerItem]:
    """The composer's ``/`` candidates, one per public tool."""
    return [
        {"id": f"mcp:{NAMESPACE}/{tool.name}", "name": tool.name, "description": tool.description}
        for tool in TOOLS
        if tool.public
    ]


async def call_tool(store: Store, source: Source, name: object, args: object) -> ToolAnswer:
    """Run a tool (hidden aliases included) and return its payload, shaped for the wire.

    Raises ``UnknownTool`` for an unknown name and ``DomainError`` for a tool failure
    (arguments the tool's model refuses are ``invalid_arguments``, or the code of the
    model's check).
    """
    tool = get_tool(name)
    if args is None:
        args = {}
    if type(args) is not dict and not isinstance(args, Mapping):
        raise InvalidInput(
            f"{tool.name}: arguments must be a JSON object, got {type(args).__name__}"
        )
    parsed = tool.parse(args)
    reject_nul(args, f"{tool.name}: an argument")
    return tool.shown(await tool.handler(store, source, parsed))
