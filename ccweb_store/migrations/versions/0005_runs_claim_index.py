"""An index for claims by kind: ``ix_runs_status_kind_created_at_id`` on
``runs (status, kind, created_at, id)``.

A claim for one kind (``run.claim`` with ``kinds: ["cross_conversation"]``) walked
``ix_runs_status_created_at`` over every queued run of the other kinds, and late in a busy
run thousands of ``reply_auto_run``s wait there. This index finds the queued runs of a kind
directly, already in the claim's ``ORDER BY created_at, id``.

Creating or dropping an index rebuilds no table, so the 0003 views stay in place.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_runs_status_kind_created_at_id"


def upgrade() -> None:
    op.create_index(INDEX, "runs", ["status", "kind", "created_at", "id"])


def downgrade() -> None:
    op.drop_index(INDEX, table_name="runs")
