"""Reading cc-web's JSON state and normalising it into row values, without losing a byte.

Pure code, no database: ``importer`` plans and writes what this module reads. Files are only
ever opened for reading (``Path.read_bytes``).

Session file (``DIR/sessions/*.json``) → ``sessions``:
  ``id`` → ``id``; ``title``/``agent``/``cwd`` → their columns; ``createdAt``/``updatedAt``/
  ``archivedAt`` → timestamps (``archived: true`` without ``archivedAt`` archives at
  ``updated_at``); ``messages`` → ``messages`` rows. Every other key goes to ``extra``
  verbatim, and so does a mapped key whose value its column cannot hold exactly (a ``null``,
  a non-string title, an epoch-ms or differently formatted timestamp).

Message → ``messages``:
  ``id`` (or ``messageId``) → ``id``; ``role`` → ``role``; ``content`` → ``content`` (a block
  list is joined to text and kept whole in ``metadata.contentBlocks``); ``timestamp`` (or
  ``createdAt``) → ``created_at`` (NULL when absent); the message's own ``metadata`` object
  is the base of ``metadata``, and every other top-level key is merged into it, listed in
  ``metadata.legacyFields``. ``metadata.legacy`` holds the source values no column reproduces
  exactly: an id under ``messageId`` or one replaced by a derived id, an unknown role, a
  non-text content, an epoch-ms timestamp, a top-level key clashing with a metadata key.

Reply entry (``DIR/config/cross-conversation-replies.json``) → ``reply_requests``:
  the fields of seed 001 (``REPLY_COLUMNS``) → their columns (``pending`` → ``waiting``).
  ``extra`` keeps, under the entry's own key names, every key no column maps and every mapped
  value its column cannot give back exactly (a ``null``, ``pending``, an epoch-ms timestamp, a
  non-integer ``hopCount``, a non-string id or title). ``extra["$absent"]`` lists the mapped
  fields the entry did not have although their column holds a value: a column default
  (``createdAt``, ``hopCount``, ``sourceAutoRun``), an ``originalRequest`` recovered from the
  target conversation, the ``returnedAt`` the importer gives a settled failure. ``$`` marks the
  importer's own keys: an entry key that begins with ``$`` is stored with one more ``$`` in
  front. An entry of a file keyed by request id is read with its key as ``requestId``.

Values no column can hold (``storable_json``): a part of a JSON value (``metadata``, ``extra``)
that breaks the stored-value rule of ``json_values`` or holds U+0000 is kept as its JSON text,
``{"$ccwebJsonText": "18446744073709551616"}``, which ``json.loads`` reads back to the source
value; a text column's value holding U+0000 or a lone surrogate has U+FFFD in their place and
its source value is kept as text where such values go (``extra``, ``metadata.legacy``; a
message id of that kind is replaced by the derived one). Each is listed in ``notes``, which
the import reports. A file nested too deep for ``json.loads`` to read is a broken file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ccweb_store.domain.content import join_text_blocks, text_of
from ccweb_store.domain.errors import InvalidInput
from ccweb_store.domain.ids import (
    REPLY_STATUSES,
    ROLES,
    SESSION_ID_MAX_LENGTH,
    validate_session_id,
)
from ccweb_store.domain.json_values import edited
from ccweb_store.domain.storable_json import (
    Place,
    clean_text,
    kept_notes,
    replace_bad_text,
    replaced_note,
    storable,
    surely_storable,
)
from ccweb_store.domain.timestamps import iso

SESSIONS_DIR = "sessions"
REPLIES_FILE = Path("config") / "cross-conversation-replies.json"

#: Keys of ``messages.metadata`` the importer itself writes.
RESERVED_METADATA_KEYS = frozenset({"contentBlocks", "legacy", "legacyFields"})
MAX_ID_LENGTH = 128

#: cc-web reply-state field → ``reply_requests`` column (seed 001, "pending 持久化").
REPLY_COLUMNS = {
    "requestId": "request_id",
    "messageId": "message_id",
    "sourceConversationId": "source_conversation_id",
    "sourceTitle": "source_title",
    "targetConversationId": "target_conversation_id",
    "targetTitle": "target_title",
    "status": "status",
    "createdAt": "created_at",
    "hopCount": "hop_count",
    "sourceAutoRun": "source_auto_run",
    "replyText": "reply_text",
    "completedAt": "completed_at",
    "returnedAt": "returned_at",
    "replyMessageId": "reply_message_id",
    "lastError": "last_error",
    "originalRequest": "original_request",
}
REPLY_TIME_FIELDS = frozenset({"createdAt", "completedAt", "returnedAt"})
REPLY_ID_FIELDS = frozenset(
    {"requestId", "messageId", "sourceConversationId", "targetConversationId", "replyMessageId"}
)
REPLY_STATUS_ALIASES = {"pending": "waiting"}
#: Fields whose NOT NULL column gets its default when the entry lacks them.
REPLY_DEFAULTED_FIELDS = ("createdAt", "hopCount", "sourceAutoRun")
#: Fields the importer may fill when the entry lacks them.
REPLY_FILLED_FIELDS = ("originalRequest", "returnedAt")
#: The key of ``reply_requests.extra`` listing mapped fields the entry did not have.
ABSENT_KEY = "$absent"
#: What ``reply_requests.hop_count`` holds (a 32-bit integer on PostgreSQL).
HOP_COUNT_RANGE = range(-(2**31), 2**31)
#: Why a file nested too deep for ``json.loads`` (or for a part of it to be written back as
#: text) is skipped.
TOO_DEEP_TO_READ = (
    "nested too deep to read (arrays and objects nested about a thousand levels; "
    "a stored value may nest 64)"
)

_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: Epoch milliseconds as a time: ``_EPOCH + _MILLISECOND * ms``, exact integer arithmetic in
#: C, 0.57 µs against 0.70 for ``timedelta(0, seconds, microseconds)``, whose constructor
#: takes any kind of number; ``OverflowError`` out of range, as there.
_MILLISECOND = timedelta(milliseconds=1)
#: Numbers below this are epoch seconds, not milliseconds (1e11 ms is March 1973).
_SECONDS_BELOW = 1e11


class LegacyFileError(Exception):
    """A source file that cannot be imported; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(slots=True)
class LegacyMessage:
    """One source message, normalised; ``wanted_id`` is None when it brought no usable id.

    With ``__slots__``: one is made per message, and an instance without a ``__dict__`` costs
    less to make and to free."""

    index: int
    id_key: str | None
    wanted_id: str | None
    role: str
    content: str
    created_at: datetime | None
    metadata: dict[str, Any]
    #: Each value kept as text or given U+FFFD: (path, what); usually none.
    notes: tuple[Place, ...] = ()

    def positional_id(self, session_id: str) -> str:
        """The stable id of a message that has none (or whose id another message holds)."""
        return f"{session_id}:{self.index}"

    def metadata_with_replaced_id(self) -> dict[str, Any]:
        """The metadata of this message once its own id was replaced by a derived one."""
        if self.id_key != "id":
            return self.metadata

        def keep_id(metadata: dict[str, Any]) -> None:
            legacy = dict(metadata.get("legacy") or {})
            legacy.setdefault("id", self.wanted_id)
            metadata["legacy"] = legacy

        return edited(self.metadata, keep_id)


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


@dataclass
class LegacyReply:
    """One reply state: its ``reply_requests`` column values and what no column reproduces."""

    columns: dict[str, Any]
    #: Source values kept verbatim in ``extra`` (keys already escaped).
    kept: dict[str, Any]
    #: The keys the entry had.
    fields: frozenset[str]
    #: Each value kept as text or given U+FFFD: (path, what).
    notes: tuple[Place, ...] = ()
    #: Where the entry is in its file: ``reply 3`` (in a list), ``reply 'req-1'`` (by key).
    label: str = ""

    @property
    def request_id(self) -> str:
        return str(self.columns["request_id"])

    def extra(self, stored: Mapping[str, Any]) -> dict[str, Any] | None:
        """``reply_requests.extra`` for this entry once its row holds the ``stored`` columns."""
        absent = [key for key in REPLY_DEFAULTED_FIELDS if key not in self.fields]
        absent += [
            key
            for key in REPLY_FILLED_FIELDS
            if key not in self.fields and stored.get(REPLY_COLUMNS[key]) is not None
        ]

        def note_absent(extra: dict[str, Any]) -> None:
            if absent:
                extra[ABSENT_KEY] = absent

        return edited(self.kept, note_absent) or None


def parse_timestamp(value: Any) -> datetime | None:
    """ISO 8601 text (naive means UTC) or epoch milliseconds (number or numeric text)."""
    if type(value) is int and abs(value) >= _SECONDS_BELOW:  # the usual epoch milliseconds
        try:
            return _EPOCH + _MILLISECOND * value  # exact, and quick
        except OverflowError:
            return None
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip()
        if _NUMBER.match(text):
            value = float(text) if "." in text else int(text)
        else:
            try:
                parsed = datetime.fromisoformat(text)
            except ValueError:
                return None
            return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    if isinstance(value, int | float):
        try:
            if abs(value) < _SECONDS_BELOW:
                return _EPOCH + timedelta(seconds=value)
            return _EPOCH + timedelta(milliseconds=value)
        except (OverflowError, ValueError):  # too large, infinite, or not a number (NaN)
            return None
    return None


def _exact_timestamp(raw: Any, parsed: datetime | None) -> bool:
    """Whether writing ``parsed`` back the way cc-web does gives ``raw`` again."""
    return parsed is not None and isinstance(raw, str) and iso(parsed) == raw


def load_json(path: Path) -> Any:
    """The JSON value of a file, opened read-only; ``LegacyFileError`` if it is not JSON."""
    return load_screened_json(path)[0]


def load_screened_json(path: Path) -> tuple[Any, bool]:
    """``load_json``, and whether the value holds no NaN and no Infinity: then
    ``surely_storable`` can check a value of it at C speed. ``json.loads`` calls the hooks
    below for the constants ``NaN``, ``Infinity`` and ``-Infinity`` and for each number with a
    fraction or an exponent (``1e400`` is Infinity), and never for the integers every message
    holds."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LegacyFileError(f"cannot read: {exc.strerror or exc}") from exc
    finite = True

    def constant(name: str) -> float:
        nonlocal finite
        finite = False
        return float(name)

    def fraction(text: str) -> float:
        nonlocal finite
        number = float(text)
        if number - number != 0.0:  # NaN and the infinities
            finite = False
        return number

    try:
        value = json.loads(data, parse_constant=constant, parse_float=fraction)
    except UnicodeDecodeError as exc:
        raise LegacyFileError(f"not UTF-8 text: {exc.reason}") from exc
    except json.JSONDecodeError as exc:
        raise LegacyFileError(
            f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from exc
    except RecursionError:
        raise LegacyFileError(TOO_DEEP_TO_READ) from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise LegacyFileError(f"a number cannot be read: {exc}".split(";")[0]) from exc
    return value, finite


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
        raise LegacyFileError(f"expected a JSON object, found {_json_kind(document)}")
    if "id" not in document:
        raise LegacyFileError("the session has no 'id'")
    try:
        session_id = validate_session_id(document["id"])
    except InvalidInput as exc:
        raise LegacyFileError(exc.message) from exc
    raw_messages = document.get("messages", [])
    if not isinstance(raw_messages, list):
        raise LegacyFileError(f"'messages' is {_json_kind(raw_messages)}, expected a list")

    messages: list[LegacyMessage] = []
    skipped: list[str] = []
    for index, raw in enumerate(raw_messages):
        if isinstance(raw, dict):
            messages.append(normalise_message(index, raw, finite=finite))
        else:
            skipped.append(f"message {index} is {_json_kind(raw)}, not an object")

    extra: dict[str, Any] = {}
    for key, value in document.items():
        if key not in ("id", "messages", "title", "agent", "cwd"):
            extra[key] = value
    title = _text_column(document, "title", extra)
    agent = _text_column(document, "agent", extra, max_length=64)
    cwd = _text_column(document, "cwd", extra)

    created_at = _time_column(document, "createdAt", extra)
    updated_at = _time_column(document, "updatedAt", extra)
    if created_at is None or updated_at is None:  # the messages' times, or the file's
        times = [m.created_at for m in messages if m.created_at is not None]
        mtime = fallback_time or datetime.fromtimestamp(path.stat().st_mtime, UTC)
        created_at = created_at or (min(times) if times else mtime)
        updated_at = updated_at or (max(times) if times else mtime)
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
        id=session_id,
        title=title,
        agent=agent,
        cwd=cwd,
        created_at=created_at,
        updated_at=updated_at,
        archived_at=archived_at,
        extra=extra or None,
        messages=messages,
        skipped_messages=skipped,
        notes=notes,
    )


def _text_column(
    document: dict[str, Any], key: str, extra: dict[str, Any], max_length: int | None = None
) -> str | None:
    """A string column; a value it cannot hold exactly stays in ``extra`` instead (text with
    U+0000 or a lone surrogate there, the column getting it with U+FFFD in their place)."""
    if key not in document:
        return None
    value = document[key]
    if isinstance(value, str) and (max_length is None or len(value) <= max_length):
        if clean_text(value):
            return value
        extra[key] = value
        return replace_bad_text(value)
    extra[key] = value
    return None


def _time_column(document: dict[str, Any], key: str, extra: dict[str, Any]) -> datetime | None:
    """A timestamp column; its source value stays in ``extra`` unless ``iso()`` gives it back."""
    if key not in document:
        return None
    parsed = parse_timestamp(document[key])
    if _exact_timestamp(document[key], parsed):
        del extra[key]
    return parsed


def normalise_message(index: int, raw: dict[str, Any], *, finite: bool = False) -> LegacyMessage:
    """Column values and metadata of one source message (see the module docstring); ``finite``:
    the message holds no NaN and no Infinity (``load_screened_json``)."""
    metadata: dict[str, Any] = {}
    legacy: dict[str, Any] = {}
    # Whether metadata gets a source value no check has seen (``storable`` looks at it then):
    # the usual message brings a clean id, a known role, text and epoch milliseconds only.
    unchecked = "metadata" in raw
    if unchecked:
        own = raw["metadata"]
        if isinstance(own, dict) and own and RESERVED_METADATA_KEYS.isdisjoint(own):
            metadata.update(own)
        else:
            legacy["metadata"] = own

    id_key = "id" if "id" in raw else "messageId" if "messageId" in raw else None
    wanted_id: str | None = None
    if id_key is not None:
        value = raw[id_key]
        if isinstance(value, str) and 0 < len(value) <= MAX_ID_LENGTH and clean_text(value):
            wanted_id = value
        if wanted_id is None or id_key != "id":
            legacy[id_key] = value
            unchecked = unchecked or wanted_id is None

    role = raw.get("role")
    if role not in ROLES:
        legacy["role"] = role
        role = "system"
        unchecked = True

    content = raw.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        unchecked = True
        text = join_text_blocks(content)
        metadata["contentBlocks"] = content
    else:
        unchecked = True
        text = text_of(content)
        legacy["content"] = content
    notes: tuple[Place, ...] = ()
    if not clean_text(text):
        unchecked = True
        text = replace_bad_text(text)
        kept_in = "metadata.legacy.content"
        if isinstance(content, str):
            legacy["content"] = content
        elif isinstance(content, list):
            kept_in = "metadata.contentBlocks"
        notes = (replaced_note("content", kept_in),)

    time_key = "timestamp" if "timestamp" in raw else "createdAt" if "createdAt" in raw else None
    created_at = None
    if time_key is not None:
        stamp = raw[time_key]
        if type(stamp) is int and abs(stamp) >= _SECONDS_BELOW:
            # parse_timestamp's first case, inlined: the usual epoch milliseconds, which no
            # text of the column gives back exactly, so the source value is kept.
            try:
                created_at = _EPOCH + _MILLISECOND * stamp
            except OverflowError:
                created_at = None
                unchecked = True
            legacy[time_key] = stamp
        else:
            created_at = parse_timestamp(stamp)
            if time_key != "timestamp" or not _exact_timestamp(stamp, created_at):
                legacy[time_key] = stamp
                unchecked = True

    # Most messages hold mapped keys only: count them rather than walk every key.
    mapped = ("metadata" in raw) + ("role" in raw) + ("content" in raw)
    if len(raw) > mapped + (id_key is not None) + (time_key is not None):
        _keep_other_keys(raw, {"metadata", "role", "content", id_key, time_key}, metadata, legacy)
        unchecked = True
    if legacy:
        metadata["legacy"] = legacy
    if unchecked and not (finite and surely_storable(metadata)):
        metadata, places = storable(metadata, "metadata", nul=True)
        if places:
            notes += tuple(kept_notes(places))
    return LegacyMessage(index, id_key, wanted_id, role, text, created_at, metadata, notes)


def _keep_other_keys(
    raw: dict[str, Any], mapped: set[str | None], metadata: dict[str, Any], legacy: dict[str, Any]
) -> None:
    """Put a message's keys that no column maps into its metadata, listed in ``legacyFields``
    (or into ``legacy`` when the metadata already has that key)."""
    fields: list[str] = []
    for key, value in raw.items():
        if key in mapped:
            continue
        if key in metadata or key in RESERVED_METADATA_KEYS:
            legacy[key] = value
        else:
            metadata[key] = value
            fields.append(key)
    if fields:
        metadata["legacyFields"] = fields


def read_replies_file(path: Path) -> tuple[list[LegacyReply], list[str]]:
    """The reply states of the reply file and the reasons some entries were skipped.

    The file may be a list, ``{"replies": [...]}`` or an object keyed by request id.
    """
    document = load_json(path)
    try:
        return _read_replies(document)
    except RecursionError:  # read, but too deep to be written back as text
        raise LegacyFileError(TOO_DEEP_TO_READ) from None


def _read_replies(document: Any) -> tuple[list[LegacyReply], list[str]]:
    if isinstance(document, dict) and isinstance(document.get("replies"), list | dict):
        document = document["replies"]
    if not isinstance(document, list | dict):
        raise LegacyFileError(
            f"expected a list or an object of replies, found {_json_kind(document)}"
        )
    replies: list[LegacyReply] = []
    skipped: list[str] = []
    for label, entry in _reply_entries(document):
        try:
            replies.append(normalise_reply(entry, label=label))
        except LegacyFileError as exc:
            skipped.append(f"{label}: {exc.reason}")
    return replies, skipped


def _reply_entries(document: list[Any] | dict[str, Any]) -> Iterator[tuple[str, Any]]:
    if isinstance(document, list):
        for index, entry in enumerate(document):
            yield f"reply {index}", entry
        return
    for key, entry in document.items():
        if isinstance(entry, dict) and "requestId" not in entry:
            entry = {"requestId": key, **entry}
        yield f"reply {key!r}", entry


def normalise_reply(entry: Any, *, label: str = "") -> LegacyReply:
    """Column values and kept source values of one reply state (see the module docstring);
    ``LegacyFileError`` when a required field is bad."""
    if not isinstance(entry, dict):
        raise LegacyFileError(f"is {_json_kind(entry)}, not an object")
    columns: dict[str, Any] = {}
    kept: dict[str, Any] = {}
    notes: list[Place] = []
    for key, raw in entry.items():
        column = REPLY_COLUMNS.get(key)
        if column is None:
            kept["$" + key if key.startswith("$") else key] = raw
            continue
        value = _reply_column_value(key, raw)
        if value is not None:
            columns[column] = value
        if not _reply_value_exact(key, raw, value):
            kept[key] = raw
            if isinstance(raw, str) and isinstance(value, str) and value != raw:
                notes.append(replaced_note(key, f"extra.{key}"))
    for key in ("requestId", "sourceConversationId", "targetConversationId", "status"):
        if not columns.get(REPLY_COLUMNS[key]):
            raise LegacyFileError(f"missing {key!r}")
    for key in REPLY_ID_FIELDS:
        value = columns.get(REPLY_COLUMNS[key])
        if value is not None and len(value) > SESSION_ID_MAX_LENGTH:
            raise LegacyFileError(f"{key!r} is longer than {SESSION_ID_MAX_LENGTH} characters")
    status = REPLY_STATUS_ALIASES.get(columns["status"], columns["status"])
    if status not in REPLY_STATUSES:
        raise LegacyFileError(f"unknown status {columns['status']!r}")
    columns["status"] = status
    kept, places = storable(kept, "extra", nul=True)
    notes += kept_notes(places)
    return LegacyReply(columns, kept, frozenset(entry), tuple(notes), label)


def _reply_column_value(key: str, raw: Any) -> Any:
    """What the column of reply field ``key`` holds for ``raw`` (None: nothing)."""
    if raw is None:
        return None
    if key in REPLY_TIME_FIELDS:
        return parse_timestamp(raw)
    if key == "hopCount":
        return raw if type(raw) is int and raw in HOP_COUNT_RANGE else None
    if key == "sourceAutoRun":
        return bool(raw)
    if isinstance(raw, str):
        return raw if clean_text(raw) else replace_bad_text(raw)
    return json.dumps(raw) if isinstance(raw, dict | list) else str(raw)


def _reply_value_exact(key: str, raw: Any, value: Any) -> bool:
    """Whether the column value ``value`` gives the source value ``raw`` back exactly."""
    if value is None:
        return False
    if key in REPLY_TIME_FIELDS:
        return _exact_timestamp(raw, value)
    if key == "sourceAutoRun":
        return isinstance(raw, bool)
    if key == "status":
        return raw not in REPLY_STATUS_ALIASES
    return key == "hopCount" or value == raw


def _json_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "null"
