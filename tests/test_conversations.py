"""``ccweb_list_conversations``'s filter, on both backends."""

from __future__ import annotations

import pytest

from ccweb_store.domain import errors
from ccweb_store.domain.context import Source
from ccweb_store.domain.errors import InvalidInput
from ccweb_store.store.uow import Store
from tests import tool_calls
from tests.lifecycle_support import make_conversation


async def _found(store: Store, query: str) -> list[str]:
    listed = await tool_calls.list_conversations(store, Source("conv-a"), {"query": query})
    return sorted(item["conversationId"] for item in listed["conversations"])


async def test_the_query_is_matched_as_plain_text_without_wildcards(store: Store) -> None:
    await make_conversation(store, "conv-a", "100% done")
    await make_conversation(store, "conv-b", "100 percent")
    await make_conversation(store, "conv-c", "snake_case")
    await make_conversation(store, "conv-d", "snakeXcase")
    await make_conversation(store, "conv-e", "back\\slash")
    assert await _found(store, "100%") == ["conv-a"]
    assert await _found(store, "%") == ["conv-a"]
    assert await _found(store, "e_c") == ["conv-c"]
    assert await _found(store, "K\\S") == ["conv-e"]
    assert await _found(store, "SNAKE") == ["conv-c", "conv-d"]


async def test_a_query_longer_than_a_thousand_characters_is_invalid_arguments(
    store: Store,
) -> None:
    await make_conversation(store, "conv-a")
    with pytest.raises(
        InvalidInput, match="query is 70000 characters long; the limit is 1000"
    ) as e:
        await _found(store, "x" * 70_000)
    assert e.value.code == errors.INVALID_ARGUMENTS
    assert await _found(store, "x" * 1000) == []
