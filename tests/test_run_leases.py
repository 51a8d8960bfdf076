"""Only a run's lease holder completes it (``run.complete``/``run.heartbeat`` with ``workerId``).

A worker whose lease expired, whose run was requeued (by the lease sweep or ``run.requeue``)
and claimed by another worker, is refused with ``lease_lost`` and changes nothing; the new
holder's output is the one delivered, once. Over HTTP on the real app, SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest

from ccweb_store.domain.timestamps import utcnow
from ccweb_store.services import runs
from ccweb_store.store.uow import Store
from tests import host_calls
from tests.http_client import rpc, rpc_result
from tests.lifecycle_support import ask_tester, planner_and_tester

ASK = "Run the test suite and report every failure."


@pytest.fixture
async def client(store: Store) -> AsyncIterator[httpx.AsyncClient]:
    """The real app with ``planner`` (the source) and ``tester`` (the target)."""
    async with planner_and_tester(store) as http:
        yield http


async def ask(client: httpx.AsyncClient) -> dict[str, Any]:
    """The planner asks the tester (``return_and_continue``); the send's payload."""
    return await ask_tester(client, ASK)


async def claim(client: httpx.AsyncClient, worker: str, **params: Any) -> dict[str, Any]:
    claimed = await rpc_result(client, "run.claim", {"workerId": worker, **params})
    run: dict[str, Any] = claimed["run"]
    assert run is not None
    return run


def completion(run_id: str, worker: str | None, output: str) -> dict[str, Any]:
    params = {"runId": run_id, "status": "completed", "output": output}
    return params if worker is None else {**params, "workerId": worker}


async def refused(client: httpx.AsyncClient, method: str, params: dict[str, Any]) -> Any:
    """The error of a call that must be refused as ``lease_lost``."""
    answer = await rpc(client, method, params)
    assert "result" not in answer, answer
    error = answer["error"]
    assert (error["code"], error["data"]["code"]) == (-32000, "lease_lost"), error
    assert "stop working on it" in error["message"] or "nothing was recorded" in error["message"]
    return error


async def everything(client: httpx.AsyncClient) -> dict[str, Any]:
    """What the host sees: every run, message and reply request."""
    found: dict[str, Any] = {
        "runs": (await rpc_result(client, "run.list", {"limit": 500}))["runs"],
        "replies": (await rpc_result(client, "reply.list", {"limit": 500}))["replies"],
    }
    for session_id in ("planner", "tester"):
        listed = await rpc_result(client, "message.list", {"sessionId": session_id})
        found[session_id] = listed["messages"]
    return found


async def requeue(client: httpx.AsyncClient, store: Store, run_id: str, how: str) -> None:
    """Put a running run back in the queue: the lease sweep once its lease passed, or the
    operator's ``run.requeue``."""
    if how == "sweep":
        later = utcnow() + timedelta(hours=1)
        assert await runs.requeue_expired(store, now=later) == {"requeued": 1, "failed": 0}
    else:
        await rpc_result(client, "run.requeue", {"runId": run_id})


@pytest.mark.parametrize("how", ["sweep", "operator"])
async def test_a_stale_workers_completion_is_refused_and_the_new_holders_answer_is_delivered(
    client: httpx.AsyncClient, store: Store, how: str
) -> None:
    sent = await ask(client)
    stale = await claim(client, "old-worker", leaseSeconds=60)
    await requeue(client, store, stale["id"], how)
    fresh = await claim(client, "new-worker")
    assert (fresh["id"], fresh["attempts"]) == (stale["id"], 1)
    before = await everything(client)

    error = await refused(
        client, "run.complete", completion(stale["id"], "old-worker", "the stale answer")
    )

    assert "moved to worker 'new-worker'" in error["message"]
    assert error["data"] == {
        "code": "lease_lost",
        "runId": stale["id"],
        "runStatus": "running",
        "heldBy": "new-worker",
    }
    assert await everything(client) == before
    done = await rpc_result(
        client, "run.complete", completion(stale["id"], "new-worker", "the new answer")
    )
    assert (done["run"]["status"], done["run"]["output"]) == ("completed", "the new answer")
    assert done["message"]["content"] == "the new answer"
    [reply] = done["replies"]
    assert (reply["requestId"], reply["status"]) == (sent["requestId"], "returned")
    assert reply["replyText"] == "the new answer"
    after = await everything(client)
    assert [m["content"] for m in after["tester"] if m["role"] == "assistant"] == ["the new answer"]
    delivered = [m for m in after["planner"] if m["metadata"].get("replyToRequestId")]
    assert [m["id"] for m in delivered] == [reply["replyMessageId"]]
    assert "the new answer" in delivered[0]["content"]
    auto_runs = [r for r in after["runs"] if r["kind"] == "reply_auto_run"]
    assert [r["replyRequestId"] for r in auto_runs] == [sent["requestId"]]

    # The stale worker tries again (the bundled worker retries): still refused, still once.
    error = await refused(
        client, "run.complete", completion(stale["id"], "old-worker", "the stale answer")
    )
    assert error["data"]["runStatus"] == "completed"
    assert "already ended (completed) under worker 'new-worker'" in error["message"]
    assert await everything(client) == after


async def test_the_holders_repeated_completion_returns_the_same_result_and_changes_nothing(
    client: httpx.AsyncClient,
) -> None:
    await ask(client)
    run = await claim(client, "worker-1")
    first = await rpc_result(client, "run.complete", completion(run["id"], "worker-1", "done"))
    after = await everything(client)

    again = await rpc_result(
        client, "run.complete", completion(run["id"], "worker-1", "another output")
    )

    assert again == first
    assert await everything(client) == after


async def test_the_holder_completes_after_its_lease_passed_if_nobody_requeued_it(
    client: httpx.AsyncClient, store: Store
) -> None:
    sent = await ask(client)
    past = utcnow() - timedelta(hours=1)
    claimed = (
        await host_calls.claim_run(store, {"workerId": "slow", "leaseSeconds": 1}, now=past)
    )["run"]
    assert claimed is not None
    assert datetime.fromisoformat(claimed["leaseExpiresAt"]) < utcnow()  # passed, not swept

    done = await rpc_result(client, "run.complete", completion(claimed["id"], "slow", "late"))

    assert (done["run"]["status"], done["run"]["workerId"]) == ("completed", "slow")
    assert [(r["requestId"], r["status"]) for r in done["replies"]] == [
        (sent["requestId"], "returned")
    ]


@pytest.mark.parametrize("how", ["sweep", "operator"])
async def test_a_requeued_run_refuses_its_old_worker_and_goes_to_the_next_claimer(
    client: httpx.AsyncClient, store: Store, how: str
) -> None:
    await ask(client)
    stale = await claim(client, "old-worker", leaseSeconds=60)
    await requeue(client, store, stale["id"], how)
    before = await everything(client)

    completed = await refused(client, "run.complete", completion(stale["id"], "old-worker", "x"))
    beat = await refused(client, "run.heartbeat", {"runId": stale["id"], "workerId": "old-worker"})

    for error in (completed, beat):
        assert "was requeued" in error["message"]
        assert (error["data"]["runStatus"], error["data"]["heldBy"]) == ("queued", None)
    assert await everything(client) == before
    rescued = await claim(client, "rescuer")
    assert rescued["id"] == stale["id"]
    done = await rpc_result(client, "run.complete", completion(stale["id"], "rescuer", "ok"))
    assert done["run"]["workerId"] == "rescuer"


async def test_a_run_failed_after_its_leases_expired_refuses_its_last_workers_answer(
    client: httpx.AsyncClient, store: Store
) -> None:
    sent = await ask(client)
    later = utcnow()
    for attempt in range(store.settings.max_attempts):
        last = await claim(client, f"w{attempt}")
        later += timedelta(hours=1)
        await runs.requeue_expired(store, now=later)
    failed = await rpc_result(client, "reply.get", {"requestId": sent["requestId"]})
    assert failed["status"] == "failed"
    before = await everything(client)

    error = await refused(
        client, "run.complete", completion(last["id"], last["workerId"], "too late")
    )

    assert error["data"] == {
        "code": "lease_lost",
        "runId": last["id"],
        "runStatus": "failed",
        "heldBy": None,
    }
    assert await everything(client) == before


async def test_a_heartbeat_from_a_worker_that_does_not_hold_the_run_is_lease_lost(
    client: httpx.AsyncClient,
) -> None:
    await ask(client)
    run = await claim(client, "holder", leaseSeconds=60)
    before = await everything(client)

    error = await refused(
        client, "run.heartbeat", {"runId": run["id"], "workerId": "intruder", "leaseSeconds": 600}
    )

    assert error["data"]["heldBy"] == "holder"
    assert await everything(client) == before
    extended = await rpc_result(
        client, "run.heartbeat", {"runId": run["id"], "workerId": "holder", "leaseSeconds": 600}
    )
    assert extended["leaseExpiresAt"] > run["leaseExpiresAt"]


async def test_a_leased_run_is_not_completed_without_naming_its_holder(
    client: httpx.AsyncClient,
) -> None:
    await ask(client)
    run = await claim(client, "holder")
    before = await everything(client)

    error = await refused(client, "run.complete", completion(run["id"], None, "who am I"))

    assert "pass workerId 'holder'" in error["message"]
    assert await everything(client) == before
    # The operator's path: take the run back, then close it (no holder, so no workerId).
    await rpc_result(client, "run.requeue", {"runId": run["id"]})
    closed = await rpc_result(
        client, "run.complete", {"runId": run["id"], "status": "failed", "error": "given up"}
    )
    assert (closed["run"]["status"], closed["run"]["workerId"]) == ("failed", None)


async def test_a_run_start_run_is_completed_without_a_worker_id_as_before(
    client: httpx.AsyncClient,
) -> None:
    started = await rpc_result(client, "run.start", {"sessionId": "planner"})
    assert started["workerId"] is None

    elsewhere = await refused(client, "run.complete", completion(started["id"], "w", "no"))
    assert "complete it without workerId" in elsewhere["message"]
    done = await rpc_result(client, "run.complete", completion(started["id"], None, "planned"))
    again = await rpc_result(client, "run.complete", completion(started["id"], None, "other"))

    assert (done["run"]["status"], done["message"]["content"]) == ("completed", "planned")
    assert again == done
    # A host that starts a run under its own name completes it under that name.
    mine = await rpc_result(client, "run.start", {"sessionId": "tester", "workerId": "host-1"})
    await refused(client, "run.complete", completion(mine["id"], None, "anonymous"))
    finished = await rpc_result(client, "run.complete", completion(mine["id"], "host-1", "ok"))
    assert finished["run"]["status"] == "completed"


async def test_a_stale_and_a_current_completion_at_once_deliver_only_the_holders_answer(
    client: httpx.AsyncClient, store: Store
) -> None:
    sent = await ask(client)
    stale = await claim(client, "old-worker")
    await requeue(client, store, stale["id"], "operator")
    await claim(client, "new-worker")

    stale_answer, new_answer = await asyncio.gather(
        rpc(client, "run.complete", completion(stale["id"], "old-worker", "stale")),
        rpc(client, "run.complete", completion(stale["id"], "new-worker", "fresh")),
    )

    assert stale_answer["error"]["data"]["code"] == "lease_lost"
    assert new_answer["result"]["run"]["output"] == "fresh"
    reply = await rpc_result(client, "reply.get", {"requestId": sent["requestId"]})
    assert (reply["status"], reply["replyText"]) == ("returned", "fresh")
    after = await everything(client)
    assert [m["content"] for m in after["tester"] if m["role"] == "assistant"] == ["fresh"]
    assert len([m for m in after["planner"] if m["metadata"].get("replyToRequestId")]) == 1
