"""Conversation credentials: ``conversation_credentials`` (one row per minted credential,
checked on every use so revocation takes effect at once) and ``server_secrets`` (the key that
signs them, made on first use unless ``CCWEB_CREDENTIAL_SECRET`` supplies one).

Two new tables: no existing table is rebuilt, so the 0003 views stay in place both ways.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

NOW = sa.text("CURRENT_TIMESTAMP")

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "conversation_credentials",
        sa.Column("id", sa.String(128), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("label", sa.Text(), nullable=True),
        sa.Column("hop_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name="fk_conversation_credentials_session_id_sessions",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_conversation_credentials"),
    )
    op.create_index(
        "ix_conversation_credentials_session_id_created_at",
        "conversation_credentials",
        ["session_id", "created_at"],
    )
    op.create_table(
        "server_secrets",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_server_secrets"),
    )


def downgrade() -> None:
    op.drop_table("server_secrets")
    op.drop_index(
        "ix_conversation_credentials_session_id_created_at", table_name="conversation_credentials"
    )
    op.drop_table("conversation_credentials")
