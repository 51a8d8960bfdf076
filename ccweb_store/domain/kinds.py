"""The closed sets of values the schema knows, as ``StrEnum``s: reply modes, message roles,
reply and run statuses, run kinds.

A member is its own text (``RunStatus.QUEUED == "queued"``), so rows, JSON and SQL read the
same values; code names them through these classes, never as bare literals. The tuples of
``ids`` (and through them the tables' CHECK constraints) are built from them.
"""

from __future__ import annotations

from enum import StrEnum


class ReplyMode(StrEnum):
    """What a send asks of its target's answer (SPEC §2.2)."""

    ONE_WAY = "one_way"
    RETURN_AND_CONTINUE = "return_and_continue"


class Role(StrEnum):
    """Who wrote a message."""

    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


class ReplyStatus(StrEnum):
    """Where a reply request is in its lifecycle (SPEC §2.4)."""

    WAITING = "waiting"
    READY = "ready"
    RETURNED = "returned"
    FAILED = "failed"


class RunKind(StrEnum):
    """Why a run exists."""

    USER_TURN = "user_turn"
    CROSS_CONVERSATION = "cross_conversation"
    REPLY_AUTO_RUN = "reply_auto_run"


class RunStatus(StrEnum):
    """Where a run is in the queue."""

    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class ConversationState(StrEnum):
    """What a conversation is doing, one word in every view (the console, the CLI): its
    active run's status (``queued``, ``running``), else ``idle``; the ``conversation_activity``
    view's ``active_run_status`` holds the same words (NULL: idle)."""

    IDLE = "idle"
    QUEUED = "queued"
    RUNNING = "running"


def conversation_state(active_run_status: str | None, *, archived: bool = False) -> str:
    """A conversation's state as every view shows it: ``idle``, ``queued`` or ``running``,
    with ``, archived`` for an archived one."""
    state = ConversationState.IDLE if active_run_status is None else active_run_status
    return f"{state}, archived" if archived else str(state)
