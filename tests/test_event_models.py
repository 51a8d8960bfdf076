"""``domain.events``: one frozen model per event type, and the rows the store writes for them.

Every event type is made by the repositories' real writes on both engines, by every path the
store writes events by (the outbox at the commit, PostgreSQL's inbox and its move, SQLite's
batches as one statement, a claim's own statement or trigger); the row each one left in the
outbox is its model's row (``store.event_rows.event_row``), field for field."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from ccweb_store.domain import events
from ccweb_store.domain.ids import new_id
from ccweb_store.domain.kinds import ReplyStatus, Role, RunKind, RunStatus
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.store.event_rows import EVENT_COLUMNS, event_row
from ccweb_store.store.uow import Store, UnitOfWork


def test_every_event_type_has_one_model_and_every_model_is_frozen() -> None:
    assert list(events.MODELS) == list(events.EVENT_TYPES)
    assert all(model.type == name for name, model in events.MODELS.items())
    queued = events.RunQueued(conversation_id="c", run_id="r", request_id=None, kind="user_turn")
    with pytest.raises(dataclasses.FrozenInstanceError):
        queued.kind = "other"  # type: ignore[misc]
    assert set(events.REPLY_EVENTS) == set(ReplyStatus)


def test_a_model_takes_only_the_fields_its_event_carries() -> None:
    with pytest.raises(TypeError):
        events.MessageAppended(conversation_id="c", message_id="m", role="user", run_id="r")  # type: ignore[call-arg]
    assert event_row(events.MessageAppended(conversation_id="c", message_id="m", role="user")) | {
        "created_at": None
    } == {
        "type": "message.appended",
        "conversation_id": "c",
        "peer_conversation_id": None,
        "message_id": "m",
        "run_id": None,
        "request_id": None,
        "created_at": None,
        "payload": {"role": "user"},
    }


async def _send(uow: UnitOfWork, source: str, target: str, *, request: bool) -> tuple[str, str]:
    """A send from ``source`` to ``target`` (one batch): its run's and its request's ids."""
    await uow.sessions.lock_many([source, target])
    run_id, request_id = new_id("run"), new_id("req")
    await uow.sends.deliver(
        source=(source, None),
        target=(target, None),
        content="ask",
        metadata={},
        hop_count=0,
        runtime_text="answer",
        message_id=new_id("msg"),
        run_id=run_id,
        request_id=request_id if request else None,
        now=utcnow(),
    )
    return run_id, request_id


async def test_every_event_types_row_is_its_models_row_on_every_write_path(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    told: list[events.Event] = []
    monkeypatch.setattr(store.feed, "poke", lambda written=None: told.extend(written or ()))

    async with store.uow() as uow:
        await uow.sessions.create("conv-a", title="Planner")
        await uow.sessions.create("conv-b")
        await uow.messages.append("conv-a", Role.USER, "hello")
        await uow.commit()
    async with store.uow() as uow:  # a send: one batch (SQLite: its events in its statement)
        run_id, request_id = await _send(uow, "conv-a", "conv-b", request=True)
        await uow.commit()
    async with store.uow(autocommit=True) as uow:  # the claim's statement writes its event
        claimed = await uow.runs.claim("w1", lease_seconds=60)
        await uow.commit()
    assert claimed is not None and claimed.id == run_id
    async with store.uow() as uow:
        await uow.replies.transition(request_id, [ReplyStatus.WAITING], ReplyStatus.READY)
        await uow.runs.finish(run_id, RunStatus.COMPLETED, worker_id="w1", output="done")
        await uow.commit()
    async with store.uow() as uow:
        await uow.replies.transition(request_id, [ReplyStatus.READY], ReplyStatus.RETURNED)
        await uow.runs.enqueue("conv-a", RunKind.USER_TURN)
        await uow.commit()
    async with store.uow() as uow:  # a claim in a transaction: noted for the commit
        again = await uow.runs.claim("w2", lease_seconds=60)
        assert again is not None
        await uow.runs.requeue(again.id)
        await uow.commit()
    async with store.uow() as uow:
        await uow.runs.start("conv-b", RunKind.USER_TURN, worker_id="w3")
        _, failing = await _send(uow, "conv-b", "conv-a", request=True)
        await uow.replies.transition(failing, [ReplyStatus.WAITING], ReplyStatus.FAILED)
        await uow.commit()
    async with store.uow() as uow:
        await uow.sessions.set_archived("conv-a", utcnow() - timedelta(seconds=1))
        await uow.sessions.set_agent_session("conv-b", "agent-session-1")
        await uow.sessions.update_columns("conv-b", {"title": "Tester"})
        uow.messages.note_imported("conv-a", 3)
        await uow.commit()

    async with store.read_uow() as uow:
        rows = await uow.events.after(0, 100)
    assert {event.type for event in told} == set(events.EVENT_TYPES)
    assert [{name: row[name] for name in EVENT_COLUMNS} for row in rows] == [
        event_row(event) for event in told
    ]
    if store.dialect == "sqlite":  # its JSON text keeps the payload's keys in their order
        payload_keys: list[Any] = [list(row["payload"]) for row in rows]
        assert payload_keys == [list(event.payload()) for event in told]
