"""Every ccweb tool's arguments as one pydantic model: the one truth of what a call may pass.

``protocol.tools`` publishes each model's JSON schema as the tool's ``inputSchema`` and
validates a call's arguments against the same model, once, where the call enters; the
services take the validated model. Required means required, and every range, length and
enum is the model's. On the wire the names are camelCase (generated aliases); in Python they
are snake_case. Keys a model does not name are ignored: threads that loaded an older schema
still send them.

A check that fails raises ``PydanticCustomError``: type ``"argument"`` carries the end of a
sentence that starts with the argument's place (``questions[0].id must be …``); any other
type is an error code (``invalid_conversation_id``) with its whole message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from ccweb_store.domain.errors import INVALID_REPLY_MODE, DomainError
from ccweb_store.domain.ids import AGENT_MAX_LENGTH, validate_session_id
from ccweb_store.domain.kinds import ReplyMode

#: The error type of a check whose message continues the argument's place.
ARGUMENT = "argument"

LIST_CONVERSATIONS_DEFAULT = 20
LIST_CONVERSATIONS_MAX = 100
QUERY_MAX_CHARS = 1000
USER_INPUTS_DEFAULT = 15
USER_INPUTS_MAX = 50
MAX_CHARS_DEFAULT = 1000
MAX_CHARS_MAX = 1000
MAX_QUESTIONS = 10


def _refuse(message: str) -> PydanticCustomError:
    return PydanticCustomError(ARGUMENT, "{text}", {"text": message})


def _domain_check(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``check`` with its ``DomainError`` turned into a validation error of that code."""

    def checked(value: Any) -> Any:
        try:
            return check(value)
        except DomainError as exc:
            raise PydanticCustomError(exc.code, "{text}", {"text": exc.message}) from None

    return checked


def _clamped(low: int, high: int) -> Callable[[int], int]:
    """A page size or budget outside ``low..high`` is brought inside it rather than refused:
    a model that asks for too much still gets an answer."""
    return lambda value: max(low, min(high, value))


def _non_blank(value: str) -> str:
    if not value.strip():
        raise _refuse("must be a non-empty string")
    return value


def _stripped_or_none(value: str | None) -> str | None:
    return (value.strip() or None) if value is not None else None


def json_type(value: Any) -> str:
    """The JSON type name of a decoded value, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    for kind, name in ((str, "string"), (int, "integer"), (float, "number")):
        if isinstance(value, kind):
            return name
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__


def _reply_mode(value: Any) -> Any:
    """An absent or null ``replyMode`` means ``one_way``; a text that is no mode is
    ``invalid_reply_mode`` with the rule an agent needs to choose."""
    if value is None:
        return ReplyMode.ONE_WAY
    if isinstance(value, ReplyMode):
        return value
    if not isinstance(value, str):
        raise _refuse(f"must be a string, got {json_type(value)}")
    if value not in tuple(ReplyMode):
        raise PydanticCustomError(
            INVALID_REPLY_MODE,
            "{text}",
            {
                "text": f"invalid replyMode {value!r}: use 'one_way' when you do not need the "
                "result, 'return_and_continue' when you need it back"
            },
        )
    return ReplyMode(value)


def _clamped_int(default: int, high: int, description: str) -> Any:
    return Field(
        default=default,
        description=description,
        json_schema_extra={"minimum": 1, "maximum": high},
    )


ConversationId = Annotated[str, AfterValidator(_domain_check(validate_session_id))]
Text = Annotated[str, AfterValidator(_non_blank)]


class ToolArguments(BaseModel):
    """What every tool's arguments share: camelCase on the wire, JSON types exactly (``1.0``
    is no integer, ``"true"`` no boolean), unknown keys ignored, immutable once parsed."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        extra="ignore",
        frozen=True,
        strict=True,
    )

    #: Arguments the published schema lists as required although the model has a default
    #: for them (``SendMessage.reply_mode``).
    published_required: ClassVar[tuple[str, ...]] = ()


class SendMessage(ToolArguments):
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


class RequestReply(ToolArguments):
    """``ccweb_request_reply``, the hidden alias: a send fixed to ``return_and_continue``."""

    target_conversation_id: ConversationId
    content: Text


class CreateConversation(ToolArguments):
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


class ListConversations(ToolArguments):
    """``ccweb_list_conversations``."""

    limit: Annotated[int, AfterValidator(_clamped(1, LIST_CONVERSATIONS_MAX))] = _clamped_int(
        LIST_CONVERSATIONS_DEFAULT, LIST_CONVERSATIONS_MAX, "How many conversations to return."
    )
    query: Annotated[str | None, AfterValidator(_stripped_or_none)] = Field(
        default=None,
        max_length=QUERY_MAX_CHARS,
        description="Only conversations whose title or id contains this text (case-insensitive).",
    )
    include_archived: bool = Field(default=False, description="Include archived conversations.")


class GetPendingReply(ToolArguments):
    """``ccweb_get_pending_reply``."""

    request_id: str | None = Field(
        default=None,
        description="One reply request to show; omit to list your open requests.",
    )
    #: Not an argument of the tool: kept so that a credential's caller naming another
    #: conversation is refused rather than quietly shown its own requests.
    conversation_id: SkipJsonSchema[Any] = None


class ListUserInputs(ToolArguments):
    """``ccweb_list_user_inputs``."""

    conversation_id: ConversationId | None = Field(
        default=None,
        description="Conversation to read; omit for this conversation.",
    )
    limit: Annotated[int, AfterValidator(_clamped(1, USER_INPUTS_MAX))] = _clamped_int(
        USER_INPUTS_DEFAULT, USER_INPUTS_MAX, "How many of the newest user messages to consider."
    )
    max_chars: Annotated[int, AfterValidator(_clamped(1, MAX_CHARS_MAX))] = _clamped_int(
        MAX_CHARS_DEFAULT, MAX_CHARS_MAX, "Character budget over all returned inputs."
    )


def _options(value: list[str]) -> list[str]:
    if not all(option.strip() for option in value):
        raise _refuse("must be a list of non-empty strings")
    return [option.strip() for option in value]


class Question(ToolArguments):
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
            raise _refuse("offers no options and no free text, so it cannot be answered")
        return self

    @property
    def free_text(self) -> bool:
        """Whether a typed answer is accepted: by default, when there are no options."""
        return self.allow_free_text if self.allow_free_text is not None else not self.options


def _unique_ids(questions: list[Question]) -> list[Question]:
    ids = [question.id for question in questions]
    repeated = sorted({qid for qid in ids if ids.count(qid) > 1})
    if repeated:
        raise _refuse(f"must have unique ids; repeated: {', '.join(repeated)}")
    return questions


class PromptUser(ToolArguments):
    """``ccweb_prompt_user``."""

    title: Annotated[str | None, AfterValidator(_stripped_or_none)] = Field(
        default=None, description="Heading of the form."
    )
    questions: Annotated[list[Question], AfterValidator(_unique_ids)] = Field(
        min_length=1, max_length=MAX_QUESTIONS
    )
