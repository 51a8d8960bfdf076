"""``SendRepository.deliver``: a send's writes as one ``statements.Batch``, on SQLite and
PostgreSQL.

The batch runs the statements the repositories write a message, a reply request and a run with
one by one; what it writes must be exactly what they write."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from ccweb_store.domain.ids import new_id
from ccweb_store.store.models import MessageRow, ReplyRequestRow, RunRow, SessionRow
from ccweb_store.store.repositories.sends import _APPEND_READ
from ccweb_store.store.uow import Store

NOW = datetime(2026, 12, 1, 11, 0, 0, 123456, tzinfo=UTC)
METADATA = {"crossConversation": {"sourceConversationId": "conv-a", "hopCount": 2}}


async def _rows(store: Store, target: str) -> dict[str, Any]:
    """The target's session, messages, requests and runs, without the ids that differ."""
    async with store.read_uow() as uow:

        async def read(model: Any, where: Any, *skip: str) -> list[dict[str, Any]]:
            columns = [c for c in model.__table__.c if c.name not in skip]
            result = await uow._execute(sa.select(*columns).where(where))
            return list(result.mappings())

        return {
            "session": await read(SessionRow, SessionRow.id == target, "id", "title", "created_at"),
            "messages": await read(MessageRow, MessageRow.session_id == target, "id", "session_id"),
            "requests": await read(
                ReplyRequestRow,
                ReplyRequestRow.target_conversation_id == target,
                "request_id",
                "message_id",
                "target_conversation_id",
                "target_title",
            ),
            "runs": await read(
                RunRow, RunRow.session_id == target, "id", "session_id", "reply_request_id"
            ),
        }


async def _by_repositories(store: Store, target: str, *, reply: bool) -> None:
    """The same writes through the repositories' own methods, one call per table."""
    request_id = new_id("req") if reply else None
    async with store.uow() as uow:
        message_id = await uow.messages.append_id(
            target, "user", "Run the tests", metadata=METADATA, now=NOW
        )
        if request_id is not None:
            await uow.replies.insert(
                {
                    "request_id": request_id,
                    "message_id": message_id,
                    "source_conversation_id": "conv-a",
                    "source_title": "Planner",
                    "target_conversation_id": target,
                    "target_title": "Tester",
                    "status": "waiting",
                    "hop_count": 2,
                    "original_request": "Run the tests",
                    "created_at": NOW,
                }
            )
        await uow.runs.enqueue_id(
            target,
            "cross_conversation",
            runtime_text="[Cross-conversation message] …",
            hop_count=2,
            reply_request_id=request_id,
            now=NOW,
        )
        await uow.commit()


async def _by_deliver(store: Store, target: str, *, reply: bool) -> str:
    message_id = new_id("msg")
    async with store.uow() as uow:
        await uow.sends.deliver(
            source=("conv-a", "Planner"),
            target=(target, "Tester"),
            content="Run the tests",
            metadata=METADATA,
            hop_count=2,
            runtime_text="[Cross-conversation message] …",
            message_id=message_id,
            run_id=new_id("run"),
            request_id=new_id("req") if reply else None,
            now=NOW,
        )
        await uow.commit()
    return message_id


@pytest.fixture
async def trio(pair: Store) -> Store:
    """``pair`` and a second target, ``conv-c`` (Tester): the same writes go to ``conv-b``
    through the repositories' own methods and to ``conv-c`` through a batch."""
    async with pair.uow() as uow:
        await uow.sessions.create("conv-c", title="Tester")
        await uow.commit()
    return pair


@pytest.mark.parametrize("reply", [True, False], ids=["return_and_continue", "one_way"])
async def test_deliver_writes_what_the_repositories_write_one_by_one(
    trio: Store, reply: bool
) -> None:
    pair = trio
    await _by_repositories(pair, "conv-b", reply=reply)
    await _by_deliver(pair, "conv-c", reply=reply)

    by_repositories, by_deliver = await _rows(pair, "conv-b"), await _rows(pair, "conv-c")
    assert by_deliver == by_repositories
    assert by_deliver["session"] == [{**by_deliver["session"][0], "updated_at": NOW}]
    assert len(by_deliver["messages"]) == len(by_deliver["runs"]) == 1
    assert len(by_deliver["requests"]) == (1 if reply else 0)


async def test_deliver_links_the_request_to_its_message_and_run(pair: Store) -> None:
    message_id = await _by_deliver(pair, "conv-b", reply=True)
    second = await _by_deliver(pair, "conv-b", reply=True)
    async with pair.read_uow() as uow:
        messages = await uow.messages.list_after("conv-b")
        [first_request, second_request], _ = await uow.replies.list_page(session_id="conv-b")
        runs = await uow.runs.list_recent(session_id="conv-b", limit=10)
    assert [m.id for m in messages] == [message_id, second]
    assert [m.seq for m in messages] == [1, 2]  # the subquery numbered them in order
    assert [first_request.message_id, second_request.message_id] == [message_id, second]
    assert {r.reply_request_id for r in runs} == {
        first_request.request_id,
        second_request.request_id,
    }
    assert all(r.status == "queued" and r.kind == "cross_conversation" for r in runs)


@pytest.mark.parametrize("auto_run", [True, False], ids=["with auto-run", "without"])
async def test_return_reply_writes_what_the_repositories_write_one_by_one(
    trio: Store, auto_run: bool
) -> None:
    pair = trio
    async with pair.uow() as uow:
        request = {"source_conversation_id": "conv-a", "target_conversation_id": "conv-a"}
        await uow.replies.insert({**request, "request_id": "req-1", "status": "returned"})
        await uow.commit()
    reply_metadata = {"ccwebDisplayOnly": True, "replyToRequestId": "req-1", "processed": True}
    async with pair.uow() as uow:
        await uow.messages.append_id(
            "conv-b", "assistant", "All tests pass", metadata=reply_metadata, now=NOW
        )
        if auto_run:
            await uow.runs.enqueue_id(
                "conv-b",
                "reply_auto_run",
                runtime_text="[Reply] …",
                hop_count=3,
                reply_request_id="req-1",
                now=NOW,
            )
        await uow.commit()
    async with pair.uow() as uow:
        await uow.sends.return_reply(
            source_id="conv-c",
            request_id="req-1",
            message_id=new_id("msg"),
            content="All tests pass",
            metadata=reply_metadata,
            auto_run=("[Reply] …", 3) if auto_run else None,
            now=NOW,
        )
        await uow.commit()

    by_repositories, by_batch = await _rows(pair, "conv-b"), await _rows(pair, "conv-c")
    assert by_batch == by_repositories
    assert len(by_batch["messages"]) == 1 and len(by_batch["runs"]) == (1 if auto_run else 0)


async def test_append_read_writes_and_returns_what_append_does(store: Store) -> None:
    """A run's output appended to its locked conversation (``append_read``, one statement on
    PostgreSQL) is the row and the touch ``MessageRepository.append`` makes."""
    async with store.uow() as uow:
        for conversation in ("by-append", "by-append-read"):
            await uow.sessions.create(conversation, title="Output")
            await uow.messages.append(conversation, "user", "Run the tests")
        await uow.commit()
    async with store.uow() as uow:
        await uow.sessions.lock_many(["by-append", "by-append-read"])
        plain = await uow.messages.append(
            "by-append", "assistant", "All 42 tests pass.", metadata={"runId": "run_1"}
        )
        read = await uow.sends.append_read(
            "by-append-read", "assistant", "All 42 tests pass.", metadata={"runId": "run_1"}
        )
        await uow.commit()
    fields = ("seq", "role", "content", "metadata_")
    assert [getattr(read, name) for name in fields] == [getattr(plain, name) for name in fields]
    assert (read.session_id, read.seq) == ("by-append-read", 2)
    assert read.id.startswith("msg_") and read.created_at is not None
    async with store.read_uow() as uow:
        session = await uow.sessions.require("by-append-read")
        stored = await uow.messages.get(read.id)
    assert session.updated_at == read.created_at
    assert stored is not None
    assert [getattr(stored, name) for name in (*fields, "created_at")] == [
        getattr(read, name) for name in (*fields, "created_at")
    ]


def test_append_read_is_one_statement_on_postgresql() -> None:
    sql = str(_APPEND_READ.as_one_statement().compile(dialect=postgresql.dialect()))
    assert sql.startswith("WITH step_0 AS \n(UPDATE sessions SET updated_at=")
    assert "INSERT INTO messages" in sql and "RETURNING messages.id" in sql
