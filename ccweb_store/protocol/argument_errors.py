"""A tool call's failed validation as the one ``invalid_arguments`` sentence a model reads.

Of everything pydantic found wrong, the first problem (in argument order, an argument given
wrong before one left out) is named, at its place in the arguments (``questions[1].id``),
in the words the tools have always used: a wrong JSON type says which type it got, a
missing or null required argument is "required", a text over its limit says both lengths.
A check of the models' own (a validator in ``contract/``) brings its sentence, or its
error code and whole message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from ccweb_store.contract.base import ARGUMENT, json_type
from ccweb_store.domain.errors import INVALID_ARGUMENTS, InvalidInput

M = TypeVar("M")

#: The JSON type pydantic's type errors ask for, by error type.
EXPECTED_TYPES = {
    "string_type": "string",
    "int_type": "integer",
    "int_from_float": "integer",
    "float_type": "number",
    "bool_type": "boolean",
    "list_type": "array",
    "dict_type": "object",
    "model_type": "object",
    "model_attributes_type": "object",
}


def place(location: Sequence[int | str]) -> str:
    """``("questions", 1, "id")`` as ``questions[1].id``."""
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or "arguments"


def parsed(adapter: TypeAdapter[M], args: Mapping[str, Any], prefix: str | None = None) -> M:
    """``args`` validated into ``adapter``'s model, reading only the wire's camelCase names;
    else the first problem as ``invalid_arguments`` (led by ``prefix``, a tool's name)."""
    try:
        return adapter.validate_python(args, by_alias=True, by_name=False)
    except ValidationError as exc:
        raise invalid_arguments(exc, prefix) from None


def built(model: Callable[..., M], **fields: Any) -> M:
    """``model(**fields)`` built in Python (by field name), or ``invalid_arguments`` naming
    the first problem: for calls a form or a command line makes."""
    try:
        return model(**fields)
    except ValidationError as exc:
        raise invalid_arguments(exc) from None


def invalid_arguments(error: ValidationError, prefix: str | None = None) -> InvalidInput:
    """The first problem of ``error`` as ``invalid_arguments`` (or a model check's own code),
    its message led by ``prefix`` (a tool's name) when there is one."""
    details = error.errors(include_url=False)
    # An argument given wrong comes before one left out: the model learns at once what it
    # got wrong, as the tools have always told it.
    first = next((d for d in details if d["type"] != "missing"), details[0])
    message, code = _sentence(first)
    return InvalidInput(f"{prefix}: {message}" if prefix else message, code=code)


def _sentence(detail: ErrorDetails) -> tuple[str, str]:
    where = place(detail["loc"])
    kind = detail["type"]
    value = detail.get("input")
    context = detail.get("ctx") or {}
    if kind == ARGUMENT:
        return f"{where} {context['text']}", INVALID_ARGUMENTS
    if "text" in context:  # a model check with an error code of its own
        return str(context["text"]), kind
    if kind == "missing" or (kind in EXPECTED_TYPES and value is None):
        return f"{where} is required", INVALID_ARGUMENTS
    if kind in EXPECTED_TYPES:
        expected = EXPECTED_TYPES[kind]
        article = "an" if expected[0] in "aeiou" else "a"
        return f"{where} must be {article} {expected}, got {json_type(value)}", INVALID_ARGUMENTS
    if kind == "string_too_long" or (kind == "too_long" and isinstance(value, str)):
        limit = context["max_length"]
        return f"{where} is {len(value)} characters long; the limit is {limit}", INVALID_ARGUMENTS
    if kind == "greater_than_equal":
        return f"{where} must be at least {context['ge']}, got {value}", INVALID_ARGUMENTS
    if kind == "less_than_equal":
        return f"{where} must be at most {context['le']}, got {value}", INVALID_ARGUMENTS
    if kind in ("too_short", "too_long"):
        return _count_sentence(where, detail), INVALID_ARGUMENTS
    return f"{where}: {detail['msg']}", INVALID_ARGUMENTS


def _count_sentence(where: str, detail: ErrorDetails) -> str:
    context = detail.get("ctx") or {}
    value = detail.get("input")
    count = len(value) if isinstance(value, list | str | dict) else context.get("actual_length")
    if detail["type"] == "too_short":
        return f"{where} must hold at least {context['min_length']} items, got {count}"
    return f"{where} must hold at most {context['max_length']} items, got {count}"
