"""The ``session.*`` calls: create, read, archive and list conversations."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ccweb_store.domain.call_models import (
    AgentSessionId,
    CallModel,
    ConversationId,
    PageSize,
    Text,
)
from ccweb_store.domain.ids import AGENT_MAX_LENGTH

#: How many conversations ``session.list`` returns when it is not told.
DEFAULT_SESSION_PAGE = 50


class CreateSession(CallModel):
    """``session.create``: a new conversation (an id of the caller's, or a new one)."""

    id: str | None = None
    title: str | None = None
    agent: Annotated[str, Field(max_length=AGENT_MAX_LENGTH)] | None = None
    cwd: str | None = None


class GetSession(CallModel):
    """``session.get``: one conversation with its active run."""

    id: Text


class ArchiveSession(CallModel):
    """``session.archive``: hide a conversation from the lists (``archived: false`` shows it)."""

    id: ConversationId
    archived: bool = True


class UpdateSession(CallModel):
    """``session.update``: set the agent session the conversation's next run resumes
    (``agentSessionId``), or clear it (null) so that the next run starts a new one."""

    id: ConversationId
    agent_session_id: AgentSessionId | None


class ListSessions(CallModel):
    """``session.list``: conversations newest created first, a page at a time."""

    limit: PageSize = DEFAULT_SESSION_PAGE
    cursor: str | None = None
