"""The rows of the event outbox (``events``, ``event_inbox``): an event (``domain.events``) as
the row it is written as, and a claimed run's ``run.started`` event as SQL, written by the
claim's own statement (PostgreSQL's ``repositories.run_leases``) or by a trigger of SQLite's
writer (``store.sqlite.one_statement``). Below both, so that neither imports the other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any

import sqlalchemy as sa

from ccweb_store.domain.events import Event, RunStarted
from ccweb_store.store.models import Base

EVENTS = Base.metadata.tables["events"]

#: The columns an event is written with, in the order of its row (``event_row``).
EVENT_COLUMNS = (
    "type",
    "conversation_id",
    "peer_conversation_id",
    "message_id",
    "run_id",
    "request_id",
    "created_at",
    "payload",
)

#: The columns that hold an event's ids besides its conversation: each the field of the same
#: name, for the event types that carry it.
_ID_COLUMNS = ("peer_conversation_id", "message_id", "run_id", "request_id")
_ids_by_type: dict[type[Event], tuple[str, ...]] = {}


def event_row(event: Event) -> dict[str, Any]:
    """``event`` as the row the outbox holds: a value for each of ``EVENT_COLUMNS``, None for
    the ids its type does not carry."""
    ids = _ids_by_type.get(type(event))
    if ids is None:
        carried = {each.name for each in fields(event)}
        ids = _ids_by_type[type(event)] = tuple(name for name in _ID_COLUMNS if name in carried)
    row: dict[str, Any] = {
        "type": event.type,
        "conversation_id": event.conversation_id,
        "peer_conversation_id": None,
        "message_id": None,
        "run_id": None,
        "request_id": None,
        "created_at": event.at,
        "payload": event.payload(),
    }
    for name in ids:
        row[name] = getattr(event, name)
    return row


def run_started_event(
    run: Any, at: sa.ColumnElement[Any], json_object: Callable[..., sa.ColumnElement[Any]]
) -> sa.Select[Any]:
    """The ``run.started`` event of a claimed run as a row of the ``events`` columns, selected
    from ``run``'s columns by name (``run.id``, ``run.kind``, …): the claim's CTE on
    PostgreSQL, the ``NEW`` row of SQLite's trigger (``store.sqlite.one_statement``). Its
    payload is ``RunStarted``'s for a claim, which always has its worker: ``{kind,
    workerId}``, built by the database's ``json_object``; ``at`` its time."""
    return sa.select(
        sa.literal(RunStarted.type, EVENTS.c.type.type).label("type"),
        run.session_id.label("conversation_id"),
        sa.cast(sa.null(), EVENTS.c.peer_conversation_id.type).label("peer_conversation_id"),
        sa.cast(sa.null(), EVENTS.c.message_id.type).label("message_id"),
        run.id.label("run_id"),
        run.reply_request_id.label("request_id"),
        at.label("created_at"),
        json_object(
            sa.literal("kind", sa.Text()),
            run.kind,
            sa.literal("workerId", sa.Text()),
            run.worker_id,
        ).label("payload"),
    )
