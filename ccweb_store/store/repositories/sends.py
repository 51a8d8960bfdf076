"""The writes of a send and of a reply's return, each as one ``statements.Batch``.

A send (``messaging``): the target's touch, its message, the reply request and its run. A
reply returned at once (``replies._return_at_once``): the source's touch, the reply message and
the source's auto-run. The messages and the runs are written by the statements
``MessageRepository.append_id`` and ``RunRepository.enqueue_id`` write them with; the touch
and the request only these write this way (the caller read and, on PostgreSQL, locked the
conversation already, so the touch needs no ``RETURNING``, and a request is ``waiting`` when
it is made). Neither reads back what it writes; a database whose round trips cost more
than its statements runs a batch as one statement (``Transaction.one_statement_batches``). A
run's output at its completion (``append_read``) is a message appended and read back, the
touch and the INSERT one batch too.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.sql.expression import bindparam

from ccweb_store.domain import errors
from ccweb_store.store.models import ROLES, Message, new_id, utcnow
from ccweb_store.store.repositories.base import (
    REPLIES,
    SESSIONS,
    Repository,
    constant,
    validate_choice,
)
from ccweb_store.store.repositories.messages import (
    _APPEND_MESSAGE,
    _APPEND_MESSAGE_UNREAD,
)
from ccweb_store.store.repositories.runs import _ENQUEUE
from ccweb_store.store.statements import Batch

Step = tuple[UpdateBase, dict[str, str]]

#: A conversation read (and on PostgreSQL locked) in this transaction already, bumped.
_TOUCH = (
    sa.update(SESSIONS)
    .where(SESSIONS.c.id == bindparam("session_id"))
    .values(updated_at=bindparam("now"))
)


def _touch(conversation: str) -> Step:
    """The conversation whose id is the values' ``conversation`` bumped to ``now``."""
    return _TOUCH, {"session_id": conversation, "now": "now"}


def _message(conversation: str, stmt: UpdateBase = _APPEND_MESSAGE_UNREAD) -> Step:
    """The message ``message_id`` (``role``, ``content``, ``metadata``) appended to it (by
    ``stmt``: the INSERT that returns nothing, or the one that returns the row)."""
    names = {"p_id": "message_id", "p_role": "role", "p_content": "content"}
    return stmt, names | {
        "p_session_id": conversation,
        "p_created_at": "now",
        "p_metadata": "metadata",
    }


def _run(conversation: str) -> Step:
    """Its queued run ``run_id`` of ``kind``, answering ``request_id`` (or nothing)."""
    return _ENQUEUE, {
        "p_id": "run_id",
        "p_session_id": conversation,
        "p_kind": "kind",
        "p_runtime_text": "runtime_text",
        "p_reply_request_id": "request_id",
        "p_hop_count": "hop_count",
        "p_created_at": "now",
    }


#: A send's request: only the columns a send sets; the rest keep their defaults.
_REQUEST: Step = (
    sa.insert(REPLIES).values(
        request_id=bindparam("request_id"),
        message_id=bindparam("message_id"),
        source_conversation_id=bindparam("source_id"),
        source_title=bindparam("source_title"),
        target_conversation_id=bindparam("target_id"),
        target_title=bindparam("target_title"),
        status=constant("waiting"),
        hop_count=bindparam("hop_count"),
        source_auto_run=sa.true(),
        original_request=bindparam("content"),
        created_at=bindparam("now"),
    ),
    {
        name: name
        for name in (
            "request_id",
            "message_id",
            "source_id",
            "source_title",
            "target_id",
            "target_title",
            "hop_count",
            "content",
            "now",
        )
    },
)
#: A ``one_way`` send: no reply request.
_ONE_WAY = Batch(_touch("target_id"), _message("target_id"), _run("target_id"))
#: A ``return_and_continue`` send: the request between the message it answers and the run.
_RETURN_AND_CONTINUE = Batch(
    _touch("target_id"), _message("target_id"), _REQUEST, _run("target_id")
)
#: A reply returned to its source, without and with the source's auto-run.
_REPLY_ONLY = Batch(_touch("source_id"), _message("source_id"))
_REPLY_AND_AUTO_RUN = Batch(_touch("source_id"), _message("source_id"), _run("source_id"))
#: A message appended and read back (``SendRepository.append_read``).
_APPEND_READ = Batch(_touch("conversation"), _message("conversation", _APPEND_MESSAGE))


class SendRepository(Repository):
    """The writes of a send or a reply's return, in a transaction that read (and on
    PostgreSQL locked) the conversations it writes to already."""

    async def append_read(
        self, session_id: str, role: str, content: str, *, metadata: dict[str, Any]
    ) -> Message:
        """``MessageRepository.append`` to a conversation this transaction read (and locked)
        already (``SessionRepository.lock_many``: a run's output at its completion): the
        touch and the INSERT as one batch; the lock already held, the INSERT's ``seq`` reads a
        snapshot no other append to the conversation can have overtaken."""
        validate_choice(role, ROLES, errors.INVALID_ROLE, "role")
        values = {
            "conversation": session_id,
            "now": utcnow(),
            "message_id": new_id("msg"),
            "role": role,
            "content": content,
            "metadata": metadata,
        }
        returned = (await self._execute_batch(_APPEND_READ, values)).one()
        return self._load(Message, returned)

    async def deliver(
        self,
        *,
        source: tuple[str, str | None],
        target: tuple[str, str | None],
        content: str,
        metadata: dict[str, Any],
        hop_count: int,
        runtime_text: str,
        message_id: str,
        run_id: str,
        request_id: str | None,
        now: datetime,
    ) -> None:
        """Bump the target (to ``now``), append its ``user`` message, insert the ``waiting``
        request when ``request_id`` is given, and queue the target's ``cross_conversation``
        run. ``source`` and ``target`` are (conversation id, title)."""
        values = {
            "now": now,
            "target_id": target[0],
            "target_title": target[1],
            "source_id": source[0],
            "source_title": source[1],
            "message_id": message_id,
            "role": "user",
            "content": content,
            "metadata": metadata,
            "request_id": request_id,
            "hop_count": hop_count,
            "run_id": run_id,
            "kind": "cross_conversation",
            "runtime_text": runtime_text,
        }
        batch = _ONE_WAY if request_id is None else _RETURN_AND_CONTINUE
        await self._execute_batch(batch, values)

    async def return_reply(
        self,
        *,
        source_id: str,
        request_id: str,
        message_id: str,
        content: str,
        metadata: dict[str, Any],
        auto_run: tuple[str, int] | None,
        now: datetime,
    ) -> None:
        """Bump the source (to ``now``), append the reply as its ``assistant`` message
        ``message_id``, and queue its ``reply_auto_run`` when ``auto_run`` gives its runtime
        text and hop count."""
        values: dict[str, Any] = {
            "now": now,
            "source_id": source_id,
            "message_id": message_id,
            "role": "assistant",
            "content": content,
            "metadata": metadata,
        }
        if auto_run is None:
            await self._execute_batch(_REPLY_ONLY, values)
            return
        values |= {
            "run_id": new_id("run"),
            "kind": "reply_auto_run",
            "runtime_text": auto_run[0],
            "hop_count": auto_run[1],
            "request_id": request_id,
        }
        await self._execute_batch(_REPLY_AND_AUTO_RUN, values)
