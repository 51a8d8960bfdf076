"""The event outbox as the wire shows it: ``events.list`` and the frames of ``GET /events``."""

from __future__ import annotations

from typing import Any, NotRequired, cast

from typing_extensions import TypedDict

from ccweb_store.domain.timestamps import iso
from ccweb_store.protocol.shapes.wire import closed
from ccweb_store.services.event_reads import EventPage
from ccweb_store.store.event_feed import Event


@closed
class EventOut(TypedDict):
    """An event: its id, type and time, the ids it concerns (only those it has) and its
    payload (only when not empty)."""

    id: int
    type: str
    conversationId: NotRequired[str]
    peerConversationId: NotRequired[str]
    messageId: NotRequired[str]
    runId: NotRequired[str]
    requestId: NotRequired[str]
    createdAt: str
    payload: NotRequired[dict[str, Any]]


@closed
class EventPageAnswer(TypedDict):
    """``events.list``'s answer."""

    events: list[EventOut]
    nextAfter: int
    latestId: int


def event_out(event: Event) -> EventOut:
    """An event as clients see it: its id, type and time, and the ids it concerns."""
    # Built as a plain dict: the optional ids come before the required ``createdAt`` on the
    # wire, an order a TypedDict literal cannot be built in.
    out: dict[str, Any] = {"id": int(event["id"]), "type": event["type"]}
    for column, key in _ID_KEYS:
        value = event[column]
        if value is not None:
            out[key] = value
    out["createdAt"] = iso(event["created_at"])
    if event["payload"]:
        out["payload"] = event["payload"]
    return cast(EventOut, out)


_ID_KEYS = (
    ("conversation_id", "conversationId"),
    ("peer_conversation_id", "peerConversationId"),
    ("message_id", "messageId"),
    ("run_id", "runId"),
    ("request_id", "requestId"),
)


def event_page_out(page: EventPage) -> EventPageAnswer:
    """``events.list``'s answer: ``{events, nextAfter, latestId}``."""
    return {
        "events": [event_out(event) for event in page.events],
        "nextAfter": page.next_after,
        "latestId": page.latest_id,
    }
