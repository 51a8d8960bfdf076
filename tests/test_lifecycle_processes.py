"""Exactly-once delivery across two real server processes sharing one database.

Two ``ccweb-store serve`` processes (uvicorn) run on the same PostgreSQL database (and on
the same SQLite file, which WAL allows). Agents send through either one; workers claim
through either one and send every completion twice, once to each server, at the same time.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from typing import Any

import httpx
import pytest

from tests.servers import serving

SOURCES = [f"src-{i}" for i in range(10)]
TARGETS = [f"tgt-{i:02d}" for i in range(50)]
WORKERS = 6


class Host:
    """JSON-RPC over real HTTP to one server."""

    ids = itertools.count(1)

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def call(self, path: str, method: str, params: dict[str, Any]) -> Any:
        message = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
        response = await self.client.post(path, json=message)
        assert response.status_code == 200, response.text
        body = response.json()
        assert "result" in body, body
        return body["result"]

    async def rpc(self, method: str, params: dict[str, Any]) -> Any:
        return await self.call("/rpc", method, params)


@pytest.mark.slow
async def test_two_servers_on_one_database_return_every_reply_exactly_once(
    database_url: str,
) -> None:
    with (
        serving(database_url, CCWEB_LOG_LEVEL="warning") as first,
        serving(database_url, CCWEB_LOG_LEVEL="warning") as second,
    ):
        async with (
            httpx.AsyncClient(base_url=first.url, timeout=60) as a,
            httpx.AsyncClient(base_url=second.url, timeout=60) as b,
        ):
            hosts = [Host(a), Host(b)]
            await _run_the_workload(hosts)


async def _run_the_workload(hosts: list[Host]) -> None:
    for number, conversation in enumerate(SOURCES + TARGETS):
        await hosts[number % 2].rpc("session.create", {"id": conversation})
    # Half the sources are mid-turn: their replies wait in ready and go out on completion.
    busy_runs = [
        (await hosts[0].rpc("run.start", {"sessionId": source}))["id"] for source in SOURCES[::2]
    ]
    sent = []
    for number, target in enumerate(TARGETS):
        source = SOURCES[number % len(SOURCES)]
        result = await hosts[number % 2].call(
            f"/mcp?sourceSessionId={source}",
            "tools/call",
            {
                "name": "ccweb_send_message",
                "arguments": {
                    "targetConversationId": target,
                    "content": f"job {number}",
                    "replyMode": "return_and_continue",
                },
            },
        )
        assert result["isError"] is False, result
        sent.append(result["structuredContent"])

    async def worker(number: int) -> None:
        claimer = hosts[number % 2]
        while True:
            claimed = await claimer.rpc(
                "run.claim", {"workerId": f"w{number}", "kinds": ["cross_conversation"]}
            )
            run = claimed["run"]
            if run is None:
                return
            params = {
                "runId": run["id"],
                "workerId": f"w{number}",
                "status": "completed",
                "output": f"done {run['sessionId']}",
            }
            first, second = await asyncio.gather(
                *(host.rpc("run.complete", params) for host in hosts)
            )
            assert (first["run"], first["message"]) == (second["run"], second["message"])
            assert [r["requestId"] for r in first["replies"]] == [
                r["requestId"] for r in second["replies"]
            ]

    async def finish_busy_sources() -> None:
        await asyncio.sleep(0.2)
        for run_id in busy_runs:
            await hosts[1].rpc(
                "run.complete", {"runId": run_id, "status": "completed", "output": "turn"}
            )

    await asyncio.gather(*(worker(n) for n in range(WORKERS)), finish_busy_sources())

    replies = (await hosts[0].rpc("reply.list", {"limit": 100}))["replies"]
    by_id = {reply["requestId"]: reply for reply in replies}
    assert set(by_id) == {payload["requestId"] for payload in sent}
    assert Counter(reply["status"] for reply in replies) == {"returned": 50}
    for source in SOURCES:
        messages = (await hosts[1].rpc("message.list", {"sessionId": source, "limit": 500}))[
            "messages"
        ]
        delivered = Counter(
            m["metadata"]["replyToRequestId"]
            for m in messages
            if m["metadata"].get("replyToRequestId")
        )
        runs = (await hosts[0].rpc("run.list", {"sessionId": source}))["runs"]
        auto_runs = Counter(r["replyRequestId"] for r in runs if r["kind"] == "reply_auto_run")
        mine = {rid for rid, reply in by_id.items() if reply["sourceConversationId"] == source}
        assert len(mine) == 5
        assert delivered == dict.fromkeys(mine, 1)
        assert auto_runs == dict.fromkeys(mine, 1)
        for message in messages:
            request_id = message["metadata"].get("replyToRequestId")
            if request_id:
                assert message["id"] == by_id[request_id]["replyMessageId"]
                assert message["content"] == f"done {by_id[request_id]['targetConversationId']}"
