"""A conversation's box: a nullable ``sessions.box``.

The real path (``realpath``) a conversation's runs must stay under, recorded when an agent's
credential creates the conversation: its creator's box, or the creator's resolved ``cwd``. The
worker resolves a run's ``cwd`` when the run starts and refuses to run outside the box, so a
symlink put in the path after the creation cannot move the run elsewhere. Conversations the
host creates have none.

Upgrade is a plain ``ADD COLUMN`` on both engines (Alembic's SQLite batch mode adds a nullable
column in place), so the 0003 views stay in place. Downgrade is a plain ``DROP COLUMN`` (SQLite
3.35 or later), which both engines allow because no view or index names the column.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("box", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("sessions", "box")
