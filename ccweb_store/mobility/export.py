"""``ccweb-store export-json``: the database written out in cc-web's own layout,
``DIR/sessions/<id>.json`` and ``DIR/config/cross-conversation-replies.json``.

The inverse of ``import-json`` (``importer.legacy_sessions``, ``importer.legacy_replies``):
each row is turned back into the entry it came from. A message's ``metadata.legacy``,
``metadata.legacyFields`` and ``metadata.contentBlocks``, a session's ``extra`` and a reply's
``extra`` (with its ``$absent`` list) hold what the columns do not reproduce, so an imported
file comes back with every field it had, unknown keys included. A kept value is written in
place of its column only while it still stands for what the column holds
(``kept_value_holds``, ``kept_values_holding``): once the service has moved a row (a
retried request now ``returned``, a session with newer messages), the export writes its
state now, never the imported one. Values kept as text
(``{"$ccwebJsonText": …}``) are written back as the values they stand for. Times are written
as cc-web writes them (``2024-03-01T10:00:00.000Z``), with six digits where a time is finer
than a millisecond (``domain.timestamps.exact_iso``), so an import reads back the same time.
docs/export.md lists what differs between an imported state and its export.

Everything is read on one snapshot (``Store.snapshot``); a session's messages are read and
written a batch at a time, so memory does not grow with the size of a conversation.

Every file is written to a temporary name beside it (``.<name>.<random>.tmp``, which the
importer's ``sessions/*.json`` never matches) and renamed into place (``os.replace``), so an
export killed at any moment leaves each file whole: the old one or the new one. A folder that
already holds a cc-web layout is the CLI's to refuse (``holds_ccweb_layout``); with ``merge``
the reply file's entries this export does not cover are kept (``merged_replies``).
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Protocol

import orjson

from ccweb_store.domain.json_values import restored
from ccweb_store.domain.timestamps import exact_iso
from ccweb_store.importer.legacy_replies import (
    ABSENT_KEY,
    REPLIES_FILE,
    REPLY_COLUMNS,
    absence_holds,
    kept_value_holds,
)
from ccweb_store.importer.legacy_sessions import SESSIONS_DIR, kept_values_holding
from ccweb_store.store.uow import Store
from ccweb_store.store.whole_tables import Snapshot, snapshot

#: Messages read and written per batch.
BATCH_ROWS = 2000
#: Tests only: N, to pause at the N-th point of the export (counting each part of a file
#: written to its temporary file and each rename), saying so on stderr, so that a test can
#: kill the export there.
PAUSE_ENV = "CCWEB_TEST_EXPORT_PAUSE_AT"
#: How long the test hook pauses.
PAUSE_SECONDS = 60.0


#: A row as the export reads it: its values by column name (``store.whole_tables``).
Row = Mapping[str, Any]


class ExportRefused(Exception):
    """The export cannot go on without destroying something; ``reason`` says what to do."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def holds_ccweb_layout(directory: Path) -> bool:
    """Whether ``directory`` already holds a cc-web state (``sessions/`` or the reply file),
    which an export would change."""
    return (directory / SESSIONS_DIR).exists() or (directory / REPLIES_FILE).exists()


def existing_replies(directory: Path) -> list[Any]:
    """The entries of the reply file in ``directory`` (none when there is no file), in any
    of the shapes ``import-json`` reads: a list, ``{"replies": […]}`` or an object keyed by
    request id (read with the key as ``requestId``); ``ExportRefused`` when it is not one."""
    path = directory / REPLIES_FILE
    if not path.exists():
        return []
    try:
        document = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as exc:
        raise ExportRefused(
            f"cannot merge into {path}: it cannot be read as JSON ({str(exc).splitlines()[0]}); "
            "move it away or export into another folder"
        ) from None
    if isinstance(document, dict) and isinstance(document.get("replies"), list | dict):
        document = document["replies"]
    if isinstance(document, list):
        return document
    if isinstance(document, dict):
        return [
            {"requestId": key, **entry}
            if isinstance(entry, dict) and "requestId" not in entry
            else entry
            for key, entry in document.items()
        ]
    raise ExportRefused(
        f"cannot merge into {path}: it is not a list or an object of reply states; "
        "move it away or export into another folder"
    )


def merged_replies(
    existing: list[Any], exported: list[dict[str, Any]], conversation: str | None
) -> list[Any]:
    """The reply file of a ``--merge`` export: the ``existing`` entries the export does not
    cover, in their order, then the ``exported`` ones. An entry is covered when its
    ``requestId`` is one the export writes or (with ``conversation``) its
    ``sourceConversationId`` or ``targetConversationId`` is ``conversation``: the export holds
    the database's word on it, and an entry of that conversation the database no longer holds
    is gone."""
    written = {entry["requestId"] for entry in exported}

    def covered(entry: Any) -> bool:
        if not isinstance(entry, dict):
            return False
        if entry.get("requestId") in written:
            return True
        return conversation is not None and conversation in (
            entry.get("sourceConversationId"),
            entry.get("targetConversationId"),
        )

    return [entry for entry in existing if not covered(entry)] + exported


@dataclass
class ExportSummary:
    sessions: int = 0
    messages: int = 0
    replies: int = 0

    def as_json(self) -> dict[str, int]:
        return {"sessions": self.sessions, "messages": self.messages, "replies": self.replies}


def _json_bytes(value: Any) -> bytes:
    """``value`` as JSON text in UTF-8, non-ASCII characters as they are: orjson's, or
    ``json.dumps``'s where orjson refuses the value or may have written it otherwise (it
    writes NaN and the infinities as ``null``, which ``import-json`` keeps as text; it refuses
    an integer beyond 64 bits and a lone surrogate, which ``json.dumps`` escapes as ``\\u``)."""
    try:
        encoded = orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        encoded = b"null"
    if b"null" not in encoded:
        return encoded
    text = json.dumps(value, ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return json.dumps(value).encode()


def _time(value: datetime | None) -> str | None:
    return None if value is None else exact_iso(value)


def session_fields(row: Row) -> dict[str, Any]:
    """A session file's keys but ``messages``, from its ``sessions`` row."""
    document: dict[str, Any] = {"id": row["id"]}
    for key in ("title", "agent", "cwd"):
        if row[key] is not None:
            document[key] = row[key]
    document["createdAt"] = _time(row["created_at"])
    document["updatedAt"] = _time(row["updated_at"])
    if row["archived_at"] is not None:
        document["archivedAt"] = _time(row["archived_at"])
    extra = restored(row["extra"]) if row["extra"] is not None else {}
    if isinstance(extra, dict):
        document.update(kept_values_holding(extra, row))
    return document


def message_entry(row: Row, position: int) -> dict[str, Any]:
    """A message of a session file, from its ``messages`` row at ``position`` in its session."""
    metadata = restored(row["metadata"]) if row["metadata"] is not None else {}
    if not isinstance(metadata, dict):
        metadata = {}
    metadata = dict(metadata)
    legacy = metadata.pop("legacy", None) or {}
    blocks = metadata.pop("contentBlocks", None)
    fields = metadata.pop("legacyFields", None) or []
    entry: dict[str, Any] = {}
    if (
        "id" not in legacy
        and "messageId" not in legacy
        and row["id"] != f"{row['session_id']}:{position}"
    ):
        entry["id"] = row["id"]
    entry["role"] = row["role"]
    entry["content"] = blocks if blocks is not None else row["content"]
    created = row["created_at"]
    if created is not None and "timestamp" not in legacy and "createdAt" not in legacy:
        entry["timestamp"] = _time(created)
    own = {key: value for key, value in metadata.items() if key not in fields}
    if own:
        entry["metadata"] = own
    entry.update((key, metadata[key]) for key in fields if key in metadata)
    entry.update(legacy)
    return entry


def reply_entry(row: Row) -> dict[str, Any]:
    """An entry of the reply file, from its ``reply_requests`` row."""
    entry: dict[str, Any] = {}
    for key, column in REPLY_COLUMNS.items():
        value = row[column]
        if isinstance(value, datetime):
            value = _time(value)
        if value is not None:
            entry[key] = value
    extra = restored(row["extra"]) if row["extra"] is not None else {}
    extra = dict(extra) if isinstance(extra, dict) else {}
    absent = extra.pop(ABSENT_KEY, None) or []
    for key, value in extra.items():
        if key in REPLY_COLUMNS and not kept_value_holds(key, value, row):
            continue  # the service has moved the request since: its column says what holds
        entry[key[1:] if key.startswith("$$") else key] = value
    for key in absent:
        if key not in REPLY_COLUMNS or absence_holds(key, row):
            entry.pop(key, None)
    return entry


async def export_state(
    store: Store,
    directory: Path,
    *,
    conversation: str | None = None,
    merge: bool = False,
    on_session: Callable[[str, int], None] | None = None,
    batch_rows: int = BATCH_ROWS,
) -> ExportSummary:
    """Write the database's sessions and replies under ``directory`` in cc-web's layout (only
    ``conversation`` and the replies it sent or received, when given), each file atomically.
    With ``merge`` the reply file keeps the entries this export does not cover
    (``merged_replies``; ``ExportRefused``, before anything is written, when it cannot be
    read); without, it holds this export's entries only."""
    summary = ExportSummary()
    existing = existing_replies(directory) if merge else []
    pause = _Pause.from_environment()
    sessions_dir = directory / SESSIONS_DIR
    sessions_dir.mkdir(parents=True, exist_ok=True)
    (directory / REPLIES_FILE).parent.mkdir(parents=True, exist_ok=True)
    async with snapshot(store) as reading:
        for session in await reading.sessions(conversation):
            path = sessions_dir / f"{session['id']}.json"
            with _replaced(path, pause) as out:
                written = await _write_session(reading, session, out, batch_rows)
            summary.sessions += 1
            summary.messages += written
            if on_session is not None:
                on_session(session["id"], written)
        entries = [reply_entry(row) for row in await reading.replies(conversation)]
    document = merged_replies(existing, entries, conversation) if merge else entries
    with _replaced(directory / REPLIES_FILE, pause) as out:
        out.write(_json_bytes(document))
    summary.replies = len(entries)
    return summary


class Writable(Protocol):
    """Where a file's bytes go: its temporary file, or the test hook's pausing writer."""

    def write(self, data: bytes, /) -> int: ...


class _Pause:
    """The test hook of ``PAUSE_ENV``: counts the points an export passes and pauses at one."""

    def __init__(self, at: int) -> None:
        self.at, self.passed = at, 0

    @classmethod
    def from_environment(cls) -> _Pause | None:
        wanted = os.environ.get(PAUSE_ENV, "")
        return cls(int(wanted)) if wanted.isdigit() else None

    def point(self, what: str) -> None:
        self.passed += 1
        if self.passed == self.at:
            print(f"export paused at point {self.passed}: {what}", file=sys.stderr, flush=True)
            time.sleep(PAUSE_SECONDS)


class _PausingWriter:
    """A binary file whose every write is a point of the test hook (``PAUSE_ENV``)."""

    def __init__(self, out: IO[bytes], path: Path, pause: _Pause) -> None:
        self._out, self._path, self._pause = out, path, pause

    def write(self, data: bytes) -> int:
        written = self._out.write(data)
        self._out.flush()
        self._pause.point(f"writing {self._path}")
        return written


@contextmanager
def _replaced(path: Path, pause: _Pause | None = None) -> Iterator[Writable]:
    """A file to write ``path``'s new content to: a temporary file beside it (private, or
    with the mode of the file it replaces), renamed over ``path`` once complete (removed
    instead if writing it failed)."""
    descriptor, temporary = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
    )
    try:
        if path.exists():
            os.chmod(descriptor, stat.S_IMODE(path.stat().st_mode))
        with os.fdopen(descriptor, "wb") as out:
            yield out if pause is None else _PausingWriter(out, path, pause)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    if pause is not None:
        pause.point(f"replaced {path}")


async def _write_session(reading: Snapshot, session: Row, out: Writable, batch_rows: int) -> int:
    """Stream one session file: its keys, then its messages a batch at a time."""
    header = [b"{"]
    for key, value in session_fields(session).items():
        header.append(_json_bytes(key) + b":" + _json_bytes(value) + b",")
    header.append(b'"messages":[')
    out.write(b"".join(header))
    written = 0
    async for rows in reading.messages(session["id"], batch_rows):
        out.write(_entries(rows, written))
        written += len(rows)
    out.write(b"]}")
    return written


def _entries(rows: Iterable[Row], first: int) -> bytes:
    parts = [_json_bytes(message_entry(row, first + offset)) for offset, row in enumerate(rows)]
    prefix = b"," if first else b""
    return prefix + b",".join(parts)
