"""The kinds of change the event outbox records (``GET /events``, ``events.list``)."""

from __future__ import annotations

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

#: The reply event for each status a request can move to.
REPLY_EVENT_BY_STATUS = {
    "waiting": REPLY_WAITING,
    "ready": REPLY_READY,
    "returned": REPLY_RETURNED,
    "failed": REPLY_FAILED,
}
