"""The bounds every call's model keeps (64-bit integers, column widths, ranges with their
units) and the NUL rule every call's text is held to."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter

from ccweb_store.contract.messages import ListMessages
from ccweb_store.contract.runs import ClaimRun
from ccweb_store.contract.sessions import CreateSession
from ccweb_store.domain import errors
from ccweb_store.domain.arguments import INT64_MAX, reject_nul
from ccweb_store.domain.errors import InvalidInput
from ccweb_store.protocol.argument_errors import parsed


@pytest.mark.parametrize("value", [INT64_MAX + 1, 2**64 - 1, -(2**63) - 1, 10**30])
def test_an_integer_beyond_64_bits_is_refused_before_it_reaches_the_database(value: int) -> None:
    with pytest.raises(InvalidInput, match="afterSeq must be at most") as caught:
        parsed(TypeAdapter(ListMessages), {"sessionId": "a", "afterSeq": value})
    assert caught.value.code == errors.INVALID_ARGUMENTS


def test_an_integer_over_its_maximum_names_the_maximum_and_its_unit() -> None:
    with pytest.raises(InvalidInput, match=r"at most 604800 \(7 days; heartbeat"):
        parsed(TypeAdapter(ClaimRun), {"workerId": "w", "leaseSeconds": 604801})


def test_a_number_over_its_maximum_is_refused() -> None:
    with pytest.raises(InvalidInput, match="at most 60 seconds"):
        parsed(TypeAdapter(ClaimRun), {"workerId": "w", "waitSeconds": 1e308})


def test_a_string_longer_than_its_column_is_refused() -> None:
    with pytest.raises(InvalidInput, match="agent is 65 characters long; the limit is 64"):
        parsed(TypeAdapter(CreateSession), {"agent": "a" * 65})
    with pytest.raises(InvalidInput, match="workerId is 129 characters long"):
        parsed(TypeAdapter(ClaimRun), {"workerId": "w" * 129})
    assert parsed(TypeAdapter(CreateSession), {"agent": "a" * 64}).agent == "a" * 64


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
