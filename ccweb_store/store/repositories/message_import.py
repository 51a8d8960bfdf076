"""Messages in bulk, for the importer: a conversation's messages read whole, the owners of
many message ids, rows inserted and updated by executemany. ``MessageRepository``
(``messages``) adds the calls of a request."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql.expression import bindparam

from ccweb_store.domain.events import SessionUpdated
from ccweb_store.domain.rows import Message
from ccweb_store.store.repositories.base import MESSAGES, Repository, column_attributes, prebuilt
from ccweb_store.store.repositories.sessions import SessionRepository

_COLUMNS_BY_ATTRIBUTE = dict(column_attributes(Message))


@cache  # unbounded: a prebuilt statement must live as long as the process (few key sets)
def _insert_statement(keys: tuple[str, ...]) -> sa.Insert:
    """An INSERT of the columns named by attribute (``metadata_``), as ``insert_many`` takes
    them, with one bound parameter each (named like the attribute)."""
    return prebuilt(
        sa.insert(MESSAGES).values({_COLUMNS_BY_ATTRIBUTE[key]: bindparam(key) for key in keys})
    )


#: The sessions holding up to ``_OWNERS_CHUNK`` message ids: one statement built (and on SQLite
#: compiled) once, its unused places NULL, which no id equals.
_OWNERS_CHUNK = 500
_OWNERS = prebuilt(
    sa.select(MESSAGES.c.id, MESSAGES.c.session_id).where(
        MESSAGES.c.id.in_([bindparam(f"id_{i}") for i in range(_OWNERS_CHUNK)])
    )
)


class MessageImport(Repository):
    """Reads and writes of many messages at once."""

    async def snapshot(self, session_id: str) -> list[Any]:
        """Every message of the session as ``(id, seq, role, content, created_at, metadata)``."""
        column = MESSAGES.c
        stmt = sa.select(
            column.id,
            column.seq,
            column.role,
            column.content,
            column.created_at,
            column["metadata"].label("metadata_"),  # named like the attribute
        ).where(column.session_id == session_id)
        return (await self._execute(stmt)).named().all()

    async def owners(self, message_ids: Sequence[str]) -> dict[str, str]:
        """``{message_id: session_id}`` for those of ``message_ids`` that exist."""
        owners: dict[str, str] = {}
        for start in range(0, len(message_ids), _OWNERS_CHUNK):
            chunk = message_ids[start : start + _OWNERS_CHUNK]
            params: dict[str, str | None] = {f"id_{i}": id for i, id in enumerate(chunk)}
            params.update({f"id_{i}": None for i in range(len(chunk), _OWNERS_CHUNK)})
            found: Sequence[Any] = (await self._execute(_OWNERS, params)).all()
            owners.update({message_id: session_id for message_id, session_id in found})
        return owners

    async def insert_many(self, rows: Sequence[dict[str, Any]], *, noted: bool = True) -> None:
        """Insert rows (attribute names as keys) in batches: one executemany, not N adds; with
        ``noted``, the event of each session's new messages too (else ``note_imported``).

        A Core insert, so an explicit ``created_at: None`` stays NULL (legacy rows) instead of
        taking the server default as the ORM would.
        """
        if not rows:
            return
        await self._execute_many(_insert_statement(tuple(sorted(rows[0]))), rows)
        await self._keep_last_message(rows)
        if noted:
            counts: dict[str, int] = {}
            for row in rows:
                counts[row["session_id"]] = counts.get(row["session_id"], 0) + 1
            for session_id, count in counts.items():
                self.note_imported(session_id, count)

    def note_imported(self, session_id: str, count: int) -> None:
        """Note that ``count`` messages were imported into the session (one event)."""
        if count:
            self.state.note(SessionUpdated(conversation_id=session_id, imported_messages=count))

    async def update_many(self, rows: Sequence[dict[str, Any]]) -> None:
        """Update rows by primary key (each dict holds ``id`` and the new values, attribute
        names as keys): one executemany per set of changed columns."""
        columns = {key: column.name for key, column in column_attributes(Message)}
        batches: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for row in rows:
            keys = tuple(sorted(key for key in row if key != "id"))
            params = {"b_id": row["id"]} | {f"b_{key}": row[key] for key in keys}
            batches.setdefault(keys, []).append(params)
        for keys, batch in batches.items():
            stmt = (
                sa.update(MESSAGES)
                .where(MESSAGES.c.id == bindparam("b_id"))
                .values({columns[key]: bindparam(f"b_{key}") for key in keys})
            )
            await self._execute(stmt, batch)
        moved = [row["id"] for row in rows if "created_at" in row]
        if moved:
            sessions = SessionRepository(self.state)
            await sessions.recount_last_message((await self.owners(moved)).values())

    async def _keep_last_message(self, rows: Sequence[dict[str, Any]]) -> None:
        """Each session's ``last_message_at`` after ``rows`` were inserted into it."""
        newest: dict[str, datetime] = {}
        for row in rows:
            at, session_id = row.get("created_at"), row["session_id"]
            if at is not None and (session_id not in newest or at > newest[session_id]):
                newest[session_id] = at
        await SessionRepository(self.state).keep_last_message(newest)
