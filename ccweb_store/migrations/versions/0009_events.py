"""The event outbox: ``events``, one row per change, written in the change's own transaction
(``GET /events``, ``events.list``).

``AUTOINCREMENT`` on SQLite: an id is never handed out twice, even after the newest events
were pruned, so a client's resume point keeps its meaning.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("conversation_id", sa.String(128), nullable=True),
        sa.Column("peer_conversation_id", sa.String(128), nullable=True),
        sa.Column("message_id", sa.String(128), nullable=True),
        sa.Column("run_id", sa.String(128), nullable=True),
        sa.Column("request_id", sa.String(128), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "payload", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True
        ),
        sa.PrimaryKeyConstraint("id", name="pk_events"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_events_conversation_id_id", "events", ["conversation_id", "id"])
    op.create_index("ix_events_peer_conversation_id_id", "events", ["peer_conversation_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_events_peer_conversation_id_id", table_name="events")
    op.drop_index("ix_events_conversation_id_id", table_name="events")
    op.drop_table("events")
