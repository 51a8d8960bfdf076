"""A cc-web session file normalised into ``sessions`` and ``messages`` row values.

Session file (``DIR/sessions/*.json``) → ``sessions``:
  ``id`` → ``id``; ``title``/``agent``/``cwd`` → their columns; ``createdAt``/``updatedAt``/
  ``archivedAt`` → timestamps (``archived: true`` without ``archivedAt`` archives at
  ``updated_at``); ``messages`` → ``messages`` rows. Every other key goes to ``extra``
  verbatim, and so does a mapped key whose value its column cannot hold exactly (a ``null``,
  a non-string title, an epoch-ms or differently formatted timestamp). Its messages are
  ``legacy_messages``'s.

Values no column can hold are kept as ``legacy_json`` describes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ccweb_store.domain.errors import InvalidInput
from ccweb_store.domain.ids import validate_session_id
from ccweb_store.domain.storable_json import (
    Place,
    clean_text,
    kept_notes,
    replace_bad_text,
    replaced_note,
    storable,
)
from ccweb_store.importer.json_stream import Item, stream_object
from ccweb_store.importer.legacy_json import (
    TOO_DEEP_TO_READ,
    FiniteScreen,
    LegacyFileError,
    exact_timestamp,
    json_kind,
    load_screened_json,
    parse_timestamp,
)
from ccweb_store.importer.legacy_messages import LegacyMessage, message_time, normalise_message

SESSIONS_DIR = "sessions"


@dataclass
class LegacySession:
    """One session file, normalised into column values and its messages."""

    id: str
    title: str | None
    agent: str | None
    cwd: str | None
    created_at: datetime
    updated_at: datetime
    archived_at: datetime | None
    extra: dict[str, Any] | None
    messages: list[LegacyMessage]
    #: Message entries that are not objects: ``"message 3: …"``.
    skipped_messages: list[str] = field(default_factory=list)
    #: Each of its values kept as text or given U+FFFD: (path, what).
    notes: list[Place] = field(default_factory=list)

    def columns(self) -> dict[str, Any]:
        """The ``sessions`` row values."""
        return {
            "id": self.id,
            "title": self.title,
            "agent": self.agent,
            "cwd": self.cwd,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "archived_at": self.archived_at,
            "extra": self.extra,
        }


def session_files(directory: Path) -> list[Path]:
    """The session files of a cc-web state directory, in a stable order."""
    return sorted((directory / SESSIONS_DIR).glob("*.json"))


def read_session_file(path: Path, *, fallback_time: datetime | None = None) -> LegacySession:
    """Parse one session file; ``LegacyFileError`` when it cannot be imported at all."""
    document, finite = load_screened_json(path)
    try:
        return _read_session(path, document, finite, fallback_time)
    except RecursionError:  # read, but too deep to be written back as text
        raise LegacyFileError(TOO_DEEP_TO_READ) from None


def _read_session(
    path: Path, document: Any, finite: bool, fallback_time: datetime | None
) -> LegacySession:
    if not isinstance(document, dict):
        raise LegacyFileError(f"expected a JSON object, found {json_kind(document)}")
    raw_messages = _checked_messages(document)
    messages: list[LegacyMessage] = []
    skipped: list[str] = []
    for index, raw in enumerate(raw_messages):
        if isinstance(raw, dict):
            messages.append(normalise_message(index, raw, finite=finite))
        else:
            skipped.append(_skipped_message(index, raw))
    times = [m.created_at for m in messages if m.created_at is not None]
    session = _session_of(path, document, times, fallback_time)
    session.messages = messages
    session.skipped_messages = skipped
    return session


def read_streamed_session(
    path: Path, *, fallback_time: datetime | None = None
) -> tuple[LegacySession, int]:
    """The session of a file too large to read whole, without its messages, and how many
    messages it holds (the file read once, one message at a time, for its other members and
    the messages' times);
    ``read_streamed_messages`` then gives the messages. Raises ``NotStreamable`` when the
    file must be read whole (``json_stream``), ``LegacyFileError`` as ``read_session_file``."""
    document: dict[str, Any] = {}
    earliest: datetime | None = None
    latest: datetime | None = None
    skipped: list[str] = []
    count = 0
    for member in stream_object(path, "messages", FiniteScreen().decoder()):
        if not isinstance(member, Item):
            document[member[0]] = member[1]  # ``messages`` as an empty list, if it is one
            continue
        raw = member.value
        if not isinstance(raw, dict):
            skipped.append(_skipped_message(member.index, raw))
            continue
        count += 1
        created_at = message_time(raw)[1]
        if created_at is not None:
            earliest = created_at if earliest is None else min(earliest, created_at)
            latest = created_at if latest is None else max(latest, created_at)
    try:
        _checked_messages(document)
        times = [t for t in (earliest, latest) if t is not None]
        session = _session_of(path, document, times, fallback_time)
    except RecursionError:
        raise LegacyFileError(TOO_DEEP_TO_READ) from None
    session.skipped_messages = skipped
    return session, count


def read_streamed_messages(path: Path) -> Iterator[LegacyMessage]:
    """The messages of a session file, normalised one at a time as they are read (see
    ``read_streamed_session``)."""
    screen = FiniteScreen()
    for member in stream_object(path, "messages", screen.decoder()):
        if isinstance(member, Item) and isinstance(member.value, dict):
            yield normalise_message(member.index, member.value, finite=screen.finite)
        screen.finite = True  # the next item is screened on its own


def _checked_messages(document: dict[str, Any]) -> list[Any]:
    """The ``messages`` list of a session object whose id is valid (else ``LegacyFileError``)."""
    if "id" not in document:
        raise LegacyFileError("the session has no 'id'")
    try:
        validate_session_id(document["id"])
    except InvalidInput as exc:
        raise LegacyFileError(exc.message) from exc
    raw_messages = document.get("messages", [])
    if not isinstance(raw_messages, list):
        raise LegacyFileError(f"'messages' is {json_kind(raw_messages)}, expected a list")
    return raw_messages


def _skipped_message(index: int, raw: Any) -> str:
    return f"message {index} is {json_kind(raw)}, not an object"


def _session_of(
    path: Path,
    document: dict[str, Any],
    message_times: list[datetime],
    fallback_time: datetime | None,
) -> LegacySession:
    """The session's columns (its ``messages`` left empty): ``message_times`` are the times
    of its messages, which stand in for a missing ``createdAt``/``updatedAt``."""
    extra: dict[str, Any] = {}
    for key, value in document.items():
        if key not in ("id", "messages", "title", "agent", "cwd"):
            extra[key] = value
    title = _text_column(document, "title", extra)
    agent = _text_column(document, "agent", extra)
    cwd = _text_column(document, "cwd", extra)

    created_at = _time_column(document, "createdAt", extra)
    updated_at = _time_column(document, "updatedAt", extra)
    if created_at is None or updated_at is None:  # the messages' times, or the file's
        mtime = fallback_time or datetime.fromtimestamp(path.stat().st_mtime, UTC)
        created_at = created_at or (min(message_times) if message_times else mtime)
        updated_at = updated_at or (max(message_times) if message_times else mtime)
    archived_at = _time_column(document, "archivedAt", extra)
    if archived_at is None and document.get("archived") is True:
        archived_at = updated_at
    notes = [
        replaced_note(key, f"extra.{key}")
        for key, value in (("title", title), ("agent", agent), ("cwd", cwd))
        if value is not None and value != document[key]
    ]
    extra, places = storable(extra, "extra", nul=True)
    notes += kept_notes(places)
    return LegacySession(
        id=document["id"],
        title=title,
        agent=agent,
        cwd=cwd,
        created_at=created_at,
        updated_at=updated_at,
        archived_at=archived_at,
        extra=extra or None,
        messages=[],
        notes=notes,
    )


#: The session file's keys a ``sessions`` column holds, and the longest text each takes.
TEXT_FIELDS: dict[str, int | None] = {"title": None, "agent": 64, "cwd": None}
#: The session file's times, by column.
TIME_FIELDS = {"createdAt": "created_at", "updatedAt": "updated_at", "archivedAt": "archived_at"}


def kept_values_holding(kept: Mapping[str, Any], row: Mapping[str, Any]) -> dict[str, Any]:
    """The source values ``sessions.extra`` keeps (``kept``) that still stand for what the
    columns of ``row`` (column name → value) hold, so that an export may write them in their
    place: those the importer reads as what the column holds now. A time it reads as nothing
    stands for the one the importer gave the session only while the service cannot have
    moved it (``createdAt``; ``archivedAt`` beside ``archived: true`` while archived);
    ``archived: true`` holds while the session is archived. Keys no column holds are the
    source's alone."""
    archived = row["archived_at"] is not None

    def holds(key: str, raw: Any) -> bool:
        if key in TEXT_FIELDS:
            return bool(_text_value(raw, TEXT_FIELDS[key])[0] == row[key])
        if key in TIME_FIELDS:
            read = parse_timestamp(raw)
            if read is not None:
                return bool(read == row[TIME_FIELDS[key]])
            if key == "archivedAt":
                return archived == (kept.get("archived") is True)
            return key == "createdAt"
        return key != "archived" or raw is not True or archived

    return {key: raw for key, raw in kept.items() if holds(key, raw)}


def _text_value(value: Any, max_length: int | None) -> tuple[str | None, bool]:
    """What a string column holds for the source ``value``, and whether it gives it back
    exactly (text with U+0000 or a lone surrogate gets U+FFFD in their place; a value that is
    not text, or is longer than ``max_length``, gives NULL)."""
    if isinstance(value, str) and (max_length is None or len(value) <= max_length):
        if clean_text(value):
            return value, True
        return replace_bad_text(value), False
    return None, False


def _text_column(document: dict[str, Any], key: str, extra: dict[str, Any]) -> str | None:
    """A string column; a value it cannot hold exactly stays in ``extra`` too."""
    if key not in document:
        return None
    value, exact = _text_value(document[key], TEXT_FIELDS[key])
    if not exact:
        extra[key] = document[key]
    return value


def _time_column(document: dict[str, Any], key: str, extra: dict[str, Any]) -> datetime | None:
    """A timestamp column; its source value stays in ``extra`` unless ``iso()`` gives it back."""
    if key not in document:
        return None
    parsed = parse_timestamp(document[key])
    if exact_timestamp(document[key], parsed):
        del extra[key]
    return parsed
