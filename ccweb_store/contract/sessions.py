"""The ``session.*`` calls: create, read, update, archive and list conversations. Each
answers a ``Session`` (``objects``) but ``session.list``, which answers a ``SessionPage``."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ccweb_store.contract.base import (
    AgentSessionId,
    ConversationId,
    Input,
    Output,
    PageSize,
    Text,
)
from ccweb_store.contract.objects import Session
from ccweb_store.domain.ids import AGENT_MAX_LENGTH

#: How many conversations ``session.list`` returns when it is not told.
DEFAULT_SESSION_PAGE = 50


class CreateSession(Input):
    """``session.create``: a new conversation (an id of the caller's, or a new one)."""

    id: str | None = None
    title: str | None = None
    agent: Annotated[str, Field(max_length=AGENT_MAX_LENGTH)] | None = None
    cwd: str | None = None


class GetSession(Input):
    """``session.get``: one conversation with its active run."""

    id: Text


class ArchiveSession(Input):
    """``session.archive``: hide a conversation from the lists (``archived: false`` shows it)."""

    id: ConversationId
    archived: bool = True


class UpdateSession(Input):
    """``session.update``: set the agent session the conversation's next run resumes
    (``agentSessionId``), or clear it (null) so that the next run starts a new one."""

    id: ConversationId
    agent_session_id: AgentSessionId | None


class ListSessions(Input):
    """``session.list``: conversations newest created first, a page at a time."""

    limit: PageSize = DEFAULT_SESSION_PAGE
    cursor: str | None = None


class SessionPage(Output):
    """``session.list``'s answer: conversations newest created first, and the cursor of the
    next page (None: the last page)."""

    sessions: list[Session]
    next_cursor: str | None
