"""The event outbox as the wire shows it: ``events.list`` and the frames of ``GET /events``."""

from __future__ import annotations

from typing import Any

from ccweb_store.domain.timestamps import iso
from ccweb_store.services.event_reads import EventPage
from ccweb_store.store.event_feed import Event


def event_out(event: Event) -> dict[str, Any]:
    """An event as clients see it: its id, type and time, and the ids it concerns."""
    out: dict[str, Any] = {"id": int(event["id"]), "type": event["type"]}
    for column, key in _ID_KEYS:
        value = event[column]
        if value is not None:
            out[key] = value
    out["createdAt"] = iso(event["created_at"])
    if event["payload"]:
        out["payload"] = event["payload"]
    return out


_ID_KEYS = (
    ("conversation_id", "conversationId"),
    ("peer_conversation_id", "peerConversationId"),
    ("message_id", "messageId"),
    ("run_id", "runId"),
    ("request_id", "requestId"),
)


def event_page_out(page: EventPage) -> dict[str, Any]:
    """``events.list``'s answer: ``{events, nextAfter, latestId}``."""
    return {
        "events": [event_out(event) for event in page.events],
        "nextAfter": page.next_after,
        "latestId": page.latest_id,
    }
