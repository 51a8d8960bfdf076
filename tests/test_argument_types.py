"""``argument_types``: a tool's arguments checked against the JSON types of its schema."""

from __future__ import annotations

from typing import Any

import pytest

from ccweb_store.protocol.argument_types import (
    argument_problem,
    json_type,
    type_problem,
    type_tests,
)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "limit": {"type": "integer"},
        "questions": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"id": {"type": "string"}, "options": {"type": "array"}},
            },
        },
        "free": {"description": "no declared type"},
    },
}


def problem(args: dict[str, Any]) -> str | None:
    return argument_problem(args, SCHEMA, type_tests(SCHEMA))


def test_arguments_of_their_declared_types_pass() -> None:
    assert problem({"title": "t", "limit": 3, "questions": [{"id": "a", "options": []}]}) is None


def test_unknown_arguments_untyped_ones_and_nulls_are_left_alone() -> None:
    assert problem({"extra": object(), "free": 1.5, "title": None, "limit": None}) is None


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"title": 3}, "title must be a string, got integer"),
        ({"limit": True}, "limit must be an integer, got boolean"),
        ({"limit": 1.0}, "limit must be an integer, got number"),
        ({"questions": {}}, "questions must be an array, got object"),
        ({"questions": ["q"]}, "questions[0] must be an object, got string"),
        ({"questions": [{"id": "a"}, {"id": 7}]}, "questions[1].id must be a string, got integer"),
        ({"questions": [{"options": "x"}]}, "questions[0].options must be an array, got string"),
    ],
)
def test_the_first_argument_of_the_wrong_type_is_named_with_its_path(
    args: dict[str, Any], expected: str
) -> None:
    assert problem(args) == expected


def test_a_value_is_named_by_its_json_type() -> None:
    names = [json_type(v) for v in (None, True, 1, 1.5, "s", [], {})]
    assert names == ["null", "boolean", "integer", "number", "string", "array", "object"]
    assert json_type(b"bytes") == "bytes"


def test_a_number_accepts_an_integer() -> None:
    assert type_problem(2, {"type": "number"}, "x") is None
