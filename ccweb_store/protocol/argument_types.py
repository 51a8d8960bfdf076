"""A tool's arguments checked against the JSON types its input schema declares.

Only types are checked, so that a model learns at once which argument it got wrong: ranges,
lengths and the other constraints are the services' to refuse, with messages of their own.
An argument the schema does not name is ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

#: Whether a decoded value has a JSON type, by type name.
JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}
#: The types whose test alone decides (``type_tests``): arrays and objects have items.
SCALAR_TYPES = frozenset({"string", "integer", "number", "boolean"})

TypeTest = Callable[[Any], bool]


def _never(value: Any) -> bool:
    """The quick test of an array or object argument: its schema is always walked."""
    return False


def type_tests(input_schema: Mapping[str, Any]) -> dict[str, TypeTest]:
    """Per argument with a declared type, a quick test that its value has that type: the
    schema is walked (``type_problem``) only for a value that fails it, or for arrays and
    objects, whose items have types of their own."""
    return {
        key: JSON_TYPES[schema["type"]] if schema["type"] in SCALAR_TYPES else _never
        for key, schema in input_schema.get("properties", {}).items()
        if isinstance(schema.get("type"), str)
    }


def argument_problem(
    args: Mapping[str, Any], input_schema: Mapping[str, Any], tests: Mapping[str, TypeTest]
) -> str | None:
    """What is wrong with the first known argument of the wrong JSON type, or ``None``."""
    for key, value in args.items():
        test = tests.get(key)
        if value is None or (test is not None and test(value)):
            continue
        schema = input_schema.get("properties", {}).get(key)
        if schema is None:
            continue
        problem = type_problem(value, schema, key)
        if problem:
            return problem
    return None


def type_problem(value: Any, schema: Mapping[str, Any], where: str) -> str | None:
    """Why ``value`` (at ``where``) does not have the type ``schema`` declares, items and
    members included, or ``None``."""
    expected = schema.get("type")
    if isinstance(expected, str) and not JSON_TYPES[expected](value):
        article = "an" if expected[0] in "aeiou" else "a"
        return f"{where} must be {article} {expected}, got {json_type(value)}"
    if expected == "array" and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            problem = type_problem(item, schema["items"], f"{where}[{index}]")
            if problem:
                return problem
    if expected == "object":
        properties = schema.get("properties", {})
        for key, item in value.items():
            if key in properties and item is not None:
                problem = type_problem(item, properties[key], f"{where}.{key}")
                if problem:
                    return problem
    return None


def json_type(value: Any) -> str:
    """The JSON type name of a decoded value, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    for name, matches in JSON_TYPES.items():
        if matches(value):
            return name
    return type(value).__name__
