"""What the operator console shows: the overview (conversations, open reply requests, active
runs) and one conversation (its messages newest first, user inputs, open requests, runs).

Each view first reads the newest event id, then the state: the page follows ``/events`` from
that id, so a change committed while the page was read arrives as an event and is read again,
never lost between the two.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ccweb_store.domain.context import Source
from ccweb_store.domain.errors import InvalidInput
from ccweb_store.domain.host_calls import GetSession, ListReplies, ListRuns, ListSessions
from ccweb_store.domain.ids import (
    ACTIVE_RUN_STATUSES,
    OPEN_REPLY_STATUSES,
    validate_session_id,
)
from ccweb_store.domain.tool_arguments import ListUserInputs
from ccweb_store.services import conversations, replies, runs, user_inputs
from ccweb_store.services.conversations import SessionView
from ccweb_store.services.user_inputs import UserInputs
from ccweb_store.store.rows import Message, ReplyRequest, Run
from ccweb_store.store.uow import Store

#: How many conversations, open requests and active runs the overview shows at most.
OVERVIEW_SESSIONS = 100
OVERVIEW_REPLIES = 500
OVERVIEW_RUNS = 200
#: Messages per page of one conversation.
MESSAGE_PAGE = 20


@dataclass(frozen=True, slots=True)
class ReplyFilter:
    """The overview's filter of open requests: one status and/or one conversation."""

    status: str | None = None
    conversation: str | None = None

    @classmethod
    def of(cls, status: str | None, conversation: str | None) -> ReplyFilter:
        status = status or None
        conversation = conversation or None
        if status is not None and status not in OPEN_REPLY_STATUSES:
            raise InvalidInput(
                f"state {status!r} is not an open request's: use one of "
                f"{', '.join(OPEN_REPLY_STATUSES)}, or none for all"
            )
        if conversation is not None:
            validate_session_id(conversation)
        return cls(status, conversation)

    def keeps(self, reply: ReplyRequest) -> bool:
        if self.status is not None and reply.status != self.status:
            return False
        sides = (reply.source_conversation_id, reply.target_conversation_id)
        return self.conversation is None or self.conversation in sides


@dataclass(frozen=True, slots=True)
class Overview:
    """The overview: from which event on the page follows, the conversations (newest first)
    with how many open requests each must answer (``replies_in``) and made (``replies_out``),
    the open requests the filter keeps (oldest first), the queued and running runs (newest
    first)."""

    latest_event_id: int
    sessions: list[SessionView]
    replies_in: dict[str, int]
    replies_out: dict[str, int]
    replies: list[ReplyRequest]
    runs: list[Run]


@dataclass(frozen=True, slots=True)
class ConversationPage:
    """One conversation: from which event on the page follows, the conversation, a page of
    its messages newest first and where the next page starts (``older_before``, None: no
    older message), its user inputs, its open requests and its active runs."""

    latest_event_id: int
    session: SessionView
    messages: list[Message]
    older_before: int | None
    inputs: UserInputs
    replies: list[ReplyRequest]
    runs: list[Run]


async def latest_event_id(store: Store) -> int:
    """The newest event's id (0: none yet): where the page's event stream starts."""
    async with store.read_uow() as uow:
        return await uow.events.latest_id()


async def overview(store: Store, chosen: ReplyFilter) -> Overview:
    """Conversations newest first, each with its open requests in (as target) and out (as
    source); the open requests ``chosen`` keeps, oldest first; queued and running runs,
    newest first."""
    latest = await latest_event_id(store)
    sessions = await conversations.list_sessions(store, ListSessions(limit=OVERVIEW_SESSIONS))
    open_replies = await replies.list_replies(
        store, ListReplies(status=list(OPEN_REPLY_STATUSES), limit=OVERVIEW_REPLIES)
    )
    active_runs = await runs.list_runs(
        store, ListRuns(status=list(ACTIVE_RUN_STATUSES), limit=OVERVIEW_RUNS)
    )
    incoming = Counter(reply.target_conversation_id for reply in open_replies.replies)
    outgoing = Counter(reply.source_conversation_id for reply in open_replies.replies)
    return Overview(
        latest_event_id=latest,
        sessions=sessions.sessions,
        replies_in={view.row.id: incoming[view.row.id] for view in sessions.sessions},
        replies_out={view.row.id: outgoing[view.row.id] for view in sessions.sessions},
        replies=[reply for reply in open_replies.replies if chosen.keeps(reply)],
        runs=active_runs,
    )


async def conversation(store: Store, session_id: str, before_seq: int | None) -> ConversationPage:
    """One conversation with a page of its messages below ``before_seq`` (None: the newest),
    newest first. Its user inputs are what ``ccweb_list_user_inputs`` returns for it."""
    validate_session_id(session_id)
    latest = await latest_event_id(store)
    session = await conversations.get_session(store, GetSession(id=session_id))
    async with store.read_uow() as uow:
        rows = await uow.messages.list_before(
            session_id, before_seq=before_seq, limit=MESSAGE_PAGE + 1
        )
    older = len(rows) > MESSAGE_PAGE
    rows = rows[:MESSAGE_PAGE]
    inputs = await user_inputs.list_user_inputs(
        store, Source(), ListUserInputs(conversation_id=session_id)
    )
    open_replies = await replies.list_replies(
        store,
        ListReplies(status=list(OPEN_REPLY_STATUSES), session_id=session_id, limit=100),
    )
    active_runs = await runs.list_runs(
        store, ListRuns(session_id=session_id, status=list(ACTIVE_RUN_STATUSES), limit=50)
    )
    return ConversationPage(
        latest_event_id=latest,
        session=session,
        messages=rows,
        older_before=rows[-1].seq if older and rows else None,
        inputs=inputs,
        replies=open_replies.replies,
        runs=active_runs,
    )
