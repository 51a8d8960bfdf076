"""Helpers shared by the lifecycle tests: make conversations, read back what was written."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import sqlalchemy as sa

from ccweb_store.domain.context import Source
from ccweb_store.domain.rows import Message, ReplyRequest, Run
from ccweb_store.store.models import Base
from ccweb_store.store.uow import Store
from tests import host_calls, tool_calls
from tests.http_client import app_client, call_tool, rpc_result


async def make_conversation(store: Store, conversation_id: str, title: str | None = None) -> None:
    async with store.uow() as uow:
        await uow.sessions.create(conversation_id, title=title or conversation_id.title())
        await uow.commit()


async def row_counts(store: Store) -> dict[str, int]:
    """How many rows each table holds."""
    counts = {}
    async with store.read_uow() as uow:
        for name in ("messages", "reply_requests", "runs"):
            stmt = sa.select(sa.func.count()).select_from(Base.metadata.tables[name])
            counts[name] = int((await uow._execute(stmt)).scalar_one())
    return counts


async def table_row_counts(store: Store) -> dict[str, int]:
    """How many rows every table holds (sessions included)."""
    counts = {}
    async with store.read_uow() as uow:
        for table in Base.metadata.sorted_tables:
            stmt = sa.select(sa.func.count()).select_from(table)
            counts[table.name] = int((await uow._execute(stmt)).scalar_one())
    return counts


async def messages_of(store: Store, session_id: str) -> list[Message]:
    async with store.read_uow() as uow:
        return await uow.messages.list_after(session_id, limit=1000)


async def runs_of(store: Store, session_id: str, kind: str | None = None) -> list[Run]:
    async with store.read_uow() as uow:
        rows = await uow.runs.list_recent(session_id=session_id, limit=500)
    return sorted(
        (run for run in rows if kind is None or run.kind == kind), key=lambda r: r.created_at
    )


async def reply_row(store: Store, request_id: str) -> ReplyRequest:
    async with store.read_uow() as uow:
        return await uow.replies.require(request_id)


async def ask(
    store: Store, source: str, target: str, content: str, *, hop: int = 0
) -> dict[str, Any]:
    """A ``return_and_continue`` send from ``source`` to ``target``."""
    return await tool_calls.send_message(
        store,
        Source(source, hop),
        {"targetConversationId": target, "content": content, "replyMode": "return_and_continue"},
    )


async def claim(store: Store, worker: str = "worker-1", **params: Any) -> dict[str, Any] | None:
    result = await host_calls.claim_run(store, {"workerId": worker, **params})
    run: dict[str, Any] | None = result["run"]
    return run


async def complete(
    store: Store, run_id: str, output: str | None = None, status: str = "completed", **more: Any
) -> dict[str, Any]:
    return await host_calls.complete_run(
        store, {"runId": run_id, "status": status, "output": output, **more}
    )


async def insert_message_by_hand(
    store: Store, session_id: str, message_id: str, metadata_json: str | None
) -> None:
    """A message row written with plain SQL, as an operator or an older tool would write it:
    the next seq of the session, ``metadata`` given as JSON text."""
    metadata = "CAST(:metadata AS JSONB)" if store.dialect == "postgresql" else ":metadata"
    async with store.uow() as uow:
        await uow._execute(
            sa.text(
                "INSERT INTO messages (id, session_id, seq, role, content, metadata)"
                " VALUES (:id, :session_id,"
                " (SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE session_id = :of_session),"
                f" 'assistant', 'written by hand', {metadata})"
            ),
            {
                "id": message_id,
                "session_id": session_id,
                "of_session": session_id,
                "metadata": metadata_json,
            },
        )
        await uow.commit()


@asynccontextmanager
async def planner_and_tester(store: Store) -> AsyncIterator[httpx.AsyncClient]:
    """A client on the real app with two conversations: ``planner`` (the source) and
    ``tester`` (the target)."""
    async with app_client(store) as http:
        await rpc_result(http, "session.create", {"id": "planner", "title": "Planner"})
        await rpc_result(http, "session.create", {"id": "tester", "title": "Tester"})
        yield http


async def ask_tester(client: httpx.AsyncClient, content: str) -> dict[str, Any]:
    """The planner asks the tester (``return_and_continue``); the send's payload."""
    arguments = {
        "targetConversationId": "tester",
        "content": content,
        "replyMode": "return_and_continue",
    }
    result = await call_tool(
        client, "ccweb_send_message", arguments, query="?sourceSessionId=planner"
    )
    assert result["isError"] is False, result
    payload: dict[str, Any] = result["structuredContent"]
    return payload
