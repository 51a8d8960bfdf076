"""The run queue's host functions (SPEC §3 ``run.*``) on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from ccweb_store.domain import errors
from ccweb_store.domain.errors import DomainError
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.services import runs
from ccweb_store.store.uow import Store
from tests import host_calls
from tests.lifecycle_support import (
    ask,
    claim,
    complete,
    make_conversation,
    messages_of,
    reply_row,
    runs_of,
)

LONG_AGO = timedelta(hours=1)


async def test_start_run_returns_a_running_run_and_refuses_a_second(pair: Store) -> None:
    run = await host_calls.start_run(pair, {"sessionId": "conv-a", "runtimeText": "hello"})
    assert (run["status"], run["kind"], run["runtimeText"]) == ("running", "user_turn", "hello")
    assert run["startedAt"] is not None
    with pytest.raises(DomainError) as caught:
        await host_calls.start_run(pair, {"sessionId": "conv-a"})
    assert caught.value.code == errors.CONVERSATION_BUSY
    other = await host_calls.start_run(pair, {"sessionId": "conv-b", "kind": "reply_auto_run"})
    assert other["kind"] == "reply_auto_run"


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"sessionId": "nobody"}, errors.CONVERSATION_NOT_FOUND),
        ({"sessionId": "bad id"}, errors.INVALID_CONVERSATION_ID),
        ({"sessionId": "conv-a", "kind": "nap"}, errors.INVALID_KIND),
        ({}, errors.INVALID_ARGUMENTS),
    ],
)
async def test_start_run_refuses_bad_params(pair: Store, params: dict[str, str], code: str) -> None:
    with pytest.raises(DomainError) as caught:
        await host_calls.start_run(pair, params)
    assert caught.value.code == code


async def test_claim_takes_the_oldest_queued_run_of_an_idle_conversation(pair: Store) -> None:
    await make_conversation(pair, "conv-c", "Builder")
    busy = await ask(pair, "conv-a", "conv-b", "first")
    await host_calls.start_run(pair, {"sessionId": "conv-c"})
    async with pair.uow() as uow:  # a queued run behind conv-c's running one
        await uow.runs.enqueue("conv-c", "user_turn")
        await uow.commit()

    run = await claim(pair, "w1", leaseSeconds=30)
    assert run is not None and run["id"] == busy["runId"]
    assert (run["status"], run["workerId"]) == ("running", "w1")
    assert run["leaseExpiresAt"] is not None
    assert await claim(pair, "w2") is None


async def test_a_claim_that_loses_a_race_for_a_conversation_claims_another_run(
    pair: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two claimers take two queued runs of one conversation at once: only one may run
    (the unique index of running runs); the other claims again and gets another run."""
    await make_conversation(pair, "conv-c", "Builder")
    async with pair.uow() as uow:
        first = await uow.runs.enqueue("conv-a", "user_turn")
        await uow.runs.enqueue("conv-a", "user_turn")
        other = await uow.runs.enqueue("conv-c", "user_turn")
        await uow.commit()
    races: list[Exception] = []
    claim_again = runs._claim

    async def counted(*args: object) -> object:
        try:
            return await claim_again(*args)
        except runs.ClaimRace as race:
            races.append(race)
            raise

    monkeypatch.setattr(runs, "_claim", counted)
    async with pair.uow() as holder:  # the first claimer, not committed yet
        held = await holder.runs.claim("w1", lease_seconds=30)
        assert held is not None and held.id == first.id
        second = asyncio.create_task(host_calls.claim_run(pair, {"workerId": "w2"}))
        await asyncio.sleep(0.3)  # PostgreSQL: it waits on the index; SQLite: for the writer
        await holder.commit()
    claimed = (await second)["run"]
    assert claimed is not None and claimed["id"] == other.id
    assert len(races) == (1 if pair.dialect == "postgresql" else 0)


async def test_claim_filters_by_kind(pair: Store) -> None:
    await ask(pair, "conv-a", "conv-b", "q")
    assert await claim(pair, kinds=["user_turn"]) is None
    assert await claim(pair, kinds="cross_conversation") is not None
    with pytest.raises(DomainError) as caught:
        await claim(pair, kinds=["nap"])
    assert caught.value.code == errors.INVALID_KIND


async def test_heartbeat_extends_the_lease_only_for_its_holder(pair: Store) -> None:
    await ask(pair, "conv-a", "conv-b", "q")
    run = await claim(pair, "w1", leaseSeconds=5)
    assert run is not None
    beat = await host_calls.heartbeat_run(
        pair, {"runId": run["id"], "workerId": "w1", "leaseSeconds": 600}
    )
    assert beat["leaseExpiresAt"] > run["leaseExpiresAt"]
    with pytest.raises(DomainError) as caught:
        await host_calls.heartbeat_run(pair, {"runId": run["id"], "workerId": "w2"})
    assert caught.value.code == errors.LEASE_LOST
    assert "claim another" in caught.value.message
    with pytest.raises(DomainError) as caught:
        await host_calls.heartbeat_run(pair, {"runId": "run_nope", "workerId": "w1"})
    assert caught.value.code == errors.RUN_NOT_FOUND


async def test_completing_a_user_turn_appends_its_output(pair: Store) -> None:
    run = await host_calls.start_run(pair, {"sessionId": "conv-a"})
    result = await complete(pair, run["id"], "Here is the plan")
    assert result["run"]["status"] == "completed" and result["run"]["output"] == "Here is the plan"
    assert result["message"]["role"] == "assistant"
    assert result["message"]["metadata"] == {"runId": run["id"]}
    assert result["replies"] == []
    [message] = await messages_of(pair, "conv-a")
    assert message.id == result["message"]["id"]
    assert await complete(pair, run["id"], "other") == result


async def test_completing_without_output_appends_no_message(pair: Store) -> None:
    run = await host_calls.start_run(pair, {"sessionId": "conv-a"})
    result = await complete(pair, run["id"], "   ", "failed", error="crashed")
    assert (result["run"]["status"], result["run"]["error"]) == ("failed", "crashed")
    assert result["message"] is None
    assert await messages_of(pair, "conv-a") == []


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"runId": "run_nope", "status": "completed"}, errors.RUN_NOT_FOUND),
        ({"runId": "x", "status": "done"}, errors.INVALID_STATUS),
        ({"status": "completed"}, errors.INVALID_ARGUMENTS),
        ({"runId": "x", "status": "completed", "output": 5}, errors.INVALID_ARGUMENTS),
    ],
)
async def test_complete_refuses_bad_params(
    pair: Store, params: dict[str, object], code: str
) -> None:
    with pytest.raises(DomainError) as caught:
        await host_calls.complete_run(pair, params)
    assert caught.value.code == code


async def test_only_a_cross_conversation_run_moves_a_request_to_ready(pair: Store) -> None:
    request_id = (await ask(pair, "conv-a", "conv-b", "q"))["requestId"]
    async with pair.uow() as uow:
        stray = await uow.runs.start("conv-a", "user_turn", reply_request_id=request_id)
        await uow.commit()
    result = await complete(pair, stray.id, "not an answer")
    assert result["replies"] == []
    assert (await reply_row(pair, request_id)).status == "waiting"


async def test_an_expired_lease_puts_the_run_back_in_the_queue(pair: Store) -> None:
    sent = await ask(pair, "conv-a", "conv-b", "q")
    past = utcnow() - LONG_AGO
    first = await host_calls.claim_run(pair, {"workerId": "dead", "leaseSeconds": 1}, now=past)
    assert first["run"]["id"] == sent["runId"]

    again = await claim(pair, "alive")
    assert again is not None and again["id"] == sent["runId"]
    assert (again["workerId"], again["attempts"]) == ("alive", 1)
    with pytest.raises(DomainError) as caught:
        await host_calls.heartbeat_run(pair, {"runId": sent["runId"], "workerId": "dead"})
    assert caught.value.code == errors.LEASE_LOST


async def test_a_lease_running_out_in_real_time_is_noticed_by_the_next_claim(
    pair: Store,
) -> None:
    """Claims skip the expiry query for up to a second after asking (no lease is shorter)."""
    sent = await ask(pair, "conv-a", "conv-b", "q")
    first = await claim(pair, "dead", leaseSeconds=1)
    assert first is not None and first["id"] == sent["runId"]
    assert await claim(pair, "early") is None  # within the lease: nothing to take
    await asyncio.sleep(1.2)
    again = await claim(pair, "alive")
    assert again is not None and again["id"] == sent["runId"]
    assert (again["workerId"], again["attempts"]) == ("alive", 1)


async def test_three_expired_leases_fail_the_run_and_its_request(pair: Store) -> None:
    sent = await ask(pair, "conv-a", "conv-b", "Flaky job")
    past = utcnow() - LONG_AGO
    outcomes = []
    for attempt in range(3):
        claimed = await host_calls.claim_run(
            pair, {"workerId": f"w{attempt}", "leaseSeconds": 1}, now=past
        )
        assert claimed["run"] is not None and claimed["run"]["id"] == sent["runId"]
        outcomes.append(await runs.requeue_expired(pair))
    assert outcomes == [{"requeued": 1, "failed": 0}] * 2 + [{"requeued": 0, "failed": 1}]

    [run] = await runs_of(pair, "conv-b")
    assert (run.status, run.attempts) == ("failed", 3)
    assert run.error is not None and "expired 3 times" in run.error
    request = await reply_row(pair, sent["requestId"])
    assert request.status == "failed" and request.last_error == run.error
    [notice] = await messages_of(pair, "conv-a")
    assert notice.metadata_ is not None and notice.metadata_["replyFailed"] is True
    assert "Flaky job" in notice.content
    assert await runs.requeue_expired(pair) == {"requeued": 0, "failed": 0}


async def test_requeue_run_puts_a_running_run_back(pair: Store) -> None:
    sent = await ask(pair, "conv-a", "conv-b", "q")
    await claim(pair, "w1")
    run = await host_calls.requeue_run(pair, {"runId": sent["runId"]})
    assert (run["status"], run["workerId"], run["attempts"]) == ("queued", None, 1)
    with pytest.raises(DomainError) as caught:
        await host_calls.requeue_run(pair, {"runId": sent["runId"]})
    assert caught.value.code == errors.INVALID_STATE


async def test_a_claim_brings_the_conversation_and_a_credential_for_the_run(pair: Store) -> None:
    from ccweb_store.services import credentials

    sent = await ask(pair, "conv-a", "conv-b", "q")
    claimed = await host_calls.claim_run(
        pair,
        {
            "workerId": "w1",
            "withConversation": True,
            "mintCredential": {"expiresInSeconds": 600, "label": "worker w1"},
        },
    )
    assert claimed["run"]["id"] == sent["runId"]
    assert claimed["conversation"]["id"] == "conv-b"
    assert claimed["conversation"]["title"] == "Tester"
    minted = claimed["credential"]
    assert minted["credential"]["label"] == f"worker w1, run {sent['runId']}"
    binding = await credentials.authenticate(pair, minted["token"])
    assert binding.conversation_id == "conv-b"
    assert binding.hop_count == claimed["run"]["hopCount"]
    nothing = await host_calls.claim_run(pair, {"workerId": "w2", "withConversation": True})
    assert nothing == {"run": None}
    with pytest.raises(DomainError):
        await host_calls.claim_run(
            pair, {"workerId": "w2", "mintCredential": {"expiresInSeconds": 0}}
        )


async def test_a_worker_requeues_only_the_run_it_still_holds(pair: Store) -> None:
    sent = await ask(pair, "conv-a", "conv-b", "q")
    await claim(pair, "w1")
    await host_calls.requeue_run(pair, {"runId": sent["runId"]})  # the operator: w1 lost it
    await claim(pair, "w2")
    with pytest.raises(DomainError) as caught:
        await host_calls.requeue_run(pair, {"runId": sent["runId"], "workerId": "w1"})
    assert caught.value.code == errors.LEASE_LOST
    listed = await host_calls.list_runs(pair, {"sessionId": "conv-b"})
    assert [(r["status"], r["workerId"]) for r in listed["runs"]] == [("running", "w2")]
    run = await host_calls.requeue_run(pair, {"runId": sent["runId"], "workerId": "w2"})
    assert (run["status"], run["attempts"]) == ("queued", 2)


async def test_list_runs_filters_by_conversation_and_status(pair: Store) -> None:
    sent = await ask(pair, "conv-a", "conv-b", "q")
    started = await host_calls.start_run(pair, {"sessionId": "conv-a"})
    everything = await host_calls.list_runs(pair, {})
    assert [r["id"] for r in everything["runs"]] == [started["id"], sent["runId"]]
    assert [
        r["id"] for r in (await host_calls.list_runs(pair, {"sessionId": "conv-b"}))["runs"]
    ] == [sent["runId"]]
    running = await host_calls.list_runs(pair, {"status": "running", "limit": 10})
    assert [r["id"] for r in running["runs"]] == [started["id"]]
    with pytest.raises(DomainError) as caught:
        await host_calls.list_runs(pair, {"status": "asleep"})
    assert caught.value.code == errors.INVALID_STATUS


async def test_enqueue_run_queues_a_run_for_a_worker_to_claim(pair: Store) -> None:
    queued = await host_calls.enqueue_run(pair, {"sessionId": "conv-a", "runtimeText": "hi"})
    assert (queued["status"], queued["kind"], queued["runtimeText"]) == (
        "queued",
        "user_turn",
        "hi",
    )
    assert queued["startedAt"] is None and queued["hopCount"] == 0
    claimed = await claim(pair)
    assert claimed is not None and claimed["id"] == queued["id"]


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"sessionId": "nobody"}, errors.CONVERSATION_NOT_FOUND),
        ({"sessionId": "conv-a", "kind": "nap"}, errors.INVALID_KIND),
        ({}, errors.INVALID_ARGUMENTS),
    ],
)
async def test_enqueue_run_refuses_bad_params(
    pair: Store, params: dict[str, str], code: str
) -> None:
    with pytest.raises(DomainError) as caught:
        await host_calls.enqueue_run(pair, params)
    assert caught.value.code == code
