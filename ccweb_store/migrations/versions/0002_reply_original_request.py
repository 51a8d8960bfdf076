"""Keep the original request text on reply requests (reply-interface PRD).

Nullable, so replies written before the PRD survive with NULL and read as "unknown".

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("reply_requests") as batch:
        batch.add_column(sa.Column("original_request", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("reply_requests") as batch:
        batch.drop_column("original_request")
