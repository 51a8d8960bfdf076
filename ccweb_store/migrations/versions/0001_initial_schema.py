"""Initial schema: the state before the reply-interface PRD (no original_request).

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NOW = sa.text("CURRENT_TIMESTAMP")
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _timestamp(name: str, *, nullable: bool = True, now: bool = False) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(
        name,
        sa.DateTime(timezone=True),
        nullable=nullable,
        server_default=NOW if now else None,
    )


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(128), nullable=False),
        sa.Column("title", sa.Text()),
        sa.Column("agent", sa.String(64)),
        sa.Column("cwd", sa.Text()),
        _timestamp("created_at", nullable=False, now=True),
        _timestamp("updated_at", nullable=False, now=True),
        _timestamp("archived_at"),
        sa.Column("extra", JSON),
        sa.PrimaryKeyConstraint("id", name="pk_sessions"),
    )
    op.create_index("ix_sessions_updated_at", "sessions", ["updated_at"])

    op.create_table(
        "messages",
        sa.Column("id", sa.String(128), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        _timestamp("created_at", now=True),
        sa.Column("metadata", JSON),
        sa.PrimaryKeyConstraint("id", name="pk_messages"),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name="fk_messages_session_id_sessions",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("session_id", "seq", name="uq_messages_session_id_seq"),
        sa.CheckConstraint(
            "role IN ('user', 'assistant', 'system', 'tool')", name="ck_messages_role"
        ),
    )
    op.create_index("ix_messages_session_id_role_seq", "messages", ["session_id", "role", "seq"])

    op.create_table(
        "reply_requests",
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("message_id", sa.String(128)),
        sa.Column("source_conversation_id", sa.String(128), nullable=False),
        sa.Column("source_title", sa.Text()),
        sa.Column("target_conversation_id", sa.String(128), nullable=False),
        sa.Column("target_title", sa.Text()),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("hop_count", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("source_auto_run", sa.Boolean(), nullable=False, server_default=sa.true()),
        sa.Column("reply_text", sa.Text()),
        _timestamp("created_at", nullable=False, now=True),
        _timestamp("completed_at"),
        _timestamp("returned_at"),
        sa.Column("reply_message_id", sa.String(128)),
        sa.Column("last_error", sa.Text()),
        sa.PrimaryKeyConstraint("request_id", name="pk_reply_requests"),
        sa.CheckConstraint(
            "status IN ('waiting', 'ready', 'returned', 'failed')",
            name="ck_reply_requests_status",
        ),
    )
    op.create_index(
        "ix_reply_requests_source_conversation_id_status",
        "reply_requests",
        ["source_conversation_id", "status"],
    )
    op.create_index(
        "ix_reply_requests_target_conversation_id_status",
        "reply_requests",
        ["target_conversation_id", "status"],
    )
    op.create_index(
        "ix_reply_requests_status_created_at", "reply_requests", ["status", "created_at"]
    )

    op.create_table(
        "runs",
        sa.Column("id", sa.String(128), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("runtime_text", sa.Text()),
        sa.Column("reply_request_id", sa.String(128)),
        sa.Column("hop_count", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("worker_id", sa.String(128)),
        _timestamp("lease_expires_at"),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        _timestamp("created_at", nullable=False, now=True),
        _timestamp("started_at"),
        _timestamp("finished_at"),
        sa.Column("output", sa.Text()),
        sa.Column("error", sa.Text()),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name="fk_runs_session_id_sessions", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["reply_request_id"],
            ["reply_requests.request_id"],
            name="fk_runs_reply_request_id_reply_requests",
            ondelete="SET NULL",
        ),
        sa.CheckConstraint(
            "kind IN ('user_turn', 'cross_conversation', 'reply_auto_run')", name="ck_runs_kind"
        ),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'completed', 'failed', 'cancelled')",
            name="ck_runs_status",
        ),
    )
    op.create_index("ix_runs_status_created_at", "runs", ["status", "created_at"])
    op.create_index("ix_runs_session_id_status", "runs", ["session_id", "status"])
    op.create_index("ix_runs_reply_request_id", "runs", ["reply_request_id"])
    op.create_index(
        "uq_runs_one_running_per_session",
        "runs",
        ["session_id"],
        unique=True,
        sqlite_where=sa.text("status = 'running'"),
        postgresql_where=sa.text("status = 'running'"),
    )


def downgrade() -> None:
    op.drop_table("runs")
    op.drop_table("reply_requests")
    op.drop_table("messages")
    op.drop_table("sessions")
