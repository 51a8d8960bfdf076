"""The database's own identity and the copy marker: ``database_identity`` (one row, a random
id made here, so two URLs can be told to reach one database or two) and ``copy_marker`` (what
``copy`` is writing, or wrote, into this database: the source's id and URL and whether it
finished).

Two new tables: no existing table is rebuilt, so the 0003 views stay in place both ways.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03
"""

import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

NOW = sa.text("CURRENT_TIMESTAMP")

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    identity = op.create_table(
        "database_identity",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_database_identity"),
    )
    op.bulk_insert(identity, [{"id": str(uuid.uuid4())}])
    op.create_table(
        "copy_marker",
        sa.Column("name", sa.String(16), nullable=False),
        sa.Column("source_id", sa.String(36), nullable=False),
        sa.Column("source_url", sa.Text(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "state = 'in progress' OR state = 'done'", name=op.f("ck_copy_marker_state")
        ),
        sa.PrimaryKeyConstraint("name", name="pk_copy_marker"),
    )


def downgrade() -> None:
    op.drop_table("copy_marker")
    op.drop_table("database_identity")
