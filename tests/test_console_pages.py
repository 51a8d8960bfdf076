"""The console's lists are pages of queries, its states and actions match the queue: over HTTP
against the real app on both backends.

More than a page of open requests: a state filter finds every one of its state, page after
page; a conversation filter finds a request far past the first page; a cut list says so and
links its next page. A conversation shows the same state word as ``conversations list``. A
request whose target run is still queued offers no Retry; Cancel ends that run; the notices
say what happened.
"""

from __future__ import annotations

import html
import re
from datetime import timedelta

import httpx

from ccweb_store.domain.kinds import ReplyStatus, RunKind
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.services.console import PAGE_SIZE
from ccweb_store.store.uow import Store
from tests import host_calls
from tests.cli_support import run_cli
from tests.http_client import BASE_URL, app_client
from tests.lifecycle_support import ask, make_conversation, reply_row
from tests.servers import server_env

HTML = {"Accept": "text/html"}
ORIGIN = {"Origin": BASE_URL}
OPEN_REQUESTS = 550
READY_EVERY = 5  # one request in five is ready: 110 of them, more than two pages


async def many_open_requests(store: Store) -> dict[str, set[str]]:
    """``OPEN_REQUESTS`` open requests among ten conversations, the oldest first, and one
    more, the oldest of all, from and to conversations that have no other: the request ids
    by status, and ``needle`` for that one."""
    start = utcnow() - timedelta(days=1)
    rows = [
        {
            "request_id": "req_needle",
            "source_conversation_id": "lonely",
            "target_conversation_id": "quiet",
            "status": ReplyStatus.WAITING,
            "created_at": start,
        }
    ]
    for n in range(OPEN_REQUESTS):
        status = ReplyStatus.READY if n % READY_EVERY == 0 else ReplyStatus.WAITING
        rows.append(
            {
                "request_id": f"req_{n:04d}",
                "source_conversation_id": f"conv-{n % 10}",
                "target_conversation_id": f"conv-{(n + 1) % 10}",
                "status": status,
                "created_at": start + timedelta(seconds=n + 1),
            }
        )
    async with store.uow() as uow:
        await uow.replies.insert_many(rows)
        await uow.commit()
    ids: dict[str, set[str]] = {"needle": {"req_needle"}}
    for row in rows:
        ids.setdefault(row["status"], set()).add(row["request_id"])
    return ids


async def every_page(client: httpx.AsyncClient, path: str) -> tuple[list[str], int]:
    """The request ids of every page of the open requests, from ``path`` on through each
    page's next link, and how many pages there were."""
    seen: list[str] = []
    pages = 0
    while path:
        page = await client.get(path, headers=HTML)
        assert page.status_code == 200, page.text[:500]
        pages += 1
        rows = re.findall(r'<tr data-request-id="([^"]+)"', page.text)
        assert len(rows) <= PAGE_SIZE
        seen += rows
        following = re.search(r'<a href="([^"]+)" id="replies-next"', page.text)
        if following is None:
            assert len(rows) < PAGE_SIZE or 'id="replies-first"' in page.text
            break
        assert "more follow" in page.text
        path = html.unescape(following.group(1))
    return seen, pages


async def test_a_filter_finds_every_open_request_it_matches_page_after_page(store: Store) -> None:
    ids = await many_open_requests(store)
    async with app_client(store) as client:
        ready, ready_pages = await every_page(client, "/?state=ready")
        needle, _ = await every_page(client, "/?conversation=quiet")
        everything, pages = await every_page(client, "/")

    assert sorted(ready) == sorted(ids[ReplyStatus.READY]) and len(ready) == 110
    assert ready_pages == 3
    assert needle == ["req_needle"]
    assert sorted(everything) == sorted(set().union(*ids.values()))
    assert pages == (OPEN_REQUESTS + 1 + PAGE_SIZE - 1) // PAGE_SIZE
    assert everything[0] == f"req_{OPEN_REQUESTS - 1:04d}"  # newest first


async def test_the_conversations_and_runs_lists_are_cut_into_pages_with_a_next_link(
    store: Store,
) -> None:
    for n in range(PAGE_SIZE + 3):
        await make_conversation(store, f"c-{n:03d}")
        await host_calls.enqueue_run(store, {"sessionId": f"c-{n:03d}"})
    async with app_client(store) as client:
        first = (await client.get("/", headers=HTML)).text
        following = re.search(r'<a href="([^"]+)" id="conversations-next"', first)
        assert following is not None
        second = (await client.get(html.unescape(following.group(1)), headers=HTML)).text
        runs_next = re.search(r'<a href="([^"]+)" id="runs-next"', first)
        assert runs_next is not None
        runs_second = (await client.get(html.unescape(runs_next.group(1)), headers=HTML)).text

    shown = re.findall(r'<tr data-conversation-id="([^"]+)"', first)
    rest = re.findall(r'<tr data-conversation-id="([^"]+)"', second)
    assert len(shown) == PAGE_SIZE and len(rest) == 3
    assert shown[0] == f"c-{PAGE_SIZE + 2:03d}"  # the newest activity first
    assert not set(shown) & set(rest)
    assert 'id="conversations-first"' in second and 'id="conversations-next"' not in second
    assert len(re.findall(r'<tr data-run-id="', runs_second)) == 3


async def test_the_console_says_queued_running_and_idle_as_the_cli_does(
    store: Store, database_url: str
) -> None:
    for name in ("waits", "works", "rests"):
        await make_conversation(store, name)
    await host_calls.enqueue_run(store, {"sessionId": "waits"})
    await host_calls.start_run(store, {"sessionId": "works", "workerId": "w-1"})

    async with app_client(store) as client:
        overview = (await client.get("/", headers=HTML)).text
        pages = {
            name: (await client.get(f"/console/conversations/{name}", headers=HTML)).text
            for name in ("waits", "works", "rests")
        }
    listed = run_cli("conversations", "list", env=server_env(CCWEB_DATABASE_URL=database_url))

    assert listed.returncode == 0, listed.stderr
    for name, state in (("waits", "queued"), ("works", "running"), ("rests", "idle")):
        row = re.search(rf'<tr data-conversation-id="{name}">(.*?)</tr>', overview, re.S)
        assert row is not None
        assert f'data-field="state">{state}</span>' in row.group(1)
        assert f'id="conversation-state">{state}</span>' in pages[name]
        line = next(line for line in listed.stdout.splitlines() if line.split()[:1] == [name])
        assert line.split()[1] == state


async def test_retry_shows_only_once_the_target_run_ended_and_cancel_ends_it(
    store: Store,
) -> None:
    await make_conversation(store, "asker", title="Asker")
    await make_conversation(store, "answerer", title="Answerer")
    request_id = (await ask(store, "asker", "answerer", "Check the build"))["requestId"]
    run = (await host_calls.list_runs(store, {"sessionId": "answerer"}))["runs"][0]
    assert run["kind"] == RunKind.CROSS_CONVERSATION

    async with app_client(store) as client:
        before = (await client.get("/", headers=HTML)).text
        cancelled = await client.post(
            f"/console/runs/{run['id']}/cancel", data={"next": "/"}, headers=ORIGIN
        )
        notice = (await client.get(cancelled.headers["location"], headers=HTML)).text
        after = (await client.get("/", headers=HTML)).text

    assert f'aria-label="Retry request {request_id}"' not in before
    assert (
        f'run <a href="/console/conversations/answerer"><code>{run["id"]}</code></a> is queued'
        in before
    )
    assert f'aria-label="Cancel run {run["id"]}"' in before
    assert cancelled.status_code == 303, cancelled.text
    assert (
        f"Run {run['id']} cancelled. Request {request_id}, which it answered, failed; its "
        "source is told." in html.unescape(notice)
    )
    assert (await reply_row(store, request_id)).status == ReplyStatus.FAILED
    assert f'aria-label="Retry request {request_id}"' in after
    assert f'aria-label="Fail request {request_id}"' not in after  # failed already


async def test_a_running_run_is_cancelled_only_with_force_and_every_notice_reads_well(
    store: Store,
) -> None:
    await make_conversation(store, "asker", title="Asker")
    await make_conversation(store, "answerer", title="Answerer")
    request_id = (await ask(store, "asker", "answerer", "Check the build"))["requestId"]
    running = (await host_calls.claim_run(store, {"workerId": "w-1"}))["run"]

    async with app_client(store) as client:

        async def act(path: str, **form: str) -> str:
            answer = await client.post(path, data={"next": "/", **form}, headers=ORIGIN)
            assert answer.status_code == 303, answer.text
            notice = re.search(
                r'id="notice">([^<]*)<',
                (await client.get(answer.headers["location"], headers=HTML)).text,
            )
            assert notice is not None
            return html.unescape(notice.group(1))

        unforced = await client.post(
            f"/console/runs/{running['id']}/cancel", data={"next": "/"}, headers=ORIGIN
        )
        failed = await act(f"/console/replies/{request_id}/fail", reason="not needed")
        stopped = await act(f"/console/runs/{running['id']}/cancel", force="1")
        retried = await act(f"/console/replies/{request_id}/retry")

    assert unforced.status_code == 409 and unforced.json()["error"]["code"] == "invalid_state"
    assert failed == f"Request {request_id} failed; its source is told why."
    assert stopped == f"Run {running['id']} cancelled."  # the request had failed already
    assert retried == f"Request {request_id}: Answerer is asked again; a new run is queued for it."
    assert (await reply_row(store, request_id)).status == ReplyStatus.WAITING
