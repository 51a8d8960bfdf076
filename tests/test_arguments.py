"""The typed getters every tool and host method reads its arguments with."""

from __future__ import annotations

from typing import Any

import pytest

from ccweb_store.domain import errors
from ccweb_store.domain.arguments import (
    INT64_MAX,
    optional_int,
    optional_number,
    optional_str,
    reject_nul,
    require_str,
)
from ccweb_store.domain.errors import InvalidInput


@pytest.mark.parametrize("value", [INT64_MAX + 1, 2**64 - 1, -(2**63) - 1, 10**30])
def test_an_integer_beyond_64_bits_is_refused_before_it_reaches_the_database(value: int) -> None:
    with pytest.raises(InvalidInput, match="afterSeq must be at most") as caught:
        optional_int({"afterSeq": value}, "afterSeq", minimum=None)
    assert caught.value.code == errors.INVALID_ARGUMENTS


def test_an_integer_over_its_maximum_names_the_maximum_and_its_unit() -> None:
    with pytest.raises(InvalidInput, match=r"at most 10 \(ten\), got 11"):
        optional_int({"n": 11}, "n", maximum=10, unit=" (ten)")
    assert optional_int({"n": 10}, "n", maximum=10) == 10


def test_a_number_over_its_maximum_is_refused() -> None:
    with pytest.raises(InvalidInput, match="at most 100 seconds"):
        optional_number({"s": 1e308}, "s", maximum=100, unit=" seconds")
    assert optional_number({"s": 100}, "s", maximum=100) == 100.0


def test_a_string_longer_than_its_column_is_refused() -> None:
    with pytest.raises(InvalidInput, match="agent is 65 characters long; the limit is 64"):
        optional_str({"agent": "a" * 65}, "agent", max_length=64)
    with pytest.raises(InvalidInput, match="workerId is 129 characters long"):
        require_str({"workerId": "w" * 129}, "workerId", max_length=128)
    assert optional_str({"agent": "a" * 64}, "agent", max_length=64) == "a" * 64


@pytest.mark.parametrize(
    "value",
    ["a\x00b", {"k": "\x00"}, {"\x00": 1}, [1, ["deep", {"x": "\x00"}]], {"a": [{"b": "\x00"}]}],
)
def test_text_holding_a_nul_character_is_refused_wherever_it_is(value: Any) -> None:
    with pytest.raises(InvalidInput, match=r"NUL character \(U\+0000\)") as caught:
        reject_nul({"field": value}, "params")
    assert caught.value.code == errors.INVALID_ARGUMENTS


def test_values_without_a_nul_character_pass() -> None:
    reject_nul({"a": ["x", 1, None, True, 1.5, {"b": "\\u0000 as text"}]}, "params")
