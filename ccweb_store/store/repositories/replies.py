"""Reply requests: conditional status transitions, pages, what a source can be delivered."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.sql.expression import bindparam

from ccweb_store.domain import errors
from ccweb_store.domain.errors import Conflict, DomainError, NotFound
from ccweb_store.domain.events import REPLY_EVENTS
from ccweb_store.domain.ids import OPEN_REPLY_STATUSES, REPLY_STATUSES, validate_choice
from ccweb_store.domain.kinds import ReplyStatus, RunStatus
from ccweb_store.domain.rows import ReplyRequest
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.store.models import reply_to_request_id
from ccweb_store.store.repositories.base import (
    MESSAGES,
    REPLIES,
    RUNS,
    Repository,
    constant,
    decode_cursor,
    one_of,
    prebuilt,
)
from ccweb_store.store.repositories.batch_steps import BatchStep

_GET_REPLY = prebuilt(sa.select(REPLIES).where(REPLIES.c.request_id == bindparam("request_id")))
_LOCK_REPLY = prebuilt(_GET_REPLY.with_for_update())
_DELIVERABLE_FOR_SOURCE = prebuilt(
    sa.select(REPLIES)
    .where(
        REPLIES.c.source_conversation_id == bindparam("session_id"),
        sa.or_(
            REPLIES.c.status == constant(ReplyStatus.READY),
            sa.and_(
                REPLIES.c.status == constant(ReplyStatus.FAILED),
                REPLIES.c.reply_message_id.is_(None),
                REPLIES.c.returned_at.is_(None),
            ),
        ),
    )
    .order_by(REPLIES.c.created_at, REPLIES.c.request_id)
)

#: Whether the source runs now, beside each message of the source that names the request in
#: ``metadata.replyToRequestId`` (probing ``ix_messages_reply_to_request_id``, migration 0006),
#: in order: one row with NULL message columns when there is none.
_SOURCE_STATE = prebuilt(
    sa.select(
        sa.exists()
        .where(
            RUNS.c.session_id == bindparam("source_id"),
            RUNS.c.status == constant(RunStatus.RUNNING),
        )
        .label("source_running"),
        MESSAGES.c.id,
        MESSAGES.c["metadata"],
    )
    .select_from(
        sa.select(sa.literal_column("1").label("one"))
        .subquery("one_row")
        .outerjoin(
            MESSAGES,
            sa.and_(
                reply_to_request_id() == bindparam("request_id"),
                MESSAGES.c.session_id == bindparam("source_id"),
            ),
        )
    )
    .order_by(MESSAGES.c.seq)
)


#: A send's ``waiting`` request: only the columns a send sets; the others keep their defaults.
INSERT_WAITING_REQUEST = prebuilt(
    sa.insert(REPLIES).values(
        request_id=bindparam("p_request_id"),
        message_id=bindparam("p_message_id"),
        source_conversation_id=bindparam("p_source_id"),
        source_title=bindparam("p_source_title"),
        target_conversation_id=bindparam("p_target_id"),
        target_title=bindparam("p_target_title"),
        status=constant(ReplyStatus.WAITING),
        hop_count=bindparam("p_hop_count"),
        source_auto_run=sa.true(),
        original_request=bindparam("p_original_request"),
        created_at=bindparam("p_created_at"),
    )
)


def waiting_request_step() -> BatchStep:
    """A ``statements.Batch`` step: the ``waiting`` request ``request_id`` of a send from
    ``source_id`` (``source_title``) to ``target_id`` (``target_title``), asking for the
    message ``message_id`` whose text is ``content``, at ``hop_count``, made ``now``
    (``INSERT_WAITING_REQUEST``)."""
    return INSERT_WAITING_REQUEST, {
        "p_request_id": "request_id",
        "p_message_id": "message_id",
        "p_source_id": "source_id",
        "p_source_title": "source_title",
        "p_target_id": "target_id",
        "p_target_title": "target_title",
        "p_hop_count": "hop_count",
        "p_original_request": "content",
        "p_created_at": "now",
    }


class SourceState(NamedTuple):
    """What decides how a reply reaches its source (SPEC §4)."""

    #: The source has a running run: the reply waits for it to end.
    running: bool
    #: A message of the source already answers the request (not a failure notice): the
    #: reply is only marked returned, pointing at it.
    answer_id: str | None


@lru_cache(maxsize=64)
def _transition_statement(
    from_statuses: tuple[str, ...], columns: tuple[str, ...]
) -> sa.UpdateBase:
    """``UPDATE reply_requests SET status, <columns> WHERE id AND status IN (…) RETURNING *``,
    built once per set of from-statuses and columns (a bound parameter per column)."""
    return prebuilt(
        sa.update(REPLIES)
        .where(
            REPLIES.c.request_id == bindparam("p_request_id"),
            one_of(REPLIES.c.status, from_statuses),
        )
        .values(status=bindparam("to_status"), **{c: bindparam(f"v_{c}") for c in columns})
        .returning(*REPLIES.c)
    )


def _new_request(
    values: dict[str, Any],
) -> tuple[dict[str, Any], Callable[[], DomainError]]:
    """A new request's values (``created_at`` defaulted), and the error for a taken id."""
    validate_choice(values.get("status"), REPLY_STATUSES, errors.INVALID_STATUS, "reply status")
    request_id = values.get("request_id")
    return {**values, "created_at": values.get("created_at") or utcnow()}, lambda: Conflict(
        f"reply request {request_id!r} already exists", code=errors.REQUEST_EXISTS
    )


class ReplyRepository(Repository):
    async def create(self, values: dict[str, Any]) -> ReplyRequest:
        """Insert a request from its values (field names as keys; ``created_at`` defaults to
        now, and a column left out to its default)."""
        row = await self._insert(ReplyRequest, *_new_request(values))
        self._note_row(row)
        return row

    async def insert(self, values: dict[str, Any]) -> None:
        """``create`` without reading the row back."""
        await self._insert_unread(REPLIES, *_new_request(values))
        self._note(
            values["status"],
            values["source_conversation_id"],
            values["target_conversation_id"],
            values["request_id"],
        )

    def _note_row(self, row: ReplyRequest) -> None:
        self._note(
            row.status, row.source_conversation_id, row.target_conversation_id, row.request_id
        )

    def _note(self, status: str, source: str, target: str, request_id: str) -> None:
        """The event of a request now in ``status``: seen by its source and its target."""
        self.state.note(
            REPLY_EVENTS[status](
                conversation_id=source, peer_conversation_id=target, request_id=request_id
            )
        )

    async def get(self, request_id: str, *, for_update: bool = False) -> ReplyRequest | None:
        """The request; ``for_update`` locks the row (PostgreSQL) and re-reads it fresh."""
        stmt = _LOCK_REPLY if for_update else _GET_REPLY
        return await self._first(ReplyRequest, stmt, {"request_id": request_id})

    async def require(self, request_id: str, *, for_update: bool = False) -> ReplyRequest:
        row = await self.get(request_id, for_update=for_update)
        if row is None:
            raise NotFound(
                f"reply request {request_id!r} does not exist", code=errors.REQUEST_NOT_FOUND
            )
        return row

    async def transition(
        self, request_id: str, from_statuses: Sequence[str], to_status: str, **values: Any
    ) -> ReplyRequest | None:
        """Move to ``to_status`` only from one of ``from_statuses``; the moved row, or None if
        it did not move."""
        validate_choice(to_status, REPLY_STATUSES, errors.INVALID_STATUS, "reply status")
        stmt = _transition_statement(tuple(from_statuses), tuple(sorted(values)))
        params = {f"v_{column}": value for column, value in values.items()}
        params |= {"p_request_id": request_id, "to_status": to_status}
        row = await self._first(ReplyRequest, stmt, params)
        if row is not None:
            self._note_row(row)
        return row

    async def list_page(
        self,
        *,
        statuses: Sequence[str] | None = None,
        session_id: str | None = None,
        as_source: bool = True,
        as_target: bool = True,
        older_than: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
        newest_first: bool = False,
    ) -> tuple[list[ReplyRequest], str | None]:
        """Oldest first (``newest_first``: newest first), keyset-paginated by
        ``(created_at, request_id)``."""
        key = sa.tuple_(REPLIES.c.created_at, REPLIES.c.request_id)
        order = (REPLIES.c.created_at, REPLIES.c.request_id)
        stmt = sa.select(REPLIES).order_by(
            *(column.desc() for column in order) if newest_first else order
        )
        if statuses:
            for status in statuses:
                validate_choice(status, REPLY_STATUSES, errors.INVALID_STATUS, "reply status")
            stmt = stmt.where(REPLIES.c.status.in_(statuses))
        if session_id is not None:
            sides = []
            if as_source:
                sides.append(REPLIES.c.source_conversation_id == session_id)
            if as_target:
                sides.append(REPLIES.c.target_conversation_id == session_id)
            stmt = stmt.where(sa.or_(*sides))
        if older_than is not None:
            stmt = stmt.where(REPLIES.c.created_at < older_than)
        if cursor:
            created_at, last_id = decode_cursor(cursor, (datetime, str))
            after = sa.tuple_(created_at, last_id)
            stmt = stmt.where(key < after if newest_first else key > after)
        return await self._page(
            ReplyRequest, stmt, limit, lambda row: (row.created_at, row.request_id)
        )

    async def open_counts(
        self, session_ids: Sequence[str]
    ) -> tuple[dict[str, int], dict[str, int]]:
        """How many open requests (``waiting``, ``ready``, ``failed``) each of ``session_ids``
        must answer (as target) and made (as source): two grouped index reads."""
        ids = list(session_ids)
        counted: list[dict[str, int]] = []
        for side in (REPLIES.c.target_conversation_id, REPLIES.c.source_conversation_id):
            if not ids:
                counted.append({})
                continue
            stmt = (
                sa.select(side, sa.func.count())
                .where(side.in_(ids), one_of(REPLIES.c.status, OPEN_REPLY_STATUSES))
                .group_by(side)
            )
            counted.append({row[0]: int(row[1]) for row in await self._execute(stmt)})
        return counted[0], counted[1]

    async def deliverable_for_source(self, source_session_id: str) -> list[ReplyRequest]:
        """Replies owed to ``source_session_id``: ``ready`` ones, and ``failed`` ones whose
        notice has not been delivered yet (no ``reply_message_id``) and whose outcome was not
        settled before import (no ``returned_at``), oldest first."""
        params = {"session_id": source_session_id}
        return await self._all(ReplyRequest, _DELIVERABLE_FOR_SOURCE, params)

    async def source_state(self, source_id: str, request_id: str) -> SourceState:
        """Whether the source runs now, and its message that already answers the request:
        one statement (``_SOURCE_STATE``)."""
        params = {"source_id": source_id, "request_id": request_id}
        rows: Sequence[Any] = (await self._execute(_SOURCE_STATE, params)).all()
        # each row: (source_running, message id, message metadata)
        answers = (
            row[1] for row in rows if row[1] is not None and not (row[2] or {}).get("replyFailed")
        )
        return SourceState(running=bool(rows[0][0]), answer_id=next(answers, None))

    async def claim_failure_notice(self, request_id: str, message_id: str) -> ReplyRequest | None:
        """Record that the failure notice ``message_id`` goes out for a failed request; the
        request as it is now, or None when another writer (or an import) settled it.

        Conditional on no notice having been recorded, so only one writer ever sends it, and
        on ``returned_at`` being NULL: an imported failure was settled in cc-web and is owed none.
        """
        stmt = (
            sa.update(REPLIES)
            .where(
                REPLIES.c.request_id == request_id,
                REPLIES.c.status == constant(ReplyStatus.FAILED),
                REPLIES.c.reply_message_id.is_(None),
                REPLIES.c.returned_at.is_(None),
            )
            .values(reply_message_id=message_id)
        )
        return await self._update_returning(ReplyRequest, stmt)

    async def get_many(
        self, request_ids: Sequence[str], *, chunk: int = 500
    ) -> dict[str, ReplyRequest]:
        """The existing requests among ``request_ids``, by id."""
        found: dict[str, ReplyRequest] = {}
        for start in range(0, len(request_ids), chunk):
            stmt = sa.select(REPLIES).where(
                REPLIES.c.request_id.in_(request_ids[start : start + chunk])
            )
            found.update({row.request_id: row for row in await self._all(ReplyRequest, stmt)})
        return found

    async def insert_many(self, rows: Sequence[dict[str, Any]]) -> None:
        """Insert request rows (keys are column names): one executemany per set of keys, so
        a column a row leaves out takes its default, as in a single insert."""
        batches: dict[frozenset[str], list[dict[str, Any]]] = {}
        for row in rows:
            batches.setdefault(frozenset(row), []).append(row)
        for batch in batches.values():
            await self._execute(sa.insert(REPLIES), batch)
        for row in rows:
            self._note(
                row.get("status") or ReplyStatus.WAITING,
                row["source_conversation_id"],
                row["target_conversation_id"],
                row["request_id"],
            )

    async def update_columns(self, request_id: str, values: dict[str, Any]) -> None:
        """Overwrite the given columns of one request (the importer's forward-only sync)."""
        stmt = sa.update(REPLIES).where(REPLIES.c.request_id == request_id).values(**values)
        row = await self._update_returning(ReplyRequest, stmt)
        if row is not None and "status" in values:
            self._note_row(row)
