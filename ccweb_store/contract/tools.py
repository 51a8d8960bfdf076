"""Every ccweb tool's arguments (and ``tools.call``'s, which runs a tool for the host); each
tool's answer is ``contract.tool_answers``'.

The registry (``protocol.registry``) publishes each arguments model's JSON schema as the tool's
``inputSchema`` and its answer's as its ``outputSchema``, and validates a call's arguments
against the model, once, where the call enters; the services take the validated model and
return the answer. Required means required, and every range, length and enum is the model's.
On the wire the names are camelCase (generated aliases); in Python they are snake_case. Keys a
model does not name are ignored: threads that loaded an older schema still send them.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BeforeValidator, Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from ccweb_store.contract.base import (
    Clamped,
    ConversationId,
    Input,
    Text,
    coded,
    json_type,
    refuse,
    stripped_or_none,
)
from ccweb_store.domain.context import Source
from ccweb_store.domain.errors import INVALID_ARGUMENTS, INVALID_REPLY_MODE
from ccweb_store.domain.ids import AGENT_MAX_LENGTH
from ccweb_store.domain.kinds import ReplyMode

LIST_CONVERSATIONS_DEFAULT = 20
LIST_CONVERSATIONS_MAX = 100
QUERY_MAX_CHARS = 1000
USER_INPUTS_DEFAULT = 15
USER_INPUTS_MAX = 50
MAX_CHARS_DEFAULT = 1000
MAX_CHARS_MAX = 1000
MAX_QUESTIONS = 10


def _reply_mode(value: Any) -> Any:
    """An absent or null ``replyMode`` means ``one_way``; a text that is no mode is
    ``invalid_reply_mode`` with the rule an agent needs to choose."""
    if value is None:
        return ReplyMode.ONE_WAY
    if isinstance(value, ReplyMode):
        return value
    if not isinstance(value, str):
        raise refuse(f"must be a string, got {json_type(value)}")
    if value not in tuple(ReplyMode):
        raise coded(
            INVALID_REPLY_MODE,
            f"invalid replyMode {value!r}: use 'one_way' when you do not need the result, "
            "'return_and_continue' when you need it back",
        )
    return ReplyMode(value)


class SendMessage(Input):
    """``ccweb_send_message``."""

    target_conversation_id: ConversationId = Field(
        description="The id of the conversation to send to (see ccweb_list_conversations)."
    )
    content: Text = Field(
        description="The complete, self-contained message for the target's agent."
    )
    # Published as required, so a model chooses every time (SPEC §2.2). Threads that loaded
    # the old schema call without it, and SPEC's compatibility rule makes that one_way: the
    # default lives here, and the schema never shows it.
    reply_mode: Annotated[ReplyMode, BeforeValidator(_reply_mode)] = Field(
        default=ReplyMode.ONE_WAY,
        description="return_and_continue when you need the result (analysis, "
        "implementation, testing, acceptance, report back, dependent follow-up); "
        "one_way only when you do not need the target's result.",
    )
    published_required: ClassVar[tuple[str, ...]] = ("replyMode",)

    @property
    def reply_mode_left_out(self) -> bool:
        """The call did not say ``replyMode``: a thread on the old schema, sent ``one_way``."""
        return "reply_mode" not in self.model_fields_set


class RequestReply(Input):
    """``ccweb_request_reply``, the hidden alias: a send fixed to ``return_and_continue``."""

    target_conversation_id: ConversationId
    content: Text


class CreateConversation(Input):
    """``ccweb_create_conversation``."""

    title: str | None = Field(default=None, description="Title of the new conversation.")
    content: str | None = Field(
        default=None,
        description="Optional first message; it is sent like ccweb_send_message.",
    )
    request_reply: bool | None = Field(
        default=None,
        description="With content: true returns the new conversation's result to you "
        "(return_and_continue); false sends one_way.",
    )
    wait_for_reply: bool | None = Field(
        default=None, description="Legacy spelling of requestReply."
    )
    agent: str | None = Field(
        default=None,
        max_length=AGENT_MAX_LENGTH,
        description="Agent to run it (e.g. claude, codex); with a credential, only yours.",
    )
    cwd: str | None = Field(
        default=None,
        description="Working directory of the new conversation; with a credential, "
        "yours (the default) or a folder inside it.",
    )

    @property
    def wants_reply(self) -> bool:
        return bool(self.request_reply or self.wait_for_reply)


class ListConversations(Input):
    """``ccweb_list_conversations``."""

    limit: Annotated[int, Clamped(1, LIST_CONVERSATIONS_MAX)] = Field(
        default=LIST_CONVERSATIONS_DEFAULT, description="How many conversations to return."
    )
    query: Annotated[str | None, AfterValidator(stripped_or_none)] = Field(
        default=None,
        max_length=QUERY_MAX_CHARS,
        description="Only conversations whose title or id contains this text (case-insensitive).",
    )
    include_archived: bool = Field(default=False, description="Include archived conversations.")


class GetPendingReply(Input):
    """``ccweb_get_pending_reply``."""

    request_id: str | None = Field(
        default=None,
        description="One reply request to show; omit to list your open requests.",
    )
    #: Not an argument of the tool: kept so that a credential's caller naming another
    #: conversation is refused rather than quietly shown its own requests.
    conversation_id: SkipJsonSchema[str | None] = None


class ListUserInputs(Input):
    """``ccweb_list_user_inputs``."""

    conversation_id: ConversationId | None = Field(
        default=None,
        description="Conversation to read; omit for this conversation.",
    )
    limit: Annotated[int, Clamped(1, USER_INPUTS_MAX)] = Field(
        default=USER_INPUTS_DEFAULT,
        description="How many of the newest user messages to consider.",
    )
    max_chars: Annotated[int, Clamped(1, MAX_CHARS_MAX)] = Field(
        default=MAX_CHARS_DEFAULT, description="Character budget over all returned inputs."
    )


def _options(value: list[str]) -> list[str]:
    if not all(option.strip() for option in value):
        raise refuse("must be a list of non-empty strings")
    return [option.strip() for option in value]


class Question(Input):
    """One question of a ``ccweb_prompt_user`` form."""

    id: Text = Field(description="Key of this answer.")
    question: Annotated[Text, AfterValidator(str.strip)] = Field(description="The question text.")
    options: Annotated[list[str], AfterValidator(_options)] = Field(
        default_factory=list, description="Choices to offer."
    )
    allow_free_text: bool | None = Field(
        default=None, description="Whether the user may type an answer of their own."
    )

    @model_validator(mode="after")
    def _answerable(self) -> Question:
        if not self.options and self.allow_free_text is False:
            raise refuse("offers no options and no free text, so it cannot be answered")
        return self

    @property
    def free_text(self) -> bool:
        """Whether a typed answer is accepted: by default, when there are no options."""
        return self.allow_free_text if self.allow_free_text is not None else not self.options


def _unique_ids(questions: list[Question]) -> list[Question]:
    ids = [question.id for question in questions]
    repeated = sorted({qid for qid in ids if ids.count(qid) > 1})
    if repeated:
        raise refuse(f"must have unique ids; repeated: {', '.join(repeated)}")
    return questions


class PromptUser(Input):
    """``ccweb_prompt_user``."""

    title: Annotated[str | None, AfterValidator(stripped_or_none)] = Field(
        default=None, description="Heading of the form."
    )
    questions: Annotated[list[Question], AfterValidator(_unique_ids)] = Field(
        min_length=1, max_length=MAX_QUESTIONS
    )


#: What ``tools.call``'s ``tool`` (or ``name``) must be, said when it is anything else.
TOOL_NAME_RULE = "tool (or name) is required: the name of the tool to call"


def _tool_name(value: Any) -> Any:
    if value is not None and not isinstance(value, str):
        raise coded(INVALID_ARGUMENTS, TOOL_NAME_RULE)
    return value


class ToolsCall(Input):
    """``tools.call`` / ``tools.callDynamic``: a tool run for a source conversation; ``tool``
    or ``name``, ``args`` or ``arguments``, ``sourceSessionId`` or ``sourceConversationId``
    (the tool's own model validates the arguments)."""

    tool: Annotated[str | None, BeforeValidator(_tool_name)] = None
    name: Annotated[str | None, BeforeValidator(_tool_name)] = None
    args: dict[str, Any] | None = None
    arguments: dict[str, Any] | None = None
    source_session_id: str | None = None
    source_conversation_id: str | None = None
    source_hop_count: Annotated[int, Field(ge=0)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _arguments_are_an_object(cls, data: Any) -> Any:
        """The tool's arguments, where given, are an object (said as the tool says it)."""
        if isinstance(data, dict):
            named = data.get("tool", data.get("name"))
            for key in ("args", "arguments"):
                given = data.get(key)
                if given is not None and not isinstance(given, dict):
                    raise coded(
                        INVALID_ARGUMENTS,
                        f"{named}: arguments must be a JSON object, got {type(given).__name__}",
                    )
        return data

    @model_validator(mode="after")
    def _named(self) -> ToolsCall:
        if not self.tool_name:
            raise coded(INVALID_ARGUMENTS, TOOL_NAME_RULE)
        return self

    @property
    def tool_name(self) -> str:
        return self.tool or self.name or ""

    @property
    def tool_arguments(self) -> dict[str, Any] | None:
        return self.args if self.args is not None else self.arguments

    @property
    def source(self) -> Source:
        """The calling conversation (none named: no source) at its hop count."""
        session = self.source_session_id or self.source_conversation_id
        return Source(session or None, self.source_hop_count or 0)
