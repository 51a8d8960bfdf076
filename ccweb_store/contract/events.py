"""The ``events.list`` call, the event outbox read a page at a time, and an event as the wire
shows it (also each frame of ``GET /events``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from ccweb_store.contract.base import Input, Output, PageSize, Timestamp, listed, omitted
from ccweb_store.domain.ids import ID_MAX_LENGTH

#: How many events ``events.list`` returns when it is not told.
DEFAULT_EVENT_PAGE = 100


class ListEvents(Input):
    """``events.list``: events after ``after``, oldest first, of ``types`` and
    ``conversation`` if given (the type names are checked by the event filter)."""

    after: Annotated[int, Field(ge=0)] | None = None
    limit: PageSize = DEFAULT_EVENT_PAGE
    types: Annotated[list[str] | None, BeforeValidator(listed)] = None
    conversation: Annotated[str, Field(max_length=ID_MAX_LENGTH)] | None = None


#: The columns of an event row that name what it concerns, and the fields that show them.
_ID_FIELDS = (
    ("conversation_id", "conversation_id"),
    ("peer_conversation_id", "peer_conversation_id"),
    ("message_id", "message_id"),
    ("run_id", "run_id"),
    ("request_id", "request_id"),
)


class Event(Output):
    """An event: its id, type and time, the ids it concerns (only those it has) and its
    payload (only when not empty)."""

    id: int
    type: str
    conversation_id: str = omitted()
    peer_conversation_id: str = omitted()
    message_id: str = omitted()
    run_id: str = omitted()
    request_id: str = omitted()
    created_at: Timestamp
    payload: dict[str, Any] = omitted()

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Event:
        """An event as the outbox row ``row`` holds it."""
        fields: dict[str, Any] = {
            field: row[column] for column, field in _ID_FIELDS if row[column] is not None
        }
        if row["payload"]:
            fields["payload"] = row["payload"]
        return cls(id=int(row["id"]), type=row["type"], created_at=row["created_at"], **fields)


class EventPage(Output):
    """``events.list``'s answer: the events oldest first, the point to ask after next, and
    the newest event's id of all."""

    events: list[Event]
    next_after: int
    latest_id: int
