"""The changes the event outbox records (``GET /events``, ``events.list``): one frozen value
per kind of change, with exactly what that change carries.

Repositories make them as they change rows, the unit of work collects them, and the store
writes them to the outbox in the change's own transaction (``store.event_rows``: an event as
the row it is written as). Each has the conversation it happened in and when; the other ids
an event carries are fields named as the outbox's columns (``message_id``, ``run_id``,
``request_id``, ``peer_conversation_id``), and what else it says is its ``payload``, in the
wire's camelCase.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from ccweb_store.domain.kinds import ReplyStatus
from ccweb_store.domain.timestamps import utcnow

SESSION_CREATED = "session.created"
SESSION_UPDATED = "session.updated"
MESSAGE_APPENDED = "message.appended"
RUN_QUEUED = "run.queued"
RUN_STARTED = "run.started"
RUN_FINISHED = "run.finished"
RUN_REQUEUED = "run.requeued"
REPLY_WAITING = "reply.waiting"
REPLY_READY = "reply.ready"
REPLY_RETURNED = "reply.returned"
REPLY_FAILED = "reply.failed"

EVENT_TYPES = (
    SESSION_CREATED,
    SESSION_UPDATED,
    MESSAGE_APPENDED,
    RUN_QUEUED,
    RUN_STARTED,
    RUN_FINISHED,
    RUN_REQUEUED,
    REPLY_WAITING,
    REPLY_READY,
    REPLY_RETURNED,
    REPLY_FAILED,
)

#: The events after which a queued run may have become claimable: a run queued or put back,
#: or a conversation's running run ended (its next queued run may start).
CLAIMABLE_AFTER = frozenset({RUN_QUEUED, RUN_REQUEUED, RUN_FINISHED})


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """A change: the conversation it happened in and when; its type says what else."""

    type: ClassVar[str]
    #: The conversation the change happened in (a reply's: its source).
    conversation_id: str
    #: When it happened (the event's ``createdAt``).
    at: datetime = field(default_factory=utcnow)

    def payload(self) -> dict[str, Any]:
        """What the event says besides its ids."""
        raise NotImplementedError


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionCreated(Event):
    """A conversation was created (host API, tool, import)."""

    type: ClassVar[str] = SESSION_CREATED
    title: str | None

    def payload(self) -> dict[str, Any]:
        return {"title": self.title}


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionUpdated(Event):
    """A conversation's columns changed (``columns``: archived or brought back, with
    ``archived``; its agent session; an import's sync), or an import added messages to it
    (``imported_messages``). The payload holds what is given."""

    type: ClassVar[str] = SESSION_UPDATED
    columns: tuple[str, ...] | None = None
    archived: bool | None = None
    imported_messages: int | None = None

    def payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {}
        if self.columns is not None:
            payload["columns"] = list(self.columns)
        if self.archived is not None:
            payload["archived"] = self.archived
        if self.imported_messages is not None:
            payload["importedMessages"] = self.imported_messages
        return payload


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageAppended(Event):
    """A message was appended (host, tool, send, reply, a run's output)."""

    type: ClassVar[str] = MESSAGE_APPENDED
    message_id: str
    role: str

    def payload(self) -> dict[str, Any]:
        return {"role": self.role}


@dataclass(frozen=True, slots=True, kw_only=True)
class RunEvent(Event):
    """A change of a run, in its conversation: the run, the reply request it serves (if
    any) and its kind."""

    run_id: str
    request_id: str | None
    kind: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RunQueued(RunEvent):
    """A run was queued (enqueue, send, auto-run, prompt answer)."""

    type: ClassVar[str] = RUN_QUEUED

    def payload(self) -> dict[str, Any]:
        return {"kind": self.kind}


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStarted(RunEvent):
    """A run was claimed by a worker, or started by the host (with or without a worker).
    A claim's statement writes this event itself (``store.event_rows.run_started_event``)."""

    type: ClassVar[str] = RUN_STARTED
    worker_id: str | None

    def payload(self) -> dict[str, Any]:
        if self.worker_id:
            return {"kind": self.kind, "workerId": self.worker_id}
        return {"kind": self.kind}


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFinished(RunEvent):
    """A run completed, failed or was cancelled (``status``)."""

    type: ClassVar[str] = RUN_FINISHED
    status: str

    def payload(self) -> dict[str, Any]:
        return {"kind": self.kind, "status": self.status}


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRequeued(RunEvent):
    """A running run went back to the queue, its ``attempts`` counted."""

    type: ClassVar[str] = RUN_REQUEUED
    attempts: int

    def payload(self) -> dict[str, Any]:
        return {"kind": self.kind, "attempts": self.attempts}


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplyEvent(Event):
    """A reply request moved to ``status``: seen by its source (``conversation_id``) and its
    target (``peer_conversation_id``)."""

    status: ClassVar[ReplyStatus]
    peer_conversation_id: str
    request_id: str

    def payload(self) -> dict[str, Any]:
        return {"status": self.status}


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplyWaiting(ReplyEvent):
    """A reply request was made, or retried to ``waiting``."""

    type: ClassVar[str] = REPLY_WAITING
    status: ClassVar[ReplyStatus] = ReplyStatus.WAITING


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplyReady(ReplyEvent):
    """The target answered; the reply waits for its source."""

    type: ClassVar[str] = REPLY_READY
    status: ClassVar[ReplyStatus] = ReplyStatus.READY


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplyReturned(ReplyEvent):
    """The reply reached its source."""

    type: ClassVar[str] = REPLY_RETURNED
    status: ClassVar[ReplyStatus] = ReplyStatus.RETURNED


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplyFailed(ReplyEvent):
    """The request failed (its target's run failed, ``reply.fail``, expiry)."""

    type: ClassVar[str] = REPLY_FAILED
    status: ClassVar[ReplyStatus] = ReplyStatus.FAILED


#: The reply event for each status a request can move to.
REPLY_EVENTS: dict[str, type[ReplyEvent]] = {
    event.status: event for event in (ReplyWaiting, ReplyReady, ReplyReturned, ReplyFailed)
}

#: The model of each event type.
MODELS: dict[str, type[Event]] = {
    event.type: event
    for event in (
        SessionCreated,
        SessionUpdated,
        MessageAppended,
        RunQueued,
        RunStarted,
        RunFinished,
        RunRequeued,
        ReplyWaiting,
        ReplyReady,
        ReplyReturned,
        ReplyFailed,
    )
}
