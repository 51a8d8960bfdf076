"""``ccweb_list_user_inputs`` (SPEC §5, seed 003) on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from ccweb_store.domain import errors
from ccweb_store.domain.context import Source
from ccweb_store.domain.errors import DomainError
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.protocol import registry as tools
from ccweb_store.services.user_inputs import apply_budget, first_batch
from ccweb_store.store.models import Base, MessageRow
from ccweb_store.store.repositories.messages import (
    LATEST_NONBLANK_BY_ROLE,
    NO_SEQ_ABOVE,
    MessageRepository,
)
from ccweb_store.store.transaction import Transaction
from ccweb_store.store.uow import Store
from tests.plans import query_plan
from tests.tool_calls import list_user_inputs

INDEX = "ix_messages_session_id_role_seq"


async def conversation(store: Store, session_id: str, *messages: tuple[str, str]) -> list[str]:
    """Create a conversation holding ``(role, content)`` messages; return their ids."""
    async with store.uow() as uow:
        await uow.sessions.create(session_id, title=session_id)
        ids = [(await uow.messages.append(session_id, role, text)).id for role, text in messages]
        await uow.commit()
    return ids


async def listed(store: Store, source: str | None = "src", **args: Any) -> dict[str, Any]:
    return await list_user_inputs(store, Source(source), args)


async def refused(store: Store, source: str | None, args: Mapping[str, Any]) -> str:
    with pytest.raises(DomainError) as caught:
        await list_user_inputs(store, Source(source), args)
    return caught.value.code


def contents(payload: dict[str, Any]) -> list[str]:
    return [item["content"] for item in payload["inputs"]]


# --- the budget, as pure arithmetic ---------------------------------------------------------


def test_budget_fills_from_the_newest_and_cuts_the_first_input_that_does_not_fit() -> None:
    kept, cut = apply_budget(["newest", "middle input", "oldest"], 10)
    assert [(k.content, k.original_chars, k.truncated) for k in kept] == [
        ("newest", 6, False),
        ("midd", 12, True),
    ]
    assert cut


def test_budget_counts_cjk_and_emoji_as_one_code_point_each() -> None:
    kept, cut = apply_budget(["你好世界", "😀👍🏽x"], 6)
    assert [k.content for k in kept] == ["你好世界", "😀👍"]
    assert kept[1].original_chars == 4
    assert cut


def test_budget_met_exactly_drops_the_next_older_input_and_reports_the_cut() -> None:
    kept, cut = apply_budget(["abcde", "fghij", "older"], 10)
    assert [k.content for k in kept] == ["abcde", "fghij"]
    assert not any(k.truncated for k in kept)
    assert cut


def test_budget_met_exactly_with_nothing_older_is_not_a_cut() -> None:
    kept, cut = apply_budget(["abcde", "fghij"], 10)
    assert [k.content for k in kept] == ["abcde", "fghij"]
    assert not cut


def test_budget_with_no_inputs_returns_nothing() -> None:
    assert apply_budget([], 1000) == ([], False)


@pytest.mark.parametrize(("given", "expected"), [(0, 1), (-7, 1), (51, 50), (5000, 50), (20, 20)])
def test_out_of_range_numbers_are_clamped(given: int, expected: int) -> None:
    assert tools.get_tool("ccweb_list_user_inputs").parse({"limit": given}).limit == expected


@pytest.mark.parametrize("given", [1.5, 15.0, "15", True, [15]])
def test_non_integer_numbers_are_invalid_arguments(given: object) -> None:
    with pytest.raises(DomainError) as caught:
        tools.get_tool("ccweb_list_user_inputs").parse({"limit": given})
    assert caught.value.code == errors.INVALID_ARGUMENTS
    assert "limit must be an integer" in caught.value.message


# --- choosing the conversation ----------------------------------------------------------------


async def test_without_conversation_id_the_source_conversation_is_read(store: Store) -> None:
    ids = await conversation(store, "src", ("user", "build the parser"))
    await conversation(store, "other", ("user", "something else"))
    payload = await listed(store)
    assert payload["conversationId"] == "src"
    assert payload["inputs"][0]["messageId"] == ids[0]
    assert contents(payload) == ["build the parser"]


async def test_an_explicit_conversation_id_is_read_instead_of_the_source(store: Store) -> None:
    await conversation(store, "src", ("user", "mine"))
    await conversation(store, "other", ("user", "theirs"))
    payload = await listed(store, conversationId="other")
    assert payload["conversationId"] == "other"
    assert contents(payload) == ["theirs"]


async def test_an_explicit_conversation_id_works_without_a_source(store: Store) -> None:
    await conversation(store, "other", ("user", "theirs"))
    assert contents(await listed(store, None, conversationId="other")) == ["theirs"]


async def test_no_source_and_no_conversation_id_is_missing_source_conversation(
    store: Store,
) -> None:
    assert await refused(store, None, {}) == errors.MISSING_SOURCE_CONVERSATION


@pytest.mark.parametrize("bad", ["", "has space", "../etc", "-lead", "x" * 129, 42])
async def test_an_invalid_explicit_id_never_falls_back_to_the_source(
    store: Store, bad: object
) -> None:
    await conversation(store, "src", ("user", "mine"))
    # A number is no id at all: the wrong JSON type, refused like any other.
    expected = errors.INVALID_ARGUMENTS if bad == 42 else errors.INVALID_CONVERSATION_ID
    assert await refused(store, "src", {"conversationId": bad}) == expected


async def test_an_unknown_explicit_conversation_is_not_found(store: Store) -> None:
    await conversation(store, "src", ("user", "mine"))
    code = await refused(store, "src", {"conversationId": "nope"})
    assert code == errors.CONVERSATION_NOT_FOUND


async def test_an_unknown_source_conversation_is_not_found(store: Store) -> None:
    assert await refused(store, "gone", {}) == errors.CONVERSATION_NOT_FOUND


async def test_a_conversation_without_inputs_returns_an_empty_list(store: Store) -> None:
    await conversation(store, "src", ("assistant", "hello"))
    assert await listed(store) == {
        "conversationId": "src",
        "limit": 15,
        "maxChars": 1000,
        "totalChars": 0,
        "returned": 0,
        "hasMore": False,
        "inputs": [],
    }


# --- which messages are inputs ------------------------------------------------------------------


async def test_forty_inputs_return_the_newest_fifteen_oldest_first(store: Store) -> None:
    await conversation(store, "src", *[("user", f"input {n}") for n in range(40)])
    payload = await listed(store)
    assert contents(payload) == [f"input {n}" for n in range(25, 40)]
    assert payload["returned"] == 15
    assert payload["limit"] == 15
    assert payload["hasMore"] is True
    assert payload["totalChars"] == sum(len(f"input {n}") for n in range(25, 40))
    first = payload["inputs"][0]
    assert first["contentChars"] == first["originalChars"] == len("input 25")
    assert first["truncated"] is False
    assert first["createdAt"].endswith("Z")


async def test_exactly_limit_inputs_have_nothing_more(store: Store) -> None:
    await conversation(store, "src", *[("user", f"input {n}") for n in range(15)])
    payload = await listed(store)
    assert payload["returned"] == 15
    assert payload["hasMore"] is False


async def test_only_user_messages_with_text_are_inputs(store: Store) -> None:
    blocks = json.dumps([{"type": "text", "text": "from"}, {"type": "text", "text": "blocks"}])
    images_only = json.dumps([{"type": "image", "source": "x.png"}])
    prompt_card = {"ccwebPrompt": {"promptId": "p1", "questions": [], "status": "pending"}}
    async with store.uow() as uow:
        await uow.sessions.create("src")
        for role, text in [
            ("user", "first"),
            ("assistant", "an answer"),
            ("system", "a system note"),
            ("tool", "tool output"),
            ("user", ""),
            ("user", "  \n\t "),
            ("user", "\u3000\u00a0"),
            ("user", images_only),
            ("user", blocks),
        ]:
            await uow.messages.append("src", role, text)
        await uow.messages.append("src", "assistant", "Pick one", metadata=prompt_card)
        await uow.messages.append("src", "user", "last")
        await uow.commit()
    payload = await listed(store)
    assert contents(payload) == ["first", "from\nblocks", "last"]
    assert payload["hasMore"] is False


async def test_blank_inputs_do_not_shorten_the_result(store: Store) -> None:
    # Unicode blanks pass the SQL prefilter; the query must keep reading below them.
    inputs = [("user", f"input {n}") for n in range(5)]
    blanks = [("user", "\u3000")] * 30 + [("user", "   ")] * 30
    await conversation(store, "src", *inputs, *blanks)
    payload = await listed(store, limit=3)
    assert contents(payload) == ["input 2", "input 3", "input 4"]
    assert payload["hasMore"] is True
    payload = await listed(store, limit=5)
    assert payload["returned"] == 5
    assert payload["hasMore"] is False


async def test_messages_without_a_timestamp_have_a_null_created_at(store: Store) -> None:
    await conversation(store, "src")
    async with store.uow() as uow:
        await uow._execute(
            sa.insert(MessageRow).values(
                id="legacy-1", session_id="src", seq=1, role="user", content="old words"
            )
        )
        await uow._execute(
            sa.update(MessageRow).where(MessageRow.id == "legacy-1").values(created_at=None)
        )
        await uow.commit()
    [item] = (await listed(store))["inputs"]
    assert item["messageId"] == "legacy-1"
    assert item["createdAt"] is None


async def test_the_read_returns_the_rows_of_the_portable_statement(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The repository runs ``LATEST_NONBLANK_BY_ROLE`` on the store's driver; on either
    engine it returns, row for row, what the same statement returns through SQLAlchemy's own
    execution: blanks of every kind left out, other roles and conversations too, timestamps
    of every stored shape read alike, at every bound."""
    texts = ["first", "", " ", "\t\n\r\f\v", "\u3000", " x ", "[]", "last"]
    ids = await conversation(
        store, "src", *[(role, text) for text in texts for role in ("user", "assistant")]
    )
    await conversation(store, "other", ("user", "elsewhere"))
    async with store.uow() as uow:
        missing = sa.update(MessageRow).where(MessageRow.id == ids[0]).values(created_at=None)
        await uow._execute(missing)
        if store.dialect == "sqlite":  # as an older tool or CURRENT_TIMESTAMP writes it
            for message_id, stored in ((ids[10], "2026-01-02 03:04:05"), (ids[14], "2026-01-02")):
                await uow._execute(
                    sa.update(MessageRow)
                    .where(MessageRow.id == message_id)
                    .values(created_at=sa.literal_column(f"'{stored}'"))
                )
        await uow.commit()
    queries: list[Any] = []
    execute = Transaction.execute

    async def recorded(self: Transaction, stmt: Any, params: Any = None) -> Any:
        queries.append(stmt)
        return await execute(self, stmt, params)

    monkeypatch.setattr(Transaction, "execute", recorded)
    reads = []
    for before_seq, limit in [(None, 50), (None, 2), (11, 3), (3, 5), (1, 5)]:
        params = {
            "session_id": "src",
            "role": "user",
            "before_seq": NO_SEQ_ABOVE if before_seq is None else before_seq,
            "limit": limit,
        }
        async with store.read_uow() as uow:
            read = await uow.messages.latest_nonblank_by_role(
                "src", "user", limit=limit, before_seq=before_seq
            )
        async with store.engine.connect() as connection:  # SQLAlchemy's own execution
            result = await connection.execute(LATEST_NONBLANK_BY_ROLE, params)
            portable = [tuple(row) for row in result]
        assert read == portable
        reads.append(read)
    newest = [row[0] for row in reads[0]]
    assert newest == [ids[14], ids[12], ids[10], ids[8], ids[0]]  # "\u3000" is Python's to drop
    assert reads[-1] == [] and reads[0][-1][3] is None
    if store.dialect == "sqlite":
        assert reads[0][0][3] == "2026-01-02T00:00:00.000Z"
        assert reads[0][2][3] == "2026-01-02T03:04:05.000Z"
    assert queries == [LATEST_NONBLANK_BY_ROLE] * 5


# --- the budget through the tool ----------------------------------------------------------------


async def test_cjk_and_emoji_are_counted_as_code_points(store: Store) -> None:
    await conversation(store, "src", ("user", "你好，世界"), ("user", "🎉🎉🎉👨‍👩‍👧"))
    payload = await listed(store, maxChars=10)
    newest = payload["inputs"][-1]
    assert newest["content"] == "🎉🎉🎉👨‍👩‍👧"
    assert newest["contentChars"] == newest["originalChars"] == 8
    oldest = payload["inputs"][0]
    assert oldest["content"] == "你好"
    assert (oldest["contentChars"], oldest["originalChars"], oldest["truncated"]) == (2, 5, True)
    assert payload["totalChars"] == 10
    assert payload["hasMore"] is True


async def test_a_budget_met_exactly_with_older_inputs_has_more(store: Store) -> None:
    await conversation(store, "src", ("user", "older"), ("user", "abcde"), ("user", "fghij"))
    payload = await listed(store, maxChars=10)
    assert contents(payload) == ["abcde", "fghij"]
    assert payload["totalChars"] == 10
    assert not any(item["truncated"] for item in payload["inputs"])
    assert payload["hasMore"] is True


async def test_a_budget_met_exactly_without_older_inputs_has_nothing_more(store: Store) -> None:
    await conversation(store, "src", ("user", "abcde"), ("user", "fghij"))
    payload = await listed(store, maxChars=10)
    assert contents(payload) == ["abcde", "fghij"]
    assert payload["hasMore"] is False


@pytest.mark.parametrize("older", [True, False])
async def test_a_budget_met_exactly_by_the_first_read_looks_one_input_further(
    store: Store, older: bool
) -> None:
    """The first read asks for ``first_batch`` inputs; when they spend the budget exactly,
    only the next read can tell whether anything older is left."""
    size = first_batch(1000)
    texts = [f"{i:03d}" + "y" * (1000 // size - 3) for i in range(size + older)]
    texts[-1] += "z" * (1000 % size)  # the newest makes up what the division left over
    assert sum(len(text) for text in texts[older:]) == 1000
    await conversation(store, "src", *[("user", text) for text in texts])
    payload = await listed(store)
    assert contents(payload) == texts[older:]
    assert payload["totalChars"] == 1000
    assert payload["hasMore"] is older


async def test_long_inputs_are_cut_by_the_budget_before_the_limit(store: Store) -> None:
    texts = [f"input {i:02d} " + "w" * 291 for i in range(20)]
    await conversation(store, "src", *[("user", text) for text in texts])
    payload = await listed(store)
    assert [item["originalChars"] for item in payload["inputs"]] == [300] * 4
    assert contents(payload) == [texts[16][:100], *texts[17:]]
    assert payload["hasMore"] is True


async def test_one_long_input_keeps_its_beginning(store: Store) -> None:
    long_text = "Requirement: " + "x" * 3000
    await conversation(store, "src", ("user", long_text))
    payload = await listed(store)
    [item] = payload["inputs"]
    assert item["content"] == long_text[:1000]
    assert (item["contentChars"], item["originalChars"], item["truncated"]) == (1000, 3013, True)
    assert payload["totalChars"] == 1000
    assert payload["hasMore"] is True


@pytest.mark.parametrize(
    ("limit", "max_chars", "expected"),
    [(0, 0, (1, 1)), (51, 5000, (50, 1000)), (-3, -100, (1, 1)), (5000, 1001, (50, 1000))],
)
async def test_out_of_range_arguments_are_clamped_in_the_answer(
    store: Store, limit: int, max_chars: int, expected: tuple[int, int]
) -> None:
    await conversation(store, "src", *[("user", f"input {n}") for n in range(60)])
    payload = await listed(store, limit=limit, maxChars=max_chars)
    assert (payload["limit"], payload["maxChars"]) == expected
    # 60 inputs of 7-8 characters: the clamped limit decides how many come back.
    assert payload["returned"] == expected[0]
    assert payload["inputs"][-1]["content"] == "input 59"[: expected[1]]
    assert payload["totalChars"] <= expected[1]
    assert payload["hasMore"] is True


@pytest.mark.parametrize("args", [{"limit": 2.5}, {"limit": "10"}, {"maxChars": False}])
async def test_non_integer_arguments_are_invalid_arguments(
    store: Store, args: dict[str, Any]
) -> None:
    await conversation(store, "src", ("user", "mine"))
    assert await refused(store, "src", args) == errors.INVALID_ARGUMENTS


# --- read-only --------------------------------------------------------------------------------


async def snapshot(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    async with store.read_uow() as uow:
        return {
            table.name: [
                tuple(row)
                for row in (await uow._execute(sa.select(table).order_by(*table.primary_key))).all()
            ]
            for table in Base.metadata.sorted_tables
        }


async def test_listing_writes_nothing_however_often_it_runs(store: Store) -> None:
    await conversation(store, "src", *[("user", f"input {n}") for n in range(30)])
    await conversation(store, "other", ("user", "x" * 2000), ("assistant", "ok"))
    async with store.uow() as uow:
        await uow._execute(
            sa.update(Base.metadata.tables["sessions"]).values(
                updated_at=utcnow() - timedelta(days=3)
            )
        )
        await uow.commit()
    before = await snapshot(store)
    for _ in range(10):
        await listed(store)
        await listed(store, conversationId="other", limit=50, maxChars=1)
        await refused(store, "src", {"conversationId": "missing"})
    assert await snapshot(store) == before


# --- scale: the query reads the index -----------------------------------------------------------


async def bulk_conversation(store: Store, session_id: str, count: int) -> None:
    """``count`` messages, alternating user and assistant, inserted in a few executemany."""
    async with store.uow() as uow:
        await uow.sessions.create(session_id)
        await uow.commit()
    now = utcnow()
    rows = [
        {
            "id": f"{session_id}-{seq}",
            "session_id": session_id,
            "seq": seq,
            "role": "user" if seq % 2 else "assistant",
            "content": f"message {seq} " + "words " * 40,
            "created_at": now,
        }
        for seq in range(1, count + 1)
    ]
    async with store.engine.begin() as connection:
        for start in range(0, count, 20_000):
            await connection.execute(sa.insert(MessageRow), rows[start : start + 20_000])


async def test_on_a_hundred_thousand_messages_the_query_reads_the_index(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await bulk_conversation(store, "big", 100_000)
    await bulk_conversation(store, "small", 50)
    async with store.engine.begin() as connection:
        await connection.exec_driver_sql("ANALYZE")

    reads: list[dict[str, Any]] = []
    read = MessageRepository.latest_nonblank_by_role

    async def counted(self: MessageRepository, *args: Any, **kwargs: Any) -> Any:
        reads.append(kwargs)
        return await read(self, *args, **kwargs)

    monkeypatch.setattr(MessageRepository, "latest_nonblank_by_role", counted)
    payload = await listed(store, "big")
    assert payload["inputs"][-1]["messageId"] == "big-99999"
    assert payload["hasMore"] is True
    assert len(reads) == 1, "one indexed read when there are no blank inputs"

    # The statement it runs is a range scan of the index, not a scan of the session.
    params = {"session_id": "big", "role": "user", "before_seq": NO_SEQ_ABOVE, "limit": 16}
    plan = await query_plan(store, LATEST_NONBLANK_BY_ROLE, params, only_indexes=False)
    if store.dialect == "sqlite":
        search = f"SEARCH messages USING INDEX {INDEX} (session_id=? AND role=? AND seq<?)"
        assert search in plan
        # Each value given as ``(SELECT ?)`` is a scan of one constant row, not of a table.
        assert "SCAN messages" not in plan and "TEMP B-TREE" not in plan
        assert plan.count("SCAN") == plan.count("SCAN CONSTANT ROW")
    else:
        assert f"Index Scan Backward using {INDEX} on messages" in plan
        assert "Seq Scan" not in plan and "Sort" not in plan
