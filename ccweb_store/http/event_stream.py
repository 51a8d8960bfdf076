"""``GET /events``: the event outbox as Server-Sent Events (``services.event_reads``).

Each event goes out as ``id: <id>``, ``event: <type>`` and ``data: <the event as JSON>``, so a
browser's ``EventSource`` resumes by itself after a dropped connection (it sends the last
``id`` back as ``Last-Event-ID``); ``?after=ID`` does the same for other clients. A comment
line goes out as a heartbeat when nothing else did (``CCWEB_EVENTS_HEARTBEAT_SECONDS``).

Two events end a stream early, each carrying what to do: ``cut`` (the client fell behind; it
resumes after ``resumeAfter``) and ``error`` (``events_expired``: the resume point is older
than the retention; read the state afresh). A client that stops reading is cut without one
(``EventStream``): one warning line, and it resumes from its last event. Refusals before the
stream starts are JSON, as everywhere: ``{"error": {"code", "message"}}``.

The operator token sees every event; a conversation credential (``?credential=`` or
``Authorization: Bearer ccw1.…``) only its conversation's. A credential's stream ends with it:
before each batch and at each heartbeat the stream checks that the credential still holds
(``credentials.confirm_still_holds``), and once it does not, sends an ``error`` event
(``credential_revoked``, ``credential_expired``) instead of the batch and closes. One
credential holds at most ``CCWEB_MAX_STREAMS_PER_CREDENTIAL`` open streams in one process
(``StreamSlots``); the operator's are not counted.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from contextvars import ContextVar
from functools import partial
from typing import Any
from weakref import WeakKeyDictionary

import orjson
from sse_starlette.event import ServerSentEvent
from sse_starlette.sse import EventSourceResponse, SendTimeoutError
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from ccweb_store.config import Settings
from ccweb_store.contract.events import Event as EventOut
from ccweb_store.domain import errors
from ccweb_store.domain.errors import DomainError
from ccweb_store.http.asgi import Answer, Incoming
from ccweb_store.http.mcp_http import SourceError, presented_token
from ccweb_store.services import credentials
from ccweb_store.services.credentials import CredentialRefused
from ccweb_store.services.event_reads import (
    Cut,
    EventFilter,
    EventsExpired,
    StillAllowed,
    event_filter,
    follow,
)
from ccweb_store.store.event_feed import Event
from ccweb_store.store.uow import Store

#: How long one send to a client may take before the stream is given up (a client that
#: stopped reading); it resumes from its last event when it comes back.
SEND_TIMEOUT_S = 30.0
#: What a client's ``EventSource`` waits before reconnecting, in milliseconds.
RETRY_MS = 1000

log = logging.getLogger(__name__)


class EventStream(EventSourceResponse):
    """The SSE answer of ``GET /events``. A stream given up because its client stopped
    reading is an everyday event on a busy server, not a fault: it ends with one warning line
    naming the client, instead of the exception escaping to the error handler and to the ASGI
    server (two tracebacks per stream)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except* SendTimeoutError:
            _cut_for_not_reading.set(True)
            log.warning(
                "events stream to %s cut: the client read nothing for %gs (the send timeout); "
                "it resumes from its last event when it reconnects",
                client_address(scope),
                self.send_timeout,
            )


def client_address(scope: Scope) -> str:
    """``host:port`` of the client, as the ASGI server saw it (``unknown`` if it did not say)."""
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "unknown"


#: Set in the task of a request whose stream ``EventStream`` cut for not reading: the ASGI
#: server runs the app in that task and logs right after it returns, in the same context.
_cut_for_not_reading: ContextVar[bool] = ContextVar("cut_for_not_reading", default=False)

#: What uvicorn logs (as an error) about a response the app left unfinished.
UNFINISHED_RESPONSE = "ASGI callable returned without completing response."


class QuietCutStreams(logging.Filter):
    """Drops the ASGI server's "returned without completing response" error for a stream
    ``EventStream`` cut and logged already: a client that reads nothing cannot be sent the
    end of the response either, and one line about it is enough."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg == UNFINISHED_RESPONSE and _cut_for_not_reading.get())


_QUIET_CUT_STREAMS = QuietCutStreams()


def quiet_cut_streams() -> None:
    """Install ``QuietCutStreams`` on uvicorn's error log (once)."""
    logger = logging.getLogger("uvicorn.error")
    if _QUIET_CUT_STREAMS not in logger.filters:
        logger.addFilter(_QUIET_CUT_STREAMS)


#: The code of the 429 answer to a credential that holds its most open streams already.
TOO_MANY_STREAMS = "too_many_streams"


def refusal(
    status: int, code: str, message: str, data: dict[str, Any] | None = None
) -> JSONResponse:
    body = {"code": code, "message": message, **(data or {})}
    return JSONResponse({"error": body}, status_code=status)


async def answer_events(incoming: Incoming) -> Answer:
    """``GET /events?after=&types=&conversation=`` (or ``Last-Event-ID``)."""
    store: Store = incoming.state.store
    settings: Settings = incoming.state.settings
    try:
        token = presented_token(incoming)
        binding = None
        if token is not None:
            binding = await credentials.authenticate(store, token)
        after = _resume_point(incoming)
        chosen = event_filter(
            types_param(incoming.query.get("types")),
            incoming.query.get("conversation") or None,
            binding.conversation_id if binding is not None else None,
        )
    except SourceError as exc:
        return refusal(400, errors.INVALID_ARGUMENTS, str(exc))
    except CredentialRefused as exc:
        return refusal(401, exc.code, exc.message)
    except DomainError as exc:
        status = 403 if exc.code == errors.CONVERSATION_FORBIDDEN else 400
        return refusal(status, exc.code, exc.message)
    options: dict[str, Any] = {
        "ping": settings.events_heartbeat_seconds,
        "send_timeout": SEND_TIMEOUT_S,
        "headers": {"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    }
    heartbeat_s = settings.events_heartbeat_seconds
    if binding is None:  # the operator: every event, no slot counted
        return EventStream(_stream(store, after, chosen, heartbeat_s), **options)
    # Nothing is awaited from taking a slot to calling the response, whose end gives it back.
    limit = settings.max_streams_per_credential
    slots = _SLOTS.setdefault(store, StreamSlots())
    if not slots.take(binding.credential_id, limit):
        return refusal(
            429,
            TOO_MANY_STREAMS,
            f"conversation credential {binding.credential_id} already holds {limit} open "
            "/events streams, the most one credential may hold in this server process "
            "(CCWEB_MAX_STREAMS_PER_CREDENTIAL): close one of them before opening another "
            "(one stream carries every event of the conversation)",
            {"limit": limit, "setting": "CCWEB_MAX_STREAMS_PER_CREDENTIAL"},
        )
    held = binding

    async def still_allowed() -> None:
        await credentials.confirm_still_holds(store, held)

    stream = _stream(store, after, chosen, heartbeat_s, still_allowed)
    return SlotHoldingStream(
        stream, release=partial(slots.give_back, held.credential_id), **options
    )


class StreamSlots:
    """The open ``/events`` streams of each conversation credential in this process."""

    def __init__(self) -> None:
        self.open: Counter[str] = Counter()

    def take(self, credential_id: str, limit: int) -> bool:
        """Count one more stream of ``credential_id``, unless it holds ``limit`` already."""
        if self.open[credential_id] >= limit:
            return False
        self.open[credential_id] += 1
        return True

    def give_back(self, credential_id: str) -> None:
        """One stream of ``credential_id`` ended."""
        self.open[credential_id] -= 1
        if self.open[credential_id] <= 0:
            del self.open[credential_id]


#: The stream slots of each store's credentials (a store is one database in one process).
_SLOTS: WeakKeyDictionary[Store, StreamSlots] = WeakKeyDictionary()


class SlotHoldingStream(EventStream):
    """An event stream that gives its credential's slot back when it ends, however it ends
    (closed by the server, the client gone, a failed send, a ``HEAD`` that never streamed)."""

    def __init__(
        self,
        content: AsyncIterator[ServerSentEvent | bytes],
        *,
        release: Callable[[], None],
        **options: Any,
    ) -> None:
        super().__init__(content, **options)
        self.release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.release()


def types_param(raw: str | None) -> list[str] | None:
    """``?types=a,b`` as a list (None: absent or blank)."""
    if raw is None or not raw.strip():
        return None
    return [part.strip() for part in raw.split(",") if part.strip()]


def _resume_point(incoming: Incoming) -> int | None:
    """``?after=`` or else ``Last-Event-ID``: the id of the last event the client took."""
    raw = incoming.query.get("after")
    name = "after"
    if raw is None:
        raw = incoming.header(b"last-event-id")
        name = "Last-Event-ID"
    if raw is None or raw == "":
        return None
    if not raw.isdigit() or len(raw) > 18:
        raise DomainError(
            f"{name} must be an event id (a whole number from 0), got {raw!r}",
            code=errors.INVALID_ARGUMENTS,
        )
    return int(raw)


async def _stream(
    store: Store,
    after: int | None,
    chosen: EventFilter,
    heartbeat_s: float,
    still_allowed: StillAllowed | None = None,
) -> AsyncIterator[ServerSentEvent | bytes]:
    frames = _FRAMES.setdefault(store, OrderedDict())
    yield ServerSentEvent(comment="ccweb-store events", retry=RETRY_MS)
    try:
        async for item in follow(
            store, after, chosen, heartbeat_s=heartbeat_s, still_allowed=still_allowed
        ):
            if item is None:
                continue  # the response's own ping keeps the connection alive
            if isinstance(item, Cut):
                message = (
                    f"{item.reason}: reconnect with after={item.resume_after} (or "
                    f"Last-Event-ID: {item.resume_after}) to go on where this stream stopped"
                )
                yield _event(
                    "cut",
                    {"resumeAfter": item.resume_after, "message": message},
                    event_id=item.resume_after,
                )
                return
            # One write per batch, each event encoded once for every stream that sends it.
            yield b"".join(_frame(frames, event) for event in item)
    except EventsExpired as exc:
        body = {"code": exc.code, "message": exc.message, **(exc.data or {})}
        yield _event("error", body)
    except CredentialRefused as exc:  # revoked or expired while the stream was open
        yield _event("error", {"code": exc.code, "message": exc.message})


#: The encoded frame of each recent event of a store, shared by the streams that send it.
_FRAMES: WeakKeyDictionary[Store, OrderedDict[int, bytes]] = WeakKeyDictionary()
FRAMES_KEPT = 4096


def _frame(frames: OrderedDict[int, bytes], event: Event) -> bytes:
    event_id = int(event["id"])
    frame = frames.get(event_id)
    if frame is None:
        shown = EventOut.of(event).model_dump()
        frame = _event(event["type"], shown, event_id=event_id).encode()
        frames[event_id] = frame
        if len(frames) > FRAMES_KEPT:
            frames.popitem(last=False)
    return frame


def _event(kind: str, body: Mapping[str, Any], *, event_id: int | None = None) -> ServerSentEvent:
    return ServerSentEvent(
        data=orjson.dumps(body).decode(),
        event=kind,
        id=None if event_id is None else str(event_id),
    )
