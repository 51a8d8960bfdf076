"""The event inbox: ``event_inbox``, where a PostgreSQL transaction writes its events, moved to
``events`` (and given their ids there) by one short statement once it has committed. No lock
is then held from a transaction's events to its commit (``repositories.events``). SQLite's one
writer writes ``events`` itself and leaves the table empty.

One new table: no existing table is rebuilt, so the 0003 views stay in place both ways.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "event_inbox",
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
        sa.PrimaryKeyConstraint("id", name="pk_event_inbox"),
    )


def downgrade() -> None:
    op.drop_table("event_inbox")
