"""Repositories: SQL for each table, and nothing else.

They take the unit of work's ``AsyncSession``, at most ``flush()``, and never commit.
State changes are conditional (``UPDATE … WHERE status IN (…)``) and report whether they
won, so two writers can never both move the same row.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, NamedTuple, TypeVar

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased, make_transient_to_detached
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.util import identity_key
from sqlalchemy.sql.expression import bindparam

from ccweb_store import errors
from ccweb_store.errors import Conflict, DomainError, InvalidInput, NotFound
from ccweb_store.models import (
    REPLY_STATUSES,
    ROLES,
    RUN_KINDS,
    RUN_STATUSES,
    SESSION_ID_MAX_LENGTH,
    SESSION_ID_PATTERN,
    Base,
    Message,
    ReplyRequest,
    Run,
    Session,
    new_id,
    utcnow,
)

MAX_PAGE = 500

_T = TypeVar("_T")
_B = TypeVar("_B", bound=Base)


def validate_session_id(value: object, *, code: str = errors.INVALID_CONVERSATION_ID) -> str:
    """Return ``value`` if it is a well-formed conversation id, else raise ``code``."""
    if (
        not isinstance(value, str)
        or not value
        or len(value) > SESSION_ID_MAX_LENGTH
        or not SESSION_ID_PATTERN.match(value)
    ):
        raise InvalidInput(
            f"invalid conversation id {value!r}: use 1-{SESSION_ID_MAX_LENGTH} letters, "
            "digits, '_' or '-', starting with a letter or digit",
            code=code,
        )
    return value


def validate_choice(value: object, choices: Sequence[str], code: str, what: str) -> str:
    """Return ``value`` if it is one of ``choices``, else raise ``code``."""
    if not isinstance(value, str) or value not in choices:
        raise InvalidInput(
            f"invalid {what} {value!r}: expected one of {', '.join(choices)}", code=code
        )
    return value


def clamp_limit(limit: object, default: int, maximum: int = MAX_PAGE) -> int:
    """A page size: ``default`` when absent, clamped to 1..``maximum``; non-integers refused."""
    if limit is None:
        return default
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidInput(f"limit must be an integer, got {limit!r}")
    return max(1, min(maximum, limit))


def encode_cursor(*parts: Any) -> str:
    """An opaque keyset cursor (the last row's sort key)."""
    raw = json.dumps([p.isoformat() if isinstance(p, datetime) else p for p in parts])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, kinds: Sequence[type]) -> list[Any]:
    """Parse a cursor made by ``encode_cursor`` whose parts have the given types."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        parts = json.loads(base64.urlsafe_b64decode(padded.encode()))
        if not isinstance(parts, list) or len(parts) != len(kinds):
            raise ValueError
        return [
            datetime.fromisoformat(p) if k is datetime else k(p)
            for p, k in zip(parts, kinds, strict=True)
        ]
    except (ValueError, TypeError) as exc:
        raise InvalidInput(f"invalid cursor {cursor!r}", code=errors.INVALID_CURSOR) from exc


# --- statements of the request hot path, built once ------------------------------------------
# Building a statement (coercing each ``.where``, generating its cache key) costs more than
# running it on SQLite, so the queries every send, claim and completion runs are built here
# with bound parameters and only executed per call. Parameters that fill INSERT/UPDATE values
# are named ``p_…``: SQLAlchemy reserves the column names there.


@lru_cache(maxsize=8)
def _column_attributes(model: type[Base]) -> tuple[tuple[str, sa.ColumnElement[Any]], ...]:
    """``(attribute name, column)`` of every column of a mapped class."""
    return tuple((attr.key, attr.columns[0]) for attr in sa.inspect(model).column_attrs)


@lru_cache(maxsize=8)
def _insert_statement(model: type[Base]) -> sa.Insert:
    """``INSERT INTO <table> … RETURNING`` every column, on the table (Core, no flush)."""
    table = Base.metadata.tables[model.__tablename__]
    return sa.insert(table).returning(*table.c)


_SESSIONS = Base.metadata.tables[Session.__tablename__]
_MESSAGES = Base.metadata.tables[Message.__tablename__]
_REPLIES = Base.metadata.tables[ReplyRequest.__tablename__]
_RUNS = Base.metadata.tables[Run.__tablename__]

_LOCK_SESSIONS = (
    sa.select(Session)
    .where(Session.id.in_(bindparam("ids", expanding=True)))
    .order_by(Session.id)
    .with_for_update()
)
_TOUCH_SESSION = (
    sa.update(_SESSIONS)
    .where(_SESSIONS.c.id == bindparam("session_id"))
    .values(updated_at=bindparam("at"))
)
_APPEND_MESSAGE = (
    sa.insert(_MESSAGES)
    .values(
        id=bindparam("p_id"),
        session_id=bindparam("p_session_id"),
        seq=sa.select(sa.func.coalesce(sa.func.max(_MESSAGES.c.seq), 0) + 1)
        .where(_MESSAGES.c.session_id == bindparam("p_session_id"))
        .scalar_subquery(),
        role=bindparam("p_role"),
        content=bindparam("p_content"),
        created_at=bindparam("p_created_at"),
        metadata=bindparam("p_metadata"),
    )
    .returning(*_MESSAGES.c)
)
_GET_REPLY = sa.select(ReplyRequest).where(ReplyRequest.request_id == bindparam("request_id"))
_LOCK_REPLY = _GET_REPLY.with_for_update().execution_options(populate_existing=True)
_DELIVERABLE_FOR_SOURCE = (
    sa.select(ReplyRequest)
    .where(
        ReplyRequest.source_conversation_id == bindparam("session_id"),
        sa.or_(
            ReplyRequest.status == "ready",
            sa.and_(
                ReplyRequest.status == "failed",
                ReplyRequest.reply_message_id.is_(None),
                ReplyRequest.returned_at.is_(None),
            ),
        ),
    )
    .order_by(ReplyRequest.created_at, ReplyRequest.request_id)
)
_GET_RUN = sa.select(Run).where(Run.id == bindparam("run_id"))
_LOCK_RUN = _GET_RUN.with_for_update()
_ACTIVE_RUNS_OF_SESSION = (
    sa.select(Run)
    .where(Run.session_id == bindparam("session_id"), Run.status.in_(("queued", "running")))
    .order_by(Run.created_at, Run.id)
)
_SESSION_HAS_RUN_IN = sa.select(
    sa.exists().where(
        Run.session_id == bindparam("session_id"),
        Run.status.in_(bindparam("statuses", expanding=True)),
    )
)
_RUNNING_RUNS_OF_SESSIONS = sa.select(Run).where(
    Run.session_id.in_(bindparam("ids", expanding=True)), Run.status == "running"
)
_ANY_EXPIRED_LEASE = sa.select(
    sa.exists().where(Run.status == "running", Run.lease_expires_at < bindparam("now"))
)
_running = aliased(Run)
_CLAIMABLE_RUNS = (
    sa.select(Run)
    .where(
        Run.status == "queued",
        Run.kind.in_(bindparam("kinds", expanding=True)),
        ~sa.exists().where(_running.session_id == Run.session_id, _running.status == "running"),
    )
    .order_by(Run.created_at, Run.id)
    .limit(8)
    .with_for_update(skip_locked=True, of=Run)
)
# Conditional UPDATEs of one row are Core statements on the table returning every column
# (``_update_one`` refreshes the loaded object from that row): the ORM's bulk-update path
# costs several times the statement itself.
_SET_RUNNING = (
    sa.update(_RUNS)
    .where(_RUNS.c.id == bindparam("p_run_id"), _RUNS.c.status == "queued")
    .values(
        status="running",
        worker_id=bindparam("p_worker_id"),
        started_at=bindparam("p_now"),
        lease_expires_at=bindparam("p_lease_expires_at"),
    )
    .returning(*_RUNS.c)
)
_FINISH_RUN = (
    sa.update(_RUNS)
    .where(
        _RUNS.c.id == bindparam("p_run_id"),
        _RUNS.c.status.in_(bindparam("p_from", expanding=True)),
    )
    .values(
        status=bindparam("p_status"),
        output=bindparam("p_output"),
        error=bindparam("p_error"),
        finished_at=bindparam("p_now"),
        lease_expires_at=None,
    )
    .returning(*_RUNS.c)
)


@lru_cache(maxsize=64)
def _transition_statement(columns: tuple[str, ...]) -> sa.UpdateBase:
    """``UPDATE reply_requests SET status, <columns> WHERE id AND status IN (…) RETURNING *``,
    built once per set of columns (a bound parameter per column, named after it)."""
    return (
        sa.update(_REPLIES)
        .where(
            _REPLIES.c.request_id == bindparam("p_request_id"),
            _REPLIES.c.status.in_(bindparam("from_statuses", expanding=True)),
        )
        .values(status=bindparam("to_status"), **{c: bindparam(f"v_{c}") for c in columns})
        .returning(*_REPLIES.c)
    )


@lru_cache(maxsize=16)
def _by_metadata_statement(key: str) -> sa.Select[Message]:
    """A session's messages whose ``metadata[key]`` equals a value, in order (one per key)."""
    return (
        sa.select(Message)
        .where(
            Message.session_id == bindparam("session_id"),
            Message.metadata_[key].as_string() == bindparam("value"),
        )
        .order_by(Message.seq)
    )


class _Repository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    @property
    def dialect(self) -> str:
        return self.session.get_bind().dialect.name

    async def _insert(self, row: Base, conflict: Callable[[], DomainError]) -> None:
        """Insert ``row`` now, turning a uniqueness clash into ``conflict()``.

        One Core ``INSERT … RETURNING`` (a flush of the unit of work costs several times
        more); the returned columns, server defaults included, fill ``row``, which then joins
        the session as if it had been loaded. Like a flush, a ``None`` leaves a column with a
        server default to that default. No savepoint: a clash ends the unit of work (the
        caller raises, the transaction rolls back), so nothing ever continues in it.
        """
        columns = _column_attributes(type(row))
        state = row.__dict__
        values = {
            column.name: state[key]
            for key, column in columns
            if key in state and not (state[key] is None and column.server_default is not None)
        }
        try:
            returned = (await self.session.execute(_insert_statement(type(row)), values)).one()
        except IntegrityError as exc:
            raise conflict() from exc
        _attach(self.session, row, returned._mapping)


class SessionRepository(_Repository):
    async def create(
        self,
        id: str | None = None,
        *,
        title: str | None = None,
        agent: str | None = None,
        cwd: str | None = None,
        extra: dict[str, Any] | None = None,
        created_at: datetime | None = None,
        updated_at: datetime | None = None,
        archived_at: datetime | None = None,
    ) -> Session:
        session_id = validate_session_id(id) if id is not None else new_id("conv")
        now = utcnow()
        row = Session(
            id=session_id,
            title=title,
            agent=agent,
            cwd=cwd,
            extra=extra,
            created_at=created_at or now,
            updated_at=updated_at or created_at or now,
            archived_at=archived_at,
        )
        if await self.session.get(Session, session_id) is not None:
            raise Conflict(
                f"conversation {session_id!r} already exists", code=errors.CONVERSATION_EXISTS
            )
        await self._insert(
            row,
            lambda: Conflict(
                f"conversation {session_id!r} already exists", code=errors.CONVERSATION_EXISTS
            ),
        )
        return row

    async def get(self, session_id: str) -> Session | None:
        return await self.session.get(Session, session_id)

    async def require(self, session_id: str) -> Session:
        """The session, or ``conversation_not_found``."""
        row = await self.get(validate_session_id(session_id))
        if row is None:
            raise NotFound(
                f"conversation {session_id!r} does not exist", code=errors.CONVERSATION_NOT_FOUND
            )
        return row

    async def lock(self, session_id: str) -> Session | None:
        """Read the session holding its row lock (PostgreSQL) until the transaction ends."""
        return (await self.lock_many([session_id])).get(session_id)

    async def lock_many(self, session_ids: Iterable[str | None]) -> dict[str, Session]:
        """Lock several sessions (PostgreSQL) in id order, so two writers never deadlock.

        Returns the ones that exist, by id. A row this transaction already locked stays
        locked until it ends, so it is not read and locked a second time.
        """
        ids = sorted({sid for sid in session_ids if sid})
        locked = self._locked_rows()
        missing = [sid for sid in ids if sid not in locked]
        if missing:
            for row in (await self.session.scalars(_LOCK_SESSIONS, {"ids": missing})).all():
                locked[row.id] = row
            # The SELECT began the transaction if it had not begun: remember it was this one.
            self.session.info["locked_sessions_of"] = self.session.sync_session.get_transaction()
            self.session.info["locked_sessions"] = locked
        return {sid: locked[sid] for sid in ids if sid in locked}

    def _locked_rows(self) -> dict[str, Session]:
        """The sessions locked by the current transaction, by id (forgotten when it ends)."""
        transaction = self.session.sync_session.get_transaction()
        info = self.session.info
        if transaction is None or info.get("locked_sessions_of") is not transaction:
            return {}
        locked: dict[str, Session] = info["locked_sessions"]
        return locked

    async def touch(self, session_id: str, at: datetime | None = None) -> bool:
        """Bump ``updated_at`` (taking the row lock); False when the session does not exist."""
        params = {"session_id": session_id, "at": at or utcnow()}
        result = await self.session.execute(_TOUCH_SESSION, params)
        return bool(result.rowcount)  # type: ignore[attr-defined]

    async def list_page(
        self, *, limit: int = 50, cursor: str | None = None, include_archived: bool = True
    ) -> tuple[list[Session], str | None]:
        """Newest created first, keyset-paginated by ``(created_at, id)``."""
        stmt = sa.select(Session).order_by(Session.created_at.desc(), Session.id.desc())
        if not include_archived:
            stmt = stmt.where(Session.archived_at.is_(None))
        if cursor:
            created_at, last_id = decode_cursor(cursor, (datetime, str))
            stmt = stmt.where(
                sa.tuple_(Session.created_at, Session.id) < sa.tuple_(created_at, last_id)
            )
        rows = list((await self.session.scalars(stmt.limit(limit + 1))).all())
        next_cursor = None
        if len(rows) > limit:
            rows = rows[:limit]
            next_cursor = encode_cursor(rows[-1].created_at, rows[-1].id)
        return rows, next_cursor

    async def search(
        self, *, limit: int, query: str | None = None, include_archived: bool = False
    ) -> tuple[list[Session], bool]:
        """Newest activity first, optionally filtered by id or title; returns (rows, has_more)."""
        stmt = sa.select(Session).order_by(Session.updated_at.desc(), Session.id.desc())
        if not include_archived:
            stmt = stmt.where(Session.archived_at.is_(None))
        if query:
            pattern = f"%{query.lower()}%"
            stmt = stmt.where(
                sa.or_(
                    sa.func.lower(Session.title).like(pattern),
                    sa.func.lower(Session.id).like(pattern),
                )
            )
        rows = list((await self.session.scalars(stmt.limit(limit + 1))).all())
        return rows[:limit], len(rows) > limit

    async def update_columns(self, session_id: str, values: dict[str, Any]) -> None:
        """Overwrite the given columns of one session (the importer's final sync)."""
        stmt = sa.update(Session).where(Session.id == session_id).values(**values)
        await self.session.execute(stmt.execution_options(synchronize_session=False))


class MessageRepository(_Repository):
    async def append(
        self,
        session_id: str,
        role: str,
        content: str,
        *,
        metadata: dict[str, Any] | None = None,
        id: str | None = None,
        created_at: datetime | None = None,
    ) -> Message:
        """Append a message with the session's next ``seq``.

        Bumping the session's ``updated_at`` first takes its row lock (PostgreSQL) or the
        write lock (SQLite, ``BEGIN IMMEDIATE``), so concurrent appends get gap-free seqs.
        The seq is computed inside the INSERT, which returns the new row.
        """
        validate_choice(role, ROLES, errors.INVALID_ROLE, "role")
        if not isinstance(content, str):
            raise InvalidInput("content must be a string")
        now = utcnow()
        if not await SessionRepository(self.session).touch(session_id, now):
            raise NotFound(
                f"conversation {session_id!r} does not exist", code=errors.CONVERSATION_NOT_FOUND
            )
        message_id = id or new_id("msg")
        params = {
            "p_id": message_id,
            "p_session_id": session_id,
            "p_role": role,
            "p_content": content,
            "p_created_at": created_at or now,
            "p_metadata": metadata,
        }
        try:
            returned = (await self.session.execute(_APPEND_MESSAGE, params)).one()
        except IntegrityError as exc:
            raise Conflict(
                f"message id {message_id!r} already exists", code="message_exists"
            ) from exc
        message = Message()
        _attach(self.session, message, returned._mapping)
        return message

    async def get(self, message_id: str) -> Message | None:
        return await self.session.get(Message, message_id)

    async def list_after(
        self, session_id: str, *, after_seq: int = 0, limit: int = 100
    ) -> list[Message]:
        """Messages with ``seq > after_seq``, in order."""
        stmt = (
            sa.select(Message)
            .where(Message.session_id == session_id, Message.seq > after_seq)
            .order_by(Message.seq)
            .limit(limit)
        )
        return list((await self.session.scalars(stmt)).all())

    async def latest_by_role(self, session_id: str, role: str, *, limit: int) -> list[Message]:
        """The newest ``limit`` messages of ``role``, newest first (an index range scan)."""
        stmt = (
            sa.select(Message)
            .where(Message.session_id == session_id, Message.role == role)
            .order_by(Message.seq.desc())
            .limit(limit)
        )
        return list((await self.session.scalars(stmt)).all())

    async def count(self, session_ids: Iterable[str]) -> dict[str, int]:
        ids = list(session_ids)
        if not ids:
            return {}
        stmt = (
            sa.select(Message.session_id, sa.func.count())
            .where(Message.session_id.in_(ids))
            .group_by(Message.session_id)
        )
        return {sid: int(n) for sid, n in (await self.session.execute(stmt)).all()}

    async def list_by_metadata(self, session_id: str, key: str, value: str) -> list[Message]:
        """Every message of the session whose ``metadata[key]`` equals ``value``, in order."""
        params = {"session_id": session_id, "value": value}
        return list((await self.session.scalars(_by_metadata_statement(key), params)).all())

    async def find_by_metadata(self, session_id: str, key: str, value: str) -> Message | None:
        """The first message of the session whose ``metadata[key]`` equals ``value``."""
        params = {"session_id": session_id, "value": value}
        stmt = _by_metadata_statement(key).limit(1)
        return (await self.session.scalars(stmt, params)).first()

    async def find_reply_request_message(self, session_id: str, request_id: str) -> Message | None:
        """The message of the session that carried reply request ``request_id``.

        cc-web marks it with ``metadata.crossConversation.replyRequestId`` (older rows with a
        top-level ``metadata.replyRequestId``).
        """
        nested = Message.metadata_[("crossConversation", "replyRequestId")].as_string()
        top = Message.metadata_["replyRequestId"].as_string()
        stmt = (
            sa.select(Message)
            .where(
                Message.session_id == session_id, sa.or_(nested == request_id, top == request_id)
            )
            .order_by(Message.seq)
            .limit(1)
        )
        return (await self.session.scalars(stmt)).first()

    async def latest_nonblank_by_role(
        self, session_id: str, role: str, *, limit: int, before_seq: int | None = None
    ) -> list[MessageText]:
        """The newest ``limit`` non-blank ``role`` messages below ``before_seq``, newest first."""
        stmt = latest_nonblank_by_role_query(session_id, role, limit=limit, before_seq=before_seq)
        return [MessageText._make(row) for row in (await self.session.execute(stmt)).all()]

    async def find_prompt_card(self, prompt_id: str) -> Message | None:
        """The assistant message carrying ``metadata.ccwebPrompt.promptId == prompt_id``.

        Cards written here use the prompt id as their message id, so this is a primary-key
        read; cards imported from cc-web's JSON keep their own ids and are found by a JSON
        lookup over assistant messages (a scan, run only when the key read misses).
        """
        row = await self.session.get(Message, prompt_id)
        if row is not None and _prompt_id_of(row) == prompt_id:
            return row
        stmt = (
            sa.select(Message)
            .where(Message.role == "assistant", _prompt_field("promptId") == prompt_id)
            .order_by(Message.seq)
            .limit(1)
        )
        return (await self.session.scalars(stmt)).first()

    async def snapshot(self, session_id: str) -> list[sa.Row[Any]]:
        """Every message of the session as ``(id, seq, role, content, created_at, metadata)``."""
        stmt = sa.select(
            Message.id,
            Message.seq,
            Message.role,
            Message.content,
            Message.created_at,
            Message.metadata_,
        ).where(Message.session_id == session_id)
        return list((await self.session.execute(stmt)).all())

    async def owners(self, message_ids: Sequence[str], *, chunk: int = 500) -> dict[str, str]:
        """``{message_id: session_id}`` for those of ``message_ids`` that exist."""
        owners: dict[str, str] = {}
        for start in range(0, len(message_ids), chunk):
            stmt = sa.select(Message.id, Message.session_id).where(
                Message.id.in_(message_ids[start : start + chunk])
            )
            owners.update({mid: sid for mid, sid in (await self.session.execute(stmt)).all()})
        return owners

    async def insert_many(self, rows: Sequence[dict[str, Any]]) -> None:
        """Insert rows (attribute names as keys) in batches: one executemany, not N adds.

        A Core insert, so an explicit ``created_at: None`` stays NULL (legacy rows) instead of
        taking the server default as the ORM would.
        """
        if rows:
            columns = {attr.key: attr.columns[0].name for attr in Message.__mapper__.column_attrs}
            params = [{columns[key]: value for key, value in row.items()} for row in rows]
            table = Message.metadata.tables[Message.__tablename__]
            await self.session.execute(sa.insert(table), params)

    async def update_many(self, rows: Sequence[dict[str, Any]]) -> None:
        """Update rows by primary key (each dict holds ``id`` and the new values)."""
        if rows:
            await self.session.execute(sa.update(Message), list(rows))

    async def answer_prompt_card(self, message_id: str, metadata: dict[str, Any]) -> bool:
        """Replace the card's metadata only while its prompt is still pending; True if it won."""
        stmt = (
            sa.update(Message)
            .where(Message.id == message_id, _prompt_field("status") == "pending")
            .values({Message.metadata_: metadata})
            .execution_options(synchronize_session=False)
        )
        won = bool((await self.session.execute(stmt)).rowcount)  # type: ignore[attr-defined]
        if won:
            row = await self.session.get(Message, message_id)
            if row is not None:
                await self.session.refresh(row)
        return won


#: Characters a blank message consists of, as far as SQL can tell (Python decides the rest).
_BLANK_CHARACTERS = " \t\n\r\f\v"


def _prompt_field(name: str) -> sa.ColumnElement[str]:
    """``metadata.ccwebPrompt.<name>`` as text (SQLite ``json_extract``, PostgreSQL ``#>>``)."""
    field: sa.ColumnElement[str] = Message.metadata_[("ccwebPrompt", name)].as_string()
    return field


def _prompt_id_of(row: Message) -> object:
    prompt = (row.metadata_ or {}).get("ccwebPrompt")
    return prompt.get("promptId") if isinstance(prompt, dict) else None


class MessageText(NamedTuple):
    """The columns a reader of message text needs (no metadata, no ORM identity)."""

    id: str
    seq: int
    content: str
    created_at: datetime | None


def latest_nonblank_by_role_query(
    session_id: str, role: str, *, limit: int, before_seq: int | None = None
) -> sa.Select[str, int, str, datetime | None]:
    """SELECT the newest ``limit`` messages of ``role`` whose content is not blank.

    A backward range scan of ``ix_messages_session_id_role_seq``: the blank test is a filter
    on the rows the index yields, so it reads ``limit`` rows plus any blank ones among them.
    """
    stmt = sa.select(Message.id, Message.seq, Message.content, Message.created_at).where(
        Message.session_id == session_id,
        Message.role == role,
        sa.func.trim(Message.content, _BLANK_CHARACTERS) != "",
    )
    if before_seq is not None:
        stmt = stmt.where(Message.seq < before_seq)
    return stmt.order_by(Message.seq.desc()).limit(limit)


class ReplyRepository(_Repository):
    async def add(self, row: ReplyRequest) -> ReplyRequest:
        validate_choice(row.status, REPLY_STATUSES, errors.INVALID_STATUS, "reply status")
        row.created_at = row.created_at or utcnow()
        await self._insert(
            row,
            lambda: Conflict(
                f"reply request {row.request_id!r} already exists", code="request_exists"
            ),
        )
        return row

    async def get(self, request_id: str, *, for_update: bool = False) -> ReplyRequest | None:
        """The request; ``for_update`` locks the row (PostgreSQL) and re-reads it fresh."""
        stmt = _LOCK_REPLY if for_update else _GET_REPLY
        return (await self.session.execute(stmt, {"request_id": request_id})).scalar_one_or_none()

    async def require(self, request_id: str, *, for_update: bool = False) -> ReplyRequest:
        row = await self.get(request_id, for_update=for_update)
        if row is None:
            raise NotFound(
                f"reply request {request_id!r} does not exist", code=errors.REQUEST_NOT_FOUND
            )
        return row

    async def transition(
        self, request_id: str, from_statuses: Sequence[str], to_status: str, **values: Any
    ) -> bool:
        """Move to ``to_status`` only from one of ``from_statuses``; True if it moved."""
        validate_choice(to_status, REPLY_STATUSES, errors.INVALID_STATUS, "reply status")
        stmt = _transition_statement(tuple(sorted(values)))
        params = {f"v_{column}": value for column, value in values.items()}
        params |= {
            "p_request_id": request_id,
            "from_statuses": list(from_statuses),
            "to_status": to_status,
        }
        return (await _update_one(self.session, ReplyRequest, stmt, params)) is not None

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
    ) -> tuple[list[ReplyRequest], str | None]:
        """Oldest first, keyset-paginated by ``(created_at, request_id)``."""
        stmt = sa.select(ReplyRequest).order_by(ReplyRequest.created_at, ReplyRequest.request_id)
        if statuses:
            for status in statuses:
                validate_choice(status, REPLY_STATUSES, errors.INVALID_STATUS, "reply status")
            stmt = stmt.where(ReplyRequest.status.in_(statuses))
        if session_id is not None:
            sides = []
            if as_source:
                sides.append(ReplyRequest.source_conversation_id == session_id)
            if as_target:
                sides.append(ReplyRequest.target_conversation_id == session_id)
            stmt = stmt.where(sa.or_(*sides))
        if older_than is not None:
            stmt = stmt.where(ReplyRequest.created_at < older_than)
        if cursor:
            created_at, last_id = decode_cursor(cursor, (datetime, str))
            stmt = stmt.where(
                sa.tuple_(ReplyRequest.created_at, ReplyRequest.request_id)
                > sa.tuple_(created_at, last_id)
            )
        rows = list((await self.session.scalars(stmt.limit(limit + 1))).all())
        next_cursor = None
        if len(rows) > limit:
            rows = rows[:limit]
            next_cursor = encode_cursor(rows[-1].created_at, rows[-1].request_id)
        return rows, next_cursor

    async def deliverable_for_source(self, source_session_id: str) -> list[ReplyRequest]:
        """Replies owed to ``source_session_id``: ``ready`` ones, and ``failed`` ones whose
        notice has not been delivered yet (no ``reply_message_id``) and whose outcome was not
        settled before import (no ``returned_at``), oldest first."""
        params = {"session_id": source_session_id}
        return list((await self.session.scalars(_DELIVERABLE_FOR_SOURCE, params)).all())

    async def claim_failure_notice(self, request_id: str, message_id: str) -> bool:
        """Record that the failure notice ``message_id`` goes out for a failed request.

        Conditional on no notice having been recorded, so only one writer ever sends it, and
        on ``returned_at`` being NULL: an imported failure was settled in cc-web and is owed none.
        """
        stmt = (
            sa.update(ReplyRequest)
            .where(
                ReplyRequest.request_id == request_id,
                ReplyRequest.status == "failed",
                ReplyRequest.reply_message_id.is_(None),
                ReplyRequest.returned_at.is_(None),
            )
            .values(reply_message_id=message_id)
        )
        return (await _update_returning(self.session, stmt, ReplyRequest)) is not None

    async def ready_for_source(self, source_session_id: str) -> list[ReplyRequest]:
        """Replies ready to deliver to ``source_session_id``, oldest first."""
        stmt = (
            sa.select(ReplyRequest)
            .where(
                ReplyRequest.source_conversation_id == source_session_id,
                ReplyRequest.status == "ready",
            )
            .order_by(ReplyRequest.created_at, ReplyRequest.request_id)
        )
        return list((await self.session.scalars(stmt)).all())

    async def get_many(
        self, request_ids: Sequence[str], *, chunk: int = 500
    ) -> dict[str, ReplyRequest]:
        """The existing requests among ``request_ids``, by id."""
        found: dict[str, ReplyRequest] = {}
        for start in range(0, len(request_ids), chunk):
            stmt = sa.select(ReplyRequest).where(
                ReplyRequest.request_id.in_(request_ids[start : start + chunk])
            )
            found.update({row.request_id: row for row in (await self.session.scalars(stmt))})
        return found

    async def insert_many(self, rows: Sequence[dict[str, Any]]) -> None:
        """Insert request rows in one batch (keys are column names)."""
        if rows:
            await self.session.execute(sa.insert(ReplyRequest), list(rows))

    async def update_columns(self, request_id: str, values: dict[str, Any]) -> None:
        """Overwrite the given columns of one request (the importer's forward-only sync)."""
        stmt = sa.update(ReplyRequest).where(ReplyRequest.request_id == request_id).values(**values)
        await self.session.execute(stmt.execution_options(synchronize_session=False))


class RunRepository(_Repository):
    async def enqueue(
        self,
        session_id: str,
        kind: str,
        *,
        runtime_text: str | None = None,
        hop_count: int = 0,
        reply_request_id: str | None = None,
    ) -> Run:
        """A new ``queued`` run."""
        return await self._add(
            session_id, kind, "queued", runtime_text, hop_count, reply_request_id
        )

    async def start(
        self,
        session_id: str,
        kind: str,
        *,
        runtime_text: str | None = None,
        hop_count: int = 0,
        reply_request_id: str | None = None,
        worker_id: str | None = None,
    ) -> Run:
        """A new run that is already ``running``; ``conversation_busy`` if one runs."""
        return await self._add(
            session_id, kind, "running", runtime_text, hop_count, reply_request_id, worker_id
        )

    async def _add(
        self,
        session_id: str,
        kind: str,
        status: str,
        runtime_text: str | None,
        hop_count: int,
        reply_request_id: str | None,
        worker_id: str | None = None,
    ) -> Run:
        validate_choice(kind, RUN_KINDS, errors.INVALID_KIND, "run kind")
        now = utcnow()
        row = Run(
            id=new_id("run"),
            session_id=session_id,
            kind=kind,
            status=status,
            runtime_text=runtime_text,
            hop_count=hop_count,
            reply_request_id=reply_request_id,
            worker_id=worker_id,
            attempts=0,
            created_at=now,
            started_at=now if status == "running" else None,
        )
        await self._insert(
            row,
            lambda: Conflict(
                f"conversation {session_id!r} already has a running run",
                code=errors.CONVERSATION_BUSY,
            ),
        )
        return row

    async def get(self, run_id: str, *, for_update: bool = False) -> Run | None:
        stmt = _LOCK_RUN if for_update else _GET_RUN
        return (await self.session.execute(stmt, {"run_id": run_id})).scalar_one_or_none()

    async def require(self, run_id: str, *, for_update: bool = False) -> Run:
        row = await self.get(run_id, for_update=for_update)
        if row is None:
            raise NotFound(f"run {run_id!r} does not exist", code=errors.RUN_NOT_FOUND)
        return row

    async def active_for_session(self, session_id: str) -> list[Run]:
        """The session's queued and running runs, oldest first."""
        params = {"session_id": session_id}
        return list((await self.session.scalars(_ACTIVE_RUNS_OF_SESSION, params)).all())

    async def has_run_in(self, session_id: str, statuses: Sequence[str]) -> bool:
        """Whether the session has a run in one of ``statuses`` (an index probe)."""
        params = {"session_id": session_id, "statuses": list(statuses)}
        return bool(await self.session.scalar(_SESSION_HAS_RUN_IN, params))

    async def open_for_request(self, request_id: str) -> list[Run]:
        """Queued or running ``cross_conversation`` runs that answer ``request_id``."""
        stmt = sa.select(Run).where(
            Run.reply_request_id == request_id,
            Run.kind == "cross_conversation",
            Run.status.in_(("queued", "running")),
        )
        return list((await self.session.scalars(stmt)).all())

    async def running_for_sessions(self, session_ids: Iterable[str]) -> dict[str, Run]:
        ids = list(session_ids)
        if not ids:
            return {}
        rows = (await self.session.scalars(_RUNNING_RUNS_OF_SESSIONS, {"ids": ids})).all()
        return {run.session_id: run for run in rows}

    async def active_for_sessions(self, session_ids: Iterable[str]) -> dict[str, Run]:
        """Each session's active run: its running run, else its oldest queued one."""
        ids = list(session_ids)
        if not ids:
            return {}
        stmt = (
            sa.select(Run)
            .where(Run.session_id.in_(ids), Run.status.in_(("queued", "running")))
            .order_by(Run.created_at, Run.id)
        )
        active: dict[str, Run] = {}
        for run in (await self.session.scalars(stmt)).all():
            current = active.get(run.session_id)
            if current is None or (run.status == "running" and current.status != "running"):
                active[run.session_id] = run
        return active

    async def claim(
        self,
        worker_id: str,
        *,
        lease_seconds: int,
        kinds: Sequence[str] | None = None,
        now: datetime | None = None,
    ) -> Run | None:
        """Take the oldest queued run of a session that has no running run, leased to ``worker_id``.

        PostgreSQL skips rows other claimers hold (``FOR UPDATE SKIP LOCKED``); the partial
        unique index settles two claimers racing for different runs of one session.
        """
        now = now or utcnow()
        for kind in kinds or ():
            validate_choice(kind, RUN_KINDS, errors.INVALID_KIND, "run kind")
        params = {"kinds": list(kinds or RUN_KINDS)}
        for candidate in (await self.session.scalars(_CLAIMABLE_RUNS, params)).all():
            if self.dialect == "sqlite":
                # BEGIN IMMEDIATE: no other writer can start a run of this session meanwhile.
                won = await self._set_running(candidate.id, worker_id, lease_seconds, now)
            else:
                try:
                    async with self.session.begin_nested():
                        won = await self._set_running(candidate.id, worker_id, lease_seconds, now)
                except IntegrityError:
                    continue  # another claimer started a run of this session first
            if won:
                return candidate
        return None

    async def _set_running(
        self, run_id: str, worker_id: str, lease_seconds: int, now: datetime
    ) -> bool:
        params = {
            "p_run_id": run_id,
            "p_worker_id": worker_id,
            "p_now": now,
            "p_lease_expires_at": now + timedelta(seconds=lease_seconds),
        }
        return (await _update_one(self.session, Run, _SET_RUNNING, params)) is not None

    async def heartbeat(
        self, run_id: str, worker_id: str, *, lease_seconds: int, now: datetime | None = None
    ) -> bool:
        """Extend the lease if ``worker_id`` still holds the running run."""
        now = now or utcnow()
        stmt = (
            sa.update(Run)
            .where(Run.id == run_id, Run.status == "running", Run.worker_id == worker_id)
            .values(lease_expires_at=now + timedelta(seconds=lease_seconds))
        )
        return (await _update_returning(self.session, stmt, Run)) is not None

    async def finish(
        self,
        run_id: str,
        status: str,
        *,
        output: str | None = None,
        error: str | None = None,
        from_statuses: Sequence[str] = ("queued", "running"),
        now: datetime | None = None,
    ) -> Run | None:
        """Close the run as ``completed``/``failed``/``cancelled`` if it is still open; the
        closed run, or None if it was not open."""
        validate_choice(
            status, ("completed", "failed", "cancelled"), errors.INVALID_STATUS, "run status"
        )
        params = {
            "p_run_id": run_id,
            "p_from": list(from_statuses),
            "p_status": status,
            "p_output": output,
            "p_error": error,
            "p_now": now or utcnow(),
        }
        return await _update_one(self.session, Run, _FINISH_RUN, params)

    async def has_expired_lease(self, *, now: datetime | None = None) -> bool:
        """Whether any running run's lease has passed (an index probe on ``status``)."""
        return bool(await self.session.scalar(_ANY_EXPIRED_LEASE, {"now": now or utcnow()}))

    async def expired(self, *, now: datetime | None = None, limit: int = 100) -> list[Run]:
        """Running runs whose lease has passed (skipping rows another process holds)."""
        stmt = (
            sa.select(Run)
            .where(Run.status == "running", Run.lease_expires_at < (now or utcnow()))
            .order_by(Run.lease_expires_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        return list((await self.session.scalars(stmt)).all())

    async def requeue(self, run_id: str, *, count_attempt: bool = True) -> bool:
        """Put a running run back in the queue (its worker is gone)."""
        values: dict[str, Any] = {"status": "queued", "worker_id": None, "lease_expires_at": None}
        if count_attempt:
            values["attempts"] = Run.attempts + 1
        stmt = sa.update(Run).where(Run.id == run_id, Run.status == "running").values(**values)
        return (await _update_returning(self.session, stmt, Run)) is not None

    async def list_recent(
        self,
        *,
        session_id: str | None = None,
        statuses: Sequence[str] | None = None,
        created_before: datetime | None = None,
        limit: int = 50,
    ) -> list[Run]:
        """Newest first."""
        stmt = sa.select(Run).order_by(Run.created_at.desc(), Run.id.desc()).limit(limit)
        if session_id is not None:
            stmt = stmt.where(Run.session_id == session_id)
        if created_before is not None:
            stmt = stmt.where(Run.created_at < created_before)
        if statuses:
            for status in statuses:
                validate_choice(status, RUN_STATUSES, errors.INVALID_STATUS, "run status")
            stmt = stmt.where(Run.status.in_(statuses))
        return list((await self.session.scalars(stmt)).all())


async def _update_returning(session: AsyncSession, stmt: sa.Update, model: type[_T]) -> _T | None:
    """Run a conditional UPDATE of one row; the updated row if it matched, else None.

    ``RETURNING`` the row refreshes the loaded object in the same statement (SQLite ≥ 3.35
    and PostgreSQL both support it), instead of a second SELECT.
    """
    returning = stmt.returning(model).execution_options(
        synchronize_session=False, populate_existing=True
    )
    row: _T | None = (await session.execute(returning)).scalars().first()
    return row


def _attach(session: AsyncSession, row: Base, returned: Mapping[Any, Any]) -> None:
    """Fill ``row`` from a ``RETURNING`` of every column and make it a loaded object."""
    for key, column in _column_attributes(type(row)):
        setattr(row, key, returned[column])
    make_transient_to_detached(row)
    session.add(row)


async def _update_one(
    session: AsyncSession,
    model: type[_B],
    stmt: sa.UpdateBase,
    params: dict[str, Any],
) -> _B | None:
    """Run a Core UPDATE of one row returning every column; the session's object for the
    row, refreshed from it (as ``populate_existing`` would), or None if no row matched."""
    row = (await session.execute(stmt, params)).first()
    if row is None:
        return None
    values = row._mapping
    mapper = sa.inspect(model)
    key = identity_key(model, tuple(values[column] for column in mapper.primary_key))
    loaded = session.sync_session.identity_map.get(key)
    if loaded is None:
        fresh = model()
        _attach(session, fresh, values)
        return fresh
    for attribute, column in _column_attributes(model):
        set_committed_value(loaded, attribute, values[column])
    found: _B = loaded
    return found
