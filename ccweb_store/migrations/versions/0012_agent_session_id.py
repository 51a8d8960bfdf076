"""The agent's own session of a conversation: a nullable ``sessions.agent_session_id``.

A conversation is one agent session (a Claude Code session, a Codex thread). A run's end records
that agent's id here and the conversation's next run resumes it, so the source's auto-run sees
the conversation's earlier turns.

Upgrade is a plain ``ADD COLUMN`` on both engines (Alembic's SQLite batch mode adds a nullable
column in place), so the 0003 views stay in place. Downgrade is a plain ``DROP COLUMN`` (SQLite
3.35 or later), which both engines allow because no view or index names the column.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("agent_session_id", sa.String(256), nullable=True))


def downgrade() -> None:
    op.drop_column("sessions", "agent_session_id")
