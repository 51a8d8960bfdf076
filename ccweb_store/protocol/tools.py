"""THE tool registry: every ccweb tool is defined once, here.

``tools/list`` (HTTP and stdio), the host's ``tools.list``, ``tools.dynamic`` and
``tools.composerItems`` are all derived from ``TOOLS``; nothing else copies a description
or a schema. Arguments are checked against a tool's schema by ``argument_types``. The hidden
alias ``ccweb_request_reply`` is callable everywhere and listed nowhere, so threads that
loaded the old tool keep working while new calls never see it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ccweb_store.domain.arguments import reject_nul
from ccweb_store.domain.context import Source
from ccweb_store.domain.errors import InvalidInput
from ccweb_store.protocol.argument_types import TypeTest, argument_problem, type_tests
from ccweb_store.services import conversations, messaging, prompt_forms, user_inputs
from ccweb_store.store.uow import Store

ToolHandler = Callable[[Store, Source, Mapping[str, Any]], Awaitable[dict[str, Any]]]

NAMESPACE = "ccweb"


class UnknownTool(LookupError):
    """No tool of that name exists (the protocols answer JSON-RPC -32602)."""

    def __init__(self, name: object) -> None:
        super().__init__(f"unknown tool {name!r}")
        self.name = name


@dataclass(frozen=True)
class Tool:
    """One tool: its wire definition and the service function that runs it."""

    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    handler: ToolHandler
    read_only: bool = False
    public: bool = True
    communication: bool = False
    definition: dict[str, Any] = field(init=False, repr=False, compare=False)
    #: Per argument with a declared type, a quick test of its value (``argument_types``).
    type_tests: dict[str, TypeTest] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        annotations = {
            "title": self.title,
            "readOnlyHint": self.read_only,
            "destructiveHint": False,
            "openWorldHint": False,
        }
        # Built once, so every list hands out the very same description and schema objects.
        object.__setattr__(
            self,
            "definition",
            {
                "name": self.name,
                "title": self.title,
                "description": self.description,
                "inputSchema": self.input_schema,
                "annotations": annotations,
            },
        )
        object.__setattr__(self, "type_tests", type_tests(self.input_schema))


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

SEND_MESSAGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "targetConversationId": {
            "type": "string",
            "description": "The id of the conversation to send to (see ccweb_list_conversations).",
        },
        "content": {
            "type": "string",
            "description": "The complete, self-contained message for the target's agent.",
        },
        "replyMode": {
            "type": "string",
            "enum": [messaging.ONE_WAY, messaging.RETURN_AND_CONTINUE],
            "description": "return_and_continue when you need the result (analysis, "
            "implementation, testing, acceptance, report back, dependent follow-up); "
            "one_way only when you do not need the target's result.",
        },
    },
    "required": ["targetConversationId", "content", "replyMode"],
}

CREATE_CONVERSATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "description": "Title of the new conversation."},
        "content": {
            "type": "string",
            "description": "Optional first message; it is sent like ccweb_send_message.",
        },
        "requestReply": {
            "type": "boolean",
            "description": "With content: true returns the new conversation's result to you "
            "(return_and_continue); false sends one_way.",
        },
        "waitForReply": {"type": "boolean", "description": "Legacy spelling of requestReply."},
        "agent": {
            "type": "string",
            "description": "Agent to run it (e.g. claude, codex); with a credential, only yours.",
        },
        "cwd": {
            "type": "string",
            "description": "Working directory of the new conversation; with a credential, "
            "yours (the default) or a folder inside it.",
        },
    },
}

LIST_CONVERSATIONS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": conversations.MAX_LIST_LIMIT,
            "default": conversations.DEFAULT_LIST_LIMIT,
            "description": "How many conversations to return.",
        },
        "query": {
            "type": "string",
            "maxLength": conversations.MAX_QUERY_CHARS,
            "description": "Only conversations whose title or id "
            "contains this text (case-insensitive).",
        },
        "includeArchived": {
            "type": "boolean",
            "default": False,
            "description": "Include archived conversations.",
        },
    },
}

GET_PENDING_REPLY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "requestId": {
            "type": "string",
            "description": "One reply request to show; omit to list your open requests.",
        }
    },
}

LIST_USER_INPUTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "conversationId": {
            "type": "string",
            "description": "Conversation to read; omit for this conversation.",
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": 50,
            "default": 15,
            "description": "How many of the newest user messages to consider.",
        },
        "maxChars": {
            "type": "integer",
            "minimum": 1,
            "maximum": 1000,
            "default": 1000,
            "description": "Character budget over all returned inputs.",
        },
    },
}

PROMPT_USER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "description": "Heading of the form."},
        "questions": {
            "type": "array",
            "minItems": 1,
            "maxItems": 10,
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": "Key of this answer."},
                    "question": {"type": "string", "description": "The question text."},
                    "options": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Choices to offer.",
                    },
                    "allowFreeText": {
                        "type": "boolean",
                        "description": "Whether the user may type an answer of their own.",
                    },
                },
                "required": ["id", "question"],
            },
        },
    },
    "required": ["questions"],
}

REQUEST_REPLY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "targetConversationId": {"type": "string"},
        "content": {"type": "string"},
    },
    "required": ["targetConversationId", "content"],
}


async def _request_reply(store: Store, source: Source, args: Mapping[str, Any]) -> dict[str, Any]:
    """The hidden alias: ``ccweb_send_message`` fixed to ``return_and_continue``."""
    return await messaging.send_message(
        store, source, args, reply_mode=messaging.RETURN_AND_CONTINUE
    )


TOOLS: tuple[Tool, ...] = (
    Tool(
        name="ccweb_send_message",
        title="Send a message to another conversation",
        description=SEND_MESSAGE_DESCRIPTION,
        input_schema=SEND_MESSAGE_SCHEMA,
        handler=messaging.send_message,
        communication=True,
    ),
    Tool(
        name="ccweb_create_conversation",
        title="Create a conversation",
        description="Create a new cc-web conversation, optionally sending it a first message. "
        "With content, requestReply=true returns its result to you automatically "
        "(return_and_continue); otherwise the message is one_way. Returns at once.",
        input_schema=CREATE_CONVERSATION_SCHEMA,
        handler=messaging.create_conversation,
        communication=True,
    ),
    Tool(
        name="ccweb_list_conversations",
        title="List conversations",
        description="List cc-web conversations, newest activity first: id, title, agent, "
        "timestamps, whether one is running, its message count and whether it is you. "
        "Metadata only, never message text.",
        input_schema=LIST_CONVERSATIONS_SCHEMA,
        handler=conversations.list_conversations,
        read_only=True,
        communication=True,
    ),
    Tool(
        name="ccweb_get_pending_reply",
        title="Show reply requests",
        description="Show the status of a return_and_continue request by requestId, or without "
        "one list this conversation's open requests. Replies are delivered automatically; "
        "use this only to check on them.",
        input_schema=GET_PENDING_REPLY_SCHEMA,
        handler=messaging.get_pending_reply,
        read_only=True,
        communication=True,
    ),
    Tool(
        name="ccweb_list_user_inputs",
        title="Read the user's own messages",
        description="Read the user's own recent messages in a conversation (this one by "
        "default), oldest first, within a character budget. Use it to recover what the user "
        "actually asked for. Read-only.",
        input_schema=LIST_USER_INPUTS_SCHEMA,
        handler=user_inputs.list_user_inputs,
        read_only=True,
        communication=True,
    ),
    Tool(
        name="ccweb_prompt_user",
        title="Ask the user a form",
        description="Show the user a short form (1-10 questions, with optional choices) in this "
        "conversation. The answers arrive later as an ordinary user message.",
        input_schema=PROMPT_USER_SCHEMA,
        handler=prompt_forms.prompt_user,
    ),
    Tool(
        name="ccweb_request_reply",
        title="Send a message and get the reply (deprecated)",
        description='Deprecated alias of ccweb_send_message with replyMode "return_and_continue".',
        input_schema=REQUEST_REPLY_SCHEMA,
        handler=_request_reply,
        public=False,
    ),
)

_BY_NAME: dict[str, Tool] = {tool.name: tool for tool in TOOLS}


def get_tool(name: object) -> Tool:
    """The tool called ``name`` (public or hidden), or ``UnknownTool``."""
    tool = _BY_NAME.get(name) if isinstance(name, str) else None
    if tool is None:
        raise UnknownTool(name)
    return tool


def public_tools() -> list[dict[str, Any]]:
    """The listed tools, as MCP ``tools/list`` and the host's ``tools.list`` show them."""
    return [tool.definition for tool in TOOLS if tool.public]


def dynamic_tools() -> list[dict[str, Any]]:
    """The host's dynamic tools: the public communication tools with ``namespace: "ccweb"``."""
    return [
        {**tool.definition, "namespace": NAMESPACE}
        for tool in TOOLS
        if tool.public and tool.communication
    ]


def composer_items() -> list[dict[str, Any]]:
    """The composer's ``/`` candidates, one per public tool."""
    return [
        {"id": f"mcp:{NAMESPACE}/{tool.name}", "name": tool.name, "description": tool.description}
        for tool in TOOLS
        if tool.public
    ]


async def call_tool(store: Store, source: Source, name: object, args: object) -> dict[str, Any]:
    """Run a tool (hidden aliases included) and return its payload.

    Raises ``UnknownTool`` for an unknown name and ``DomainError`` for a tool failure
    (argument type errors are ``invalid_arguments``).
    """
    tool = get_tool(name)
    if args is None:
        args = {}
    if type(args) is not dict and not isinstance(args, Mapping):
        raise InvalidInput(
            f"{tool.name}: arguments must be a JSON object, got {type(args).__name__}"
        )
    check_arguments(tool, args)
    reject_nul(args, f"{tool.name}: an argument")
    return await tool.handler(store, source, args)


def check_arguments(tool: Tool, args: Mapping[str, Any]) -> None:
    """Refuse known arguments of the wrong JSON type; unknown extra keys are ignored."""
    problem = argument_problem(args, tool.input_schema, tool.type_tests)
    if problem:
        raise InvalidInput(f"{tool.name}: {problem}")
