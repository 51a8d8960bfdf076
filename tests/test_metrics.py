"""``GET /metrics``: the request counters and latencies by method, tool and outcome, the
backlog read from the database at each scrape, lease expiries, database errors, who may
scrape, and several server processes counted together (``PROMETHEUS_MULTIPROC_DIR``)."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ccweb_store.config import Settings
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.http.app import create_app
from ccweb_store.services import runs
from ccweb_store.services.monitoring import backlog
from ccweb_store.store.uow import Store
from tests import host_calls
from tests.cli_support import run_cli
from tests.http_client import BASE_URL, app_client, call_tool, mcp, rpc, rpc_result
from tests.servers import serving

TOKEN = "metrics-test-operator-token-0123456789"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    """Every sample of an exposition, by name and labels."""
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


async def scrape(client: httpx.AsyncClient, **kwargs: object) -> Samples:
    response = await client.get("/metrics", **kwargs)  # type: ignore[arg-type]
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=")
    return samples(response.text)


def requests(
    found: Samples, endpoint: str, method: str, tool: str = "", outcome: str = "ok"
) -> float:
    return value(
        found, "ccweb_requests_total", endpoint=endpoint, method=method, tool=tool, outcome=outcome
    )


async def test_requests_are_counted_by_method_tool_and_outcome(pair: Store) -> None:
    async with app_client(pair) as client:
        before = await scrape(client)
        await rpc_result(client, "session.list", {})
        sent = await call_tool(
            client,
            "ccweb_send_message",
            {"targetConversationId": "conv-b", "content": "hi", "replyMode": "one_way"},
            query="?sourceSessionId=conv-a",
        )
        assert sent["isError"] is False
        refused = await call_tool(
            client, "ccweb_send_message", {"targetConversationId": "nobody", "content": "x"}
        )
        assert refused["isError"] is True
        unknown_tool = await mcp(client, "tools/call", {"name": "no_such_tool", "arguments": {}})
        assert "error" in unknown_tool.json()
        unknown_method = await rpc(client, "evil.method", {})
        assert unknown_method["error"]["code"] == -32601
        for method, params in (([1], {}), ("tools/call", {"name": ["x"]})):
            bad = await client.post(
                "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
            )
            assert bad.status_code in (200, 400) and "error" in bad.json()
        assert (await client.get("/no-such-path")).status_code == 404
        not_json = await client.post("/mcp", content=b"x", headers={"content-type": "text/plain"})
        assert not_json.status_code == 415
        after = await scrape(client)

    def grew(endpoint: str, method: str, tool: str = "", outcome: str = "ok") -> float:
        return requests(after, endpoint, method, tool, outcome) - requests(
            before, endpoint, method, tool, outcome
        )

    assert grew("/rpc", "session.list") == 1
    assert grew("/mcp", "tools/call", "ccweb_send_message") == 1
    assert grew("/mcp", "tools/call", "ccweb_send_message", "tool_error") == 1
    # Names nobody registered are counted under "other": a client cannot add series.
    assert grew("/mcp", "tools/call", "other", "error") == 2  # no_such_tool, ["x"]
    assert grew("/rpc", "other", "", "error") == 1
    assert grew("/mcp", "other", "", "error") == 1  # a method that is not a string
    assert grew("other", "", "", "refused") == 1
    assert grew("/mcp", "", "", "refused") == 1  # refused before it was read
    assert grew("/metrics", "") == 1  # the first scrape
    histogram = "ccweb_request_duration_seconds_count"
    labels = {"endpoint": "/rpc", "method": "session.list", "tool": ""}
    assert value(after, histogram, **labels) - value(before, histogram, **labels) == 1
    bucket = value(after, "ccweb_request_duration_seconds_bucket", **labels, le="+Inf")
    assert bucket == value(after, histogram, **labels)


async def test_a_send_without_reply_mode_is_one_way_logged_naming_the_conversation_and_counted(
    pair: Store, caplog: pytest.LogCaptureFixture
) -> None:
    old_schema = {"targetConversationId": "conv-b", "content": "hi"}
    async with app_client(pair) as client:
        before = await scrape(client)
        with caplog.at_level(logging.WARNING):
            sent = await call_tool(
                client, "ccweb_send_message", old_schema, query="?sourceSessionId=conv-a"
            )
            await rpc_result(client, "run.cancel", {"runId": sent["structuredContent"]["runId"]})
            chose = await call_tool(
                client,
                "ccweb_send_message",
                {**old_schema, "replyMode": "one_way"},
                query="?sourceSessionId=conv-a",
            )
        after = await scrape(client)

    assert sent["structuredContent"]["replyMode"] == "one_way"
    assert chose["isError"] is False
    name = "ccweb_sends_without_reply_mode_total"
    tool = "ccweb_send_message"
    assert value(after, name, tool=tool) - value(before, name, tool=tool) == 1
    warned = [r.getMessage() for r in caplog.records if "without replyMode" in r.getMessage()]
    assert len(warned) == 1
    assert "from conversation conv-a to conv-b: sent one_way" in warned[0]


async def test_the_backlog_is_read_from_the_database_at_each_scrape(pair: Store) -> None:
    async with app_client(pair) as client:
        empty = await scrape(client)
        assert value(empty, "ccweb_database_up") == 1
        assert value(empty, "ccweb_open_replies", status="waiting") == 0
        assert value(empty, "ccweb_oldest_waiting_reply_age_seconds") == 0
        sent = await call_tool(
            client,
            "ccweb_send_message",
            {
                "targetConversationId": "conv-b",
                "content": "please answer",
                "replyMode": "return_and_continue",
            },
            query="?sourceSessionId=conv-a",
        )
        assert sent["isError"] is False
        after = await scrape(client)
    assert value(after, "ccweb_open_replies", status="waiting") == 1
    assert value(after, "ccweb_open_replies", status="ready") == 0
    assert value(after, "ccweb_runs", status="queued") == 1
    assert value(after, "ccweb_runs", status="running") == 0
    assert value(after, "ccweb_oldest_waiting_reply_age_seconds") >= 0
    an_hour_on = await backlog(pair, now=utcnow() + timedelta(hours=1))
    assert an_hour_on.oldest_waiting_seconds >= 3600
    assert an_hour_on.replies == {"waiting": 1, "ready": 0, "failed": 0}


async def test_lease_expiries_are_counted(pair: Store) -> None:
    async with app_client(pair) as client:
        await rpc_result(client, "run.enqueue", {"sessionId": "conv-b", "kind": "user_turn"})
        before = await scrape(client)
        past = utcnow() - timedelta(hours=1)
        claimed = await host_calls.claim_run(
            pair, {"workerId": "gone", "leaseSeconds": 1}, now=past
        )
        assert claimed["run"] is not None
        swept = await runs.requeue_expired(pair)
        assert swept == {"requeued": 1, "failed": 0}
        after = await scrape(client)
    name = "ccweb_lease_expiries_total"
    assert value(after, name, outcome="requeued") - value(before, name, outcome="requeued") == 1


async def test_a_database_that_cannot_answer_shows_as_down_and_is_counted(
    tmp_path: Path,
) -> None:
    # Nothing listens on port 1: every connection is refused.
    settings = Settings(database_url="postgresql+asyncpg://nobody@127.0.0.1:1/none")
    store = Store.from_settings(settings)
    try:
        app = create_app(settings, store=store, migrate_on_start=False)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            first = await scrape(client)
            second = await scrape(client)
    finally:
        await store.dispose()
    assert value(second, "ccweb_database_up") == 0
    assert ("ccweb_runs", frozenset({("status", "queued")})) not in second
    errors = "ccweb_database_errors_total"
    assert value(second, errors, during="begin") - value(first, errors, during="begin") == 1


async def test_metrics_need_the_operator_token_unless_public_on_loopback(store: Store) -> None:
    async with app_client(store, token=TOKEN) as client:
        refused = await client.get("/metrics")
        assert refused.status_code == 401
        assert "CCWEB_TOKEN" in refused.json()["error"]["message"]
        await scrape(client, headers={"Authorization": f"Bearer {TOKEN}"})
    async with app_client(store, token=TOKEN, metrics_public=True) as client:
        await scrape(client)
        assert (await client.post("/rpc", json={})).status_code == 401  # only /metrics opens


def test_serve_refuses_public_metrics_on_a_public_bind(tmp_path: Path) -> None:
    result = run_cli(
        "serve",
        "--host",
        "0.0.0.0",
        "--token",
        TOKEN,
        env={**serving_env(tmp_path), "CCWEB_METRICS_PUBLIC": "1"},
        cwd=tmp_path,
        timeout=30,
    )
    assert result.returncode == 2
    assert "CCWEB_METRICS_PUBLIC=1" in result.stderr and "loopback" in result.stderr
    assert not (tmp_path / "ccweb.db").exists()


def test_serve_refuses_a_missing_multiprocess_directory(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir"
    env = {**serving_env(tmp_path), "PROMETHEUS_MULTIPROC_DIR": str(missing)}
    result = run_cli("serve", env=env, cwd=tmp_path, timeout=30)
    assert result.returncode == 2
    assert f"PROMETHEUS_MULTIPROC_DIR='{missing}' is not a writable directory" in result.stderr


def serving_env(tmp_path: Path) -> dict[str, str]:
    from tests.servers import server_env

    return server_env(CCWEB_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'ccweb.db'}")


@pytest.mark.slow
def test_several_server_processes_are_counted_together(database_url: str, tmp_path: Path) -> None:
    shared = tmp_path / "metrics"
    shared.mkdir()
    env = {"PROMETHEUS_MULTIPROC_DIR": str(shared), "CCWEB_METRICS_PUBLIC": "1"}
    call = {"jsonrpc": "2.0", "id": 1, "method": "session.list", "params": {}}
    with serving(database_url, **env) as first, serving(database_url, **env) as second:
        for server, times in ((first, 3), (second, 2)):
            for _ in range(times):
                answer = httpx.post(f"{server.url}/rpc", json=call, timeout=30)
                assert "result" in answer.json()
        scraped = [samples(httpx.get(f"{s.url}/metrics", timeout=30).text) for s in (first, second)]
    for found in scraped:  # either process answers for both
        assert requests(found, "/rpc", "session.list") == 5
        assert value(found, "ccweb_database_up") == 1
    assert len(list(shared.glob("*.db"))) >= 2  # each process wrote its own file
