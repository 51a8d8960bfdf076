"""Orders that an index serves: a conversation's last message kept on its row, and the
conversations' pages by creation and by activity.

- ``sessions.last_message_at`` (nullable): the newest ``created_at`` of the conversation's
  messages, kept by every write of a message (``MessageRepository``), filled here from the
  messages. ``conversation_activity.last_message_at`` reads it, so ``ORDER BY
  last_message_at`` walks ``ix_sessions_last_message_at`` instead of computing the newest
  message of every conversation and sorting them all. Its active run is read by scalar
  subqueries rather than 0003's join, which PostgreSQL planned as a hash join over every
  conversation whatever the ``LIMIT``; the columns and what they hold are 0003's.
- ``ix_sessions_created_at_id``: ``session.list``'s order, newest created first.
- ``ix_sessions_updated_at_id`` replaces ``ix_sessions_updated_at``: the order of
  ``operator.conversations`` and of the console's conversations, newest activity first, with
  the id that breaks ties.

The view is dropped and made again around the change (see 0003's docstring); adding and
dropping a column rebuilds no table on either engine (SQLite 3.35 or later drops a column in
place once no view or index names it). Downgrade restores the view as 0003 made it.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _open_requests(side: str, status: str) -> str:
    return (
        f"(SELECT COUNT(*) FROM reply_requests q "
        f"WHERE q.{side}_conversation_id = s.id AND q.status = '{status}') "
        f"AS {status}_as_{side}"
    )


_ACTIVITY = """
CREATE VIEW conversation_activity AS
SELECT
    s.id AS session_id,
    s.title,
    (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) AS message_count,
    {last_message_at} AS last_message_at,
    {active_run},
    {open_requests}
FROM sessions s
{join}"""
_OPEN_REQUESTS = ",\n    ".join(
    _open_requests(side, status)
    for side in ("source", "target")
    for status in ("waiting", "ready", "failed")
)
_RUN_COLUMNS = ("id", "kind", "status")
#: The conversation's active run: its running run, else its oldest queued one.
_ACTIVE_RUN = (
    "SELECT r.{column} FROM runs r "
    "WHERE r.session_id = s.id AND r.status IN ('running', 'queued') "
    "ORDER BY CASE r.status WHEN 'running' THEN 0 ELSE 1 END, r.created_at, r.id LIMIT 1"
)
#: Three scalar subqueries: the view reads one row of ``sessions`` per row it gives, so an
#: ``ORDER BY … LIMIT`` over it reads the rows an index gives in order and stops.
_ACTIVE_RUN_COLUMNS = ",\n    ".join(
    f"({_ACTIVE_RUN.format(column=column)}) AS active_run_{column}" for column in _RUN_COLUMNS
)
#: As 0003 made it: a join, which PostgreSQL plans as a hash join over every conversation.
_ACTIVE_RUN_JOINED = ", ".join(f"ar.{column} AS active_run_{column}" for column in _RUN_COLUMNS)
_JOIN_0003 = f"LEFT JOIN runs ar ON ar.id = ({_ACTIVE_RUN.format(column='id')})"
#: The newest message of each conversation, as 0003 computed it and as the column holds it.
_NEWEST_MESSAGE = "(SELECT MAX(m.created_at) FROM messages m WHERE m.session_id = s.id)"


def _activity_view(last_message_at: str, active_run: str, join: str) -> str:
    return _ACTIVITY.format(
        last_message_at=last_message_at,
        active_run=active_run,
        open_requests=_OPEN_REQUESTS,
        join=join,
    )


def upgrade() -> None:
    op.execute("DROP VIEW conversation_activity")
    op.add_column("sessions", sa.Column("last_message_at", sa.DateTime(timezone=True)))
    op.execute(
        "UPDATE sessions SET last_message_at = "
        "(SELECT MAX(m.created_at) FROM messages m WHERE m.session_id = sessions.id)"
    )
    op.create_index("ix_sessions_last_message_at", "sessions", ["last_message_at"])
    op.create_index("ix_sessions_created_at_id", "sessions", ["created_at", "id"])
    op.drop_index("ix_sessions_updated_at", table_name="sessions")
    op.create_index("ix_sessions_updated_at_id", "sessions", ["updated_at", "id"])
    op.execute(_activity_view("s.last_message_at", _ACTIVE_RUN_COLUMNS, ""))


def downgrade() -> None:
    op.execute("DROP VIEW conversation_activity")
    op.drop_index("ix_sessions_updated_at_id", table_name="sessions")
    op.create_index("ix_sessions_updated_at", "sessions", ["updated_at"])
    op.drop_index("ix_sessions_created_at_id", table_name="sessions")
    op.drop_index("ix_sessions_last_message_at", table_name="sessions")
    op.drop_column("sessions", "last_message_at")
    op.execute(_activity_view(_NEWEST_MESSAGE, _ACTIVE_RUN_JOINED, _JOIN_0003))
