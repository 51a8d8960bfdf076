"""Importing cc-web's reply file: reply states are inserted, or moved forward only
(``waiting`` → ``ready`` → ``returned``, ``waiting|ready`` → ``failed`` → ``ready|returned``),
never back; a failure that comes from the file is settled (``returned_at`` set, see
``_settles_failure``), so its source gets no failure notice long after the fact.

An entry without ``sourceTitle`` or ``targetTitle`` (common in cc-web's files) gets the title
of its conversation: from the session file of the same import, else from the database
(``_fill_titles``); ``extra["$absent"]`` lists the field, so the export leaves it out again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ccweb_store.domain.kinds import ReplyStatus
from ccweb_store.domain.rows import ReplyRequest
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.importer.legacy_json import LegacyFileError
from ccweb_store.importer.legacy_replies import REPLY_COLUMNS, LegacyReply, read_replies_file
from ccweb_store.importer.summary import ImportSummary, KeptValue, Skipped
from ccweb_store.store.failures import DatabaseError
from ccweb_store.store.uow import Store, UnitOfWork

#: Reply status → the statuses the importer may move it to.
FORWARD_STATUSES: dict[str, frozenset[str]] = {
    ReplyStatus.WAITING: frozenset({ReplyStatus.READY, ReplyStatus.RETURNED, ReplyStatus.FAILED}),
    ReplyStatus.READY: frozenset({ReplyStatus.RETURNED, ReplyStatus.FAILED}),
    ReplyStatus.FAILED: frozenset({ReplyStatus.READY, ReplyStatus.RETURNED}),
    ReplyStatus.RETURNED: frozenset(),
}


async def import_replies_file(
    store: Store | None,
    path: Path,
    summary: ImportSummary,
    unmarked: set[str],
    carried: dict[tuple[str, str], str] | None = None,
    titles: dict[str, str] | None = None,
) -> None:
    """Import the reply states of ``path``, counting each in ``summary.replies``. A dry run
    recovers original requests from the messages the sessions' import would have written too
    (``carried``), so that its counts are the real import's. ``titles``: the conversations'
    titles of the session files this import read, by id."""
    carried = carried or {}
    titles = titles or {}
    try:
        replies, skipped = read_replies_file(path)
    except LegacyFileError as exc:
        summary.replies.skipped += 1
        summary.skipped.append(Skipped(str(path), exc.reason))
        return
    for reason in skipped:
        summary.replies.skipped += 1
        summary.skipped.append(Skipped(str(path), reason))
    replies = list({reply.request_id: reply for reply in replies}.values())
    try:
        if store is None:
            for reply in replies:
                recovered = reply.columns.get("original_request") is None and (
                    (reply.columns["target_conversation_id"], reply.request_id) in carried
                )
                _count_reply(summary, "imported", recovered=recovered)
        elif summary.dry_run:
            async with store.read_uow() as uow:
                await _sync_replies(uow, replies, summary, unmarked, carried, titles)
        else:
            async with store.uow() as uow:
                await _sync_replies(uow, replies, summary, unmarked, carried, titles)
                await uow.commit()
    except DatabaseError as exc:
        summary.replies.skipped += len(replies)
        summary.skipped.append(Skipped.refused(path, exc))
        return
    for reply in replies:
        record = f"{reply.label} (request {reply.request_id})"
        summary.kept_as_text.extend(KeptValue(str(path), record, *note) for note in reply.notes)


def _count_reply(summary: ImportSummary, outcome: str, *, recovered: bool) -> None:
    setattr(summary.replies, outcome, getattr(summary.replies, outcome) + 1)
    summary.original_requests_recovered += int(recovered)


async def _sync_replies(
    uow: UnitOfWork,
    replies: list[LegacyReply],
    summary: ImportSummary,
    unmarked: set[str],
    carried: dict[tuple[str, str], str],
    titles: dict[str, str],
) -> None:
    """Insert new reply states and move existing ones forward (writes only outside dry runs)."""
    existing = await uow.replies.get_many([reply.request_id for reply in replies])
    titles = await _known_titles(uow, replies, existing, titles)
    new_rows: list[dict[str, Any]] = []
    for reply in replies:
        values = dict(reply.columns)
        row = existing.get(reply.request_id)
        _fill_titles(values, row, titles)
        recovered = False
        if values.get("original_request") is None and (row is None or row.original_request is None):
            recovered_text = await _recover_original_request(uow, values, unmarked, carried)
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


#: The title columns of a reply, each with the column of the conversation it names.
TITLE_COLUMNS = (
    ("source_title", "source_conversation_id"),
    ("target_title", "target_conversation_id"),
)


def _missing_titles(values: dict[str, Any], row: ReplyRequest | None) -> list[tuple[str, str]]:
    """(title column, conversation id) of each title neither the entry nor the stored row has."""
    return [
        (title, values[conversation])
        for title, conversation in TITLE_COLUMNS
        if values.get(title) is None and (row is None or getattr(row, title) is None)
    ]


async def _known_titles(
    uow: UnitOfWork,
    replies: list[LegacyReply],
    existing: dict[str, ReplyRequest],
    titles: dict[str, str],
) -> dict[str, str]:
    """``titles`` (the session files' of this import) and, for the other conversations whose
    title an entry lacks, the database's."""
    wanted = {
        conversation
        for reply in replies
        for _, conversation in _missing_titles(reply.columns, existing.get(reply.request_id))
        if conversation not in titles
    }
    return {**await uow.sessions.titles(wanted), **titles} if wanted else titles


def _fill_titles(values: dict[str, Any], row: ReplyRequest | None, titles: dict[str, str]) -> None:
    """Give an entry lacking ``sourceTitle``/``targetTitle`` its conversation's title (only
    where the stored row has none either)."""
    for title, conversation in _missing_titles(values, row):
        if conversation in titles:
            values[title] = titles[conversation]


async def _recover_original_request(
    uow: UnitOfWork, values: dict[str, Any], unmarked: set[str], carried: dict[tuple[str, str], str]
) -> str | None:
    """The text of the target's message that carried the request, if one did.

    That is a scan of the target's messages (``find_reply_request_message``). A target in
    ``unmarked`` was inserted whole by this import from a file none of whose messages carries a
    reply request (``session_sync.marks_replies``): its rows are the file's, so the scan would
    find nothing and is skipped.
    """
    target = values["target_conversation_id"]
    if target in unmarked:
        return None
    message = await uow.messages.find_reply_request_message(target, values["request_id"])
    if message is not None:
        return message.content
    return carried.get((target, values["request_id"]))


def _settles_failure(values: dict[str, Any], row: ReplyRequest | None) -> bool:
    """Whether the file brings a failure (a new failed request, or one it moves to failed).

    cc-web sends no failure notices, so such a failure was final there and its source waits
    for nothing. The importer marks it settled by giving it a ``returned_at`` (the entry's own
    ``returnedAt``, else its ``completedAt`` or ``createdAt``, else the import time); the
    lifecycle only notifies sources of failures whose ``returned_at`` is NULL.
    """
    return (
        values["status"] == ReplyStatus.FAILED
        and values.get("returned_at") is None
        and (row is None or row.status != ReplyStatus.FAILED)
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
