"""Who a send is between: its source and target read in one statement, with whether the
target has a queued or running run (a busy target is refused), on SQLite as the statement
that begins the send's transaction, on PostgreSQL with both rows locked."""

from __future__ import annotations

from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.sql.expression import bindparam

from ccweb_store.domain.ids import ACTIVE_RUN_STATUSES
from ccweb_store.domain.rows import Party
from ccweb_store.store.repositories.base import RUNS, SESSIONS, constant, prebuilt


class SendParties(NamedTuple):
    """The two conversations of a send, None where one does not exist, and whether the
    target has a queued or running run."""

    source: Party | None
    target: Party | None
    target_busy: bool


def _has_active_run(session_id: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
    """Whether the session has a queued or running run: one index probe per status.

    Not ``status IN (…)``: SQLite builds a temporary table of the list's values on every
    run of a statement whose index lookup an ``IN`` list drives, which costs more than the
    probes (so does the ``id IN (…)`` of two sessions, hence the ``UNION ALL`` below).
    """
    return sa.or_(
        *(
            sa.exists().where(RUNS.c.session_id == session_id, RUNS.c.status == constant(status))
            for status in ACTIVE_RUN_STATUSES
        )
    )


#: The run statuses ``_has_active_run_sqlite`` finds: every status from the first active one
#: to the last, in SQLite's order (``BINARY``: byte by byte). No other run status lies between
#: them (a test holds ``RUN_STATUSES`` to that).
ACTIVE_RUN_STATUS_RANGE = (min(ACTIVE_RUN_STATUSES), max(ACTIVE_RUN_STATUSES))


def _has_active_run_sqlite(session_id: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
    """``_has_active_run`` on SQLite in one index probe instead of one per status: the
    active statuses, ``queued`` and ``running``, are the only run statuses from the one to the
    other (the ``status`` CHECK admits no other value), so one range of
    ``ix_runs_session_id_status`` holds exactly the session's active runs (a send's busy
    check). Not on PostgreSQL, whose text order is its collation's."""
    return sa.exists().where(
        RUNS.c.session_id == session_id,
        RUNS.c.status >= constant(ACTIVE_RUN_STATUS_RANGE[0]),
        RUNS.c.status <= constant(ACTIVE_RUN_STATUS_RANGE[1]),
    )


#: SQLite: both conversations and the target's busy flag in one statement. An UPDATE that
#: changes nothing, so that the statement begins the unit of work's transaction as it reads
#: (``BEGIN IMMEDIATE``, which sqlite3 issues in the same call before a statement that
#: writes): that holds every other writer off, so what it reads stays true until the commit.
SEND_PARTIES = prebuilt(
    sa.update(SESSIONS)
    .where(SESSIONS.c.id.in_([bindparam("source_id"), bindparam("target_id")]))
    .values(updated_at=SESSIONS.c.updated_at)
    .returning(
        SESSIONS.c.id,
        SESSIONS.c.title,
        sa.case(
            (
                SESSIONS.c.id == bindparam("target_id"),
                _has_active_run_sqlite(bindparam("target_id")),
            ),
            else_=sa.false(),
        ),
    )
)
#: PostgreSQL: both rows locked in id order, so that concurrent sends to one target queue on
#: its lock; the busy check must come after, to see what the lock waited for (a statement
#: reads one snapshot, taken before it waited).
LOCK_SEND_PARTIES = prebuilt(
    sa.select(SESSIONS.c.id, SESSIONS.c.title)
    .where(SESSIONS.c.id.in_([bindparam("source_id"), bindparam("target_id")]))
    .order_by(SESSIONS.c.id)
    .with_for_update()
)
HAS_ACTIVE_RUN = prebuilt(sa.select(_has_active_run(bindparam("session_id"))))
