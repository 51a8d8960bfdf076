"""What the operator console shows: the overview (conversations, open reply requests, active
runs) and one conversation (its messages newest first, user inputs, open requests, runs).

Every list is a page of ``PAGE_SIZE`` rows, newest activity first, read by one query with its
filter and a keyset cursor (``Cursors``): nothing is filtered after a capped read, so a filter
finds every row it matches, page after page, and a cut list says where its next page starts.

Each view first reads the newest event id, then the state: the page follows ``/events`` from
that id, so a change committed while the page was read arrives as an event and is read again,
never lost between the two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from ccweb_store.contract.tool_answers import UserInputs
from ccweb_store.contract.tools import ListUserInputs
from ccweb_store.domain.context import Source
from ccweb_store.domain.errors import InvalidInput
from ccweb_store.domain.ids import ACTIVE_RUN_STATUSES, OPEN_REPLY_STATUSES, validate_session_id
from ccweb_store.domain.rows import Conversation, Message, ReplyRequest, Run
from ccweb_store.services import user_inputs
from ccweb_store.store.uow import Store, UnitOfWork

#: Rows per page of every list (conversations, open requests, runs).
PAGE_SIZE = 50
#: Messages per page of one conversation.
MESSAGE_PAGE = 20

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Page(Generic[_T]):
    """A page of a list and the cursor of the next one (None: this is the last)."""

    rows: list[_T]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class Cursors:
    """Where each list of a page starts (None: at its first page)."""

    conversations: str | None = None
    replies: str | None = None
    runs: str | None = None


@dataclass(frozen=True, slots=True)
class ReplyFilter:
    """The overview's filter of open requests: one status and/or one conversation."""

    status: str | None = None
    conversation: str | None = None

    @classmethod
    def of(cls, status: str | None, conversation: str | None) -> ReplyFilter:
        status = status or None
        conversation = (conversation or "").strip() or None
        if status is not None and status not in OPEN_REPLY_STATUSES:
            raise InvalidInput(
                f"state {status!r} is not an open request's: use one of "
                f"{', '.join(OPEN_REPLY_STATUSES)}, or none for all"
            )
        if conversation is not None:
            validate_session_id(conversation)
        return cls(status, conversation)


@dataclass(frozen=True, slots=True)
class Shown:
    """A conversation the console shows, with its active run (queued or running; None:
    neither), which gives its state."""

    row: Conversation
    active_run: Run | None


@dataclass(frozen=True, slots=True)
class OpenRequests:
    """A page of open requests, newest first, and for each one a target run still answers
    (queued or running), that run: such a request cannot be retried until it ends."""

    page: Page[ReplyRequest]
    answering: dict[str, Run]


@dataclass(frozen=True, slots=True)
class Overview:
    """The overview: from which event on the page follows; a page of conversations (newest
    activity first) with how many open requests each must answer (``replies_in``) and made
    (``replies_out``); a page of the open requests the filter keeps; a page of the queued
    and running runs (newest first) with their conversations' titles."""

    latest_event_id: int
    sessions: Page[Shown]
    replies_in: dict[str, int]
    replies_out: dict[str, int]
    replies: OpenRequests
    runs: Page[Run]
    titles: dict[str, str]


@dataclass(frozen=True, slots=True)
class ConversationPage:
    """One conversation: from which event on the page follows, the conversation, a page of
    its messages newest first and where the next page starts (``older_before``, None: no
    older message), its user inputs, a page of its open requests and of its active runs."""

    latest_event_id: int
    session: Shown
    messages: list[Message]
    older_before: int | None
    inputs: UserInputs
    replies: OpenRequests
    runs: Page[Run]


async def latest_event_id(store: Store) -> int:
    """The newest event's id (0: none yet): where the page's event stream starts."""
    async with store.read_uow() as uow:
        return await uow.events.latest_id()


async def overview(store: Store, chosen: ReplyFilter, at: Cursors) -> Overview:
    """A page of each list at ``at``: conversations, the open requests ``chosen`` keeps, the
    queued and running runs."""
    latest = await latest_event_id(store)
    async with store.read_uow() as uow:
        rows, next_sessions = await uow.sessions.page_by_activity(
            limit=PAGE_SIZE, cursor=at.conversations
        )
        ids = [row.id for row in rows]
        active = await uow.runs.active_for_sessions(ids)
        replies_in, replies_out = await uow.replies.open_counts(ids)
        requests = await _open_requests(uow, chosen.status, chosen.conversation, at.replies)
        runs, next_runs = await uow.runs.list_page(
            statuses=ACTIVE_RUN_STATUSES, limit=PAGE_SIZE, cursor=at.runs
        )
        titles = await uow.sessions.titles({run.session_id for run in runs})
    return Overview(
        latest_event_id=latest,
        sessions=Page([Shown(row, active.get(row.id)) for row in rows], next_sessions),
        replies_in={sid: replies_in.get(sid, 0) for sid in ids},
        replies_out={sid: replies_out.get(sid, 0) for sid in ids},
        replies=requests,
        runs=Page(runs, next_runs),
        titles=titles,
    )


async def conversation(
    store: Store, session_id: str, before_seq: int | None, at: Cursors
) -> ConversationPage:
    """One conversation with a page of its messages below ``before_seq`` (None: the newest),
    newest first, and a page of its open requests and active runs at ``at``. Its user inputs
    are what ``ccweb_list_user_inputs`` returns for it."""
    validate_session_id(session_id)
    latest = await latest_event_id(store)
    async with store.read_uow() as uow:
        row = await uow.sessions.require(session_id)
        active = await uow.runs.active_for_sessions([session_id])
        messages = await uow.messages.list_before(
            session_id, before_seq=before_seq, limit=MESSAGE_PAGE + 1
        )
        requests = await _open_requests(uow, None, session_id, at.replies)
        runs, next_runs = await uow.runs.list_page(
            statuses=ACTIVE_RUN_STATUSES, session_id=session_id, limit=PAGE_SIZE, cursor=at.runs
        )
    older = len(messages) > MESSAGE_PAGE
    messages = messages[:MESSAGE_PAGE]
    inputs = await user_inputs.list_user_inputs(
        store, Source(), ListUserInputs(conversation_id=session_id)
    )
    return ConversationPage(
        latest_event_id=latest,
        session=Shown(row, active.get(session_id)),
        messages=messages,
        older_before=messages[-1].seq if older and messages else None,
        inputs=inputs,
        replies=requests,
        runs=Page(runs, next_runs),
    )


async def _open_requests(
    uow: UnitOfWork, status: str | None, session_id: str | None, cursor: str | None
) -> OpenRequests:
    """A page of open requests (of ``status``, of ``session_id`` on either side), newest
    first, with the target runs that still answer them."""
    rows, next_cursor = await uow.replies.list_page(
        statuses=[status] if status is not None else list(OPEN_REPLY_STATUSES),
        session_id=session_id,
        limit=PAGE_SIZE,
        cursor=cursor,
        newest_first=True,
    )
    answering = await uow.runs.open_for_requests([row.request_id for row in rows])
    return OpenRequests(Page(rows, next_cursor), answering)
