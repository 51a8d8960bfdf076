"""An index for "is this request already answered in its source?":
``ix_messages_reply_to_request_id`` on ``messages (metadata.replyToRequestId, session_id,
seq)``, partial (only the messages that carry the key).

Delivering a reply first looks for the source conversation's messages whose
``metadata.replyToRequestId`` names the request (SPEC §4); that lookup read every message of
the source on every delivery. The index is on the expression, not on a new column, so it
covers every row however it was written: by delivery, by ``message.append`` with any
metadata, by ``import-json``, by hand. Its first part is
``ccweb_store.store.models.reply_to_request_id``, the very expression the query renders:

- SQLite: ``json_extract(metadata, '$.replyToRequestId')``. SQLite evaluates it on every
  insert or update of a message, so a message whose ``metadata`` is not valid JSON can no
  longer be written (and if one exists, this upgrade fails with "malformed JSON").
- PostgreSQL: ``(metadata ->> 'replyToRequestId')`` over the JSONB column.

``session_id, seq`` follow so that the query's ``session_id = ? … ORDER BY seq`` is answered
by the index too: with the expression alone, SQLite (without ``ANALYZE`` statistics)
prefers ``uq_messages_session_id_seq``, which gives that order for free, and scans the
whole conversation again.

The ORM does not declare the index (SQLite cannot reflect an expression index, so
autogenerate could not compare it); ``migrations/env.py`` leaves it out of ``alembic check``.
Creating or dropping an index rebuilds no table, so the 0003 views stay in place.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from ccweb_store.store.models import REPLY_TO_REQUEST_ID_INDEX, reply_to_request_id

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    key = reply_to_request_id(sa.column("metadata"))
    present = key.is_not(None)
    op.create_index(
        REPLY_TO_REQUEST_ID_INDEX,
        "messages",
        [key, "session_id", "seq"],
        sqlite_where=present,
        postgresql_where=present,
    )


def downgrade() -> None:
    op.drop_index(REPLY_TO_REQUEST_ID_INDEX, table_name="messages")
