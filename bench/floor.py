"""The aiosqlite floor: one send's and one list's SQL run straight on aiosqlite by a bare
Starlette app, with nothing of ccweb-store between the request and the statements.

``compare.py``'s floor rows measure ccweb-store's send and list on SQLite against this app,
served in a process of its own under uvicorn with the same settings as the other peers, in
the same rounds. The floor pays aiosqlite's thread hand-off (one per statement) and the HTTP
server, nothing else: a SQLite goal that it alone puts out of reach is met against it instead.

The statements are those one ``ccweb_send_message``
(``return_and_continue``, to an idle target) and one ``ccweb_list_user_inputs`` (default
arguments, on a conversation whose user inputs are a few hundred characters, so that its
first read asks for 4 rows and the budget stops there) run on SQLite, as the driver
connection saw them during real calls through the app (``sqlite3.Connection.
set_trace_callback`` on every connection of the store's engine), their values made
parameters again: a send is ``BEGIN IMMEDIATE``, ``CONVERSATIONS``, ``TOUCH``,
``APPEND_MESSAGE``, ``INSERT_REQUEST``, ``ENQUEUE_RUN``, ``COMMIT``; a list ``BEGIN``,
``LATEST_INPUTS``, ``ROLLBACK``. ``tests/test_bench_floor.py`` checks that a floor send
writes the rows a real send writes, and that a floor list reads the messages the tool answers.

How they run: writes on one writer connection, one transaction at a
time under an ``asyncio.Lock`` (``BEGIN IMMEDIATE`` … ``COMMIT``); reads on one reader
connection, under a lock of its own (its ``BEGIN`` … ``ROLLBACK`` must not interleave); both
with the service's pragmas (WAL, ``synchronous = NORMAL``, foreign keys, the busy timeout,
temporary storage in memory, the same WAL autocheckpoint).

    CCWEB_FLOOR_DATABASE=/path/to/migrated.db python -m uvicorn floor:app --app-dir bench
    POST /send {"jsonrpc": "2.0", "id": 1, "method": "send",
                "params": {"source": "sender", "target": "target-1", "content": "…"}}
    POST /list {"jsonrpc": "2.0", "id": 1, "method": "list", "params": {"conversation": "…"}}
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import aiosqlite
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ccweb_store.domain.prompts import RETURN_AND_CONTINUE, target_prompt

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
TOUCH = "UPDATE sessions SET updated_at=? WHERE sessions.id = ?"
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


def new_id(prefix: str) -> str:
    """An id shaped like the service's: the time in hex, then 40 random bits (time-ordered,
    so that each insert lands at the end of the primary key's index, as the service's do)."""
    return f"{prefix}_{time.time_ns():x}{secrets.token_hex(5)}"


def stored_time() -> str:
    """Now, as SQLAlchemy stores a ``DateTime`` in SQLite."""
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


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

    async def send(self, source: str, target: str, content: str) -> dict[str, Any]:
        """One ``return_and_continue`` send, from ``source`` to the idle ``target``."""
        message_id, request_id, run_id = new_id("msg"), new_id("req"), new_id("run")
        async with self.writing:
            db = self.writer
            await db.execute("BEGIN IMMEDIATE")
            try:
                rows = list(await db.execute_fetchall(CONVERSATIONS, (source, target, target)))
                if len(rows) != 2 or rows[1][2]:
                    raise LookupError(f"{source!r} or {target!r} is missing, or the target busy")
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
                metadata = json.dumps({"crossConversation": cross})
                prompt = target_prompt(
                    source_id=source,
                    source_title=source_title,
                    content=content,
                    reply_mode=RETURN_AND_CONTINUE,
                    request_id=request_id,
                )
                await db.execute(TOUCH, (now, target))
                await db.execute(
                    APPEND_MESSAGE, (message_id, target, target, "user", content, now, metadata)
                )
                request = (request_id, message_id, source, source_title, target, target_title)
                await db.execute(INSERT_REQUEST, (*request, "waiting", 1, 1, now, content))
                await db.execute(
                    ENQUEUE_RUN,
                    (run_id, target, "cross_conversation", "queued", prompt, request_id, 1, now),
                )
                await db.execute("COMMIT")
            except BaseException:
                await db.execute("ROLLBACK")
                raise
        return {"messageId": message_id, "requestId": request_id, "runId": run_id}

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


def answer(body: dict[str, Any], result: Any) -> JSONResponse:
    return JSONResponse({"jsonrpc": "2.0", "id": body.get("id"), "result": result})


async def send(request: Request) -> JSONResponse:
    body = await request.json()
    params = body["params"]
    floor: Floor = request.app.state.floor
    return answer(body, await floor.send(params["source"], params["target"], params["content"]))


async def list_inputs(request: Request) -> JSONResponse:
    body = await request.json()
    floor: Floor = request.app.state.floor
    return answer(body, {"inputs": await floor.latest_inputs(body["params"]["conversation"])})


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    app.state.floor = await Floor.open(os.environ[DATABASE_ENV])
    try:
        yield
    finally:
        await app.state.floor.close()


app = Starlette(
    routes=[Route("/send", send, methods=["POST"]), Route("/list", list_inputs, methods=["POST"])],
    lifespan=lifespan,
)
