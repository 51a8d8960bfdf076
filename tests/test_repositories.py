"""Repositories on real databases: CRUD, keyset pages, concurrency, and refused input."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from ccweb_store.config import Settings
from ccweb_store.domain import errors
from ccweb_store.domain.errors import Conflict, DomainError, InvalidInput, NotFound
from ccweb_store.domain.ids import ACTIVE_RUN_STATUSES, RUN_STATUSES, new_id
from ccweb_store.domain.rows import Message, ReplyRequest
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.store.models import REPLY_TO_REQUEST_ID_INDEX
from ccweb_store.store.repositories import messages as messages_module
from ccweb_store.store.repositories import replies as replies_module
from ccweb_store.store.repositories import runs as runs_module
from ccweb_store.store.repositories import send_parties as send_parties_module
from ccweb_store.store.repositories import sessions as sessions_module
from ccweb_store.store.repositories.base import MESSAGES, column_attributes
from ccweb_store.store.repositories.messages import (
    NO_SEQ_ABOVE,
    REPLIES_TO_REQUEST,
    REPLY_REQUEST_MESSAGE,
)
from ccweb_store.store.repositories.replies import _SOURCE_STATE, SourceState
from ccweb_store.store.repositories.sessions import SessionRepository
from ccweb_store.store.uow import Store, UnitOfWork
from tests import host_calls
from tests.lifecycle_support import insert_message_by_hand
from tests.plans import query_plan


async def _make_sessions(store: Store, *ids: str) -> None:
    async with store.uow() as uow:
        for session_id in ids:
            await uow.sessions.create(session_id, title=f"Title {session_id}")
        await uow.commit()


async def test_a_created_session_reads_back_with_aware_utc_timestamps(store: Store) -> None:
    async with store.uow() as uow:
        await uow.sessions.create("s1", title="First", agent="codex", cwd="/w", extra={"k": [1]})
        await uow.commit()
    async with store.read_uow() as uow:
        row = await uow.sessions.require("s1")
    assert (row.title, row.agent, row.cwd, row.extra) == ("First", "codex", "/w", {"k": [1]})
    assert row.created_at.utcoffset() == timedelta(0)
    assert row.archived_at is None


async def test_creating_a_taken_id_is_conversation_exists(store: Store) -> None:
    await _make_sessions(store, "dup")
    with pytest.raises(Conflict) as caught:
        await _make_sessions(store, "dup")
    assert caught.value.code == errors.CONVERSATION_EXISTS


async def test_a_session_without_an_id_gets_a_generated_one(store: Store) -> None:
    async with store.uow() as uow:
        row = await uow.sessions.create(title="anonymous")
        await uow.commit()
    assert row.id.startswith("conv_")


@pytest.mark.parametrize("bad_id", ["", "-leading-dash", "has space", "sl/ash", "x" * 129, "é"])
async def test_malformed_conversation_ids_are_refused(store: Store, bad_id: str) -> None:
    async with store.uow() as uow:
        with pytest.raises(InvalidInput) as caught:
            await uow.sessions.create(bad_id)
        with pytest.raises(InvalidInput):
            await uow.sessions.require(bad_id)
    assert caught.value.code == errors.INVALID_CONVERSATION_ID


async def test_an_unknown_conversation_is_conversation_not_found(store: Store) -> None:
    async with store.read_uow() as uow:
        with pytest.raises(NotFound) as caught:
            await uow.sessions.require("nobody")
    assert caught.value.code == errors.CONVERSATION_NOT_FOUND


async def test_session_pages_follow_the_keyset_cursor_without_repeats(store: Store) -> None:
    await _make_sessions(store, *(f"p{i:02d}" for i in range(7)))
    seen: list[str] = []
    cursor = None
    async with store.read_uow() as uow:
        while True:
            rows, cursor = await uow.sessions.list_page(limit=3, cursor=cursor)
            seen += [row.id for row in rows]
            if cursor is None:
                break
    assert seen == [f"p{i:02d}" for i in reversed(range(7))]


async def test_a_garbled_cursor_is_invalid_cursor(store: Store) -> None:
    async with store.read_uow() as uow:
        with pytest.raises(InvalidInput) as caught:
            await uow.sessions.list_page(cursor="not-a-cursor")
    assert caught.value.code == errors.INVALID_CURSOR


async def test_messages_get_increasing_seqs_and_bump_the_session(store: Store) -> None:
    await _make_sessions(store, "chat")
    async with store.read_uow() as uow:
        before = (await uow.sessions.require("chat")).updated_at
    async with store.uow() as uow:
        first = await uow.messages.append("chat", "user", "hello", metadata={"a": 1})
        second = await uow.messages.append("chat", "assistant", "hi")
        await uow.commit()
    async with store.read_uow() as uow:
        rows = await uow.messages.list_after("chat")
        after = (await uow.sessions.require("chat")).updated_at
        tail = await uow.messages.list_after("chat", after_seq=1)
    assert [(m.seq, m.role, m.content) for m in rows] == [
        (1, "user", "hello"),
        (2, "assistant", "hi"),
    ]
    assert rows[0].metadata_ == {"a": 1}
    assert (first.seq, second.seq) == (1, 2)
    assert [m.id for m in tail] == [second.id]
    assert after >= before


async def test_appending_to_a_missing_session_is_conversation_not_found(store: Store) -> None:
    async with store.uow() as uow:
        with pytest.raises(NotFound) as caught:
            await uow.messages.append("ghost", "user", "hello")
    assert caught.value.code == errors.CONVERSATION_NOT_FOUND


@pytest.mark.parametrize("role", ["owner", "USER", "", None])
async def test_an_unknown_role_is_invalid_role(store: Store, role: str) -> None:
    await _make_sessions(store, "chat")
    async with store.uow() as uow:
        with pytest.raises(InvalidInput) as caught:
            await uow.messages.append("chat", role, "text")
    assert caught.value.code == errors.INVALID_ROLE


async def test_twenty_concurrent_appends_get_twenty_gap_free_seqs(settings: Settings) -> None:
    stores = [Store.from_settings(settings) for _ in range(2)]  # two "processes"
    try:
        await _make_sessions(stores[0], "busy")

        async def append(i: int) -> int:
            async with stores[i % 2].uow() as uow:
                message = await uow.messages.append("busy", "user", f"message {i}")
                await uow.commit()
                return message.seq

        seqs = await asyncio.gather(*(append(i) for i in range(20)))
        async with stores[0].read_uow() as uow:
            stored = [m.seq for m in await uow.messages.list_after("busy")]
    finally:
        for active in stores:
            await active.dispose()
    assert sorted(seqs) == list(range(1, 21))
    assert stored == list(range(1, 21))


async def test_the_database_refuses_a_second_running_run_even_by_hand(store: Store) -> None:
    await _make_sessions(store, "one")
    async with store.uow() as uow:
        await uow.runs.start("one", "user_turn")
        await uow.commit()
    async with store.uow() as uow:
        with pytest.raises(IntegrityError):
            await uow._execute(
                sa.text(
                    "INSERT INTO runs (id, session_id, kind, status)"
                    " VALUES ('run_by_hand', 'one', 'user_turn', 'running')"
                )
            )
    async with store.uow() as uow:
        with pytest.raises(Conflict) as caught:
            await uow.runs.start("one", "user_turn")
    assert caught.value.code == errors.CONVERSATION_BUSY


async def test_claims_take_the_oldest_run_of_an_idle_session_with_a_lease(store: Store) -> None:
    await _make_sessions(store, "a", "b")
    async with store.uow() as uow:
        first = await uow.runs.enqueue("a", "user_turn", runtime_text="first")
        second = await uow.runs.enqueue("a", "cross_conversation", hop_count=1)
        third = await uow.runs.enqueue("b", "reply_auto_run")
        await uow.commit()
    async with store.uow() as uow:
        claimed = await uow.runs.claim("w1", lease_seconds=60)
        assert claimed is not None and claimed.id == first.id
        # Session a now runs, so its second run waits; b's run is next.
        again = await uow.runs.claim("w2", lease_seconds=60)
        assert again is not None and again.id == third.id
        assert await uow.runs.claim("w3", lease_seconds=60) is None
        await uow.commit()
    assert claimed.status == "running" and claimed.worker_id == "w1"
    assert claimed.lease_expires_at is not None and claimed.started_at is not None
    async with store.uow() as uow:
        assert await uow.runs.finish(first.id, "completed", worker_id="w1", output="done")
        assert not await uow.runs.finish(first.id, "failed", worker_id="w1")  # already closed
        nxt = await uow.runs.claim("w1", lease_seconds=60, kinds=["cross_conversation"])
        await uow.commit()
    assert nxt is not None and nxt.id == second.id


async def test_two_concurrent_claimers_never_get_the_same_run(settings: Settings) -> None:
    stores = [Store.from_settings(settings) for _ in range(2)]
    try:
        sessions = [f"c{i}" for i in range(12)]
        await _make_sessions(stores[0], *sessions)
        async with stores[0].uow() as uow:
            for session_id in sessions:
                for _ in range(2):
                    await uow.runs.enqueue(session_id, "user_turn")
            await uow.commit()

        async def claimer(worker: int) -> list[tuple[str, str]]:
            won: list[tuple[str, str]] = []
            for _ in range(10):
                params = {"workerId": f"w{worker}", "leaseSeconds": 60}
                run = (await host_calls.claim_run(stores[worker % 2], params))["run"]
                if run is not None:
                    won.append((run["id"], run["sessionId"]))
            return won

        results = await asyncio.gather(*(claimer(w) for w in range(4)))
    finally:
        for active in stores:
            await active.dispose()
    claimed = [item for result in results for item in result]
    assert len(claimed) == len({run_id for run_id, _ in claimed})
    assert sorted(session for _, session in claimed) == sorted(sessions)  # one per session


async def test_heartbeats_and_requeues_only_touch_the_holders_run(store: Store) -> None:
    await _make_sessions(store, "h")
    async with store.uow() as uow:
        run = await uow.runs.enqueue("h", "user_turn")
        await uow.runs.claim("w1", lease_seconds=1)
        await uow.commit()
    async with store.uow() as uow:
        assert await uow.runs.heartbeat(run.id, "w1", lease_seconds=600)
        assert not await uow.runs.heartbeat(run.id, "intruder", lease_seconds=600)
        expired = await uow.runs.expired(now=utcnow() + timedelta(hours=1))
        assert [r.id for r in expired] == [run.id]
        assert await uow.runs.requeue(run.id)
        assert not await uow.runs.requeue(run.id)  # no longer running
        await uow.commit()
    async with store.read_uow() as uow:
        row = await uow.runs.require(run.id)
    assert (row.status, row.worker_id, row.attempts) == ("queued", None, 1)


async def test_busy_running_and_expired_lease_probes_follow_the_runs_state(
    store: Store,
) -> None:
    await _make_sessions(store, "p")
    async with store.uow() as uow:
        assert not await uow.runs.has_run_in("p", ("queued", "running"))
        run = await uow.runs.enqueue("p", "user_turn")
        assert await uow.runs.has_run_in("p", ("queued", "running"))
        assert not await uow.runs.has_run_in("p", ("running",))
        await uow.runs.claim("w1", lease_seconds=60)
        assert await uow.runs.has_run_in("p", ("running",))
        earliest = await uow.runs.earliest_lease_expiry()
        assert earliest is not None
        assert utcnow() + timedelta(seconds=50) < earliest < utcnow() + timedelta(seconds=61)
        closed = await uow.runs.finish(run.id, "completed", worker_id="w1", output="done")
        assert closed is not None and (closed.status, closed.output) == ("completed", "done")
        assert not await uow.runs.has_run_in("p", ("queued", "running"))
        assert await uow.runs.earliest_lease_expiry() is None
        await uow.commit()


async def test_a_sends_target_is_busy_exactly_while_it_has_a_queued_or_running_run(
    store: Store,
) -> None:
    await _make_sessions(store, "src", "idle", *(f"t-{status}" for status in RUN_STATUSES))
    async with store.uow() as uow:
        for status in RUN_STATUSES:
            await uow.runs._add(f"t-{status}", "user_turn", status, None, 0, None)
        await uow.commit()
    async with store.uow() as uow:
        busy = {
            target: (await uow.sessions.send_parties("src", target)).target_busy
            for target in ["idle", *(f"t-{status}" for status in RUN_STATUSES)]
        }
        parties = await uow.sessions.send_parties("src", "t-queued")
    assert busy == {"idle": False} | {
        f"t-{status}": status in ACTIVE_RUN_STATUSES for status in RUN_STATUSES
    }
    assert parties.source == ("src", "Title src")
    assert parties.target == ("t-queued", "Title t-queued")
    if store.dialect == "sqlite":  # one range of the runs' session index, not one per status
        params = {"source_id": "src", "target_id": "idle"}
        plan = await query_plan(store, send_parties_module.SEND_PARTIES, params)
        probe = "ix_runs_session_id_status (session_id=? AND status>? AND status<?)"
        assert plan.count("ix_runs_session_id_status") == plan.count(probe) == 1


def test_the_active_run_statuses_are_one_range_of_the_run_statuses() -> None:
    low, high = send_parties_module.ACTIVE_RUN_STATUS_RANGE
    assert {status for status in RUN_STATUSES if low <= status <= high} == set(ACTIVE_RUN_STATUSES)


async def test_reply_transitions_are_conditional_on_the_current_status(store: Store) -> None:
    async with store.uow() as uow:
        await uow.replies.create(
            dict(
                request_id="req1",
                source_conversation_id="a",
                target_conversation_id="b",
                status="waiting",
            )
        )
        await uow.commit()
    async with store.uow() as uow:
        assert await uow.replies.transition("req1", ["waiting"], "ready", reply_text="done")
        assert not await uow.replies.transition("req1", ["waiting"], "ready", reply_text="twice")
        await uow.commit()
    async with store.read_uow() as uow:
        row = await uow.replies.require("req1")
    assert (row.status, row.reply_text) == ("ready", "done")


async def test_two_writers_racing_on_one_reply_only_one_wins(settings: Settings) -> None:
    stores = [Store.from_settings(settings) for _ in range(2)]
    try:
        async with stores[0].uow() as uow:
            await uow.replies.create(
                dict(
                    request_id="race",
                    source_conversation_id="a",
                    target_conversation_id="b",
                    status="ready",
                )
            )
            await uow.commit()

        async def deliver(i: int) -> bool:
            async with stores[i % 2].uow() as uow:
                moved = await uow.replies.transition(
                    "race", ["ready"], "returned", reply_text=f"{i}"
                )
                await uow.commit()
                return moved is not None

        outcomes = await asyncio.gather(*(deliver(i) for i in range(8)))
    finally:
        for active in stores:
            await active.dispose()
    assert outcomes.count(True) == 1


async def test_reply_pages_filter_by_status_and_session(store: Store) -> None:
    async with store.uow() as uow:
        for i, status in enumerate(["waiting", "ready", "returned", "failed", "waiting"]):
            await uow.replies.create(
                dict(
                    request_id=new_id("req"),
                    source_conversation_id="src" if i % 2 == 0 else "other",
                    target_conversation_id="tgt",
                    status=status,
                )
            )
        await uow.commit()
    async with store.read_uow() as uow:
        waiting, _ = await uow.replies.list_page(statuses=["waiting"])
        mine, _ = await uow.replies.list_page(session_id="src", as_target=False)
        first, cursor = await uow.replies.list_page(limit=2)
        rest, end = await uow.replies.list_page(limit=10, cursor=cursor)
    assert len(waiting) == 2
    assert {r.source_conversation_id for r in mine} == {"src"} and len(mine) == 3
    assert len(first) == 2 and len(rest) == 3 and end is None


@pytest.mark.parametrize(
    "call",
    [
        lambda uow: uow.replies.transition("x", ["waiting"], "done"),
        lambda uow: uow.replies.list_page(statuses=["pending"]),
        lambda uow: uow.runs.list_recent(statuses=["sleeping"]),
        lambda uow: uow.runs.finish("x", "queued", worker_id=None),
    ],
    ids=["reply-transition", "reply-filter", "run-filter", "run-finish"],
)
async def test_statuses_outside_the_enum_are_invalid_status(store: Store, call: object) -> None:
    async with store.uow() as uow:
        with pytest.raises(DomainError) as caught:
            await call(uow)  # type: ignore[operator]
    assert caught.value.code == errors.INVALID_STATUS


async def test_an_unknown_run_kind_is_invalid_kind(store: Store) -> None:
    await _make_sessions(store, "k")
    async with store.uow() as uow:
        with pytest.raises(InvalidInput) as caught:
            await uow.runs.enqueue("k", "nap")
    assert caught.value.code == errors.INVALID_KIND


async def test_the_check_constraints_refuse_bad_enums_written_by_hand(store: Store) -> None:
    await _make_sessions(store, "raw")
    async with store.uow() as uow:
        with pytest.raises(IntegrityError):
            await uow._execute(
                sa.text(
                    "INSERT INTO messages (id, session_id, seq, role, content)"
                    " VALUES ('m1', 'raw', 1, 'owner', 'x')"
                )
            )


async def test_rows_read_from_the_database_refuse_changes_that_would_be_lost(
    store: Store,
) -> None:
    await _make_sessions(store, "snap")
    async with store.uow() as uow:
        row = await uow.sessions.require("snap")
        with pytest.raises(AttributeError):
            row.title = "changed"  # type: ignore[misc]
        await uow.sessions.update_columns("snap", {"title": "changed"})
        await uow.commit()
    async with store.read_uow() as uow:
        assert (await uow.sessions.require("snap")).title == "changed"


async def test_each_statement_returns_the_row_as_it_left_it_and_held_rows_stay_as_read(
    store: Store,
) -> None:
    await _make_sessions(store, "held")
    async with store.uow() as uow:
        queued = await uow.runs.enqueue("held", "user_turn")
        claimed = await uow.runs.claim("worker-1", lease_seconds=60)
        assert claimed is not None and claimed.id == queued.id
        assert (claimed.status, claimed.worker_id) == ("running", "worker-1")
        finished = await uow.runs.finish(
            queued.id, "completed", worker_id="worker-1", output="done"
        )
        assert finished is not None and (finished.status, finished.output) == ("completed", "done")
        assert (queued.status, queued.worker_id, queued.output) == ("queued", None, None)
        assert (claimed.status, claimed.output) == ("running", None)
        await uow.commit()
    async with store.read_uow() as uow:
        fresh = await uow.runs.require(queued.id)
    assert fresh == finished


async def test_rows_are_values_that_a_later_statement_leaves_as_they_were(
    store: Store,
) -> None:
    await _make_sessions(store, "a", "b")
    async with store.uow() as uow:
        added = await uow.replies.create(
            {
                "request_id": "req",
                "source_conversation_id": "a",
                "target_conversation_id": "b",
                "status": "waiting",
            }
        )
        assert (added.hop_count, added.source_auto_run) == (0, True)  # the server defaults
        with pytest.raises(AttributeError):
            added.status = "ready"  # type: ignore[misc]
        moved = await uow.replies.transition("req", ["waiting"], "ready", reply_text="done")
        assert moved is not None
        assert (moved.status, moved.reply_text) == ("ready", "done")
        assert (added.status, added.reply_text) == ("waiting", None)
        await uow.commit()
    async with store.read_uow() as uow:
        read = await uow.replies.require("req")
    assert type(read) is ReplyRequest
    assert read == moved
    assert read._fields == tuple(key for key, _ in column_attributes(ReplyRequest))
    assert read.created_at.utcoffset() == timedelta(0)


async def _append_failure_notice(uow: UnitOfWork, session_id: str, request_id: str) -> None:
    """A failure notice for ``request_id`` in the session: it names the request, answers none."""
    metadata = {"replyToRequestId": request_id, "replyFailed": True}
    await uow.messages.append(session_id, "assistant", "notice", metadata=metadata)


async def test_the_replies_to_a_request_are_the_sessions_messages_naming_it_however_written(
    store: Store,
) -> None:
    await _make_sessions(store, "src", "other")
    async with store.uow() as uow:
        await _append_failure_notice(uow, "src", "req-1")
        await uow.messages.append("src", "assistant", "run", metadata={"runId": "req-1"})
        await uow.messages.append("src", "user", "plain")
        await uow.commit()
    await insert_message_by_hand(store, "src", "by-hand", '{"replyToRequestId": "req-1"}')
    await insert_message_by_hand(store, "src", "other-request", '{"replyToRequestId": "req-2"}')
    await insert_message_by_hand(store, "src", "nested", '{"x": {"replyToRequestId": "req-1"}}')
    await insert_message_by_hand(store, "src", "a-list", '["replyToRequestId", "req-1"]')
    await insert_message_by_hand(store, "src", "no-metadata", None)
    await insert_message_by_hand(store, "other", "elsewhere", '{"replyToRequestId": "req-1"}')

    async with store.read_uow() as uow:
        found = await uow.messages.replies_to_request("src", "req-1")
        elsewhere = await uow.messages.replies_to_request("other", "req-1")
        second = await uow.messages.replies_to_request("src", "req-2")
        none = await uow.messages.replies_to_request("src", "req-3")

    assert [(m.seq, m.content) for m in found] == [(1, "notice"), (4, "written by hand")]
    assert found[1].id == "by-hand" and found[1].metadata_ == {"replyToRequestId": "req-1"}
    assert [m.id for m in elsewhere] == ["elsewhere"]
    assert [m.id for m in second] == ["other-request"]
    assert none == []


async def _long_source(store: Store) -> None:
    """Conversation ``long``: 2,000 messages, every hundredth the reply to ``req-<seq>``."""
    await _make_sessions(store, "long")
    rows = [
        {
            "id": f"m{seq}",
            "session_id": "long",
            "seq": seq,
            "role": "assistant",
            "content": "x",
            "metadata_": {"replyToRequestId": f"req-{seq}"} if seq % 100 == 0 else {"n": seq},
        }
        for seq in range(1, 2001)
    ]
    async with store.uow() as uow:
        await uow.messages.insert_many(rows)
        await uow.commit()


async def test_the_replies_to_a_request_are_read_through_their_index(store: Store) -> None:
    """A long source conversation: the lookup probes ``ix_messages_reply_to_request_id``
    (migration 0006) instead of reading the conversation, with or without statistics."""
    await _long_source(store)
    lookup = {"session_id": "long", "request_id": "req-500"}

    if store.dialect == "sqlite":  # SQLite databases usually have no statistics at all
        assert REPLY_TO_REQUEST_ID_INDEX in await query_plan(store, REPLIES_TO_REQUEST, lookup)
    async with store.engine.begin() as connection:
        await connection.execute(sa.text("ANALYZE"))
    assert REPLY_TO_REQUEST_ID_INDEX in await query_plan(store, REPLIES_TO_REQUEST, lookup)
    async with store.read_uow() as uow:
        assert [m.id for m in await uow.messages.replies_to_request("long", "req-500")] == ["m500"]


async def test_a_sources_state_says_whether_it_runs_and_which_message_answers_the_request(
    store: Store,
) -> None:
    await _make_sessions(store, "src", "other")

    async def state(request_id: str = "req-1") -> SourceState:
        async with store.read_uow() as uow:
            return await uow.replies.source_state("src", request_id)

    assert await state() == SourceState(running=False, answer_id=None)
    async with store.uow() as uow:
        await _append_failure_notice(uow, "src", "req-1")
        await uow.runs.enqueue("src", "user_turn")
        await uow.commit()
    await insert_message_by_hand(store, "other", "elsewhere", '{"replyToRequestId": "req-1"}')
    assert await state() == SourceState(running=False, answer_id=None)  # a notice, a queued run

    await insert_message_by_hand(store, "src", "first", '{"replyToRequestId": "req-1"}')
    await insert_message_by_hand(store, "src", "second", '{"replyToRequestId": "req-1"}')
    async with store.uow() as uow:
        await uow.runs.start("src", "user_turn")
        await uow.commit()
    assert await state() == SourceState(running=True, answer_id="first")
    assert await state("req-2") == SourceState(running=True, answer_id=None)


async def test_a_sources_state_is_one_index_probe_for_the_answers(store: Store) -> None:
    await _long_source(store)
    lookup = {"source_id": "long", "request_id": "req-500"}
    assert REPLY_TO_REQUEST_ID_INDEX in await query_plan(store, _SOURCE_STATE, lookup)
    async with store.read_uow() as uow:
        assert await uow.replies.source_state("long", "req-500") == SourceState(False, "m500")


def test_enum_constants_are_written_into_the_sql_and_nothing_else_is() -> None:
    from sqlalchemy.dialects.sqlite.aiosqlite import SQLiteDialect_aiosqlite

    from ccweb_store.store.repositories.base import RUNS, constant, one_of

    stmt = sa.select(RUNS.c.id).where(one_of(RUNS.c.status, ("queued", "running")))
    sql = str(stmt.compile(dialect=SQLiteDialect_aiosqlite()))
    assert "IN ('queued', 'running')" in sql
    for bad in ("Queued", "queued'; DROP TABLE runs; --", "", "a b"):
        with pytest.raises(ValueError):
            constant(bad)


async def test_writes_that_skip_reading_back_store_what_the_reading_ones_store(
    store: Store,
) -> None:
    await _make_sessions(store, "read", "unread")
    columns = {"request_id", "source_conversation_id", "target_conversation_id", "status"}
    async with store.uow() as uow:
        read_message = await uow.messages.append("read", "user", "hi", metadata={"k": [1]})
        unread_message = await uow.messages.append_id("unread", "user", "hi", metadata={"k": [1]})
        read_run = await uow.runs.enqueue("read", "reply_auto_run", runtime_text="p", hop_count=2)
        unread_run = await uow.runs.enqueue_id(
            "unread", "reply_auto_run", runtime_text="p", hop_count=2
        )
        request = {"source_conversation_id": "read", "target_conversation_id": "unread"}
        await uow.replies.create({**request, "request_id": "r-read", "status": "waiting"})
        await uow.replies.insert({**request, "request_id": "r-unread", "status": "waiting"})
        await uow.commit()
    with pytest.raises(Conflict) as taken:
        async with store.uow() as uow:
            await uow.messages.append_id("unread", "user", "again", id=unread_message)
    assert taken.value.code == "message_exists"
    with pytest.raises(Conflict) as twice:
        async with store.uow() as uow:
            await uow.replies.insert({**request, "request_id": "r-unread", "status": "waiting"})
    assert twice.value.code == errors.REQUEST_EXISTS

    def same(row: Any, skip: set[str]) -> dict[str, Any]:
        return {k: v for k, v in row._asdict().items() if k not in skip}

    async with store.read_uow() as uow:
        message = await uow.messages.get(unread_message)
        run = await uow.runs.get(unread_run)
        reply = await uow.replies.get("r-unread")
    assert message is not None and run is not None and reply is not None
    skip = {"id", "session_id", "created_at"}
    assert same(message, skip) == same(read_message, skip)
    assert same(run, skip) == same(read_run, skip)
    assert (message.session_id, run.session_id) == ("unread", "unread")
    assert {k: getattr(reply, k) for k in columns} == {
        **request,
        **{"request_id": "r-unread", "status": "waiting"},
    }
    assert reply.created_at is not None and reply.hop_count == 0 and reply.source_auto_run is True


async def _stored_messages(store: Store, session_id: str) -> list[tuple[Any, ...]]:
    """The session's message rows as the database holds them (JSON as text), id prefix cut."""
    metadata = "CAST(metadata AS TEXT)"
    async with store.engine.connect() as connection:
        rows = await connection.execute(
            sa.text(
                f"SELECT id, seq, role, content, created_at, {metadata} FROM messages"
                " WHERE session_id = :session_id ORDER BY seq"
            ),
            {"session_id": session_id},
        )
        return [(row[0].split(":", 1)[1], *row[1:]) for row in rows]


async def test_insert_many_stores_exactly_what_sqlalchemys_executemany_stores(
    store: Store,
) -> None:
    """The importer's bulk insert (one executemany on the store's driver) writes the same text
    as SQLAlchemy's own executemany of the same rows: JSON (a None one too), times, NULLs."""
    await _make_sessions(store, "fast", "stock")
    when = utcnow()
    shapes: list[dict[str, Any]] = [
        {"role": "user", "content": "plain", "created_at": when, "metadata_": None},
        {"role": "assistant", "content": "é ☃", "created_at": None, "metadata_": {"a": [1, None]}},
        {"role": "tool", "content": "", "created_at": when, "metadata_": {"legacy": {"t": 1.5}}},
    ]
    no_time = [{"role": "user", "content": "server default", "metadata_": {"k": "v"}}]

    def rows(session_id: str, batch: list[dict[str, Any]], first_seq: int) -> list[dict[str, Any]]:
        return [
            {"id": f"{session_id}:{seq}", "session_id": session_id, "seq": seq, **shape}
            for seq, shape in enumerate(batch, start=first_seq)
        ]

    columns = dict(column_attributes(Message))
    async with store.uow() as uow:
        await uow.messages.insert_many(rows("fast", shapes, 1))
        await uow.messages.insert_many(rows("fast", no_time, 4))
        await uow.commit()
    async with store.engine.begin() as connection:  # SQLAlchemy's own executemany
        for batch in (rows("stock", shapes, 1), rows("stock", no_time, 4)):
            params = [{columns[key].name: value for key, value in row.items()} for row in batch]
            await connection.execute(sa.insert(MESSAGES), params)

    fast, stock = await _stored_messages(store, "fast"), await _stored_messages(store, "stock")
    assert fast[:3] == stock[:3]
    assert [row[:4] + row[5:] for row in fast[3:]] == [row[:4] + row[5:] for row in stock[3:]]
    assert fast[3][4] is not None  # the column's default
    assert fast[0][5] == "null"  # a None JSON value is JSON null, not SQL NULL, as before


async def test_owners_names_the_session_of_every_known_id_across_chunks(store: Store) -> None:
    await _make_sessions(store, "one", "two")
    rows = [
        {"id": f"m{i}", "session_id": "one" if i % 3 else "two", "seq": i, "role": "user"}
        | {"content": "x"}
        for i in range(1, 1204)
    ]
    async with store.uow() as uow:
        await uow.messages.insert_many(rows)
        await uow.commit()
    wanted = [f"m{i}" for i in range(1203, 0, -2)] + ["unknown", "m0"]
    async with store.read_uow() as uow:
        owners = await uow.messages.owners(wanted)
    assert owners == {f"m{i}": "one" if i % 3 else "two" for i in range(1203, 0, -2)}


@pytest.mark.parametrize(
    ("metadata", "escaped"),
    [
        ('{"crossConversation": {"sourceConversationId": "s", "replyRequestId": "req-9"}}', False),
        ('{"replyRequestId": "req-9"}', False),
        ('{"crossConversation": {"replyRequest\\u0049d": "req-9"}}', True),
        ('{"replyRequest\\u0049d": "req-9", "note": "\\u00e9"}', True),
    ],
)
async def test_the_message_that_carried_a_request_is_found_however_its_key_is_written(
    store: Store, metadata: str, escaped: bool
) -> None:
    """The importer recovers a legacy request's text from it: the first message holding the
    request id under the nested or the top-level key, never another session's. SQLite's
    lookup reads a row as JSON only when its text could hold the key, and finds what reading
    every row finds, even when another tool spelled the key with a JSON escape."""
    await _make_sessions(store, "target", "elsewhere")
    await insert_message_by_hand(store, "elsewhere", "other-session", metadata)
    await insert_message_by_hand(store, "target", "unrelated", '{"replyRequestId": "req-8"}')
    await insert_message_by_hand(store, "target", "no-metadata", None)
    await insert_message_by_hand(store, "target", "carrier", metadata)
    await insert_message_by_hand(store, "target", "later", metadata)
    params = {"session_id": "target", "request_id": "req-9"}
    async with store.read_uow() as uow:
        found = await uow.messages.find_reply_request_message("target", "req-9")
        missing = await uow.messages.find_reply_request_message("target", "req-7")
        every_row = (await uow._execute(REPLY_REQUEST_MESSAGE, params)).first()
    assert (found and found.id) == (every_row and every_row.id)
    assert missing is None
    if not escaped or store.dialect == "postgresql":  # jsonb reads the escape; SQLite does not
        assert found is not None and found.id == "carrier"


async def test_a_unit_of_work_reads_each_session_it_locked_once_until_its_transaction_ends(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _make_sessions(store, "a", "b")
    reads: list[list[str]] = []
    read = SessionRepository._all

    async def counted(self: SessionRepository, model: Any, stmt: Any, params: Any = None) -> Any:
        rows = await read(self, model, stmt, params)
        reads.append(sorted(params.values()))
        return rows

    monkeypatch.setattr(SessionRepository, "_all", counted)
    async with store.read_uow() as uow:
        assert set(await uow.sessions.lock_many(["b", "a"])) == {"a", "b"}
        assert (await uow.sessions.lock("a")) is not None  # locked already: not read again
        assert set(await uow.sessions.lock_many(["a", "b", "c"])) == {"a", "b"}
        await uow.commit()  # the locks end with the transaction, and so does the unit of work
        with pytest.raises(RuntimeError, match="has ended"):
            await uow.sessions.lock("a")  # not claimed from what the ended transaction read
    async with store.read_uow() as uow:  # a new transaction reads (and locks) again
        assert (await uow.sessions.lock("a")) is not None
    assert reads == [["a", "b"], ["c"], ["a"]]


async def test_prebuilt_statements_read_back_exactly_as_sqlalchemy_reads_them(
    store: Store,
) -> None:
    """On the store's driver (``statements.Compiled``) and through SQLAlchemy's own execution,
    the same statements give the same values: aware datetimes, JSON, booleans, NULLs."""
    await _make_sessions(store, "src")
    async with store.uow() as uow:
        await uow.sessions.create("dst", title=None, extra={"k": [1, "two", None]})
        message = await uow.messages.append(
            "dst", "user", "hi", metadata={"crossConversation": {"replyRequestId": "r1"}}
        )
        await uow.replies.create(
            {
                "request_id": "r1",
                "message_id": message.id,
                "source_conversation_id": "src",
                "target_conversation_id": "dst",
                "status": "ready",
                "source_auto_run": True,
            }
        )
        run = await uow.runs.enqueue("dst", "cross_conversation", reply_request_id="r1")
        await uow.commit()
    await insert_message_by_hand(store, "src", "answer", '{"replyToRequestId": "r1"}')
    checks: list[tuple[Any, dict[str, Any]]] = [
        (sessions_module._GET_SESSION, {"session_id": "src"}),
        (sessions_module._GET_SESSION, {"session_id": "dst"}),
        (messages_module._GET_MESSAGE, {"message_id": message.id}),
        (
            messages_module.LATEST_NONBLANK_BY_ROLE,
            {"session_id": "dst", "role": "user", "before_seq": NO_SEQ_ABOVE, "limit": 5},
        ),
        (replies_module._GET_REPLY, {"request_id": "r1"}),
        (replies_module._DELIVERABLE_FOR_SOURCE, {"session_id": "src"}),
        (_SOURCE_STATE, {"source_id": "src", "request_id": "r1"}),
        (runs_module._GET_RUN, {"run_id": run.id}),
        (runs_module._has_run_in_statement(("queued",)), {"session_id": "dst"}),
    ]
    async with store.read_uow() as uow, store.engine.connect() as connection:
        for stmt, params in checks:
            straight = [tuple(row) for row in await uow._execute(stmt, params)]
            through = [tuple(row) for row in await connection.execute(stmt, params)]
            assert straight == through, stmt
            assert straight, stmt
    assert isinstance(through[0][0], bool)
    async with store.read_uow() as uow:
        request = await uow.replies.require("r1")
    assert request.created_at.utcoffset() == timedelta(0)
    assert request.source_auto_run is True and request.reply_text is None


async def test_driver_errors_are_sqlalchemy_errors_and_the_repositorys_conflict(
    store: Store,
) -> None:
    async with store.uow() as uow:
        await uow.sessions.create("s", title="S")
        await uow.messages.append("s", "user", "one", id="m-1")
        with pytest.raises(Conflict) as caught:
            await uow.messages.append("s", "user", "two", id="m-1")
        assert isinstance(caught.value.__cause__, IntegrityError)
    async with store.read_uow() as uow:  # the block above never committed
        assert await uow.sessions.get("s") is None
