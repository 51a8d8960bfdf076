"""`ccweb-store replies retry/fail/expire` and `runs requeue`, on both engines.

Every state is built through the service functions the host API uses (sends, claims,
completions, run starts), and every change is checked in what the conversations now hold.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa

from ccweb_store.config import Settings
from ccweb_store.domain.errors import Conflict
from ccweb_store.domain.rows import Message, Run
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.store.models import ReplyRequestRow
from ccweb_store.store.uow import Store
from tests import host_calls
from tests.cli_support import as_json, ccweb_store, run_cli
from tests.lifecycle_support import (
    ask,
    claim,
    complete,
    make_conversation,
    messages_of,
    reply_row,
    row_counts,
    runs_of,
)
from tests.servers import server_env

T = TypeVar("T")


def on_store(database_url: str, work: Callable[[Store], Awaitable[T]]) -> T:
    """Run ``work`` on a fresh store outside any event loop (the CLI runs its own)."""

    async def run() -> T:
        store = Store.from_settings(Settings(database_url=database_url))
        try:
            return await work(store)
        finally:
            await store.dispose()

    return asyncio.run(run())


async def conversations(store: Store, *ids: str) -> None:
    for conversation_id in ids:
        await make_conversation(store, conversation_id)


def replies_to(messages: list[Message], request_id: str) -> list[Message]:
    return [m for m in messages if (m.metadata_ or {}).get("replyToRequestId") == request_id]


async def backdate(store: Store, request_id: str, age: timedelta) -> None:
    """Make a request look older than it is: the only state no service function can build."""
    async with store.uow() as uow:
        await uow._execute(
            sa.update(ReplyRequestRow)
            .where(ReplyRequestRow.request_id == request_id)
            .values(created_at=utcnow() - age)
        )
        await uow.commit()


def ready_behind_a_dead_source_run(database_url: str) -> str:
    """A reply that is ``ready`` and stuck: its source's run was requeued, so nothing delivers it.

    The planner runs, asks the reviewer, the reviewer answers while the planner still runs
    (the reply waits), then the planner's worker dies and its run goes back to the queue.
    """

    async def build(store: Store) -> str:
        await conversations(store, "planner", "reviewer")
        planner_run = await host_calls.start_run(store, {"sessionId": "planner", "workerId": "w-1"})
        request_id: str = (await ask(store, "planner", "reviewer", "Review the schema change"))[
            "requestId"
        ]
        target_run = await claim(store, "w-2")
        assert target_run is not None and target_run["sessionId"] == "reviewer"
        await complete(
            store, target_run["id"], "Looks good; two nits", workerId=target_run["workerId"]
        )
        assert (await reply_row(store, request_id)).status == "ready"
        await host_calls.requeue_run(store, {"runId": planner_run["id"]})
        return request_id

    return on_store(database_url, build)


def waiting_request(database_url: str) -> str:
    """The planner asked the reviewer; the reviewer's run is queued."""

    async def build(store: Store) -> str:
        await conversations(store, "planner", "reviewer")
        sent = await ask(store, "planner", "reviewer", "Review the schema change")
        request_id: str = sent["requestId"]
        return request_id

    return on_store(database_url, build)


def returned_request(database_url: str) -> str:
    """The reviewer answered and the planner got its reply."""

    async def build(store: Store) -> str:
        await conversations(store, "planner", "reviewer")
        request_id: str = (await ask(store, "planner", "reviewer", "Review it"))["requestId"]
        target_run = await claim(store)
        assert target_run is not None
        await complete(store, target_run["id"], "Reviewed", workerId=target_run["workerId"])
        return request_id

    return on_store(database_url, build)


# --- replies retry --------------------------------------------------------------------------


def test_retry_delivers_a_stuck_ready_reply_once_with_its_auto_run(database_url: str) -> None:
    request_id = ready_behind_a_dead_source_run(database_url)

    reply = as_json(ccweb_store(database_url, "replies", "retry", request_id, "--json"))
    again = ccweb_store(database_url, "replies", "retry", request_id)

    assert reply["requestId"] == request_id
    assert reply["status"] == "returned" and reply["returnedAt"] is not None
    planner_messages = on_store(database_url, lambda store: messages_of(store, "planner"))
    delivered = replies_to(planner_messages, request_id)
    assert len(delivered) == 1
    assert delivered[0].id == reply["replyMessageId"]
    assert "Looks good; two nits" in delivered[0].content
    auto_runs = on_store(database_url, lambda store: runs_of(store, "planner", "reply_auto_run"))
    assert [(run.status, run.reply_request_id) for run in auto_runs] == [("queued", request_id)]
    assert again.exit_code == 1
    assert "already returned; there is nothing to retry" in again.stderr


def test_retry_says_in_one_line_where_the_request_now_stands(database_url: str) -> None:
    request_id = ready_behind_a_dead_source_run(database_url)

    result = ccweb_store(database_url, "replies", "retry", request_id)

    assert result.exit_code == 0, result.output
    reply = on_store(database_url, lambda store: reply_row(store, request_id))
    assert result.stdout.strip() == (
        f"reply request {request_id}: returned, delivered to planner as message "
        f"{reply.reply_message_id}"
    )


def test_retry_of_a_failed_request_without_an_answer_asks_the_target_again(
    database_url: str,
) -> None:
    request_id = waiting_request(database_url)
    assert ccweb_store(database_url, "replies", "fail", request_id, "--reason", "x").exit_code == 0
    on_store(database_url, lambda store: _cancel_open_runs(store, "reviewer"))

    reply = as_json(ccweb_store(database_url, "replies", "retry", request_id, "--json"))

    assert (reply["status"], reply["lastError"], reply["replyMessageId"]) == ("waiting", None, None)
    reviewer_runs = on_store(
        database_url, lambda store: runs_of(store, "reviewer", "cross_conversation")
    )
    assert [run.status for run in reviewer_runs] == ["cancelled", "queued"]
    assert reviewer_runs[-1].reply_request_id == request_id
    assert request_id in (reviewer_runs[-1].runtime_text or "")


async def _cancel_open_runs(store: Store, session_id: str) -> None:
    async with store.uow() as uow:
        for run in await uow.runs.active_for_session(session_id):
            await uow.runs.finish(run.id, "cancelled", worker_id=run.worker_id)
        await uow.commit()


def test_retry_while_the_target_run_still_answers_exits_1_naming_it_and_changes_nothing(
    database_url: str,
) -> None:
    request_id = waiting_request(database_url)
    assert ccweb_store(database_url, "replies", "fail", request_id, "--reason", "x").exit_code == 0
    [target_run] = on_store(database_url, lambda store: runs_of(store, "reviewer"))
    before = on_store(database_url, row_counts)
    reply_before = on_store(database_url, lambda store: reply_row(store, request_id))

    result = ccweb_store(database_url, "replies", "retry", request_id)

    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.strip().splitlines()[-1] == (
        f"ccweb-store: reply request {request_id!r} is still being answered: run "
        f"{target_run.id!r} in the target 'reviewer' is queued. Nothing was changed: retry "
        "after that run ends (its end answers or fails the request), or end it first "
        f"(`ccweb-store runs cancel {target_run.id}`, or run.cancel)"
    )
    assert on_store(database_url, row_counts) == before
    after = on_store(database_url, lambda store: reply_row(store, request_id))
    assert (after.status, after.last_error, after.reply_message_id) == (
        reply_before.status,
        reply_before.last_error,
        reply_before.reply_message_id,
    )
    on_store(database_url, lambda store: _answer_late(store, "Reviewed after all"))
    reply = as_json(ccweb_store(database_url, "replies", "retry", request_id, "--json"))
    assert (reply["status"], reply["replyText"]) == ("returned", "Reviewed after all")


def test_python_m_ccweb_store_replies_retry_delivers_from_ccweb_database_url(
    database_url: str,
) -> None:
    request_id = ready_behind_a_dead_source_run(database_url)
    env = server_env(CCWEB_DATABASE_URL=database_url)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, env=env)

    retried = run("replies", "retry", request_id, "--json")
    unknown = run("replies", "retry", "req_nope")
    again = run("replies", "retry", request_id)

    assert retried.returncode == 0, retried.stderr
    assert json.loads(retried.stdout)["status"] == "returned"
    planner_messages = on_store(database_url, lambda store: messages_of(store, "planner"))
    assert len(replies_to(planner_messages, request_id)) == 1
    assert (unknown.returncode, again.returncode) == (3, 1)
    assert "reply request 'req_nope' does not exist" in unknown.stderr
    assert "nothing to retry" in again.stderr


# --- replies fail ---------------------------------------------------------------------------


def test_fail_with_a_reason_fails_the_request_and_tells_the_source(database_url: str) -> None:
    request_id = waiting_request(database_url)

    reply = as_json(
        ccweb_store(
            database_url,
            "replies",
            "fail",
            request_id,
            "--reason",
            "reviewer was archived",
            "--json",
        )
    )

    assert (reply["status"], reply["lastError"]) == ("failed", "reviewer was archived")
    stored = on_store(database_url, lambda store: reply_row(store, request_id))
    assert (stored.status, stored.last_error) == ("failed", "reviewer was archived")
    notices = replies_to(
        on_store(database_url, lambda store: messages_of(store, "planner")), request_id
    )
    assert len(notices) == 1
    assert notices[0].id == reply["replyMessageId"]
    assert notices[0].metadata_["replyFailed"] is True
    assert "reviewer was archived" in notices[0].content


def test_fail_prints_the_reason_and_the_notice(database_url: str) -> None:
    request_id = waiting_request(database_url)

    result = ccweb_store(
        database_url, "replies", "fail", request_id, "--reason", "no longer needed"
    )

    assert result.exit_code == 0, result.output
    notice_id = on_store(database_url, lambda store: reply_row(store, request_id)).reply_message_id
    assert result.stdout.strip() == (
        f"reply request {request_id}: failed (no longer needed); "
        f"notice {notice_id} delivered to planner"
    )


@pytest.mark.parametrize("reason", [None, "", "   "])
def test_fail_without_a_reason_is_refused_with_exit_2(
    database_url: str, reason: str | None
) -> None:
    request_id = waiting_request(database_url)
    before = on_store(database_url, row_counts)

    args = ["replies", "fail", request_id] + ([] if reason is None else ["--reason", reason])
    result = ccweb_store(database_url, *args)

    assert result.exit_code == 2
    assert "reason" in result.stderr
    assert on_store(database_url, lambda store: reply_row(store, request_id)).status == "waiting"
    assert on_store(database_url, row_counts) == before


def test_fail_of_a_returned_request_exits_1_and_changes_nothing(database_url: str) -> None:
    request_id = returned_request(database_url)

    result = ccweb_store(database_url, "replies", "fail", request_id, "--reason", "too late")

    assert result.exit_code == 1
    assert "already returned and cannot fail" in result.stderr
    assert on_store(database_url, lambda store: reply_row(store, request_id)).status == "returned"


def test_replies_show_includes_the_notice_and_the_reply_delivered_after_a_retry(
    database_url: str,
) -> None:
    request_id = waiting_request(database_url)
    ccweb_store(database_url, "replies", "fail", request_id, "--reason", "reviewer was stuck")
    on_store(database_url, lambda store: _answer_late(store, "Reviewed after all"))
    assert as_json(ccweb_store(database_url, "replies", "retry", request_id, "--json"))[
        "status"
    ] == ("returned")

    story = as_json(ccweb_store(database_url, "replies", "show", request_id, "--json"))
    shown = ccweb_store(database_url, "replies", "show", request_id)

    assert story["requestMessage"]["sessionId"] == "reviewer"
    assert [run["kind"] for run in story["runs"]] == [
        "cross_conversation",
        "reply_auto_run",
        "reply_auto_run",
    ]
    notice, reply = story["sourceMessages"]
    assert notice["metadata"]["replyFailed"] is True and "reviewer was stuck" in notice["content"]
    assert "Reviewed after all" in reply["content"]
    assert story["replyMessage"]["id"] == reply["id"] == story["reply"]["replyMessageId"]
    assert shown.exit_code == 0, shown.output
    assert f"Failure notice (source): {notice['id']} in planner" in shown.stdout
    assert f"Reply message (source): {reply['id']} in planner" in shown.stdout
    assert "Request message (target): " in shown.stdout


async def _answer_late(store: Store, output: str) -> None:
    """The reviewer's run finishes after its request was failed by hand."""
    target_run = await claim(store, kinds=["cross_conversation"])
    assert target_run is not None
    await complete(store, target_run["id"], output, workerId=target_run["workerId"])


# --- replies expire -------------------------------------------------------------------------


def three_requests_of_different_ages(database_url: str) -> dict[str, str]:
    """An old ``waiting`` request, a fresh ``waiting`` one, and an old ``returned`` one."""

    async def build(store: Store) -> dict[str, str]:
        await conversations(store, "planner", "reviewer", "tester", "writer", "lead", "docs")
        answered = (await ask(store, "lead", "docs", "Document it"))["requestId"]
        docs_run = await claim(store)
        assert docs_run is not None and docs_run["sessionId"] == "docs"
        await complete(store, docs_run["id"], "Documented", workerId=docs_run["workerId"])
        old = (await ask(store, "planner", "reviewer", "Review it"))["requestId"]
        fresh = (await ask(store, "tester", "writer", "Write it"))["requestId"]
        await backdate(store, old, timedelta(hours=3))
        await backdate(store, answered, timedelta(hours=5))
        return {"old": old, "fresh": fresh, "returned": answered}

    return on_store(database_url, build)


def test_expire_dry_run_lists_what_would_expire_and_changes_nothing(database_url: str) -> None:
    requests = three_requests_of_different_ages(database_url)
    before = on_store(database_url, row_counts)

    payload = as_json(
        ccweb_store(database_url, "replies", "expire", "--older-than", "1h", "--dry-run", "--json")
    )
    table = ccweb_store(database_url, "replies", "expire", "--older-than", "1h", "--dry-run")

    assert payload["dryRun"] is True and payload["wouldExpire"] == 1
    assert [(r["requestId"], r["status"]) for r in payload["replies"]] == [
        (requests["old"], "waiting")
    ]
    assert table.exit_code == 0, table.output
    assert "Would expire (waiting, older than 1h)" in table.stdout
    assert "1 request(s), oldest first; nothing was changed" in table.stdout
    assert requests["old"] in table.stdout and "Planner → Reviewer" in table.stdout
    assert requests["fresh"] not in table.stdout
    assert on_store(database_url, row_counts) == before
    assert on_store(database_url, lambda store: reply_row(store, requests["old"])).status == (
        "waiting"
    )


def test_expire_fails_only_old_waiting_requests_and_notifies_their_sources(
    database_url: str,
) -> None:
    requests = three_requests_of_different_ages(database_url)

    payload = as_json(
        ccweb_store(database_url, "replies", "expire", "--older-than", "1h", "--json")
    )
    nothing_left = ccweb_store(database_url, "replies", "expire", "--older-than", "1h")

    assert payload == {"expired": 1}
    old = on_store(database_url, lambda store: reply_row(store, requests["old"]))
    assert (old.status, old.last_error) == ("failed", "expired")
    notices = replies_to(
        on_store(database_url, lambda store: messages_of(store, "planner")), requests["old"]
    )
    assert len(notices) == 1 and notices[0].metadata_["replyFailed"] is True
    statuses = {
        name: on_store(database_url, lambda store, rid=rid: reply_row(store, rid)).status
        for name, rid in requests.items()
        if name != "old"
    }
    assert statuses == {"fresh": "waiting", "returned": "returned"}
    assert nothing_left.exit_code == 0
    assert nothing_left.stdout.strip() == "expired 0 waiting reply request(s) older than 1h"


def test_expire_dry_run_with_nothing_to_expire_says_so(database_url: str) -> None:
    three_requests_of_different_ages(database_url)

    result = ccweb_store(database_url, "replies", "expire", "--older-than", "1d", "--dry-run")

    assert result.exit_code == 0, result.output
    assert "No waiting request is older than 1d; nothing would expire." in result.stdout


@pytest.mark.parametrize("args", [[], ["--older-than", "soon"], ["--older-than", "-1h"]])
def test_expire_without_a_valid_duration_exits_2(database_url: str, args: list[str]) -> None:
    result = ccweb_store(database_url, "replies", "expire", *args)

    assert result.exit_code == 2
    assert "--older-than" in result.stderr


# --- runs requeue ---------------------------------------------------------------------------


def test_requeue_puts_a_dead_workers_run_back_in_the_queue(database_url: str) -> None:
    async def claimed(store: Store) -> dict[str, Any]:
        await conversations(store, "planner", "reviewer")
        await ask(store, "planner", "reviewer", "Review it")
        run = await claim(store, "w-dead")
        assert run is not None and run["status"] == "running"
        return run

    before = on_store(database_url, claimed)

    run = as_json(ccweb_store(database_url, "runs", "requeue", before["id"], "--json"))
    again = ccweb_store(database_url, "runs", "requeue", before["id"])
    reclaimed = on_store(database_url, lambda store: claim(store, "w-alive"))

    assert (run["id"], run["status"], run["workerId"], run["leaseExpiresAt"]) == (
        before["id"],
        "queued",
        None,
        None,
    )
    assert run["attempts"] == before["attempts"] + 1
    assert again.exit_code == 1
    assert "is queued, not running; only a running run can be requeued" in again.stderr
    assert reclaimed is not None
    assert (reclaimed["id"], reclaimed["workerId"]) == (before["id"], "w-alive")


def test_requeue_prints_the_run_and_its_attempts(database_url: str) -> None:
    async def started(store: Store) -> Run:
        await conversations(store, "planner")
        await host_calls.start_run(store, {"sessionId": "planner", "workerId": "w-dead"})
        return (await runs_of(store, "planner"))[0]

    run = on_store(database_url, started)

    result = ccweb_store(database_url, "runs", "requeue", run.id)

    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"run {run.id}: queued again (attempts {run.attempts + 1})"


# --- runs cancel ----------------------------------------------------------------------------


def test_cancel_ends_a_queued_run_and_fails_its_request_so_retry_asks_again(
    database_url: str,
) -> None:
    request_id = waiting_request(database_url)
    [target_run] = on_store(database_url, lambda store: runs_of(store, "reviewer"))

    result = ccweb_store(database_url, "runs", "cancel", target_run.id, "--reason", "wrong ask")

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"run {target_run.id}: cancelled (wrong ask)",
        f"reply request {request_id}: failed",
    ]
    [run] = on_store(database_url, lambda store: runs_of(store, "reviewer"))
    reply = on_store(database_url, lambda store: reply_row(store, request_id))
    assert (run.status, run.error) == ("cancelled", "wrong ask")
    assert (reply.status, reply.last_error) == ("failed", "wrong ask")
    notices = on_store(database_url, lambda store: messages_of(store, "planner"))
    assert any("wrong ask" in str(message.content) for message in notices)
    # nothing waits for the cancelled run any more: a retry asks the reviewer again
    retried = as_json(ccweb_store(database_url, "replies", "retry", request_id, "--json"))
    assert retried["status"] == "waiting"
    assert len(on_store(database_url, lambda store: runs_of(store, "reviewer"))) == 2


def test_cancel_of_a_running_run_needs_force_and_the_worker_loses_its_lease(
    database_url: str,
) -> None:
    request_id = waiting_request(database_url)
    claimed = on_store(database_url, lambda store: claim(store, "w-busy"))
    assert claimed is not None

    refused = ccweb_store(database_url, "runs", "cancel", claimed["id"])
    assert refused.exit_code == 1
    assert "is running (worker 'w-busy'); cancel it with force" in refused.stderr
    assert on_store(database_url, lambda store: reply_row(store, request_id)).status == "waiting"

    forced = as_json(
        ccweb_store(database_url, "runs", "cancel", claimed["id"], "--force", "--json")
    )
    assert forced["run"]["status"] == "cancelled"
    assert [reply["status"] for reply in forced["replies"]] == ["failed"]
    with pytest.raises(Conflict) as lost:
        on_store(
            database_url,
            lambda store: host_calls.heartbeat_run(
                store, {"runId": claimed["id"], "workerId": "w-busy"}
            ),
        )
    assert lost.value.code == "lease_lost"


def test_cancel_of_an_ended_run_exits_1(database_url: str) -> None:
    returned_request(database_url)
    [run] = on_store(database_url, lambda store: runs_of(store, "reviewer"))

    result = ccweb_store(database_url, "runs", "cancel", run.id, "--force")

    assert result.exit_code == 1
    assert f"run {run.id!r} already ended (completed); nothing to cancel" in result.stderr


# --- unknown ids ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["replies", "retry", "req_nope"], "reply request 'req_nope' does not exist"),
        (["replies", "fail", "req_nope", "--reason", "x"], "reply request 'req_nope' does not"),
        (["replies", "show", "req_nope"], "reply request 'req_nope' does not exist"),
        (["runs", "requeue", "run_nope"], "run 'run_nope' does not exist"),
        (["runs", "cancel", "run_nope"], "run 'run_nope' does not exist"),
    ],
)
def test_an_unknown_id_exits_3(database_url: str, args: list[str], message: str) -> None:
    result = ccweb_store(database_url, *args)

    assert result.exit_code == 3
    assert message in result.stderr
