"""Messages: append with the next seq, read in order, find by metadata (the replies to a
request by index), prompt cards."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.expression import bindparam

from ccweb_store.domain import errors
from ccweb_store.domain.errors import Conflict, InvalidInput, NotFound
from ccweb_store.domain.events import MessageAppended
from ccweb_store.domain.ids import ROLES, new_id, validate_choice
from ccweb_store.domain.kinds import Role
from ccweb_store.domain.rows import Message
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.store.column_types import IsoText
from ccweb_store.store.models import reply_to_request_id
from ccweb_store.store.repositories.base import (
    MESSAGES,
    prebuilt,
)
from ccweb_store.store.repositories.batch_steps import BatchStep
from ccweb_store.store.repositories.message_import import MessageImport
from ccweb_store.store.repositories.sessions import SessionRepository

#: A message appended with its session's next ``seq``, computed inside the INSERT; only the
#: session's write lock (``SessionRepository.touch``, taken first) keeps seqs gap-free.
APPEND_MESSAGE_UNREAD = prebuilt(
    sa.insert(MESSAGES).values(
        id=bindparam("p_id"),
        session_id=bindparam("p_session_id"),
        seq=sa.select(sa.func.coalesce(sa.func.max(MESSAGES.c.seq), 0) + 1)
        .where(MESSAGES.c.session_id == bindparam("p_session_id"))
        .scalar_subquery(),
        role=bindparam("p_role"),
        content=bindparam("p_content"),
        created_at=bindparam("p_created_at"),
        metadata=bindparam("p_metadata"),
    )
)
#: The same, returning the new row.
APPEND_MESSAGE = prebuilt(APPEND_MESSAGE_UNREAD.returning(*MESSAGES.c))


def append_step(session: str) -> BatchStep:
    """A ``statements.Batch`` step: the message ``message_id`` (``role``, ``content``,
    ``metadata``, made ``now``) appended to the session the values' ``session`` names
    (``APPEND_MESSAGE_UNREAD``; a batch reads it back by ``message_id``). The batch must
    touch the session first, as ``MessageRepository.append`` does."""
    return APPEND_MESSAGE_UNREAD, {
        "p_id": "message_id",
        "p_session_id": session,
        "p_role": "role",
        "p_content": "content",
        "p_created_at": "now",
        "p_metadata": "metadata",
    }


_GET_MESSAGE = prebuilt(sa.select(MESSAGES).where(MESSAGES.c.id == bindparam("message_id")))
#: A session's messages whose ``metadata.replyToRequestId`` names a request, in order: a probe
#: of ``ix_messages_reply_to_request_id`` (migration 0006), which ``reply_to_request_id``
#: renders with its key as a literal so that both planners match it to the index.
REPLIES_TO_REQUEST = prebuilt(
    sa.select(MESSAGES)
    .where(
        reply_to_request_id() == bindparam("request_id"),
        MESSAGES.c.session_id == bindparam("session_id"),
    )
    .order_by(MESSAGES.c.seq)
)


def _reply_request_message() -> sa.Select[Any]:
    """The first message of a session that carried a reply request (see
    ``MessageRepository.find_reply_request_message``).

    A row's JSON is looked into only when its text holds ``replyRequestId`` or a ``\\u``
    escape, which could spell that key otherwise: the same rows come out, but most rows of a
    long conversation are never parsed.
    """
    metadata = MESSAGES.c["metadata"]
    matches = sa.or_(
        metadata[("crossConversation", "replyRequestId")].as_string() == bindparam("request_id"),
        metadata["replyRequestId"].as_string() == bindparam("request_id"),
    )
    text = sa.cast(metadata, sa.Text)
    matches = sa.and_(sa.or_(text.contains("replyRequestId"), text.contains("\\u")), matches)
    return (
        sa.select(MESSAGES)
        .where(MESSAGES.c.session_id == bindparam("session_id"), matches)
        .order_by(MESSAGES.c.seq)
        .limit(1)
    )


REPLY_REQUEST_MESSAGE = prebuilt(_reply_request_message())


@lru_cache(maxsize=16)
def _by_metadata_statement(key: str) -> sa.Select[Any]:
    """A session's messages whose ``metadata[key]`` equals a value, in order (one per key)."""
    return prebuilt(
        sa.select(MESSAGES)
        .where(
            MESSAGES.c.session_id == bindparam("session_id"),
            MESSAGES.c["metadata"][key].as_string() == bindparam("value"),
        )
        .order_by(MESSAGES.c.seq)
    )


class MessageRepository(MessageImport):
    """Messages: append, read, find by metadata; the importer's bulk calls are
    ``MessageImport``'s."""

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
        params = await self._append_params(
            session_id, role, content, metadata, id, created_at, None
        )
        returned = (await self._run_append(APPEND_MESSAGE, params)).one()
        self._note_appended(params)
        return self._load(Message, returned)

    async def append_id(
        self,
        session_id: str,
        role: str,
        content: str,
        *,
        metadata: dict[str, Any] | None = None,
        id: str | None = None,
        now: datetime | None = None,
    ) -> str:
        """``append`` without reading the row back: the new message's id. ``now`` is its time
        and its session's (default: the current time)."""
        params = await self._append_params(session_id, role, content, metadata, id, now, now)
        await self._run_append(APPEND_MESSAGE_UNREAD, params)
        self._note_appended(params)
        message_id: str = params["p_id"]
        return message_id

    def _note_appended(self, params: dict[str, Any]) -> None:
        self.state.note(
            MessageAppended(
                conversation_id=params["p_session_id"],
                message_id=params["p_id"],
                role=params["p_role"],
            )
        )

    async def _append_params(
        self,
        session_id: str,
        role: str,
        content: str,
        metadata: dict[str, Any] | None,
        id: str | None,
        created_at: datetime | None,
        now: datetime | None,
    ) -> dict[str, Any]:
        """Check the message, bump its session (see ``append``) to ``now`` (default: the
        current time); the INSERT's parameters."""
        validate_choice(role, ROLES, errors.INVALID_ROLE, "role")
        if not isinstance(content, str):
            raise InvalidInput("content must be a string")
        now = now or utcnow()
        sessions = SessionRepository(self.state)
        if not await sessions.touch(session_id, now, message_at=created_at or now):
            raise NotFound(
                f"conversation {session_id!r} does not exist", code=errors.CONVERSATION_NOT_FOUND
            )
        return {
            "p_id": id or new_id("msg"),
            "p_session_id": session_id,
            "p_role": role,
            "p_content": content,
            "p_created_at": created_at or now,
            "p_metadata": metadata,
        }

    async def _run_append(self, stmt: sa.Insert, params: dict[str, Any]) -> Any:
        try:
            return await self._execute(stmt, params)
        except IntegrityError as exc:
            raise Conflict(
                f"message id {params['p_id']!r} already exists; leave id out to get a new one",
                code=errors.MESSAGE_EXISTS,
            ) from exc

    async def get(self, message_id: str) -> Message | None:
        return await self._first(Message, _GET_MESSAGE, {"message_id": message_id})

    async def list_after(
        self, session_id: str, *, after_seq: int = 0, limit: int = 100
    ) -> list[Message]:
        """Messages with ``seq > after_seq``, in order."""
        stmt = (
            sa.select(MESSAGES)
            .where(MESSAGES.c.session_id == session_id, MESSAGES.c.seq > after_seq)
            .order_by(MESSAGES.c.seq)
            .limit(limit)
        )
        return await self._all(Message, stmt)

    async def list_before(
        self,
        session_id: str,
        *,
        before_seq: int | None = None,
        limit: int = 100,
        role: str | None = None,
    ) -> list[Message]:
        """Messages with ``seq < before_seq`` (None: all), of ``role`` if given, newest first."""
        stmt = sa.select(MESSAGES).where(MESSAGES.c.session_id == session_id)
        if before_seq is not None:
            stmt = stmt.where(MESSAGES.c.seq < before_seq)
        if role is not None:
            stmt = stmt.where(MESSAGES.c.role == role)
        return await self._all(Message, stmt.order_by(MESSAGES.c.seq.desc()).limit(limit))

    async def count(self, session_ids: Iterable[str]) -> dict[str, int]:
        ids = list(session_ids)
        if not ids:
            return {}
        stmt = (
            sa.select(MESSAGES.c.session_id, sa.func.count())
            .where(MESSAGES.c.session_id.in_(ids))
            .group_by(MESSAGES.c.session_id)
        )
        counts: Sequence[Any] = (await self._execute(stmt)).all()
        return {session_id: int(n) for session_id, n in counts}

    async def replies_to_request(self, session_id: str, request_id: str) -> list[Message]:
        """The session's messages whose ``metadata.replyToRequestId`` is ``request_id``, in
        order: the replies (and failure notices) already delivered for that request.

        An index probe (``REPLIES_TO_REQUEST``), however many messages the session holds.
        """
        params = {"session_id": session_id, "request_id": request_id}
        return await self._all(Message, REPLIES_TO_REQUEST, params)

    async def list_by_metadata(self, session_id: str, key: str, value: str) -> list[Message]:
        """Every message of the session whose ``metadata[key]`` equals ``value``, in order.

        It reads every message of the session (the path is a bound parameter, which no
        index can serve); ``replies_to_request`` is the indexed lookup for
        ``replyToRequestId``.
        """
        params = {"session_id": session_id, "value": value}
        return await self._all(Message, _by_metadata_statement(key), params)

    async def find_by_metadata(self, session_id: str, key: str, value: str) -> Message | None:
        """The first message of the session whose ``metadata[key]`` equals ``value``."""
        params = {"session_id": session_id, "value": value}
        return await self._first(Message, _by_metadata_statement(key).limit(1), params)

    async def find_reply_request_message(self, session_id: str, request_id: str) -> Message | None:
        """The message of the session that carried reply request ``request_id``.

        cc-web marks it with ``metadata.crossConversation.replyRequestId`` (older rows with a
        top-level ``metadata.replyRequestId``).
        """
        params = {"session_id": session_id, "request_id": request_id}
        return await self._first(Message, REPLY_REQUEST_MESSAGE, params)

    async def latest_nonblank_by_role(
        self, session_id: str, role: str, *, limit: int, before_seq: int | None = None
    ) -> list[MessageText]:
        """The newest ``limit`` non-blank ``role`` messages below ``before_seq``, newest first
        (``LATEST_NONBLANK_BY_ROLE``)."""
        below = NO_SEQ_ABOVE if before_seq is None else before_seq
        params = {"session_id": session_id, "role": role, "before_seq": below, "limit": limit}
        result = await self._execute(LATEST_NONBLANK_BY_ROLE, params)
        return [cast(MessageText, tuple(row)) for row in result.all()]

    async def find_prompt_card(self, prompt_id: str) -> Message | None:
        """The assistant message carrying ``metadata.ccwebPrompt.promptId == prompt_id``.

        Cards written here use the prompt id as their message id, so this is a primary-key
        read; cards imported from cc-web's JSON keep their own ids and are found by a JSON
        lookup over assistant messages (a scan, run only when the key read misses).
        """
        row = await self.get(prompt_id)
        if row is not None and _prompt_id_of(row) == prompt_id:
            return row
        stmt = (
            sa.select(MESSAGES)
            .where(MESSAGES.c.role == Role.ASSISTANT, _prompt_field("promptId") == prompt_id)
            .order_by(MESSAGES.c.seq)
            .limit(1)
        )
        return await self._first(Message, stmt)

    async def answer_prompt_card(self, message_id: str, metadata: dict[str, Any]) -> bool:
        """Replace the card's metadata only while its prompt is still pending; True if it won."""
        stmt = (
            sa.update(MESSAGES)
            .where(MESSAGES.c.id == message_id, _prompt_field("status") == "pending")
            .values({MESSAGES.c["metadata"]: metadata})
        )
        return await self._update_returning(Message, stmt) is not None


#: Characters a blank message consists of, as far as SQL can tell (Python decides the rest).
_BLANK_CHARACTERS = " \t\n\r\f\v"


def _prompt_field(name: str) -> sa.ColumnElement[str]:
    """``metadata.ccwebPrompt.<name>`` as text (SQLite ``json_extract``, PostgreSQL ``#>>``)."""
    field: sa.ColumnElement[str] = MESSAGES.c["metadata"][("ccwebPrompt", name)].as_string()
    return field


def _prompt_id_of(row: Message) -> object:
    prompt = (row.metadata_ or {}).get("ccwebPrompt")
    return prompt.get("promptId") if isinstance(prompt, dict) else None


#: The columns a reader of message text needs, ``(id, seq, content, created_at)``: no
#: metadata, no ORM identity, the time as the text ``timestamps.iso`` makes of it; a plain tuple,
#: as the driver returns a row.
MessageText = tuple[str, int, str, str | None]


#: Above every ``seq``: the largest BIGINT.
NO_SEQ_ABOVE = 2**63 - 1


def _latest_nonblank_by_role(
    value: Callable[[str, sa.types.TypeEngine[Any]], Any], not_blank: sa.ColumnElement[bool]
) -> sa.Select[Any]:
    """The newest ``limit`` messages of ``role`` below ``before_seq`` whose content is
    ``not_blank``, newest first, each parameter given by ``value(name, type)``."""
    return (
        sa.select(
            MESSAGES.c.id,
            MESSAGES.c.seq,
            MESSAGES.c.content,
            sa.type_coerce(MESSAGES.c.created_at, IsoText()).label("created_at"),
        )
        .where(
            MESSAGES.c.session_id == value("session_id", sa.String()),
            MESSAGES.c.role == value("role", sa.String()),
            not_blank,
            MESSAGES.c.seq < value("before_seq", sa.BigInteger()),
        )
        .order_by(MESSAGES.c.seq.desc())
        .limit(value("limit", sa.Integer()))
    )


def _planned_once(name: str, type_: sa.types.TypeEngine[Any]) -> sa.ScalarSelect[Any]:
    """A parameter the planner cannot see the value of: ``(SELECT $n)``.

    PostgreSQL plans a prepared statement anew for each call's values (a custom plan) until
    the plan it makes without them (the generic plan) costs no more; it costs a ``LIMIT`` or
    a range whose value it cannot see at a guess, so the generic plan of a plain parameter
    never looks cheap enough and every call pays for planning. Given as subqueries, the
    values are unknown to both plans, which then cost the same, and the statement runs on the
    plan made once per connection: the same backward range scan of the index. SQLite plans
    the same statement to the same scan (``tests/test_user_inputs.py`` checks both plans).
    """
    return sa.select(bindparam(name, type_=type_)).scalar_subquery()


#: ``content`` is not empty once the blank characters are trimmed.
_TRIMMED_NOT_EMPTY = sa.func.trim(MESSAGES.c.content, _BLANK_CHARACTERS) != ""

#: The newest ``limit`` messages of ``role`` below ``before_seq`` whose content is not blank,
#: newest first. A backward range scan of ``ix_messages_session_id_role_seq``: the blank test
#: is a filter on the rows the index yields, so it reads ``limit`` rows plus any blank ones
#: among them. The values are given as subqueries (``_planned_once``), so PostgreSQL plans the
#: statement once per connection.
LATEST_NONBLANK_BY_ROLE = prebuilt(_latest_nonblank_by_role(_planned_once, _TRIMMED_NOT_EMPTY))
