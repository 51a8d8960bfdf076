"""Imported conversations work with the tools and the host API like native ones."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from ccweb_store.config import Settings
from ccweb_store.store.uow import Store
from tests.http_client import app_client, call_tool, rpc_result
from tests.test_importer import run_import, write_state


def import_then(
    database_url: str, tmp_path: Path, check: Callable[[httpx.AsyncClient], Awaitable[None]]
) -> None:
    """Import the fixture state with the CLI, then run ``check`` against the real app."""
    code, _, _ = run_import(write_state(tmp_path / "state"), database_url)
    assert code == 0

    async def run() -> None:
        store = Store.from_settings(Settings(database_url=database_url))
        try:
            async with app_client(store) as client:
                await check(client)
        finally:
            await store.dispose()

    asyncio.run(run())


def test_list_user_inputs_returns_an_imported_conversations_inputs(
    database_url: str, tmp_path: Path
) -> None:
    async def check(client: httpx.AsyncClient) -> None:
        result = await call_tool(client, "ccweb_list_user_inputs", {"conversationId": "beta"})
        payload = result["structuredContent"]
        assert [item["content"] for item in payload["inputs"]] == ["hello"]
        assert payload["inputs"][0]["messageId"] == "b-1"
        assert payload["inputs"][0]["createdAt"] == "2024-02-01T08:00:00.000Z"

    import_then(database_url, tmp_path, check)


def test_a_ready_imported_reply_is_delivered_by_reply_retry(
    database_url: str, tmp_path: Path
) -> None:
    async def check(client: httpx.AsyncClient) -> None:
        reply = await rpc_result(client, "reply.retry", {"requestId": "req-ready"})
        messages = await rpc_result(client, "message.list", {"sessionId": "alpha", "limit": 500})
        runs = await rpc_result(client, "run.list", {"sessionId": "alpha"})
        assert reply["status"] == "returned"
        delivered = [
            m for m in messages["messages"] if m["metadata"].get("replyToRequestId") == "req-ready"
        ]
        assert len(delivered) == 1 and "done" in delivered[0]["content"]
        assert reply["replyMessageId"] == delivered[0]["id"]
        auto_runs = [r for r in runs["runs"] if r["kind"] == "reply_auto_run"]
        assert len(auto_runs) == 1 and auto_runs[0]["replyRequestId"] == "req-ready"
        assert "do the thing" in auto_runs[0]["runtimeText"]

    import_then(database_url, tmp_path, check)
