"""Importing a session file too large to read whole, in bounded memory.

A file of at least ``STREAM_FROM_BYTES`` whose session the database does not hold yet (the
case of a first import) is read twice, a message at a time (``read_streamed_session``, then
``read_streamed_messages``), and its messages are inserted ``BATCH`` at a time, all in one
transaction as any session file is. The rows are the ones ``session_sync`` writes for a new
session: every message in file order, numbered from 1. That path gives a message whose id
another message holds the message's positional id; this one assumes no two messages share an
id, and a message that does breaks the primary key: the transaction is rolled back and the
file imported by ``session_sync`` after all, as is a file this reader refuses
(``NotStreamable``) or whose session is already there (re-importing one compares every
message, which needs the file whole). Either way the database ends up the same.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccweb_store.importer.json_stream import NotStreamable
from ccweb_store.importer.legacy_json import LegacyFileError
from ccweb_store.importer.legacy_messages import LegacyMessage
from ccweb_store.importer.legacy_sessions import (
    LegacySession,
    read_streamed_messages,
    read_streamed_session,
)
from ccweb_store.importer.session_sync import (
    carried_request_id,
    marks_reply,
    message_kept_values,
    new_message_row,
    note_title,
)
from ccweb_store.importer.summary import ImportSummary, KeptValue, MessagesCallback, Skipped
from ccweb_store.store.failures import DatabaseError
from ccweb_store.store.uow import Store

#: Files from this size on are streamed: a file read whole takes several times its size.
STREAM_FROM_BYTES = 16 << 20
#: Messages inserted per statement.
BATCH = 2_000


@dataclass
class _Streamed:
    """What streaming one file found, added to the summary once the file is through."""

    messages: int = 0
    marks_replies: bool = False
    carried: list[tuple[str, str]] = field(default_factory=list)
    kept: list[KeptValue] = field(default_factory=list)


def is_large(path: Path) -> bool:
    try:
        return path.stat().st_size >= STREAM_FROM_BYTES
    except OSError:
        return False  # the whole-file reader says why it cannot be read


async def import_large_session_file(
    store: Store | None,
    path: Path,
    summary: ImportSummary,
    unmarked: set[str],
    carried: dict[tuple[str, str], str] | None,
    on_messages: MessagesCallback | None = None,
    titles: dict[str, str] | None = None,
) -> str | None:
    """Import ``path`` streamed (see the module docstring) as ``import_session_file`` would,
    telling ``on_messages`` how far it got after each batch; None when it must be imported
    whole instead (nothing written)."""
    try:
        legacy, count = read_streamed_session(path)
    except NotStreamable:
        return None
    except LegacyFileError as exc:
        summary.sessions.skipped += 1
        summary.skipped.append(Skipped(str(path), exc.reason))
        return "skipped"

    try:
        if store is None:
            streamed = _streamed(path, legacy, dry_run=True)
        elif summary.dry_run:
            async with store.read_uow() as uow:
                if await uow.sessions.get(legacy.id) is not None:
                    return None
            streamed = _streamed(path, legacy, dry_run=True)
        else:

            def progress(done: int) -> None:
                if on_messages is not None:
                    on_messages(path, done, count)

            found = await _write(store, path, legacy, progress)
            if found is None:
                return None
            streamed = found
    except NotStreamable:  # the second reading differs from the first: the file changed
        return None

    for reason in legacy.skipped_messages:
        summary.messages.skipped += 1
        summary.skipped.append(Skipped(str(path), reason))
    if not summary.dry_run and not streamed.marks_replies:
        unmarked.add(legacy.id)
    if summary.dry_run and carried is not None:
        for request_id, content in streamed.carried:
            carried.setdefault((legacy.id, request_id), content)
    note_title(titles, legacy)
    summary.sessions.imported += 1
    summary.messages.imported += streamed.messages
    summary.kept_as_text.extend(
        KeptValue(str(path), f"session {legacy.id}", *note) for note in legacy.notes
    )
    summary.kept_as_text.extend(streamed.kept)
    return "imported"


def _streamed(path: Path, legacy: LegacySession, *, dry_run: bool) -> _Streamed:
    """Read every message of ``path`` for what the summary says of it (a dry run)."""
    streamed = _Streamed()
    for message in read_streamed_messages(path):
        _take(streamed, path, message, dry_run=dry_run)
    return streamed


async def _write(
    store: Store, path: Path, legacy: LegacySession, progress: Callable[[int], None]
) -> _Streamed | None:
    """Insert the session and its messages in one transaction; None (nothing written) when the
    session is there already or the database refuses a row (two messages sharing an id breaks
    the primary key): the file read whole then says what to do with it."""
    streamed = _Streamed()
    try:
        async with store.uow() as uow:
            if await uow.sessions.get(legacy.id) is not None:
                return None
            columns = legacy.columns()
            await uow.sessions.create(columns.pop("id"), **columns)
            rows: list[dict[str, Any]] = []
            for message in read_streamed_messages(path):
                _take(streamed, path, message, dry_run=False)
                message_id = message.wanted_id or message.positional_id(legacy.id)
                rows.append(
                    new_message_row(
                        legacy.id, streamed.messages, message_id, message, message.metadata
                    )
                )
                if len(rows) == BATCH:
                    await uow.messages.insert_many(rows, noted=False)
                    rows = []
                    progress(streamed.messages)
            await uow.messages.insert_many(rows, noted=False)
            uow.messages.note_imported(legacy.id, streamed.messages)
            await uow.commit()
    except DatabaseError:
        return None
    return streamed


def _take(streamed: _Streamed, path: Path, message: LegacyMessage, *, dry_run: bool) -> None:
    """Count ``message`` and keep what the summary will say of it."""
    streamed.messages += 1
    if not streamed.marks_replies and marks_reply(message.metadata):
        streamed.marks_replies = True
    if dry_run:
        request_id = carried_request_id(message.metadata)
        if request_id is not None:
            streamed.carried.append((request_id, message.content))
    if message.notes:
        streamed.kept.extend(message_kept_values(path, message))
