"""Every console page renders with every kind of run and reply request in it, and every
answer of the app (pages, refusals, 404s, 500s, the JSON-RPC endpoints) carries the CSP,
over HTTP against the real app on both backends."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

from ccweb_store.domain.ids import RUN_STATUSES
from ccweb_store.http.app import create_app
from ccweb_store.http.headers import CSP
from ccweb_store.store.uow import Store
from tests import host_calls
from tests.http_client import BASE_URL, app_client
from tests.lifecycle_support import ask, claim, complete, make_conversation

HTML = {"Accept": "text/html"}


async def every_state(store: Store) -> dict[str, str]:
    """Conversations holding runs in every status and requests in every state; returns the
    states seen, by status, with a conversation that holds one."""
    for name in ("planner", "reviewer", "tester", "writer", "idle"):
        await make_conversation(store, name, title=name.title())
    # returned: asked, answered and delivered
    await ask(store, "planner", "reviewer", "Review it")
    run = await claim(store, "w-1")
    assert run is not None
    await complete(store, run["id"], "Reviewed", workerId="w-1")
    # ready: answered while its source runs
    await host_calls.start_run(store, {"sessionId": "writer", "workerId": "w-3"})
    await ask(store, "writer", "reviewer", "Check again")
    answering = await claim(store, "w-4", kinds=["cross_conversation"])
    assert answering is not None
    await complete(store, answering["id"], "Checked", workerId="w-4")
    # the planner's reply auto-run is queued now; a request failed by hand, its run queued
    failed = await ask(store, "writer", "tester", "Test it")
    await host_calls.fail_reply(store, {"requestId": failed["requestId"], "reason": "no"})
    # cancelled and failed runs
    started = await host_calls.start_run(store, {"sessionId": "idle", "workerId": "w-2"})
    await complete(store, started["id"], status="failed", error="boom", workerId="w-2")
    queued = await host_calls.enqueue_run(store, {"sessionId": "idle"})
    await host_calls.cancel_run(store, {"runId": queued["id"]})
    # waiting, its target run queued
    await ask(store, "tester", "idle", "Still there?")
    return await _states(store)


async def _states(store: Store) -> dict[str, Any]:
    every_run = (await host_calls.list_runs(store, {"limit": 100}))["runs"]
    every_reply = (await host_calls.list_replies(store, {"limit": 100}))["replies"]
    return {
        "runs": {run["status"] for run in every_run},
        "replies": {reply["status"] for reply in every_reply},
    }


def assert_csp(response: httpx.Response) -> None:
    assert response.headers.get("content-security-policy") == CSP, (
        response.status_code,
        response.request.url,
    )
    assert response.headers["x-content-type-options"] == "nosniff"


async def test_every_page_renders_with_every_run_and_reply_state(store: Store) -> None:
    states = await every_state(store)
    assert states["runs"] == set(RUN_STATUSES)
    assert states["replies"] == {"waiting", "ready", "failed", "returned"}

    async with app_client(store) as client:
        pages = ["/", *(f"/?state={state}" for state in ("waiting", "ready", "failed"))]
        pages += [
            f"/console/conversations/{name}"
            for name in ("planner", "reviewer", "tester", "writer", "idle")
        ]
        for path in pages:
            response = await client.get(path, headers=HTML)
            assert response.status_code == 200, (path, response.text[:500])
            assert_csp(response)
        overview = (await client.get("/", headers=HTML)).text
        for status in ("queued", "running"):
            assert f"state-{status}" in overview


async def test_every_answer_carries_the_csp(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    await make_conversation(store, "planner")
    async with app_client(store, token="operator-token-for-csp-tests") as client:
        bearer = {"Authorization": "Bearer operator-token-for-csp-tests"}
        answers = [
            await client.get("/console/login"),
            await client.get("/", headers=HTML),  # to the login form
            await client.get("/console/conversations/nope", headers={**HTML, **bearer}),
            await client.get("/no/such/path"),
            await client.delete("/rpc", headers=bearer),
            await client.post("/rpc", json={"jsonrpc": "2.0", "id": 1}, headers=bearer),
            await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}),
            await client.get("/healthz"),
            await client.get("/healthz", headers={"Host": "rebind.evil.example"}),
        ]
        for response in answers:
            assert_csp(response)
    # a 500: an endpoint that fails for a reason nobody foresaw
    app = create_app(store.settings, store=store, migrate_on_start=False)
    app.state.store = None  # every page then fails inside its endpoint
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
        with caplog.at_level(logging.CRITICAL, logger="ccweb_store"):
            broken = await client.get("/", headers=HTML)
            broken_rpc = await client.post(
                "/rpc", json={"jsonrpc": "2.0", "id": 1, "method": "session.list"}
            )
    assert broken.status_code == 500
    assert broken_rpc.json()["error"]["code"] == -32603  # a JSON-RPC internal error
    assert_csp(broken)
    assert_csp(broken_rpc)


async def test_the_conversation_page_shows_the_agent_session_its_next_run_resumes(
    store: Store,
) -> None:
    await make_conversation(store, "planner", title="Planner")
    async with app_client(store) as client:
        before = (await client.get("/console/conversations/planner", headers=HTML)).text
        update = {"id": "planner", "agentSessionId": "df2a8fae-<b>session</b>"}
        await host_calls.call(store, "session.update", update)
        after = (await client.get("/console/conversations/planner", headers=HTML)).text
    assert "<dt>Agent session</dt><dd>—</dd>" in before
    assert "<dd><code>df2a8fae-&lt;b&gt;session&lt;/b&gt;</code></dd>" in after
