"""``import-json``: bring a cc-web JSON state into the database, idempotently.

``legacy_json`` reads and normalises the files; this module compares them with what the
database holds and writes the difference. Each session file is one transaction, so a killed
import leaves whole sessions only and running it again completes the job:

- a session that is not there is inserted with all its messages (as if no other session held
  their ids, which the primary key checks: see ``_write_session``);
- a session that is there gets its columns synced and the messages it lacks appended with the
  next ``seq`` (matched by message id); messages whose text or metadata changed are updated;
- reply states are inserted, or moved forward only (``waiting`` → ``ready`` → ``returned``,
  ``waiting|ready`` → ``failed`` → ``ready|returned``), never back; a failure that comes from
  the file is settled (``returned_at`` set, see ``_settles_failure``), so its source gets no
  failure notice months later.

A value no column can hold as it is (a JSON value that breaks the stored-value rule, text
holding U+0000 or a lone surrogate) is kept as text by ``legacy_json``; the summary lists each
(``KeptValue``), the same in a dry run.

Files are streamed one by one, so memory is bounded by the largest file; the cyclic garbage
collector waits while one is imported (``_cyclic_gc_paused``).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from ccweb_store.importer.legacy_json import (
    REPLIES_FILE,
    REPLY_COLUMNS,
    LegacyFileError,
    LegacyReply,
    LegacySession,
    read_replies_file,
    read_session_file,
    session_files,
)
from ccweb_store.store.models import ReplyRequest, utcnow
from ccweb_store.store.uow import Store, UnitOfWork

#: Reply status → the statuses the importer may move it to.
FORWARD_STATUSES: dict[str, frozenset[str]] = {
    "waiting": frozenset({"ready", "returned", "failed"}),
    "ready": frozenset({"returned", "failed"}),
    "failed": frozenset({"ready", "returned"}),
    "returned": frozenset(),
}
MESSAGE_COLUMNS = ("role", "content", "created_at", "metadata_")


@dataclass
class Counts:
    """How many things were imported, updated, left unchanged or skipped."""

    imported: int = 0
    updated: int = 0
    unchanged: int = 0
    skipped: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "imported": self.imported,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "skipped": self.skipped,
        }


@dataclass
class Skipped:
    """Something left out of the import, and why."""

    path: str
    reason: str


@dataclass
class KeptValue:
    """A value stored otherwise than the source wrote it: kept as its JSON text, or text with
    U+FFFD in place of characters no column holds (``what`` says which, and why)."""

    file: str
    #: The record in the file: ``session abc``, ``message 12 (id m-12)``, ``reply 3 (request r)``.
    record: str
    #: Where in the record: ``metadata.x``, ``extra.title``, ``content``.
    path: str
    what: str

    def as_dict(self) -> dict[str, str]:
        return {"file": self.file, "record": self.record, "path": self.path, "what": self.what}

    def __str__(self) -> str:
        return f"{self.file}: {self.record}: {self.path} {self.what}"


@dataclass
class ImportSummary:
    """What an import did (or, in a dry run, would do)."""

    dry_run: bool
    sessions: Counts = field(default_factory=Counts)
    messages: Counts = field(default_factory=Counts)
    replies: Counts = field(default_factory=Counts)
    original_requests_recovered: int = 0
    skipped: list[Skipped] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    kept_as_text: list[KeptValue] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """False when anything (a file, a message, a reply) was skipped."""
        return not self.skipped

    def as_dict(self) -> dict[str, Any]:
        return {
            "dryRun": self.dry_run,
            "sessions": self.sessions.as_dict(),
            "messages": self.messages.as_dict(),
            "replies": {
                **self.replies.as_dict(),
                "originalRequestRecovered": self.original_requests_recovered,
            },
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.skipped],
            "warnings": list(self.warnings),
            "keptAsText": {
                "count": len(self.kept_as_text),
                "values": [kept.as_dict() for kept in self.kept_as_text],
            },
        }


#: Called after each file with (path, what happened); the CLI draws progress with it.
ProgressCallback = Callable[[Path, str], None]


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


def import_files_total(directory: Path) -> int:
    """How many files an import of ``directory`` reads (for a progress bar)."""
    return len(session_files(directory)) + int((directory / REPLIES_FILE).is_file())


async def import_state(
    store: Store | None,
    directory: Path,
    *,
    dry_run: bool = False,
    on_file: ProgressCallback | None = None,
) -> ImportSummary:
    """Import ``directory`` (a cc-web state) into ``store``.

    With ``dry_run`` nothing is written: plans are made in read-only transactions, or against
    an empty database when ``store`` is None (the database does not exist or is not migrated).
    """
    summary = ImportSummary(dry_run=dry_run)
    unmarked: set[str] = set()
    for path in session_files(directory):
        with _cyclic_gc_paused():
            outcome = await _import_session_file(store, path, summary, unmarked)
        if on_file is not None:
            on_file(path, outcome)
    replies_path = directory / REPLIES_FILE
    if replies_path.is_file():
        outcome = await _import_replies_file(store, replies_path, summary, unmarked)
        if on_file is not None:
            on_file(replies_path, outcome)
    return summary


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while one file is read, planned and written.

    A session file parses into tens of thousands of dicts and lists, all alive until its
    rows are written. Left on, the collector counts them as new objects, runs again and
    again over them (none of which can be in a cycle: JSON values never are) and every few
    files over the whole heap (SQLAlchemy, the migrations): 15% of an import's time. Between
    files it is on again, so anything cyclic a file left behind is collected then, with the
    file's objects already freed. The CLI's process only imports; a caller that runs other
    work on the same event loop sees the collector paused while a file is imported.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def _import_session_file(
    store: Store | None, path: Path, summary: ImportSummary, unmarked: set[str]
) -> str:
    """Import one session file; a session it inserted whose messages carry no reply request
    is added to ``unmarked`` (see ``_recover_original_request``)."""
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
    except SQLAlchemyError as exc:
        summary.sessions.skipped += 1
        summary.skipped.append(Skipped(str(path), f"the database refused it: {_reason(exc)}"))
        return "skipped"

    if plan.insert_session is not None and not summary.dry_run and not _marks_replies(legacy):
        unmarked.add(legacy.id)
    setattr(summary.sessions, plan.outcome, getattr(summary.sessions, plan.outcome) + 1)
    summary.messages.imported += len(plan.new_messages)
    summary.messages.updated += len(plan.changed_messages)
    summary.messages.unchanged += plan.unchanged_messages
    _note_kept_values(summary, path, legacy)
    return plan.outcome


def _note_kept_values(summary: ImportSummary, path: Path, legacy: LegacySession) -> None:
    """List the values of ``legacy`` that were kept as text in ``summary``."""
    kept = summary.kept_as_text
    kept.extend(KeptValue(str(path), f"session {legacy.id}", *note) for note in legacy.notes)
    for message in legacy.messages:
        if message.notes:
            record = f"message {message.index}"
            if message.wanted_id is not None:
                record += f" (id {message.wanted_id})"
            kept.extend(KeptValue(str(path), record, *note) for note in message.notes)


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
    except IntegrityError:
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
                {
                    "id": message_id,
                    "session_id": session_id,
                    "seq": next_seq,
                    "role": message.role,
                    "content": message.content,
                    "created_at": message.created_at,
                    "metadata_": metadata or None,
                }
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
        append(
            {
                "id": message_id,
                "session_id": session_id,
                "seq": seq,
                "role": message.role,
                "content": message.content,
                "created_at": message.created_at,
                "metadata_": metadata or None,
            }
        )
    return rows


async def _apply(uow: UnitOfWork, session_id: str, plan: SessionPlan) -> None:
    if plan.insert_session is not None:
        values = dict(plan.insert_session)
        await uow.sessions.create(values.pop("id"), **values)
    elif plan.update_session:
        await uow.sessions.update_columns(session_id, plan.update_session)
    await uow.messages.insert_many(plan.new_messages)
    await uow.messages.update_many(plan.changed_messages)


async def _import_replies_file(
    store: Store | None, path: Path, summary: ImportSummary, unmarked: set[str]
) -> str:
    try:
        replies, skipped = read_replies_file(path)
    except LegacyFileError as exc:
        summary.replies.skipped += 1
        summary.skipped.append(Skipped(str(path), exc.reason))
        return "skipped"
    for reason in skipped:
        summary.replies.skipped += 1
        summary.skipped.append(Skipped(str(path), reason))
    replies = list({reply.request_id: reply for reply in replies}.values())
    try:
        if store is None:
            summary.replies.imported += len(replies)
        elif summary.dry_run:
            async with store.read_uow() as uow:
                await _sync_replies(uow, replies, summary, unmarked)
        else:
            async with store.uow() as uow:
                await _sync_replies(uow, replies, summary, unmarked)
                await uow.commit()
    except SQLAlchemyError as exc:
        summary.replies.skipped += len(replies)
        summary.skipped.append(Skipped(str(path), f"the database refused it: {_reason(exc)}"))
        return "skipped"
    for reply in replies:
        record = f"{reply.label} (request {reply.request_id})"
        summary.kept_as_text.extend(KeptValue(str(path), record, *note) for note in reply.notes)
    return "imported"


def _count_reply(summary: ImportSummary, outcome: str, *, recovered: bool) -> None:
    setattr(summary.replies, outcome, getattr(summary.replies, outcome) + 1)
    summary.original_requests_recovered += int(recovered)


async def _sync_replies(
    uow: UnitOfWork, replies: list[LegacyReply], summary: ImportSummary, unmarked: set[str]
) -> None:
    """Insert new reply states and move existing ones forward (writes only outside dry runs)."""
    existing = await uow.replies.get_many([reply.request_id for reply in replies])
    new_rows: list[dict[str, Any]] = []
    for reply in replies:
        values = dict(reply.columns)
        row = existing.get(reply.request_id)
        recovered = False
        if values.get("original_request") is None and (row is None or row.original_request is None):
            recovered_text = await _recover_original_request(uow, values, unmarked)
            if recovered_text is not None:
                values["original_request"] = recovered_text
                recovered = True
        if _settles_failure(values, row):
            values["returned_at"] = (
                values.get("completed_at") or values.get("created_at") or utcnow()
            )
        stored = values if row is None else {**_columns_of(row), **values}
        extra = reply.extra(stored)
        if extra is not None or (row is not None and row.extra is not None):
            values["extra"] = extra
        if row is None:
            new_rows.append(values)
            _count_reply(summary, "imported", recovered=recovered)
            continue
        changes = _forward_changes(row, values)
        if changes:
            if not summary.dry_run:
                await uow.replies.update_columns(reply.request_id, changes)
            _count_reply(summary, "updated", recovered=recovered)
        else:
            _count_reply(summary, "unchanged", recovered=False)
    if not summary.dry_run:
        await uow.replies.insert_many(new_rows)


async def _recover_original_request(
    uow: UnitOfWork, values: dict[str, Any], unmarked: set[str]
) -> str | None:
    """The text of the target's message that carried the request, if one did.

    That is a scan of the target's messages (``find_reply_request_message``), half a
    millisecond in a conversation of 1,000. A target in ``unmarked`` was inserted whole by
    this import from a file none of whose messages carries a reply request (``_marks_replies``):
    its rows are the file's, so the scan would find nothing and is skipped.
    """
    target = values["target_conversation_id"]
    if target in unmarked:
        return None
    message = await uow.messages.find_reply_request_message(target, values["request_id"])
    return None if message is None else message.content


def _marks_replies(legacy: LegacySession) -> bool:
    """Whether a message of ``legacy`` has a ``metadata`` key ``find_reply_request_message``
    matches (``crossConversation.replyRequestId`` or ``replyRequestId``), whatever its value."""
    for message in legacy.messages:
        metadata = message.metadata
        cross = metadata.get("crossConversation")
        if "replyRequestId" in metadata or (isinstance(cross, dict) and "replyRequestId" in cross):
            return True
    return False


def _settles_failure(values: dict[str, Any], row: ReplyRequest | None) -> bool:
    """Whether the file brings a failure (a new failed request, or one it moves to failed).

    cc-web sends no failure notices, so such a failure was final there and its source waits
    for nothing. The importer marks it settled by giving it a ``returned_at`` (the entry's own
    ``returnedAt``, else its ``completedAt`` or ``createdAt``, else the import time); the
    lifecycle only notifies sources of failures whose ``returned_at`` is NULL.
    """
    return (
        values["status"] == "failed"
        and values.get("returned_at") is None
        and (row is None or row.status != "failed")
    )


def _columns_of(row: ReplyRequest) -> dict[str, Any]:
    return {column: getattr(row, column) for column in REPLY_COLUMNS.values()}


def _forward_changes(row: ReplyRequest, values: dict[str, Any]) -> dict[str, Any]:
    """The columns to write for a stored request: everything that differs if the status stays
    or moves forward, nothing if the file is behind the database."""
    if values["status"] != row.status and values["status"] not in FORWARD_STATUSES[row.status]:
        return {}
    return {
        key: value
        for key, value in values.items()
        if key != "request_id" and getattr(row, key) != value
    }


def _reason(exc: SQLAlchemyError) -> str:
    """The driver's own message, without SQLAlchemy's statement dump."""
    orig = getattr(exc, "orig", None)
    return str(orig if orig is not None else exc).splitlines()[0]
