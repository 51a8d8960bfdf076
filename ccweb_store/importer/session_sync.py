"""Importing one session file: compare it with what the database holds and write the
difference in one transaction.

A session that is not there is inserted with all its messages (as if no other session held
their ids, which the primary key checks: see ``_write_session``); a session that is there gets
its columns synced and the messages it lacks appended with the next ``seq`` (matched by message
id); messages whose text or metadata changed are updated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccweb_store.importer.legacy_json import LegacyFileError
from ccweb_store.importer.legacy_messages import LegacyMessage
from ccweb_store.importer.legacy_sessions import LegacySession, read_session_file
from ccweb_store.importer.summary import ImportSummary, KeptValue, Skipped
from ccweb_store.store.failures import ConstraintViolation, DatabaseError
from ccweb_store.store.uow import Store, UnitOfWork

MESSAGE_COLUMNS = ("role", "content", "created_at", "metadata_")


@dataclass
class SessionPlan:
    """What one session file changes in the database."""

    insert_session: dict[str, Any] | None = None
    update_session: dict[str, Any] | None = None
    new_messages: list[dict[str, Any]] = field(default_factory=list)
    changed_messages: list[dict[str, Any]] = field(default_factory=list)
    unchanged_messages: int = 0

    @property
    def outcome(self) -> str:
        if self.insert_session is not None:
            return "imported"
        if self.update_session or self.new_messages or self.changed_messages:
            return "updated"
        return "unchanged"


async def import_session_file(
    store: Store | None,
    path: Path,
    summary: ImportSummary,
    unmarked: set[str],
    carried: dict[tuple[str, str], str] | None = None,
    titles: dict[str, str] | None = None,
) -> str:
    """Import one session file; a session it inserted whose messages carry no reply request
    is added to ``unmarked`` (see ``reply_sync``). In a dry run, ``carried`` gets the text of
    each message that carries a reply request, by (session id, request id): the messages the
    import would write, from which it would recover a request's original text. ``titles``
    gets the session's title (``note_title``), for the reply entries that lack it."""
    try:
        legacy = read_session_file(path)
    except LegacyFileError as exc:
        summary.sessions.skipped += 1
        summary.skipped.append(Skipped(str(path), exc.reason))
        return "skipped"
    for reason in legacy.skipped_messages:
        summary.messages.skipped += 1
        summary.skipped.append(Skipped(str(path), reason))

    try:
        if store is None:
            plan = plan_session(legacy, None, [], {})
        elif summary.dry_run:
            async with store.read_uow() as uow:
                plan = await _plan_in(uow, legacy)
        else:
            plan = await _write_session(store, legacy)
    except DatabaseError as exc:
        summary.sessions.skipped += 1
        summary.skipped.append(Skipped.refused(path, exc))
        return "skipped"

    if plan.insert_session is not None and not summary.dry_run and not marks_replies(legacy):
        unmarked.add(legacy.id)
    if summary.dry_run and carried is not None:
        for request_id, content in carried_requests(legacy):
            carried.setdefault((legacy.id, request_id), content)
    note_title(titles, legacy)
    setattr(summary.sessions, plan.outcome, getattr(summary.sessions, plan.outcome) + 1)
    summary.messages.imported += len(plan.new_messages)
    summary.messages.updated += len(plan.changed_messages)
    summary.messages.unchanged += plan.unchanged_messages
    _note_kept_values(summary, path, legacy)
    return plan.outcome


def note_title(titles: dict[str, str] | None, legacy: LegacySession) -> None:
    """Keep the title of a session the import read (not a blank one) in ``titles``."""
    if titles is not None and legacy.title is not None and legacy.title.strip():
        titles[legacy.id] = legacy.title


def _note_kept_values(summary: ImportSummary, path: Path, legacy: LegacySession) -> None:
    """List the values of ``legacy`` that were kept as text in ``summary``."""
    kept = summary.kept_as_text
    kept.extend(KeptValue(str(path), f"session {legacy.id}", *note) for note in legacy.notes)
    for message in legacy.messages:
        if message.notes:
            kept.extend(message_kept_values(path, message))


def message_kept_values(path: Path, message: LegacyMessage) -> list[KeptValue]:
    """The values of ``message`` kept as text or given U+FFFD, as the summary lists them."""
    record = f"message {message.index}"
    if message.wanted_id is not None:
        record += f" (id {message.wanted_id})"
    return [KeptValue(str(path), record, *note) for note in message.notes]


async def _write_session(store: Store, legacy: LegacySession) -> SessionPlan:
    """Plan and write one session file in one transaction.

    A session the database does not hold yet is written on the assumption that none of its
    message ids belongs to another session (the usual case: an import into an empty
    database, or of new conversations), without looking those ids up. If one does belong to
    another session, its insert breaks the primary key: that transaction is rolled back, and
    the file planned and written again with the lookup, which gives such a message a derived
    id. An insert that went through proves the lookup would have found nothing, so the rows
    are the same either way.
    """
    new_session = False
    try:
        async with store.uow() as uow:
            plan = await _plan_in(uow, legacy, owners_unless_new=True)
            new_session = plan.insert_session is not None
            await _apply(uow, legacy.id, plan)
            await uow.commit()
            return plan
    except ConstraintViolation:
        if not new_session:
            raise  # planned with the lookup already
    async with store.uow() as uow:
        plan = await _plan_in(uow, legacy)
        await _apply(uow, legacy.id, plan)
        await uow.commit()
        return plan


async def _plan_in(
    uow: UnitOfWork, legacy: LegacySession, *, owners_unless_new: bool = False
) -> SessionPlan:
    """The plan of ``legacy`` against what the database holds; with ``owners_unless_new``,
    a session not there yet is planned as if no other session held its message ids (see
    ``_write_session``)."""
    existing = await uow.sessions.get(legacy.id)
    if existing is None and owners_unless_new:
        return plan_session(legacy, None, [], {})
    stored = await uow.messages.snapshot(legacy.id) if existing is not None else []
    own_ids = {row.id for row in stored}
    candidates = [
        m.wanted_id for m in legacy.messages if m.wanted_id and m.wanted_id not in own_ids
    ]
    owners = await uow.messages.owners(candidates)
    current = None if existing is None else {k: getattr(existing, k) for k in legacy.columns()}
    return plan_session(legacy, current, stored, owners)


def plan_session(
    legacy: LegacySession,
    current: dict[str, Any] | None,
    stored: list[Any],
    owners: dict[str, str],
) -> SessionPlan:
    """Compare a parsed session with its stored state (``current`` row values, ``stored``
    message rows, ``owners`` of its wanted ids elsewhere) and decide what to write."""
    plan = SessionPlan()
    columns = legacy.columns()
    if current is None:
        plan.insert_session = columns
    else:
        changed = {k: v for k, v in columns.items() if k != "id" and current.get(k) != v}
        plan.update_session = changed or None

    session_id = legacy.id
    if not stored and not owners:
        plan.new_messages = _rows_of_new_messages(legacy)
        return plan
    by_id = {row.id: row for row in stored}
    next_seq = max((row.seq for row in stored), default=0) + 1
    used: set[str] = set()
    for message in legacy.messages:
        message_id = message.wanted_id
        metadata = message.metadata
        if message_id is None:
            message_id = message.positional_id(session_id)
        elif message_id in used or owners.get(message_id, session_id) != session_id:
            metadata = message.metadata_with_replaced_id()
            message_id = message.positional_id(session_id)
        used.add(message_id)
        row = by_id.get(message_id)
        if row is None:
            plan.new_messages.append(
                new_message_row(session_id, next_seq, message_id, message, metadata)
            )
            next_seq += 1
            continue
        values: dict[str, Any] = {
            "role": message.role,
            "content": message.content,
            "created_at": message.created_at,
            "metadata_": metadata or None,
        }
        if any(getattr(row, key) != values[key] for key in MESSAGE_COLUMNS):
            plan.changed_messages.append({"id": message_id, **values})
        else:
            plan.unchanged_messages += 1
    return plan


def _rows_of_new_messages(legacy: LegacySession) -> list[dict[str, Any]]:
    """``plan_session``'s rows for a session none of whose messages is stored and none of
    whose ids another session holds (an import into an empty database, or of a new
    conversation): every message new, numbered from 1, an id taken twice replaced by the
    message's positional one. The same rows as the general loop, without its lookups."""
    session_id = legacy.id
    rows: list[dict[str, Any]] = []
    append = rows.append
    used: set[str] = set()
    for seq, message in enumerate(legacy.messages, 1):
        message_id = message.wanted_id
        metadata = message.metadata
        if message_id is None:
            message_id = message.positional_id(session_id)
        elif message_id in used:
            metadata = message.metadata_with_replaced_id()
            message_id = message.positional_id(session_id)
        used.add(message_id)
        append(new_message_row(session_id, seq, message_id, message, metadata))
    return rows


def new_message_row(
    session_id: str, seq: int, message_id: str, message: LegacyMessage, metadata: dict[str, Any]
) -> dict[str, Any]:
    """The ``messages`` row of a message the import inserts (attribute names as keys)."""
    return {
        "id": message_id,
        "session_id": session_id,
        "seq": seq,
        "role": message.role,
        "content": message.content,
        "created_at": message.created_at,
        "metadata_": metadata or None,
    }


async def _apply(uow: UnitOfWork, session_id: str, plan: SessionPlan) -> None:
    if plan.insert_session is not None:
        values = dict(plan.insert_session)
        await uow.sessions.create(values.pop("id"), **values)
    elif plan.update_session:
        await uow.sessions.update_columns(session_id, plan.update_session)
    await uow.messages.insert_many(plan.new_messages)
    await uow.messages.update_many(plan.changed_messages)


def carried_requests(legacy: LegacySession) -> list[tuple[str, str]]:
    """``(request id, text)`` of each message of ``legacy`` that carries a reply request, in
    order, as ``find_reply_request_message`` matches them."""
    found = []
    for message in legacy.messages:
        request_id = carried_request_id(message.metadata)
        if request_id is not None:
            found.append((request_id, message.content))
    return found


def carried_request_id(metadata: dict[str, Any]) -> str | None:
    """The reply request a message's metadata carries, as ``find_reply_request_message``
    matches it (``crossConversation.replyRequestId``, else ``replyRequestId``)."""
    cross = metadata.get("crossConversation")
    request_id = cross.get("replyRequestId") if isinstance(cross, dict) else None
    if request_id is None:
        request_id = metadata.get("replyRequestId")
    return request_id if isinstance(request_id, str) else None


def marks_replies(legacy: LegacySession) -> bool:
    """Whether a message of ``legacy`` has a ``metadata`` key ``find_reply_request_message``
    matches, whatever its value (``marks_reply``)."""
    return any(marks_reply(message.metadata) for message in legacy.messages)


def marks_reply(metadata: dict[str, Any]) -> bool:
    """Whether ``metadata`` has ``crossConversation.replyRequestId`` or ``replyRequestId``."""
    cross = metadata.get("crossConversation")
    return "replyRequestId" in metadata or (isinstance(cross, dict) and "replyRequestId" in cross)
