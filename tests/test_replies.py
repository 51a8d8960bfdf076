"""The reply lifecycle of SPEC §4, driven through the service layer on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from ccweb_store.config import Settings
from ccweb_store.domain import errors
from ccweb_store.domain.context import Source
from ccweb_store.domain.errors import DomainError
from ccweb_store.domain.prompts import LEGACY_ORIGINAL_REQUEST
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.store.models import SessionRow
from ccweb_store.store.uow import Store
from tests import host_calls, tool_calls
from tests.conftest import migrate_url
from tests.http_client import app_client, rpc_result
from tests.lifecycle_support import (
    ask,
    claim,
    complete,
    insert_message_by_hand,
    make_conversation,
    messages_of,
    reply_row,
    runs_of,
)


async def _answer(store: Store, output: str = "All tests pass", status: str = "completed") -> Any:
    """The target claims its run and completes it."""
    run = await claim(store, "target-worker", kinds=["cross_conversation"])
    assert run is not None and run["sessionId"] == "conv-b"
    return await complete(
        store,
        run["id"],
        output,
        status,
        error="boom" if status == "failed" else None,
        workerId="target-worker",
    )


def _reply_messages(messages: list[Any], request_id: str) -> list[Any]:
    return [m for m in messages if (m.metadata_ or {}).get("replyToRequestId") == request_id]


async def test_a_completed_target_run_returns_exactly_one_reply_and_queues_one_auto_run(
    pair: Store,
) -> None:
    request_id = (await ask(pair, "conv-a", "conv-b", "Run the suite and report", hop=1))[
        "requestId"
    ]
    result = await _answer(pair, "All 120 tests pass")

    assert result["run"]["status"] == "completed"
    assert result["message"]["sessionId"] == "conv-b"
    assert result["message"]["content"] == "All 120 tests pass"
    [reply] = result["replies"]
    assert reply["requestId"] == request_id and reply["status"] == "returned"

    row = await reply_row(pair, request_id)
    assert row.status == "returned"
    assert row.reply_text == "All 120 tests pass"
    assert row.completed_at is not None and row.returned_at is not None

    [message] = _reply_messages(await messages_of(pair, "conv-a"), request_id)
    assert message.id == row.reply_message_id
    assert message.role == "assistant" and message.content == "All 120 tests pass"
    assert message.metadata_ is not None
    assert {k: message.metadata_[k] for k in ("ccwebDisplayOnly", "processed", "autoRun")} == {
        "ccwebDisplayOnly": True,
        "processed": True,
        "autoRun": True,
    }

    [auto_run] = await runs_of(pair, "conv-a")
    assert (auto_run.kind, auto_run.status) == ("reply_auto_run", "queued")
    assert auto_run.reply_request_id == request_id and auto_run.hop_count == 2
    prompt = auto_run.runtime_text or ""
    for expected in (
        request_id,
        "Tester",
        "conv-b",
        "Run the suite and report",
        "All 120 tests pass",
    ):
        assert expected in prompt
    assert "returned is not the same as done" in prompt


async def test_completing_a_finished_run_again_changes_nothing_and_returns_the_same_result(
    pair: Store,
) -> None:
    await ask(pair, "conv-a", "conv-b", "Report")
    first = await _answer(pair, "Report: fine")
    again = await complete(
        pair, first["run"]["id"], "different output", "failed", workerId="target-worker"
    )
    assert again == first
    assert len(await messages_of(pair, "conv-a")) == 1
    assert len(await runs_of(pair, "conv-a")) == 1


async def test_a_reply_for_a_busy_source_stays_ready_until_its_run_completes(pair: Store) -> None:
    source_run = await host_calls.start_run(pair, {"sessionId": "conv-a", "runtimeText": "working"})
    request_id = (await ask(pair, "conv-a", "conv-b", "Benchmark it"))["requestId"]
    result = await _answer(pair, "120 req/s")

    assert result["replies"][0]["status"] == "ready"
    assert (await reply_row(pair, request_id)).status == "ready"
    pending = await tool_calls.get_pending_reply(pair, Source("conv-a"), {})
    assert [(r["requestId"], r["status"]) for r in pending["replies"]] == [(request_id, "ready")]
    listed = await host_calls.list_replies(pair, {"status": "ready"})
    assert [r["requestId"] for r in listed["replies"]] == [request_id]
    assert _reply_messages(await messages_of(pair, "conv-a"), request_id) == []
    assert await runs_of(pair, "conv-a", "reply_auto_run") == []

    done = await complete(pair, source_run["id"], "source turn done")
    assert [(r["requestId"], r["status"]) for r in done["replies"]] == [(request_id, "returned")]
    assert len(_reply_messages(await messages_of(pair, "conv-a"), request_id)) == 1
    [auto_run] = await runs_of(pair, "conv-a", "reply_auto_run")
    assert "120 req/s" in (auto_run.runtime_text or "")
    assert (await tool_calls.get_pending_reply(pair, Source("conv-a"), {}))["count"] == 0
    assert await complete(pair, source_run["id"], "again") == done


async def test_a_failed_target_run_reaches_the_source_as_a_notice(pair: Store) -> None:
    request_id = (await ask(pair, "conv-a", "conv-b", "Deploy it"))["requestId"]
    result = await _answer(pair, None, "failed")

    assert result["message"] is None
    [reply] = result["replies"]
    assert reply["status"] == "failed" and reply["lastError"] == "boom"
    [notice] = _reply_messages(await messages_of(pair, "conv-a"), request_id)
    assert notice.metadata_ is not None and notice.metadata_["replyFailed"] is True
    assert "boom" in notice.content and "Deploy it" in notice.content
    assert (await reply_row(pair, request_id)).reply_message_id == notice.id
    [auto_run] = await runs_of(pair, "conv-a", "reply_auto_run")
    assert auto_run.reply_request_id == request_id

    # Later completions in the source do not deliver the notice again.
    run = await claim(pair, "source-worker")
    assert run is not None
    await complete(pair, run["id"], "noted", workerId="source-worker")
    assert len(_reply_messages(await messages_of(pair, "conv-a"), request_id)) == 1
    assert (await reply_row(pair, request_id)).status == "failed"


async def test_a_reply_already_answered_in_the_source_is_only_marked_returned(pair: Store) -> None:
    request_id = (await ask(pair, "conv-a", "conv-b", "Look"))["requestId"]
    async with pair.uow() as uow:
        existing = await uow.messages.append(
            "conv-a", "assistant", "answered by hand", metadata={"replyToRequestId": request_id}
        )
        await uow.commit()
    await _answer(pair, "looked")
    row = await reply_row(pair, request_id)
    assert row.status == "returned" and row.reply_message_id == existing.id
    assert len(await messages_of(pair, "conv-a")) == 1
    assert await runs_of(pair, "conv-a") == []


@pytest.mark.parametrize("written_by", ["message.append", "INSERT"])
async def test_an_answer_written_into_the_source_by_another_tool_counts(
    pair: Store, written_by: str
) -> None:
    """The host API or plain SQL: any message of the source naming the request answers it."""
    request_id = (await ask(pair, "conv-a", "conv-b", "Look"))["requestId"]
    metadata = {"replyToRequestId": request_id, "source": "host"}
    if written_by == "message.append":
        async with app_client(pair) as client:
            params = {"sessionId": "conv-a", "role": "assistant", "content": "seen", "id": "m-1"}
            await rpc_result(client, "message.append", {**params, "metadata": metadata})
    else:
        await insert_message_by_hand(pair, "conv-a", "m-1", json.dumps(metadata))

    result = await _answer(pair, "looked")

    assert [(r["status"], r["replyMessageId"]) for r in result["replies"]] == [("returned", "m-1")]
    assert [m.id for m in await messages_of(pair, "conv-a")] == ["m-1"]
    assert await runs_of(pair, "conv-a") == []


async def test_an_answer_naming_the_request_in_another_conversation_is_not_the_sources(
    pair: Store,
) -> None:
    await make_conversation(pair, "conv-c", "Bystander")
    request_id = (await ask(pair, "conv-a", "conv-b", "Look"))["requestId"]
    metadata = json.dumps({"replyToRequestId": request_id})
    await insert_message_by_hand(pair, "conv-c", "m-elsewhere", metadata)

    await _answer(pair, "looked")

    [reply] = _reply_messages(await messages_of(pair, "conv-a"), request_id)
    assert (
        reply.content == "looked"
        and reply.id == (await reply_row(pair, request_id)).reply_message_id
    )
    assert [m.id for m in await messages_of(pair, "conv-c")] == ["m-elsewhere"]
    assert len(await runs_of(pair, "conv-a", "reply_auto_run")) == 1


async def test_a_failure_notice_already_in_the_source_is_not_an_answer(pair: Store) -> None:
    request_id = (await ask(pair, "conv-a", "conv-b", "Look"))["requestId"]
    notice = json.dumps({"replyToRequestId": request_id, "replyFailed": True})
    await insert_message_by_hand(pair, "conv-a", "m-notice", notice)

    await _answer(pair, "looked after all")

    notice_row, reply = _reply_messages(await messages_of(pair, "conv-a"), request_id)
    assert notice_row.id == "m-notice" and reply.content == "looked after all"
    assert (await reply_row(pair, request_id)).reply_message_id == reply.id


async def test_a_reply_whose_source_is_gone_fails(pair: Store) -> None:
    request_id = (await ask(pair, "conv-a", "conv-b", "Anyone there?"))["requestId"]
    async with pair.uow() as uow:
        await uow._execute(sa.delete(SessionRow).where(SessionRow.id == "conv-a"))
        await uow.commit()
    await _answer(pair, "yes")
    row = await reply_row(pair, request_id)
    assert row.status == "failed"
    assert row.last_error is not None and "no longer exists" in row.last_error


async def test_fail_reply_fails_a_waiting_request_and_notifies_the_source(pair: Store) -> None:
    request_id = (await ask(pair, "conv-a", "conv-b", "Slow job"))["requestId"]
    failed = await host_calls.fail_reply(
        pair, {"requestId": request_id, "reason": "cancelled by ops"}
    )
    assert failed["status"] == "failed" and failed["lastError"] == "cancelled by ops"
    [notice] = _reply_messages(await messages_of(pair, "conv-a"), request_id)
    assert "cancelled by ops" in notice.content
    assert await host_calls.fail_reply(pair, {"requestId": request_id, "reason": "x"}) == failed

    with pytest.raises(DomainError) as caught:
        await host_calls.fail_reply(pair, {"requestId": request_id})
    assert caught.value.code == errors.INVALID_ARGUMENTS


async def test_expire_fails_only_waiting_requests_older_than_the_cutoff(pair: Store) -> None:
    await make_conversation(pair, "conv-c", "Builder")
    old = (await ask(pair, "conv-a", "conv-b", "old"))["requestId"]
    returned = (await ask(pair, "conv-a", "conv-c", "answered"))["requestId"]
    run = await claim(pair, kinds=["cross_conversation"])
    run = run if run and run["sessionId"] == "conv-c" else await claim(pair, "w2")
    assert run is not None and run["sessionId"] == "conv-c"
    await complete(pair, run["id"], "answer", workerId=run["workerId"])

    later = utcnow() + timedelta(hours=1)
    assert await host_calls.expire_replies(pair, {"olderThanSeconds": 7200}, now=later) == {
        "expired": 0
    }
    assert await host_calls.expire_replies(pair, {"olderThanSeconds": 60}, now=later) == {
        "expired": 1
    }
    row = await reply_row(pair, old)
    assert (row.status, row.last_error) == ("failed", "expired")
    assert (await reply_row(pair, returned)).status == "returned"
    assert len(_reply_messages(await messages_of(pair, "conv-a"), old)) == 1

    # The late answer is kept, and a retry delivers it.
    [late] = await runs_of(pair, "conv-b")
    await complete(pair, late.id, "late answer", workerId=late.worker_id)
    assert (await reply_row(pair, old)).reply_text == "late answer"
    retried = await host_calls.retry_reply(pair, {"requestId": old})
    assert retried["status"] == "returned"
    assert [m.content for m in _reply_messages(await messages_of(pair, "conv-a"), old)][-1] == (
        "late answer"
    )


async def test_expirable_replies_lists_what_expire_would_fail_and_writes_nothing(
    pair: Store,
) -> None:
    await make_conversation(pair, "conv-c", "Builder")
    first = (await ask(pair, "conv-a", "conv-b", "first"))["requestId"]
    second = (await ask(pair, "conv-c", "conv-a", "second"))["requestId"]
    later = utcnow() + timedelta(hours=1)

    listed = await host_calls.expirable_replies(pair, {"olderThanSeconds": 60}, now=later)
    too_young = await host_calls.expirable_replies(pair, {"olderThanSeconds": 7200}, now=later)

    assert [row.request_id for row in listed] == [first, second]
    assert too_young == []
    assert {(await reply_row(pair, rid)).status for rid in (first, second)} == {"waiting"}
    assert await host_calls.expire_replies(pair, {"olderThanSeconds": 60}, now=later) == {
        "expired": len(listed)
    }
    with pytest.raises(DomainError) as caught:
        await host_calls.expirable_replies(pair, {})
    assert caught.value.code == errors.INVALID_ARGUMENTS


async def test_retry_delivers_a_ready_reply_once_the_source_is_idle(pair: Store) -> None:
    source_run = await host_calls.start_run(pair, {"sessionId": "conv-a"})
    request_id = (await ask(pair, "conv-a", "conv-b", "q"))["requestId"]
    await _answer(pair, "a")
    assert (await host_calls.retry_reply(pair, {"requestId": request_id}))["status"] == "ready"
    async with pair.uow() as uow:  # the source's worker dies and the run is cancelled
        await uow.runs.finish(source_run["id"], "cancelled", worker_id=None)
        await uow.commit()
    assert (await host_calls.retry_reply(pair, {"requestId": request_id}))["status"] == "returned"
    with pytest.raises(DomainError) as caught:
        await host_calls.retry_reply(pair, {"requestId": request_id})
    assert caught.value.code == errors.INVALID_STATE
    assert len(await runs_of(pair, "conv-a", "reply_auto_run")) == 1


async def test_retry_of_a_waiting_request_with_its_run_still_queued_is_target_busy(
    pair: Store,
) -> None:
    request_id = (await ask(pair, "conv-a", "conv-b", "q"))["requestId"]
    [run] = await runs_of(pair, "conv-b")
    with pytest.raises(DomainError) as caught:
        await host_calls.retry_reply(pair, {"requestId": request_id})
    assert caught.value.code == errors.TARGET_BUSY
    assert caught.value.data == {
        "runId": run.id,
        "runStatus": "queued",
        "targetConversationId": "conv-b",
    }
    assert (await reply_row(pair, request_id)).status == "waiting"
    assert len(await runs_of(pair, "conv-b")) == 1


async def test_retry_of_a_failed_unanswered_request_asks_the_target_again(pair: Store) -> None:
    request_id = (await ask(pair, "conv-a", "conv-b", "Try the flaky step"))["requestId"]
    await _answer(pair, None, "failed")
    retried = await host_calls.retry_reply(pair, {"requestId": request_id})
    assert retried["status"] == "waiting" and retried["lastError"] is None
    queued = [r for r in await runs_of(pair, "conv-b") if r.status == "queued"]
    assert len(queued) == 1 and queued[0].reply_request_id == request_id
    assert "Try the flaky step" in (queued[0].runtime_text or "")
    await _answer(pair, "worked this time")
    assert (await reply_row(pair, request_id)).status == "returned"


async def test_reply_get_and_list_page_through_requests(pair: Store) -> None:
    await make_conversation(pair, "conv-c", "Builder")
    ids = [(await ask(pair, "conv-a", t, f"to {t}"))["requestId"] for t in ("conv-b", "conv-c")]
    assert (await host_calls.get_reply(pair, {"requestId": ids[0]}))[
        "originalRequest"
    ] == "to conv-b"
    first = await host_calls.list_replies(pair, {"sessionId": "conv-a", "limit": 1})
    second = await host_calls.list_replies(
        pair, {"sessionId": "conv-a", "cursor": first["nextCursor"]}
    )
    assert [r["requestId"] for r in first["replies"] + second["replies"]] == ids
    assert second["nextCursor"] is None
    only_c = await host_calls.list_replies(pair, {"sessionId": "conv-c", "status": ["waiting"]})
    assert [r["requestId"] for r in only_c["replies"]] == [ids[1]]
    with pytest.raises(DomainError) as caught:
        await host_calls.get_reply(pair, {"requestId": "req_nope"})
    assert caught.value.code == errors.REQUEST_NOT_FOUND


async def test_a_legacy_request_without_original_request_is_delivered_with_the_placeholder(
    empty_database_url: str,
) -> None:
    await migrate_url(empty_database_url, "0001")
    legacy = Store.from_settings(Settings(database_url=empty_database_url))
    try:
        async with legacy.uow() as uow:
            for sid, title in (("conv-a", "Planner"), ("conv-b", "Tester")):
                await uow._execute(
                    sa.text("INSERT INTO sessions (id, title) VALUES (:id, :title)"),
                    {"id": sid, "title": title},
                )
            await uow._execute(
                sa.text(
                    "INSERT INTO reply_requests (request_id, source_conversation_id, source_title,"
                    " target_conversation_id, target_title, status, hop_count)"
                    " VALUES ('req_legacy', 'conv-a', 'Planner', 'conv-b', 'Tester', 'waiting', 1)"
                )
            )
            await uow._execute(
                sa.text(
                    "INSERT INTO runs (id, session_id, kind, status, reply_request_id, hop_count)"
                    " VALUES ('run_legacy', 'conv-b', 'cross_conversation', 'queued',"
                    " 'req_legacy', 1)"
                )
            )
            await uow.commit()
        await migrate_url(empty_database_url)

        assert (await host_calls.get_reply(legacy, {"requestId": "req_legacy"}))[
            "originalRequest"
        ] is None
        run = await claim(legacy)
        assert run is not None and run["id"] == "run_legacy"
        result = await complete(legacy, "run_legacy", "legacy answer", workerId="worker-1")
        assert result["replies"][0]["status"] == "returned"
        [auto_run] = await runs_of(legacy, "conv-a", "reply_auto_run")
        prompt = auto_run.runtime_text or ""
        assert LEGACY_ORIGINAL_REQUEST in prompt
        assert "req_legacy" in prompt and "legacy answer" in prompt
    finally:
        await legacy.dispose()


async def test_concurrent_workers_return_every_reply_exactly_once(
    store: Store, settings: Settings
) -> None:
    """50 requests from 10 conversations, completed by concurrent workers, each twice."""
    sources = [f"src-{i}" for i in range(10)]
    targets = [f"tgt-{i:02d}" for i in range(50)]
    for conversation in sources + targets:
        await make_conversation(store, conversation)
    # Half the sources are mid-turn, so their replies must wait and go out on completion.
    busy_runs = [(await host_calls.start_run(store, {"sessionId": s}))["id"] for s in sources[::2]]
    request_ids = [
        (await ask(store, sources[i % 10], target, f"job {i}"))["requestId"]
        for i, target in enumerate(targets)
    ]

    async def worker(number: int) -> None:
        own = Store.from_settings(settings)
        try:
            while (run := await claim(own, f"w{number}", kinds=["cross_conversation"])) is not None:
                twice = [Store.from_settings(settings) for _ in range(2)]
                try:
                    results = await asyncio.gather(
                        *(
                            complete(
                                s, run["id"], f"done {run['sessionId']}", workerId=f"w{number}"
                            )
                            for s in twice
                        )
                    )
                finally:
                    for s in twice:
                        await s.dispose()
                # The second call changes nothing: same run and message, same requests.
                first, second = results
                assert (first["run"], first["message"]) == (second["run"], second["message"])
                assert [r["requestId"] for r in first["replies"]] == [
                    r["requestId"] for r in second["replies"]
                ]
        finally:
            await own.dispose()

    async def finish_busy_sources() -> None:
        own = Store.from_settings(settings)
        try:
            await asyncio.sleep(0.05)
            await asyncio.gather(*(complete(own, run_id, "source turn") for run_id in busy_runs))
        finally:
            await own.dispose()

    await asyncio.gather(*(worker(n) for n in range(6)), finish_busy_sources())

    async with store.read_uow() as uow:
        rows = [await uow.replies.require(rid) for rid in request_ids]
    assert {row.status for row in rows} == {"returned"}
    for source in sources:
        messages = await messages_of(store, source)
        auto_runs = await runs_of(store, source, "reply_auto_run")
        mine = [row for row in rows if row.source_conversation_id == source]
        assert len(mine) == 5
        for row in mine:
            delivered = _reply_messages(messages, row.request_id)
            assert [m.id for m in delivered] == [row.reply_message_id]
            assert delivered[0].content == f"done {row.target_conversation_id}"
            assert [r.reply_request_id for r in auto_runs].count(row.request_id) == 1
        assert len(auto_runs) == 5


async def test_crossed_replies_completing_at_once_are_both_delivered(
    store: Store, settings: Settings
) -> None:
    """A asks B and B asks A; both runs complete concurrently: no deadlock, nothing stuck."""
    for round_ in range(8):
        a, b = f"a-{round_}", f"b-{round_}"
        await make_conversation(store, a)
        await make_conversation(store, b)
        a_asks = (await ask(store, a, b, "from a"))["requestId"]
        b_asks = (await ask(store, b, a, "from b"))["requestId"]
        claimed = [await claim(store, w, kinds=["cross_conversation"]) for w in ("w1", "w2")]
        assert {run["sessionId"] for run in claimed if run} == {a, b}
        workers = [Store.from_settings(settings) for _ in claimed]
        try:
            await asyncio.gather(
                *(
                    complete(
                        s, run["id"], f"answer in {run['sessionId']}", workerId=run["workerId"]
                    )
                    for s, run in zip(workers, claimed, strict=True)
                    if run
                )
            )
        finally:
            for s in workers:
                await s.dispose()
        for request_id, source in ((a_asks, a), (b_asks, b)):
            assert (await reply_row(store, request_id)).status == "returned"
            assert len(_reply_messages(await messages_of(store, source), request_id)) == 1
            [auto_run] = await runs_of(store, source, "reply_auto_run")
            assert auto_run.reply_request_id == request_id
