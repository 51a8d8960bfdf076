"""The aiosqlite floor: the SQL of one send, one list and one round trip run straight on
aiosqlite by a bare Starlette app, with nothing of ccweb-store between request and statements
but the text of the JSON values written (``dumps_json``), so that both write the same rows.

``compare.py``'s floor rows measure ccweb-store's send, list and SQLite round trip against
this app, served in a process of its own under uvicorn with the same settings as the other
peers, in the same rounds. The floor pays aiosqlite's thread hand-off (one per statement) and
the HTTP server, nothing else: a SQLite goal that it alone puts out of reach is met against
it instead.

The statements are those the app ran on SQLite, one call to the driver each, as the driver
connection saw them during real calls (``sqlite3.Connection.set_trace_callback`` on every
connection under the store), their values made parameters again. The app now runs the same
writes in fewer calls (``store/sqlite/one_statement.py``; ``driver_calls.py`` counts them),
so the floor is what the service's statements cost at one call each, the design it
replaced:

- ``ccweb_send_message`` (``return_and_continue``, to an idle target): ``BEGIN IMMEDIATE``,
  ``CONVERSATIONS``, ``TOUCH``, ``APPEND_MESSAGE``, ``INSERT_REQUEST``, ``ENQUEUE_RUN``,
  the outbox's events (``insert_events``), ``COMMIT``;
- ``ccweb_list_user_inputs`` (default arguments, on user inputs of a few hundred characters,
  so that its first read asks for 4 rows and the budget stops there): ``BEGIN``,
  ``LATEST_INPUTS``, ``ROLLBACK``;
- ``run.claim`` (one kind): ``BEGIN IMMEDIATE``, ``CLAIM``, its event, ``COMMIT``; the
  service's probe for expired leases (at most once a second) is left out;
- ``run.complete`` (``completed``, with an output) of a ``cross_conversation`` run whose
  source runs nothing, as in ``roundtrip.py``: ``BEGIN IMMEDIATE``, ``FINISH``,
  ``GET_REQUEST``, ``LOCK_SESSIONS``, ``TOUCH`` and ``APPEND_READ`` (the output, on the
  target), ``SOURCE_STATE``, ``RETURN_AT_ONCE`` (``waiting → returned``), ``TOUCH`` and
  ``APPEND_MESSAGE`` (the reply, on the source), ``ENQUEUE_RUN`` (the source's
  ``reply_auto_run``), ``DELIVERABLE`` (replies owed to the target), the events,
  ``COMMIT``. Any other case (a busy source, a reply owed to the target, a run not held) is
  refused, not handled.

``tests/test_bench_floor.py`` checks that a floor send and a floor round trip write the rows
the app writes, and that a floor list reads the messages the tool answers.

Writes run on one writer connection, one transaction at a time under an ``asyncio.Lock``
(``BEGIN IMMEDIATE`` … ``COMMIT``); reads on one reader connection under a lock of its own
(its ``BEGIN`` … ``ROLLBACK`` must not interleave); both with the service's pragmas. Ids are
fresh per request.

    CCWEB_FLOOR_DATABASE=/path/to/migrated.db python -m uvicorn floor:app --app-dir bench
    POST /send {"jsonrpc": "2.0", "id": 1, "method": "send",
                "params": {"source": "sender", "target": "target-1", "content": "…"}}
    POST /list {…, "params": {"conversation": "…"}}
    POST /claim {…, "params": {"workerId": "w0", "kind": "cross_conversation"}}
    POST /complete {…, "params": {"runId": "run_…", "workerId": "w0", "output": "…"}}
    POST /session {…, "params": {"id": "…", "title": "…"}}  (setup, not measured)
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from itertools import chain
from typing import Any

import aiosqlite
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ccweb_store.domain.prompts import (
    RETURN_AND_CONTINUE,
    reply_message_text,
    source_auto_run_prompt,
    target_prompt,
)
from ccweb_store.store.sqlite.driver import dumps_json

DATABASE_ENV = "CCWEB_FLOOR_DATABASE"
BUSY_TIMEOUT_MS = 30_000
#: The service's pragmas on every SQLite connection (``store/db.py``).
PRAGMAS = (
    "PRAGMA foreign_keys = ON",
    "PRAGMA journal_mode = WAL",
    f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}",
    "PRAGMA synchronous = NORMAL",
    "PRAGMA temp_store = MEMORY",
    "PRAGMA wal_autocheckpoint = 10000",
)

#: The source and the target with their titles, and whether the target has a queued or
#: running run: two index probes joined by ``UNION ALL``, the source's row first.
CONVERSATIONS = (
    "SELECT sessions.id, sessions.title, 0 AS anon_1 FROM sessions WHERE sessions.id = ?"
    " UNION ALL SELECT sessions.id, sessions.title, EXISTS (SELECT * FROM runs"
    " WHERE runs.session_id = ? AND runs.status >= 'queued' AND runs.status <= 'running')"
    " AS anon_2 FROM sessions WHERE sessions.id = ?"
)
#: The conversation bumped for a message made now, which its ``last_message_at`` keeps.
TOUCH = (
    "UPDATE sessions SET updated_at=?, last_message_at=CASE WHEN (last_message_at IS NULL"
    " OR last_message_at < ?) THEN ? ELSE last_message_at END WHERE sessions.id = ?"
)
APPEND_MESSAGE = (
    "INSERT INTO messages (id, session_id, seq, role, content, created_at, metadata)"
    " VALUES (?, ?, (SELECT coalesce(max(messages.seq), 0) + 1 AS anon_1 FROM messages"
    " WHERE messages.session_id = ?), ?, ?, ?, ?)"
)
INSERT_REQUEST = (
    "INSERT INTO reply_requests (request_id, message_id, source_conversation_id, source_title,"
    " target_conversation_id, target_title, status, hop_count, source_auto_run, created_at,"
    " original_request) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
ENQUEUE_RUN = (
    "INSERT INTO runs (id, session_id, kind, status, runtime_text, reply_request_id,"
    " hop_count, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)

#: The newest non-blank user inputs below a seq, newest first; bound: conversation, role,
#: the seq to stay below, how many.
LATEST_INPUTS = (
    "SELECT id, seq, content, created_at FROM messages WHERE session_id = ? AND role = ?"
    " AND trim(content, ' \t\n\r\x0c\x0b') != '' AND seq < ? ORDER BY seq DESC LIMIT ?"
)
#: What the default budget (1,000 characters) reads first: 4 rows.
FIRST_BATCH = 4
NO_SEQ_ABOVE = 2**63 - 1

RUN_FIELDS = (
    "id, session_id, kind, status, runtime_text, reply_request_id, hop_count, worker_id,"
    " lease_expires_at, attempts, created_at, started_at, finished_at, output, error"
)
REQUEST_FIELDS = (
    "request_id, message_id, source_conversation_id, source_title, target_conversation_id,"
    " target_title, status, hop_count, source_auto_run, reply_text, created_at, completed_at,"
    " returned_at, reply_message_id, last_error, original_request, extra"
)
REQUEST_COLUMNS = ", ".join(f"reply_requests.{name}" for name in REQUEST_FIELDS.split(", "))
#: The service's default lease (``Settings.lease_seconds``).
LEASE_SECONDS = 300

#: Lease the oldest queued run of one kind whose conversation runs nothing; bound: the
#: worker, the lease's end, the start, the kind.
CLAIM = (
    "UPDATE runs SET status='running', worker_id=?, lease_expires_at=?, started_at=?"
    " WHERE runs.id = (SELECT candidate.id FROM runs AS candidate"
    " WHERE candidate.status = 'queued' AND candidate.kind IN (?) AND NOT (EXISTS (SELECT *"
    " FROM runs AS running WHERE running.session_id = candidate.session_id"
    " AND running.status = 'running')) ORDER BY candidate.created_at, candidate.id"
    f" LIMIT 1 OFFSET 0) AND runs.status = 'queued' RETURNING {RUN_FIELDS}"
)
#: Close a run its caller holds; bound: the status, the end, the output, the run, the worker.
FINISH = (
    "UPDATE runs SET status=?, lease_expires_at=NULL, finished_at=?, output=?, error=NULL"
    " WHERE runs.id = ? AND runs.status IN ('queued', 'running') AND runs.worker_id IS ?"
    f" RETURNING {RUN_FIELDS}"
)
GET_REQUEST = f"SELECT {REQUEST_COLUMNS} FROM reply_requests WHERE reply_requests.request_id = ?"
#: The run's conversation and the request's source, in id order (on SQLite a read).
LOCK_SESSIONS = (
    "SELECT sessions.id, sessions.title, sessions.agent, sessions.cwd, sessions.created_at,"
    " sessions.updated_at, sessions.archived_at, sessions.extra FROM sessions"
    " WHERE sessions.id IN (?, ?) ORDER BY sessions.id"
)
APPEND_READ = f"{APPEND_MESSAGE} RETURNING id, session_id, seq, role, content, created_at, metadata"
#: Whether the source runs something, and the answer to the request it already holds (the
#: path stays a literal: ``ix_messages_reply_to_request_id`` is on that expression); bound:
#: the source, the request, the source.
SOURCE_STATE = (
    "SELECT EXISTS (SELECT * FROM runs WHERE runs.session_id = ? AND runs.status = 'running')"
    " AS source_running, messages.id, messages.metadata FROM (SELECT 1 AS one) AS one_row"
    " LEFT OUTER JOIN messages ON json_extract(messages.metadata, '$.replyToRequestId') = ?"
    " AND messages.session_id = ? ORDER BY messages.seq"
)
#: ``waiting → returned`` in one step; bound: the reply, completed and returned at, the
#: reply's message, the request.
RETURN_AT_ONCE = (
    "UPDATE reply_requests SET status='returned', reply_text=?, completed_at=?, returned_at=?,"
    " reply_message_id=? WHERE reply_requests.request_id = ?"
    f" AND reply_requests.status IN ('waiting') RETURNING {REQUEST_FIELDS}"
)
#: The replies and failure notices owed to a conversation (here: the run's own).
DELIVERABLE = (
    f"SELECT {REQUEST_COLUMNS} FROM reply_requests"
    " WHERE reply_requests.source_conversation_id = ? AND (reply_requests.status = 'ready'"
    " OR reply_requests.status = 'failed' AND reply_requests.reply_message_id IS NULL"
    " AND reply_requests.returned_at IS NULL)"
    " ORDER BY reply_requests.created_at, reply_requests.request_id"
)
#: A conversation for the round trips to use (setup, outside any measurement).
CREATE_SESSION = "INSERT INTO sessions (id, title) VALUES (?, ?)"
_EVENT_COLUMNS = (
    "type, conversation_id, peer_conversation_id, message_id, run_id, request_id, created_at,"
    " payload"
)


def insert_events(count: int) -> str:
    """The outbox rows of a transaction, as the service writes them: one multi-row INSERT."""
    rows = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?)"] * count)
    return f"INSERT INTO events ({_EVENT_COLUMNS}) VALUES {rows}"


def event(
    kind: str,
    conversation: str,
    now: str,
    payload: dict[str, Any],
    *,
    peer: str | None = None,
    message: str | None = None,
    run: str | None = None,
    request: str | None = None,
) -> tuple[Any, ...]:
    return (kind, conversation, peer, message, run, request, now, dumps_json(payload))


class TargetBusy(LookupError):
    """The send's target has a queued or running run (the service answers ``target_busy``)."""


class NotCovered(LookupError):
    """A ``run.claim`` or ``run.complete`` case the floor does not run (see the docstring)."""


def new_id(prefix: str) -> str:
    """An id shaped like the service's: the time in hex, then 40 random bits (time-ordered,
    so that each insert lands at the end of the primary key's index, as the service's do)."""
    return f"{prefix}_{time.time_ns():x}{secrets.token_hex(5)}"


def stored_time(after: timedelta = timedelta()) -> str:
    """Now (or ``after`` from now), as SQLAlchemy stores a ``DateTime`` in SQLite."""
    return (datetime.now(UTC) + after).strftime("%Y-%m-%d %H:%M:%S.%f")


def named(fields: str, row: Any) -> dict[str, Any]:
    return dict(zip(fields.split(", "), row, strict=True))


class Floor:
    """The writer and the reader connection, each with its lock."""

    def __init__(self, writer: aiosqlite.Connection, reader: aiosqlite.Connection) -> None:
        self.writer, self.reader = writer, reader
        self.writing, self.reading = asyncio.Lock(), asyncio.Lock()

    @classmethod
    async def open(cls, path: str) -> Floor:
        connections = []
        for _ in range(2):
            connection = await aiosqlite.connect(path, isolation_level=None)
            for pragma in PRAGMAS:
                await connection.execute(pragma)
            connections.append(connection)
        return cls(*connections)

    async def close(self) -> None:
        await self.writer.close()
        await self.reader.close()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """The writer connection in one ``BEGIN IMMEDIATE`` … ``COMMIT``, under its lock."""
        async with self.writing:
            await self.writer.execute("BEGIN IMMEDIATE")
            try:
                yield self.writer
            except BaseException:
                await self.writer.execute("ROLLBACK")
                raise
            await self.writer.execute("COMMIT")

    async def send(self, source: str, target: str, content: str) -> dict[str, Any]:
        """One ``return_and_continue`` send, from ``source`` to the idle ``target``."""
        message_id, request_id, run_id = new_id("msg"), new_id("req"), new_id("run")
        async with self.transaction() as db:
            rows = list(await db.execute_fetchall(CONVERSATIONS, (source, target, target)))
            if len(rows) != 2:
                raise LookupError(f"{source!r} or {target!r} is missing")
            if rows[1][2]:
                raise TargetBusy(f"{target!r} is busy (a queued or running run)")
            (_, source_title, _), (_, target_title, _) = rows
            now = stored_time()
            cross = {
                "sourceConversationId": source,
                "sourceTitle": source_title,
                "hopCount": 1,
                "replyMode": RETURN_AND_CONTINUE,
                "expectsReply": True,
                "replyRequestId": request_id,
            }
            metadata = dumps_json({"crossConversation": cross})
            prompt = target_prompt(
                source_id=source,
                source_title=source_title,
                content=content,
                reply_mode=RETURN_AND_CONTINUE,
                request_id=request_id,
            )
            await db.execute(TOUCH, (now, now, now, target))
            await db.execute(
                APPEND_MESSAGE, (message_id, target, target, "user", content, now, metadata)
            )
            request = (request_id, message_id, source, source_title, target, target_title)
            await db.execute(INSERT_REQUEST, (*request, "waiting", 1, 1, now, content))
            await db.execute(
                ENQUEUE_RUN,
                (run_id, target, "cross_conversation", "queued", prompt, request_id, 1, now),
            )
            events = (
                event("message.appended", target, now, {"role": "user"}, message=message_id),
                event(
                    "reply.waiting",
                    source,
                    now,
                    {"status": "waiting"},
                    peer=target,
                    request=request_id,
                ),
                event(
                    "run.queued",
                    target,
                    now,
                    {"kind": "cross_conversation"},
                    run=run_id,
                    request=request_id,
                ),
            )
            await db.execute(insert_events(len(events)), tuple(chain(*events)))
        return {"messageId": message_id, "requestId": request_id, "runId": run_id}

    async def create_session(self, session_id: str, title: str) -> None:
        async with self.transaction() as db:
            await db.execute(CREATE_SESSION, (session_id, title))

    async def claim(self, worker_id: str, kind: str) -> dict[str, Any] | None:
        """Lease the oldest queued run of ``kind`` whose conversation runs nothing."""
        started = stored_time()
        expires = stored_time(timedelta(seconds=LEASE_SECONDS))
        async with self.transaction() as db:
            rows = list(await db.execute_fetchall(CLAIM, (worker_id, expires, started, kind)))
            if not rows:
                return None
            run = named(RUN_FIELDS, rows[0])
            started_event = event(
                "run.started",
                run["session_id"],
                started,
                {"kind": run["kind"], "workerId": worker_id},
                run=run["id"],
                request=run["reply_request_id"],
            )
            await db.execute(insert_events(1), started_event)
        return run

    async def complete(self, run_id: str, worker_id: str, output: str) -> dict[str, Any]:
        """Complete the ``cross_conversation`` run ``run_id`` that ``worker_id`` holds, with
        ``output``: the output on the target, the reply returned to the idle source at once,
        the source's ``reply_auto_run`` queued when the request asked for one."""
        async with self.transaction() as db:
            return await self._complete(db, run_id, worker_id, output)

    @staticmethod
    async def _complete(
        db: aiosqlite.Connection, run_id: str, worker_id: str, output: str
    ) -> dict[str, Any]:
        now = stored_time()
        finished = list(
            await db.execute_fetchall(FINISH, ("completed", now, output, run_id, worker_id))
        )
        if not finished:
            raise NotCovered(f"run {run_id!r} is not held by {worker_id!r}")
        run = named(RUN_FIELDS, finished[0])
        found = list(await db.execute_fetchall(GET_REQUEST, (run["reply_request_id"],)))
        if run["kind"] != "cross_conversation" or not found:
            raise NotCovered(f"run {run_id!r} answers no reply request")
        request = named(REQUEST_FIELDS, found[0])
        request_id, source = request["request_id"], request["source_conversation_id"]
        target = run["session_id"]
        if len(list(await db.execute_fetchall(LOCK_SESSIONS, sorted((source, target))))) != 2:
            raise NotCovered(f"the source {source!r} no longer exists")
        await db.execute(TOUCH, (now, now, now, target))
        metadata = dumps_json({"runId": run_id})
        output_id = new_id("msg")
        appended = await db.execute_fetchall(
            APPEND_READ, (output_id, target, target, "assistant", output, now, metadata)
        )
        events = [
            event(
                "run.finished",
                target,
                now,
                {"kind": run["kind"], "status": "completed"},
                run=run_id,
                request=request_id,
            ),
            event("message.appended", target, now, {"role": "assistant"}, message=output_id),
        ]
        state = list(await db.execute_fetchall(SOURCE_STATE, (source, request_id, source)))
        running, answer_id, _ = state[0]
        if request["status"] != "waiting" or running or answer_id is not None:
            raise NotCovered(f"the reply to {request_id!r} cannot be returned at once")
        reply_id = new_id("msg")
        returned = await db.execute_fetchall(
            RETURN_AT_ONCE, (output, now, now, reply_id, request_id)
        )
        if not returned:
            raise NotCovered(f"the request {request_id!r} moved meanwhile")
        await db.execute(TOUCH, (now, now, now, source))
        auto_run = bool(request["source_auto_run"])
        reply_metadata = dumps_json(
            {"ccwebDisplayOnly": True, "replyToRequestId": request_id, "processed": True}
            | {"autoRun": auto_run, "deliveredByRunId": run_id}
        )
        reply = (reply_id, source, source, "assistant", reply_message_text(output), now)
        await db.execute(APPEND_MESSAGE, (*reply, reply_metadata))
        events.append(
            event(
                "reply.returned",
                source,
                now,
                {"status": "returned"},
                peer=target,
                request=request_id,
            )
        )
        events.append(
            event("message.appended", source, now, {"role": "assistant"}, message=reply_id)
        )
        if auto_run:
            prompt = source_auto_run_prompt(
                request_id=request_id,
                target_id=request["target_conversation_id"],
                target_title=request["target_title"],
                original_request=request["original_request"],
                reply_text=output,
            )
            values = ("reply_auto_run", "queued", prompt, request_id, request["hop_count"], now)
            auto_run_id = new_id("run")
            await db.execute(ENQUEUE_RUN, (auto_run_id, source, *values))
            events.append(
                event(
                    "run.queued",
                    source,
                    now,
                    {"kind": "reply_auto_run"},
                    run=auto_run_id,
                    request=request_id,
                )
            )
        if await db.execute_fetchall(DELIVERABLE, (target,)):
            raise NotCovered(f"replies are owed to {target!r}")
        await db.execute(insert_events(len(events)), tuple(chain(*events)))
        replies = [named(REQUEST_FIELDS, row) for row in returned]
        message = dict(zip(("id", "seq"), next(iter(appended)), strict=False))
        return {"run": run, "message": message, "replies": replies}

    async def latest_inputs(self, conversation: str) -> list[dict[str, Any]]:
        """The first read of one list of ``conversation``'s user inputs."""
        async with self.reading:
            db = self.reader
            await db.execute("BEGIN")
            try:
                rows = await db.execute_fetchall(
                    LATEST_INPUTS, (conversation, "user", NO_SEQ_ABOVE, FIRST_BATCH)
                )
            finally:
                await db.execute("ROLLBACK")
        return [
            {"messageId": id_, "seq": seq, "content": content, "createdAt": created_at}
            for id_, seq, content, created_at in rows
        ]


def endpoint(step: Callable[[Floor, dict[str, Any]], Awaitable[Any]]) -> Any:
    """A ``POST`` handler: the JSON-RPC request's ``params`` to ``step``, its result back."""

    async def handle(request: Request) -> JSONResponse:
        body = await request.json()
        result = await step(request.app.state.floor, body["params"])
        return JSONResponse({"jsonrpc": "2.0", "id": body.get("id"), "result": result})

    return handle


async def send(floor: Floor, params: dict[str, Any]) -> dict[str, Any]:
    try:
        return await floor.send(params["source"], params["target"], params["content"])
    except TargetBusy:
        return {"refused": "target_busy"}


async def list_inputs(floor: Floor, params: dict[str, Any]) -> dict[str, Any]:
    return {"inputs": await floor.latest_inputs(params["conversation"])}


async def claim(floor: Floor, params: dict[str, Any]) -> dict[str, Any]:
    return {"run": await floor.claim(params["workerId"], params["kind"])}


async def complete(floor: Floor, params: dict[str, Any]) -> dict[str, Any]:
    return await floor.complete(params["runId"], params["workerId"], params["output"])


async def create_session(floor: Floor, params: dict[str, Any]) -> dict[str, Any]:
    await floor.create_session(params["id"], params["title"])
    return {"id": params["id"]}


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    app.state.floor = await Floor.open(os.environ[DATABASE_ENV])
    try:
        yield
    finally:
        await app.state.floor.close()


STEPS = {
    "/send": send,
    "/list": list_inputs,
    "/claim": claim,
    "/complete": complete,
    "/session": create_session,
}
app = Starlette(
    routes=[Route(path, endpoint(step), methods=["POST"]) for path, step in STEPS.items()],
    lifespan=lifespan,
)
