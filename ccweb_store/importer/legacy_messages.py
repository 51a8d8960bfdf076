"""A message of a cc-web session file normalised into ``messages`` row values.

Message → ``messages``:
  ``id`` (or ``messageId``) → ``id``; ``role`` → ``role``; ``content`` → ``content`` (a block
  list is joined to text and kept whole in ``metadata.contentBlocks``); ``timestamp`` (or
  ``createdAt``) → ``created_at`` (NULL when absent); the message's own ``metadata`` object
  is the base of ``metadata``, and every other top-level key is merged into it, listed in
  ``metadata.legacyFields``. ``metadata.legacy`` holds the source values no column reproduces
  exactly: an id under ``messageId`` or one replaced by a derived id, an unknown role, a
  non-text content, an epoch-ms timestamp, a top-level key clashing with a metadata key.

Values no column can hold are kept as ``legacy_json`` describes.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ccweb_store.domain.content import join_text_blocks, text_of
from ccweb_store.domain.ids import ROLES
from ccweb_store.domain.json_values import edited
from ccweb_store.domain.kinds import Role
from ccweb_store.domain.storable_json import (
    Place,
    clean_text,
    kept_notes,
    replace_bad_text,
    replaced_note,
    storable,
    surely_storable,
)
from ccweb_store.importer.legacy_json import (
    exact_timestamp,
    from_epoch_milliseconds,
    is_epoch_milliseconds,
    parse_timestamp,
)

#: Keys of ``messages.metadata`` the importer itself writes.
RESERVED_METADATA_KEYS = frozenset({"contentBlocks", "legacy", "legacyFields"})
MAX_ID_LENGTH = 128


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


@dataclass(frozen=True, slots=True)
class _Source:
    """What a step does with a message field's source value, besides giving its column."""

    #: The source value goes to ``metadata.legacy``.
    kept: bool
    #: The metadata gets a value no check has seen, so it must pass ``storable``.
    unchecked: bool


#: Nothing: the column gives the value back exactly (or the message has no such field).
_EXACT = _Source(kept=False, unchecked=False)
#: Kept in ``metadata.legacy``, a value a check has seen (a clean id, epoch milliseconds).
_KEPT = _Source(kept=True, unchecked=False)
#: Kept in ``metadata.legacy``, a value no check has seen.
_KEPT_UNCHECKED = _Source(kept=True, unchecked=True)
#: Laid in ``metadata`` itself (the message's own metadata, content blocks), unchecked.
_MERGED_UNCHECKED = _Source(kept=False, unchecked=True)


#: What a step gives for a field the message does not hold.
_ABSENT: tuple[None, _Source] = (None, _EXACT)


def normalise_message(index: int, raw: dict[str, Any], *, finite: bool = False) -> LegacyMessage:
    """Column values and metadata of one source message (see the module docstring); ``finite``:
    the message holds no NaN and no Infinity (``load_screened_json``).

    A step per mapped field gives its column value and what becomes of its source value (a
    ``_Source``): the kept values make ``metadata.legacy``, and the metadata passes
    ``storable`` only when some step or an unmapped key laid in it a value no check has seen
    (the usual message brings a clean id, a known role, text and epoch milliseconds only)."""
    id_key = "id" if "id" in raw else "messageId" if "messageId" in raw else None
    time_key = "timestamp" if "timestamp" in raw else "createdAt" if "createdAt" in raw else None
    own, own_source = _read_own_metadata(raw["metadata"]) if "metadata" in raw else _ABSENT
    wanted_id, id_source = _read_id(id_key, raw[id_key]) if id_key is not None else _ABSENT
    role, role_source = _read_role(raw.get("role"))
    text, content_source, content_note = _read_content(raw.get("content"))
    created_at, time_source = _read_time(time_key, raw[time_key]) if time_key else _ABSENT
    sources = (
        ("metadata", own_source),
        (id_key, id_source),
        ("role", role_source),
        ("content", content_source),
        (time_key, time_source),
    )

    metadata: dict[str, Any] = dict(own) if own else {}
    if isinstance(raw.get("content"), list):
        metadata["contentBlocks"] = raw["content"]
    legacy: dict[str, Any] = {}
    for key, source in sources:
        if source.kept and key is not None:
            legacy[key] = raw.get(key)
    # Most messages hold mapped keys only: count them rather than walk every key.
    mapped = ("metadata" in raw) + ("role" in raw) + ("content" in raw)
    has_other_keys = len(raw) > mapped + (id_key is not None) + (time_key is not None)
    if has_other_keys:
        _keep_other_keys(raw, {"metadata", "role", "content", id_key, time_key}, metadata, legacy)
    if legacy:
        metadata["legacy"] = legacy

    notes: tuple[Place, ...] = () if content_note is None else (content_note,)
    unchecked = has_other_keys or (
        own_source.unchecked
        or id_source.unchecked
        or role_source.unchecked
        or content_source.unchecked
        or time_source.unchecked
    )
    if unchecked and not (finite and surely_storable(metadata)):
        metadata, places = storable(metadata, "metadata", nul=True)
        notes += tuple(kept_notes(places))
    return LegacyMessage(index, id_key, wanted_id, role, text, created_at, metadata, notes)


def _read_own_metadata(own: Any) -> tuple[dict[str, Any] | None, _Source]:
    """The message's own ``metadata`` as the base of the row's, when it is a non-empty object
    none of whose keys the importer writes; else None, the value kept in ``legacy``."""
    if isinstance(own, dict) and own and RESERVED_METADATA_KEYS.isdisjoint(own):
        return own, _MERGED_UNCHECKED
    return None, _KEPT_UNCHECKED


def _read_id(key: str, value: Any) -> tuple[str | None, _Source]:
    """The id the message asks for (None: unusable, a derived id replaces it); one under
    ``messageId`` is kept too, so the file's key can be told."""
    if isinstance(value, str) and 0 < len(value) <= MAX_ID_LENGTH and clean_text(value):
        return value, _EXACT if key == "id" else _KEPT
    return None, _KEPT_UNCHECKED


def _read_role(role: Any) -> tuple[str, _Source]:
    """A known role, or ``system`` keeping the unknown one."""
    if role in ROLES:
        return role, _EXACT
    return Role.SYSTEM, _KEPT_UNCHECKED


def _read_content(content: Any) -> tuple[str, _Source, Place | None]:
    """The message's text: text as it is, a block list joined (the blocks go whole to
    ``metadata.contentBlocks``), anything else as text of it, kept. Text with U+0000 or a lone
    surrogate gets U+FFFD, its source kept, and a note says where."""
    if isinstance(content, str):
        if clean_text(content):
            return content, _EXACT, None
        note = replaced_note("content", "metadata.legacy.content")
        return replace_bad_text(content), _KEPT_UNCHECKED, note
    is_blocks = isinstance(content, list)
    source = _MERGED_UNCHECKED if is_blocks else _KEPT_UNCHECKED
    text = join_text_blocks(content) if is_blocks else text_of(content)
    if clean_text(text):
        return text, source, None
    note = replaced_note(
        "content", "metadata.contentBlocks" if is_blocks else "metadata.legacy.content"
    )
    return replace_bad_text(text), source, note


def _read_time(key: str, stamp: Any) -> tuple[datetime | None, _Source]:
    """The message's time (None: not a time). The usual epoch milliseconds are kept, as no
    text of the column gives them back exactly, but an integer in range needs no check; any
    other value is kept unless it is a ``timestamp`` the column gives back exactly."""
    if is_epoch_milliseconds(stamp):
        created_at = from_epoch_milliseconds(stamp)
        return created_at, _KEPT if created_at is not None else _KEPT_UNCHECKED
    created_at = parse_timestamp(stamp)
    if key == "timestamp" and exact_timestamp(stamp, created_at):
        return created_at, _EXACT
    return created_at, _KEPT_UNCHECKED


def message_time(raw: dict[str, Any]) -> tuple[str | None, datetime | None, bool]:
    """The key holding a source message's time (``timestamp``, else ``createdAt``; None:
    neither), the time it gives (None: absent or not a time), and whether it is cc-web's
    usual epoch milliseconds."""
    time_key = "timestamp" if "timestamp" in raw else "createdAt" if "createdAt" in raw else None
    if time_key is None:
        return None, None, False
    stamp = raw[time_key]
    if is_epoch_milliseconds(stamp):
        return time_key, from_epoch_milliseconds(stamp), True
    return time_key, parse_timestamp(stamp), False


def _keep_other_keys(
    raw: dict[str, Any],
    mapped: Container[str | None],
    metadata: dict[str, Any],
    legacy: dict[str, Any],
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
