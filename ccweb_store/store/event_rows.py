"""The rows of the event outbox (``events``, ``event_inbox``): the columns an event is written
with, and a claimed run's ``run.started`` event as SQL, written by the claim's own statement
(PostgreSQL's ``repositories.run_leases``) or by a trigger of SQLite's writer
(``store.sqlite.one_statement``). Below both, so that neither imports the other."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from ccweb_store.domain import event_types
from ccweb_store.store.models import Base

EVENTS = Base.metadata.tables["events"]

#: The columns an event is written with, in the order ``UnitState.note`` keeps them.
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


def run_started_event(
    run: Any, at: sa.ColumnElement[Any], json_object: Callable[..., sa.ColumnElement[Any]]
) -> sa.Select[Any]:
    """The ``run.started`` event of a claimed run as a row of the ``events`` columns, selected
    from ``run``'s columns by name (``run.id``, ``run.kind``, …): the claim's CTE on
    PostgreSQL, the ``NEW`` row of SQLite's trigger (``store.sqlite.one_statement``). Its
    payload is what ``RunLeases.claim`` notes, ``{kind, workerId}``, built by the database's
    ``json_object``; ``at`` its time."""
    return sa.select(
        sa.literal(event_types.RUN_STARTED, EVENTS.c.type.type).label("type"),
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
