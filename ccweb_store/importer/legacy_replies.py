"""cc-web's reply file normalised into ``reply_requests`` row values.

Reply entry (``DIR/config/cross-conversation-replies.json``) → ``reply_requests``:
  the reply fields cc-web writes (``REPLY_COLUMNS``) → their columns (``pending`` → ``waiting``).
  ``extra`` keeps, under the entry's own key names, every key no column maps and every mapped
  value its column cannot give back exactly (a ``null``, ``pending``, an epoch-ms timestamp, a
  non-integer ``hopCount``, a non-string id or title). ``extra["$absent"]`` lists the mapped
  fields the entry did not have although their column holds a value: a column default
  (``createdAt``, ``hopCount``, ``sourceAutoRun``), an ``originalRequest`` recovered from the
  target conversation, the ``returnedAt`` the importer gives a settled failure, a
  ``sourceTitle``/``targetTitle`` taken from the conversation. ``$`` marks the
  importer's own keys: an entry key that begins with ``$`` is stored with one more ``$`` in
  front. An entry of a file keyed by request id is read with its key as ``requestId``.

Values no column can hold are kept as ``legacy_json`` describes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccweb_store.domain.ids import REPLY_STATUSES, SESSION_ID_MAX_LENGTH
from ccweb_store.domain.json_values import edited
from ccweb_store.domain.kinds import ReplyStatus
from ccweb_store.domain.storable_json import (
    Place,
    clean_text,
    kept_notes,
    replace_bad_text,
    replaced_note,
    storable,
)
from ccweb_store.importer.legacy_json import (
    TOO_DEEP_TO_READ,
    LegacyFileError,
    exact_timestamp,
    json_kind,
    load_screened_json,
    parse_timestamp,
)

REPLIES_FILE = Path("config") / "cross-conversation-replies.json"

#: The reply fields cc-web writes → their ``reply_requests`` columns.
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
REPLY_STATUS_ALIASES = {"pending": ReplyStatus.WAITING}
#: Fields whose NOT NULL column gets its default when the entry lacks them.
REPLY_DEFAULTED_FIELDS = ("createdAt", "hopCount", "sourceAutoRun")
#: Fields the importer may fill when the entry lacks them.
REPLY_FILLED_FIELDS = ("originalRequest", "returnedAt", "sourceTitle", "targetTitle")
#: The fields the reply lifecycle moves (retry, delivery, failure, a late answer); a request
#: keeps every other field as it was made.
REPLY_LIFECYCLE_FIELDS = frozenset(
    {"status", "completedAt", "returnedAt", "replyText", "replyMessageId", "lastError"}
)
#: The key of ``reply_requests.extra`` listing mapped fields the entry did not have.
ABSENT_KEY = "$absent"
#: What ``reply_requests.hop_count`` holds (a 32-bit integer on PostgreSQL).
HOP_COUNT_RANGE = range(-(2**31), 2**31)


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


def kept_value_holds(key: str, raw: Any, row: Mapping[str, Any]) -> bool:
    """Whether ``raw``, the source value ``extra`` keeps of the mapped field ``key``, still
    stands for what its column holds in ``row`` (column name → value), so that an export may
    write it in the column's place: the importer reads it as that value. A value it reads as
    nothing stands for the default or the fill its column got, which only the lifecycle
    changes; once the service has moved a request, its lifecycle columns speak for
    themselves."""
    column = row[REPLY_COLUMNS[key]]
    read = _reply_column_value(key, raw)
    if key == "status":
        read = REPLY_STATUS_ALIASES.get(read, read)
    if read is not None:
        return bool(read == column)
    return key not in REPLY_LIFECYCLE_FIELDS or column is None or _settled_on_import(key, row)


def absence_holds(key: str, row: Mapping[str, Any]) -> bool:
    """Whether the mapped field ``key``, listed in ``extra["$absent"]``, is still one whose
    column holds only what the importer put there (a default or a fill), so that an export
    leaves it out as the entry did."""
    return key not in REPLY_LIFECYCLE_FIELDS or _settled_on_import(key, row)


def _settled_on_import(key: str, row: Mapping[str, Any]) -> bool:
    """Whether ``row``'s ``returned_at`` is the one the importer gives a failure to settle it
    (``reply_sync``): the service never sets it on a failed request, only on a delivered
    reply, and clears it when a failure is retried."""
    return (
        key == "returnedAt"
        and row["status"] == ReplyStatus.FAILED
        and row["returned_at"] is not None
    )


def read_replies_file(path: Path) -> tuple[list[LegacyReply], list[str]]:
    """The reply states of the reply file and the reasons some entries were skipped.

    The file may be a list, ``{"replies": [...]}`` or an object keyed by request id.
    """
    document, _ = load_screened_json(path)
    try:
        return _read_replies(document)
    except RecursionError:  # read, but too deep to be written back as text
        raise LegacyFileError(TOO_DEEP_TO_READ) from None


def _read_replies(document: Any) -> tuple[list[LegacyReply], list[str]]:
    if isinstance(document, dict) and isinstance(document.get("replies"), list | dict):
        document = document["replies"]
    if not isinstance(document, list | dict):
        raise LegacyFileError(
            f"expected a list or an object of replies, found {json_kind(document)}"
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
        raise LegacyFileError(f"is {json_kind(entry)}, not an object")
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
        return exact_timestamp(raw, value)
    if key == "sourceAutoRun":
        return isinstance(raw, bool)
    if key == "status":
        return raw not in REPLY_STATUS_ALIASES
    return key == "hopCount" or value == raw
