"""Views for debugging pending replies: ``pending_replies`` and ``conversation_activity``.

Both views have the same columns and meaning on SQLite and PostgreSQL; only ``age_seconds``
needs dialect-specific SQL. Boolean columns (``source_auto_run``, ``original_request_known``,
``source_running``) read as ``true``/``false`` on PostgreSQL and ``1``/``0`` on SQLite.

The views are not part of the ORM metadata, so autogenerate never sees them. A later
migration that rebuilds ``reply_requests``, ``runs``, ``sessions`` or ``messages`` (SQLite
batch mode, or a PostgreSQL column type change) must drop these views first and recreate
them afterwards: SQLite refuses to rename a table while a view names a missing one, and
PostgreSQL refuses to alter a column a view uses.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Whole seconds since the request was created, an integer on both engines.
_AGE_SECONDS = {
    "postgresql": "CAST(FLOOR(EXTRACT(EPOCH FROM (CURRENT_TIMESTAMP - rr.created_at))) AS BIGINT)",
    "sqlite": "CAST((julianday('now') - julianday(rr.created_at)) * 86400 AS INTEGER)",
}

_PENDING_REPLIES = """
CREATE VIEW pending_replies AS
SELECT
    rr.request_id,
    rr.status,
    rr.source_conversation_id,
    COALESCE(src.title, rr.source_title) AS source_title,
    rr.target_conversation_id,
    COALESCE(tgt.title, rr.target_title) AS target_title,
    {age_seconds} AS age_seconds,
    rr.hop_count,
    rr.source_auto_run,
    (rr.original_request IS NOT NULL) AS original_request_known,
    rr.last_error,
    rr.created_at,
    tr.id AS target_run_id,
    tr.status AS target_run_status,
    tr.worker_id AS target_run_worker_id,
    tr.lease_expires_at AS target_run_lease_expires_at,
    tr.attempts AS target_run_attempts,
    EXISTS (
        SELECT 1 FROM runs sr
        WHERE sr.session_id = rr.source_conversation_id AND sr.status = 'running'
    ) AS source_running
FROM reply_requests rr
LEFT JOIN sessions src ON src.id = rr.source_conversation_id
LEFT JOIN sessions tgt ON tgt.id = rr.target_conversation_id
LEFT JOIN runs tr ON tr.id = (
    SELECT r.id FROM runs r
    WHERE r.reply_request_id = rr.request_id AND r.kind = 'cross_conversation'
    ORDER BY r.created_at DESC, r.id DESC
    LIMIT 1
)
WHERE rr.status IN ('waiting', 'ready', 'failed')
"""


def _open_requests(side: str, status: str) -> str:
    return (
        f"(SELECT COUNT(*) FROM reply_requests q "
        f"WHERE q.{side}_conversation_id = s.id AND q.status = '{status}') "
        f"AS {status}_as_{side}"
    )


_CONVERSATION_ACTIVITY = f"""
CREATE VIEW conversation_activity AS
SELECT
    s.id AS session_id,
    s.title,
    (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) AS message_count,
    (SELECT MAX(m.created_at) FROM messages m WHERE m.session_id = s.id) AS last_message_at,
    ar.id AS active_run_id,
    ar.kind AS active_run_kind,
    ar.status AS active_run_status,
    {_open_requests("source", "waiting")},
    {_open_requests("source", "ready")},
    {_open_requests("source", "failed")},
    {_open_requests("target", "waiting")},
    {_open_requests("target", "ready")},
    {_open_requests("target", "failed")}
FROM sessions s
LEFT JOIN runs ar ON ar.id = (
    SELECT r.id FROM runs r
    WHERE r.session_id = s.id AND r.status IN ('running', 'queued')
    ORDER BY CASE r.status WHEN 'running' THEN 0 ELSE 1 END, r.created_at, r.id
    LIMIT 1
)
"""


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.execute(_PENDING_REPLIES.format(age_seconds=_AGE_SECONDS[dialect]))
    op.execute(_CONVERSATION_ACTIVITY)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS conversation_activity")
    op.execute("DROP VIEW IF EXISTS pending_replies")
