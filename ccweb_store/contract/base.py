"""What every call's two models share.

``Input``, what comes in: camelCase on the wire, JSON types exactly, unknown keys ignored,
immutable; the model of a call without parameters (``NoParams``), the types of common
arguments, and the checks that raise validation errors the edge turns into
``invalid_arguments`` sentences (``protocol.argument_errors``). A check that fails raises
``PydanticCustomError``: type ``"argument"`` carries the end of a sentence that starts with
the argument's place (``questions[0].id must be …``); any other type is an error code
(``invalid_conversation_id``) with its whole message.

``Output``, what goes out: camelCase by alias, immutable, read from a row's attributes of the
same snake_case names (a repository's row values), time as ``Timestamp`` (ISO 8601 with
milliseconds and a ``Z``). A key the wire leaves out when it has nothing to say is declared
``= omitted()``: it is written only when it holds something (``omitted(absent=…)`` names what
stands for nothing when null is a value of its own), and the published schema does not list it
as required.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    PlainSerializer,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from ccweb_store.domain.arguments import CENTURY_SECONDS, INT64_MAX
from ccweb_store.domain.errors import INVALID_ARGUMENTS, DomainError
from ccweb_store.domain.ids import AGENT_SESSION_ID_MAX_LENGTH, MAX_PAGE, validate_session_id
from ccweb_store.domain.timestamps import iso

#: The error type of a check whose message continues the argument's place.
ARGUMENT = "argument"


def refuse(message: str) -> PydanticCustomError:
    return PydanticCustomError(ARGUMENT, "{text}", {"text": message})


def domain_check(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``check`` with its ``DomainError`` turned into a validation error of that code."""

    def checked(value: Any) -> Any:
        try:
            return check(value)
        except DomainError as exc:
            raise PydanticCustomError(exc.code, "{text}", {"text": exc.message}) from None

    return checked


@dataclass(frozen=True)
class Clamped:
    """An integer argument's range: ``Annotated[int, Clamped(1, 100)]``. A page size or budget
    outside ``low..high`` is brought inside it rather than refused (a model that asks for too
    much still gets an answer); the published schema states the range."""

    low: int
    high: int

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self._clamp, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        published = handler(schema)
        published.update(minimum=self.low, maximum=self.high)
        return published

    def _clamp(self, value: int) -> int:
        return max(self.low, min(self.high, value))


def non_blank(value: str) -> str:
    if not value.strip():
        raise refuse("must be a non-empty string")
    return value


def stripped_or_none(value: str | None) -> str | None:
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


def coded(code: str, message: str) -> PydanticCustomError:
    """A validation error with an error code of its own and its whole message."""
    return PydanticCustomError(code, "{text}", {"text": message})


def one_of(
    choices: tuple[str, ...], code: str, what: str, make: Callable[[str], Any]
) -> Callable[[Any], Any]:
    """A text that must be one of ``choices`` (``code`` otherwise), as ``make`` makes it."""

    def check(value: Any) -> Any:
        if not isinstance(value, str) or value not in choices:
            raise coded(code, f"invalid {what} {value!r}: expected one of {', '.join(choices)}")
        return make(value)

    return check


def listed(value: Any) -> Any:
    """One text stands for a list of one."""
    return [value] if isinstance(value, str) else value


def _shown(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def between(low: float, high: float, unit: str = "") -> Callable[[Any], Any]:
    """A number from ``low`` to ``high``; the refusal names the bound and ``unit``."""

    def check(value: Any) -> Any:
        if value < low:
            raise refuse(f"must be at least {_shown(low)}, got {_shown(value)}")
        if value > high:
            raise refuse(f"must be at most {_shown(high)}{unit}, got {_shown(value)}")
        return value

    return check


def number(value: Any) -> Any:
    """An integer where a number is asked is that number (JSON does not tell them apart)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if value is not None and not isinstance(value, float):
        raise refuse(f"must be a number, got {json_type(value)}")
    return value


ConversationId = Annotated[str, AfterValidator(domain_check(validate_session_id))]
Text = Annotated[str, AfterValidator(non_blank)]
#: An agent's own session id (a Claude Code session, a Codex thread), as the agent gave it.
AgentSessionId = Annotated[
    str, Field(max_length=AGENT_SESSION_ID_MAX_LENGTH), AfterValidator(non_blank)
]
#: How many rows a host method's listing returns, brought inside ``1..MAX_PAGE``.
PageSize = Annotated[int, Clamped(1, MAX_PAGE)]
#: A whole number of seconds back in time (``olderThanSeconds``), at most a century.
AgeSeconds = Annotated[int, AfterValidator(between(0, CENTURY_SECONDS, " (100 years)"))]


class Input(BaseModel):
    """What every call's model shares: camelCase on the wire, JSON types exactly (``1.0``
    is no integer, ``"true"`` no boolean), unknown keys ignored, immutable once parsed, and
    no integer beyond 64 bits (the database's columns)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        extra="ignore",
        frozen=True,
        strict=True,
    )

    #: Arguments the published schema lists as required although the model has a default
    #: for them: one it fills for old callers (``replyMode``), or one whose absence it refuses
    #: in words of its own.
    published_required: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _fits_64_bits(cls, data: Any) -> Any:
        """An integer argument outside 64 bits is refused before any field's own check: no
        column holds it, and no range of ours reaches it."""
        if isinstance(data, dict):
            for key, value in data.items():
                if type(value) is int and not -INT64_MAX - 1 <= value <= INT64_MAX:
                    raise PydanticCustomError(
                        INVALID_ARGUMENTS,
                        "{text}",
                        {"text": f"{key} must be at most {INT64_MAX}, got {value}"},
                    )
        return data


class NoParams(Input):
    """A method that takes no parameters (any given are ignored)."""


#: A time on the wire: ISO 8601 UTC with milliseconds and a ``Z`` (``domain.timestamps.iso``).
Timestamp = Annotated[
    datetime,
    PlainSerializer(iso, return_type=str),
    WithJsonSchema({"type": "string", "format": "date-time"}, mode="serialization"),
]


#: What an omitted key holds when its answer says nothing there, where null is a value.
ABSENT: Any = type("Absent", (), {"__repr__": lambda self: "ABSENT"})()


def omitted(absent: Any = None) -> Any:
    """The declaration of an answer's key that is left out of the wire while it holds
    ``absent`` (its default)."""
    return Field(default=absent, exclude_if=lambda value: value is absent)


class Output(BaseModel):
    """What every answer's model shares: camelCase by alias, immutable, built from a row's
    attributes of the same names or from keyword arguments."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        serialize_by_alias=True,
        validate_by_name=True,
        validate_by_alias=True,
        from_attributes=True,
        frozen=True,
        extra="forbid",
    )
