"""The operator console in a real browser: Playwright driving Debian's Chromium against a real
server process on SQLite and PostgreSQL.

Log in; a send over ``/mcp`` shows in the pending list without a reload; fail a request and
retry it from the page (``reply.get`` sees each change); a ``<script>`` message is text; a
wrong token and a conversation credential are refused; the token is in no URL the browser
visited. The screenshots in docs/console.md are taken here (``shot``).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Page, expect, sync_playwright

from ccweb_store.http.console import session
from tests.servers import ROOT, SERVE, Server, free_port, server_env, serving, start_server

TOKEN = "console-test-operator-token-0123456789"
CHROMIUM = "/usr/bin/chromium"
IMAGES = ROOT / "docs" / "images"
LAPTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}
HOSTILE = "<script>window.__owned = 1</script><img src=x onerror=alert(1)>"
#: Conversations created one after another while the overview is open.
BURST = 60
#: A browser behaviour, whatever the engine: run on SQLite only.
on_sqlite = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


@pytest.fixture
def server(database_url: str) -> Iterator[Server]:
    with serving(database_url, CCWEB_TOKEN=TOKEN) as running:
        yield running


@pytest.fixture
def visited() -> list[str]:
    return []


@pytest.fixture
def page(database_url: str, visited: list[str]) -> Iterator[Page]:
    """A Chromium page, started once the database is made (Playwright's sync API holds an
    event loop while it is open, so the database fixtures' ``asyncio.run`` must come first)."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            context = browser.new_context(viewport=LAPTOP)
            opened = context.new_page()
            opened.on("request", lambda request: visited.append(request.url))
            opened.on("dialog", lambda dialog: dialog.accept())
            yield opened
        finally:
            browser.close()


def rpc(server: Server, method: str, params: dict[str, Any]) -> Any:
    response = httpx.post(
        f"{server.url}/rpc",
        json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=30,
    )
    body = response.json()
    assert "error" not in body, body
    return body["result"]


def send_over_mcp(server: Server, source: str, target: str, content: str) -> str:
    """``ccweb_send_message`` (return_and_continue) over ``/mcp``; the request's id."""
    arguments = {
        "targetConversationId": target,
        "content": content,
        "replyMode": "return_and_continue",
    }
    response = httpx.post(
        f"{server.url}/mcp?sourceSessionId={source}",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "ccweb_send_message", "arguments": arguments},
        },
        headers={"Authorization": f"Bearer {TOKEN}", "Accept": "application/json"},
        timeout=30,
    )
    result = response.json()["result"]
    assert result["isError"] is False, result
    request_id: str = result["structuredContent"]["requestId"]
    return request_id


def log_in(page: Page, server: Server) -> None:
    page.goto(f"{server.url}/")
    expect(page).to_have_url(f"{server.url}/console/login")
    page.get_by_label("Operator token").fill(TOKEN)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"{server.url}/")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")


def shot(page: Page, name: str, backend: str) -> None:
    """A screenshot; with ``CCWEB_UPDATE_SCREENSHOTS=1`` the SQLite run's replaces the one in
    docs/console.md (docs/images), so that a plain test run changes no file of the repository."""
    if backend == "sqlite" and os.environ.get("CCWEB_UPDATE_SCREENSHOTS") == "1":
        IMAGES.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(IMAGES / f"console-{name}.png"), full_page=True)
    else:
        assert page.screenshot(full_page=True).startswith(b"\x89PNG")


def test_a_send_over_mcp_shows_live_and_fail_then_retry_from_the_page_change_its_state(
    server: Server, page: Page, visited: list[str], backend: str
) -> None:
    rpc(server, "session.create", {"id": "planner", "title": "Planner", "agent": "claude"})
    rpc(server, "session.create", {"id": "reviewer", "title": "Reviewer", "agent": "codex"})
    log_in(page, server)
    expect(page.locator("#replies-empty")).to_be_visible()

    request_id = send_over_mcp(server, "planner", "reviewer", "Please review the schema change")
    row = page.locator(f'tr[data-request-id="{request_id}"]')
    expect(row).to_be_visible(timeout=10000)
    expect(row.locator('[data-field="status"]')).to_have_text("waiting")
    expect(row).to_contain_text("Planner")
    expect(row).to_contain_text("Reviewer")
    expect(row).to_contain_text("Please review the schema change")
    expect(page.locator('tr[data-conversation-id="reviewer"]')).to_contain_text("1")
    shot(page, "overview", backend)

    row.get_by_label(f"Reason to fail request {request_id}").fill("the reviewer is offline")
    row.get_by_role("button", name=f"Fail request {request_id}").click()
    expect(page.locator("#notice")).to_have_text(
        f"Request {request_id} failed; its source is told why."
    )
    row = page.locator(f'tr[data-request-id="{request_id}"]')
    expect(row.locator('[data-field="status"]')).to_have_text("failed")
    expect(row).to_contain_text("the reviewer is offline")
    failed = rpc(server, "reply.get", {"requestId": request_id})
    assert failed["status"] == "failed"
    assert failed["lastError"] == "the reviewer is offline"

    # Its target run still queued, the request offers no Retry until Cancel ends that run.
    (target_run,) = rpc(server, "run.list", {"sessionId": "reviewer"})["runs"]
    expect(row.locator('[data-field="answering"]')).to_contain_text(target_run["id"])
    expect(row.get_by_role("button", name=f"Retry request {request_id}")).to_have_count(0)
    page.get_by_role("button", name=f"Cancel run {target_run['id']}").click()
    expect(page.locator("#notice")).to_have_text(f"Run {target_run['id']} cancelled.")
    row.get_by_role("button", name=f"Retry request {request_id}").click()
    expect(page.locator("#notice")).to_have_text(
        f"Request {request_id}: Reviewer is asked again; a new run is queued for it."
    )
    expect(row.locator('[data-field="status"]')).to_have_text("waiting")
    assert rpc(server, "reply.get", {"requestId": request_id})["status"] == "waiting"

    page.get_by_label("State").select_option("failed")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("#replies-empty")).to_be_visible()

    assert not [url for url in visited if TOKEN in url]


def test_content_is_escaped_and_one_conversation_shows_messages_inputs_and_replies(
    server: Server, page: Page, backend: str
) -> None:
    rpc(server, "session.create", {"id": "evil", "title": HOSTILE, "agent": "claude"})
    rpc(server, "session.create", {"id": "helper", "title": "Helper"})
    rpc(server, "message.append", {"sessionId": "evil", "role": "user", "content": HOSTILE})
    blocks = [{"type": "text", "text": "first block"}, {"type": "text", "text": "second block"}]
    rpc(server, "message.append", {"sessionId": "evil", "role": "assistant", "content": blocks})
    send_over_mcp(server, "evil", "helper", HOSTILE)
    log_in(page, server)
    expect(page.locator('tr[data-conversation-id="evil"]')).to_contain_text(HOSTILE)

    page.get_by_role("link", name=HOSTILE).first.click()
    expect(page.locator("#conversation-title")).to_have_text(HOSTILE)
    messages = page.locator("#message-list > li")
    expect(messages.first).to_contain_text("second block")
    expect(page.locator("#inputs")).to_contain_text(HOSTILE)
    expect(page.locator("#replies")).to_contain_text("Helper")
    assert page.evaluate("window.__owned") is None
    assert page.locator("#main script, #main img").count() == 0

    rpc(server, "message.append", {"sessionId": "evil", "role": "user", "content": "live line"})
    expect(messages.first).to_contain_text("live line", timeout=1000)
    shot(page, "conversation", backend)

    page.set_viewport_size(PHONE)
    page.goto(f"{server.url}/")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    shot(page, "phone", backend)


def test_a_wrong_token_or_a_conversation_credential_is_refused_and_logging_out_ends_it(
    server: Server, page: Page, visited: list[str], backend: str
) -> None:
    rpc(server, "session.create", {"id": "solo", "title": "Solo"})
    credential = rpc(server, "credential.mint", {"sessionId": "solo"})["token"]
    page.goto(f"{server.url}/console/login")
    page.get_by_label("Operator token").fill("not-the-token")
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("#login-error")).to_contain_text("not the operator token")
    shot(page, "login-refused", backend)
    page.get_by_label("Operator token").fill(credential)
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("#login-error")).to_contain_text("conversation credential")
    page.goto(f"{server.url}/")
    expect(page).to_have_url(f"{server.url}/console/login")

    log_in(page, server)
    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(f"{server.url}/console/login")
    page.goto(f"{server.url}/")
    expect(page).to_have_url(f"{server.url}/console/login")
    assert not [url for url in visited if TOKEN in url or credential in url]


def test_the_console_answers_carry_a_strict_csp_and_refuse_what_they_must(
    server: Server,
) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        origin = {"Origin": server.url}
        login = client.post("/console/login", data={"token": TOKEN}, headers=origin)
        assert login.status_code == 303
        cookie = login.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie

        page = client.get("/", headers={"Accept": "text/html"})
        assert page.status_code == 200
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "default-src 'none'" in csp
        assert "'unsafe-inline'" not in csp
        assert TOKEN not in page.text

        # An action from another site, or with no Origin at all, changes nothing.
        rpc(server, "session.create", {"id": "a", "title": "A"})
        rpc(server, "session.create", {"id": "b", "title": "B"})
        request_id = send_over_mcp(server, "a", "b", "hello")
        for headers in ({"Origin": "http://evil.example"}, {}):
            refused = client.post(
                f"/console/replies/{request_id}/fail", data={"reason": "x"}, headers=headers
            )
            assert refused.status_code == 403
            assert refused.json()["error"]["code"] == "origin_not_allowed"
        assert rpc(server, "reply.get", {"requestId": request_id})["status"] == "waiting"

        # The login cookie opens the console and /events, never /rpc.
        assert (
            client.post(
                "/rpc", json={"jsonrpc": "2.0", "id": 1, "method": "session.list"}
            ).status_code
            == 401
        )

    credential = rpc(server, "credential.mint", {"sessionId": "a"})["token"]
    with httpx.Client(base_url=server.url, timeout=30) as stranger:
        for headers, query in (
            ({"Authorization": f"Bearer {credential}"}, ""),
            ({}, f"?credential={credential}"),
        ):
            answer = stranger.get(f"/{query}", headers=headers)
            assert answer.status_code == 401
            assert re.search("conversation credential", answer.json()["error"]["message"])
        forged = stranger.get("/", headers={"Cookie": "ccweb_console=v1.99999999999.00"})
        assert forged.status_code == 401


def test_the_page_says_when_it_lost_the_stream_and_resumes_with_a_new_server(
    database_url: str, server: Server, page: Page
) -> None:
    rpc(server, "session.create", {"id": "left", "title": "Left"})
    rpc(server, "session.create", {"id": "right", "title": "Right"})
    log_in(page, server)
    server.stop()
    status = page.locator("#live-status")
    expect(status).to_have_attribute("data-state", "lost")
    expect(status).to_contain_text("Lost the event stream")

    # The same address and database; the login cookie holds, as it depends on the token only.
    port = int(server.url.rsplit(":", 1)[1])
    env = server_env(CCWEB_DATABASE_URL=database_url, CCWEB_TOKEN=TOKEN)
    again = start_server([*SERVE, "--port", str(port)], port=port, env=env)
    try:
        expect(status).to_have_attribute("data-state", "live", timeout=15000)
        request_id = send_over_mcp(again, "left", "right", "after the restart")
        expect(page.locator(f'tr[data-request-id="{request_id}"]')).to_be_visible(timeout=10000)
    finally:
        again.stop()


def test_a_run_whose_lease_ran_out_is_requeued_from_the_page(
    database_url: str, page: Page, visited: list[str]
) -> None:
    # A server without the lease sweeper, so the expired run waits for the operator.
    with serving(database_url, CCWEB_TOKEN=TOKEN, CCWEB_LEASE_SWEEP_SECONDS="0") as quiet:
        rpc(quiet, "session.create", {"id": "busy", "title": "Busy"})
        rpc(quiet, "run.enqueue", {"sessionId": "busy"})
        run = rpc(quiet, "run.claim", {"workerId": "w-1", "leaseSeconds": 1})["run"]
        log_in(page, quiet)
        button = page.get_by_role("button", name=f"Requeue run {run['id']}")
        for _ in range(50):  # the page shows the button once the lease has run out
            if button.count():
                break
            page.wait_for_timeout(200)
            page.reload()
        button.click()
        expect(page.locator("#notice")).to_have_text(
            f"Run {run['id']} is back in the queue for the next worker."
        )
        requeued = rpc(quiet, "run.list", {"sessionId": "busy"})["runs"][0]
        assert (requeued["status"], requeued["attempts"]) == ("queued", run["attempts"] + 1)
        assert not [url for url in visited if TOKEN in url]


@contextmanager
def another_local_server() -> Iterator[tuple[str, list[str]]]:
    """A server on another port of the same host, as an agent's dev server would be: its URL,
    and the ``Cookie`` headers the browser sent it."""
    received: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            received.append(self.headers.get("Cookie", ""))
            body = b"<!doctype html><title>dev server</title><p id='hello'>hello</p>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    port = free_port()
    httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/", received
    finally:
        httpd.shutdown()
        httpd.server_close()


@on_sqlite
def test_a_server_on_another_port_gets_the_login_cookie_but_reads_and_does_nothing_with_it(
    server: Server, page: Page
) -> None:
    rpc(server, "session.create", {"id": "secret", "title": "Secret plans"})
    rpc(server, "session.create", {"id": "asker", "title": "Asker"})
    request_id = send_over_mcp(server, "asker", "secret", "the launch codes")
    log_in(page, server)
    expect(page.locator(f'tr[data-request-id="{request_id}"]')).to_contain_text("launch codes")

    with another_local_server() as (url, received):
        page.goto(url)  # the operator opens it in the same browser
        expect(page.locator("#hello")).to_have_text("hello")
    cookie = next(header for header in received if f"{session.COOKIE}=" in header)

    stolen = {"Cookie": cookie, "Accept": "text/html"}
    with httpx.Client(base_url=server.url, timeout=30) as thief:
        overview = thief.get("/", headers=stolen)
        conversation = thief.get("/console/conversations/secret", headers=stolen)
        with thief.stream("GET", "/events?after=0", headers={"Cookie": cookie}) as events:
            events_status = events.status_code
        fail = thief.post(
            f"/console/replies/{request_id}/fail",
            data={"reason": "stolen", "next": "/"},
            headers={**stolen, "Origin": server.url},
        )

    assert overview.status_code == 200 and conversation.status_code == 200
    for answer in (overview, conversation):
        assert "Secret plans" not in answer.text and "launch codes" not in answer.text
        assert "data-live-shell" in answer.text
    assert events_status == 401
    assert fail.status_code == 401
    assert rpc(server, "reply.get", {"requestId": request_id})["status"] == "waiting"

    # The console's own page still reads everything: its key is in this origin's storage.
    page.goto(f"{server.url}/console/conversations/secret")
    expect(page.locator("#conversation-title")).to_have_text("Secret plans")


@on_sqlite
def test_a_burst_of_events_reads_the_page_again_at_most_about_once_a_second(
    server: Server, page: Page
) -> None:
    log_in(page, server)
    reads: list[str] = []
    page.on(
        "request",
        lambda request: (
            reads.append(request.url)
            if request.resource_type == "fetch" and urlsplit(request.url).path == "/"
            else None
        ),
    )
    started = time.monotonic()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for n in range(BURST):
            body = {"jsonrpc": "2.0", "id": 1, "method": "session.create"}
            body["params"] = {"id": f"burst-{n:03d}"}
            answer = client.post("/rpc", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
            assert "error" not in answer.json()
            time.sleep(0.02)
    expect(page.locator(f'tr[data-conversation-id="burst-{BURST - 1:03d}"]')).to_be_visible()
    seconds = time.monotonic() - started

    assert len(reads) <= seconds + 2, (len(reads), seconds)


def test_a_login_cookie_holds_until_it_expires_and_only_for_its_token() -> None:
    value = session.cookie_value(TOKEN, now=1000.0)
    assert TOKEN not in value
    assert session.cookie_valid(TOKEN, value, now=1000.0 + session.LOGIN_SECONDS - 1)
    assert not session.cookie_valid(TOKEN, value, now=1000.0 + session.LOGIN_SECONDS)
    assert not session.cookie_valid(TOKEN + "x", value, now=1001.0)
    assert not session.cookie_valid(TOKEN, value.replace("v2.", "v1.", 1), now=1001.0)
    assert not session.cookie_valid(TOKEN, "v2.x.y.z", now=1001.0)


def test_each_login_has_a_key_of_its_own_that_the_cookie_does_not_hold() -> None:
    first, second = session.cookie_value(TOKEN), session.cookie_value(TOKEN)
    key = session.login_key(TOKEN, first)
    assert key not in first and key != session.login_key(TOKEN, second)
    assert session.key_valid(TOKEN, first, key)
    assert not session.key_valid(TOKEN, second, key)
    assert not session.key_valid(TOKEN, first, None)
    assert not session.key_valid(TOKEN + "x", first, key)


def test_the_ci_script_installs_chromium_when_it_is_missing() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    assert "apt-get install -y -q chromium" in script
    assert Path(CHROMIUM).exists()
