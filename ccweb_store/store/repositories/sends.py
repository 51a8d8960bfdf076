"""The writes of a send and of a reply's return, each as one ``statements.Batch`` of the steps
the tables' own modules build.

A send (``messaging``): the target's touch, its message, the reply request and its run. A
reply returned at once (``reply_delivery``): the source's touch, the reply message and the
source's auto-run. Each write is its table's statement (``sessions.touch_step``,
``messages.append_step``, ``replies.waiting_request_step``, ``runs.enqueue_step``); this
module only chooses which values fill them. The caller read and, on PostgreSQL, locked the
conversations already, so the touch needs no ``RETURNING``, and a request is ``waiting`` when
it is made. Nothing is read back; a database whose round trips cost more than its statements
runs a batch as one statement (``Transaction.one_statement_batches``; SQLite, as a view's
trigger). A run's output at its completion (``append_read``) is a message appended and read
back, its touch and INSERT one batch too. Each method notes its events before it runs its
batch, which on SQLite writes them (and any noted before) in the same statement.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ccweb_store.domain import errors
from ccweb_store.domain.events import MessageAppended, ReplyWaiting, RunQueued
from ccweb_store.domain.ids import ROLES, new_id, validate_choice
from ccweb_store.domain.kinds import Role, RunKind
from ccweb_store.domain.rows import Message
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.store.repositories.base import MESSAGES, Repository
from ccweb_store.store.repositories.messages import append_step
from ccweb_store.store.repositories.replies import waiting_request_step
from ccweb_store.store.repositories.runs import enqueue_step
from ccweb_store.store.repositories.sessions import touch_step
from ccweb_store.store.statements import Batch

#: A ``one_way`` send: no reply request.
_ONE_WAY = Batch(
    touch_step("target_id", "now"), append_step("target_id"), enqueue_step("target_id")
)
#: A ``return_and_continue`` send: the request between the message it answers and the run.
_RETURN_AND_CONTINUE = Batch(
    touch_step("target_id", "now"),
    append_step("target_id"),
    waiting_request_step(),
    enqueue_step("target_id"),
)
#: A reply returned to its source, without and with the source's auto-run.
_REPLY_ONLY = Batch(touch_step("source_id", "now"), append_step("source_id"))
_REPLY_AND_AUTO_RUN = Batch(
    touch_step("source_id", "now"), append_step("source_id"), enqueue_step("source_id")
)
#: A message appended and read back (``SendRepository.append_read``).
_APPEND_READ = Batch(
    touch_step("conversation", "now"),
    append_step("conversation"),
    read_back=(MESSAGES, "message_id"),
)


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
        now = utcnow()
        message_id = new_id("msg")
        values = {
            "conversation": session_id,
            "now": now,
            "message_id": message_id,
            "role": role,
            "content": content,
            "metadata": metadata,
        }
        self._note_message(session_id, message_id, role, now)
        returned = (await self._execute_batch(_APPEND_READ, values)).one()
        return self._load(Message, returned)

    def _note_message(self, session_id: str, message_id: str, role: str, now: datetime) -> None:
        self.state.note(
            MessageAppended(conversation_id=session_id, message_id=message_id, role=role, at=now)
        )

    def _note_run(
        self, session_id: str, run_id: str, kind: str, request_id: str | None, now: datetime
    ) -> None:
        self.state.note(
            RunQueued(
                conversation_id=session_id, run_id=run_id, request_id=request_id, kind=kind, at=now
            )
        )

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
            "role": Role.USER,
            "content": content,
            "metadata": metadata,
            "request_id": request_id,
            "hop_count": hop_count,
            "run_id": run_id,
            "kind": RunKind.CROSS_CONVERSATION,
            "runtime_text": runtime_text,
        }
        self._note_message(target[0], message_id, Role.USER, now)
        if request_id is not None:
            self.state.note(
                ReplyWaiting(
                    conversation_id=source[0],
                    peer_conversation_id=target[0],
                    request_id=request_id,
                    at=now,
                )
            )
        self._note_run(target[0], run_id, RunKind.CROSS_CONVERSATION, request_id, now)
        await self._execute_batch(_ONE_WAY if request_id is None else _RETURN_AND_CONTINUE, values)

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
            "role": Role.ASSISTANT,
            "content": content,
            "metadata": metadata,
        }
        self._note_message(source_id, message_id, Role.ASSISTANT, now)
        if auto_run is None:
            await self._execute_batch(_REPLY_ONLY, values)
            return
        values |= {
            "run_id": new_id("run"),
            "kind": RunKind.REPLY_AUTO_RUN,
            "runtime_text": auto_run[0],
            "hop_count": auto_run[1],
            "request_id": request_id,
        }
        self._note_run(source_id, values["run_id"], RunKind.REPLY_AUTO_RUN, request_id, now)
        await self._execute_batch(_REPLY_AND_AUTO_RUN, values)
