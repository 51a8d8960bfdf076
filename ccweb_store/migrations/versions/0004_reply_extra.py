"""Keep every field of an imported reply entry: a nullable JSON ``reply_requests.extra``.

``import-json`` stores there what no ``reply_requests`` column reproduces exactly (see
``ccweb_store.importer.legacy_json``), as ``sessions.extra`` does for sessions. Rows written by the
lifecycle leave it NULL.

The debugging views of 0003 read ``reply_requests`` but stay in place: neither direction
rebuilds the table. Upgrade is a plain ``ADD COLUMN`` on both engines (Alembic's SQLite batch
mode adds a column without a default in place). Downgrade is a plain ``DROP COLUMN`` (SQLite
3.35 or later), which both engines allow because no view or index names ``extra``; a batch
drop would rebuild the table, and SQLite refuses to rename it back while the views exist.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("reply_requests") as batch:
        batch.add_column(
            sa.Column(
                "extra", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True
            )
        )


def downgrade() -> None:
    op.drop_column("reply_requests", "extra")
