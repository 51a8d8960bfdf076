"""The event outbox: what each change writes, ``events.list``, ``GET /events`` over real
server processes (resume across a restart, two processes on one database, credential scope),
long-poll claims, retention."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
import uvicorn

from ccweb_store.config import Settings
from ccweb_store.domain import events as types
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.http import event_stream as events_endpoint
from ccweb_store.http.app import create_app
from ccweb_store.services import event_reads as event_service
from ccweb_store.services.event_reads import EventsExpired
from ccweb_store.store.event_feed import Subscription
from ccweb_store.store.uow import Store
from tests import host_calls, tool_calls
from tests.http_client import rpc_result
from tests.servers import serving

call = rpc_result


async def send(client: httpx.AsyncClient, source: str, target: str, text: str) -> dict[str, Any]:
    result: dict[str, Any] = await call(
        client,
        "tools.call",
        {
            "tool": "ccweb_send_message",
            "sourceSessionId": source,
            "args": {
                "targetConversationId": target,
                "content": text,
                "replyMode": "return_and_continue",
            },
        },
    )
    return result


class Stream:
    """An SSE client reading ``GET /events`` into (id, type, data) triples."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.lines = response.aiter_lines()

    async def next(self) -> tuple[int | None, str, dict[str, Any]]:
        event_id: int | None = None
        kind = "message"
        data: list[str] = []
        async for line in self.lines:
            if line == "":
                if data:
                    return event_id, kind, json.loads("\n".join(data))
                continue
            if line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "id":
                event_id = int(value)
            elif field == "event":
                kind = value
            elif field == "data":
                data.append(value)
        raise AssertionError("the stream ended")

    async def take(self, count: int) -> list[tuple[int | None, str, dict[str, Any]]]:
        return [await asyncio.wait_for(self.next(), 20) for _ in range(count)]


@asynccontextmanager
async def stream(
    url: str, path: str = "/events", headers: dict[str, str] | None = None
) -> AsyncIterator[Stream]:
    async with (
        httpx.AsyncClient(base_url=url, timeout=30) as client,
        client.stream("GET", path, headers=headers or {}) as response,
    ):
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        yield Stream(response)


async def _two_conversations(client: httpx.AsyncClient) -> None:
    await call(client, "session.create", {"id": "conv-a", "title": "Planner"})
    await call(client, "session.create", {"id": "conv-b", "title": "Tester"})


# --- what each change writes -------------------------------------------------------------


async def test_a_send_and_its_run_write_their_events_in_order(pair: Store) -> None:
    from ccweb_store.domain.context import Source

    before = (await host_calls.list_events(pair, {}))["latestId"]
    sent = await tool_calls.send_message(
        pair,
        Source("conv-a"),
        {"targetConversationId": "conv-b", "content": "hi"},
        reply_mode="return_and_continue",
    )
    claimed = await host_calls.claim_run(pair, {"workerId": "w1"})
    assert claimed["run"]["id"] == sent["runId"]
    await host_calls.complete_run(
        pair, {"runId": sent["runId"], "workerId": "w1", "status": "completed", "output": "ok"}
    )
    listed = await host_calls.list_events(pair, {"after": before, "limit": 100})
    seen = [(e["type"], e.get("conversationId")) for e in listed["events"]]
    assert seen[:4] == [
        (types.MESSAGE_APPENDED, "conv-b"),
        (types.REPLY_WAITING, "conv-a"),
        (types.RUN_QUEUED, "conv-b"),
        (types.RUN_STARTED, "conv-b"),
    ]
    rest = [kind for kind, _ in seen[4:]]
    assert types.RUN_FINISHED in rest
    assert types.REPLY_RETURNED in rest
    ids = [e["id"] for e in listed["events"]]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    waiting = listed["events"][1]
    assert waiting["requestId"] == sent["requestId"]
    assert waiting["peerConversationId"] == "conv-b"
    assert listed["latestId"] == ids[-1] == listed["nextAfter"]


async def test_a_change_that_rolls_back_writes_no_event(pair: Store) -> None:
    before = (await host_calls.list_events(pair, {}))["latestId"]
    async with pair.uow() as uow:
        await uow.messages.append("conv-a", "user", "never kept")
        # left without commit: rolled back
    async with pair.uow() as uow:
        await uow.messages.append("conv-a", "user", "kept")
        await uow.commit()
    listed = await host_calls.list_events(pair, {"after": before})
    assert [e["type"] for e in listed["events"]] == [types.MESSAGE_APPENDED]


async def test_events_list_filters_by_type_and_conversation(pair: Store) -> None:
    async with pair.uow() as uow:
        await uow.messages.append("conv-a", "user", "a")
        await uow.messages.append("conv-b", "user", "b")
        await uow.runs.enqueue("conv-b", "user_turn")
        await uow.commit()
    only_b = await host_calls.list_events(pair, {"conversation": "conv-b"})
    assert {e["conversationId"] for e in only_b["events"]} == {"conv-b"}
    queued = await host_calls.list_events(pair, {"types": ["run.queued"]})
    assert [e["type"] for e in queued["events"]] == ["run.queued"]
    with pytest.raises(Exception, match="unknown event type"):
        await host_calls.list_events(pair, {"types": ["run.exploded"]})


async def test_a_resume_point_older_than_the_retention_is_refused_with_resync(
    pair: Store,
) -> None:
    for text in ("one", "two", "three"):
        async with pair.uow() as uow:
            await uow.messages.append("conv-a", "user", text)
            await uow.commit()
    listed = (await host_calls.list_events(pair, {}))["events"]
    first = listed[0]["id"]
    # Every event is older than a retention that ends in the future: all are pruned.
    pruned = await event_service.prune_events(pair, retention_days=-1)
    assert pruned == len(listed)
    async with pair.uow() as uow:
        await uow.messages.append("conv-a", "user", "four")
        await uow.commit()
    with pytest.raises(EventsExpired) as refused:
        await host_calls.list_events(pair, {"after": first})
    assert "reply.list" in refused.value.message
    newest = (await host_calls.list_events(pair, {}))["events"]
    assert [e["type"] for e in newest] == [types.MESSAGE_APPENDED]


async def test_pruning_keeps_what_is_younger_than_the_retention(pair: Store) -> None:
    async with pair.uow() as uow:
        await uow.messages.append("conv-a", "user", "fresh")
        await uow.commit()
    before = len((await host_calls.list_events(pair, {}))["events"])
    assert await event_service.prune_events(pair, retention_days=1) == 0
    assert len((await host_calls.list_events(pair, {}))["events"]) == before


# --- claims: the claim and its event in one statement where each statement commits alone --


def no_lease_expires_soon(store: Store) -> None:
    """No lease can pass within the hour: a claim asks no lease probe first, so a claim
    without extras runs alone (on PostgreSQL, one statement without a transaction)."""
    store.no_lease_expires_before = utcnow() + timedelta(hours=1)


async def test_a_claim_writes_its_started_event_once_and_tells_the_feed(
    pair: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ccweb_store.store.postgres.transaction import PostgresTransaction
    from tests.lifecycle_support import ask

    sent = await ask(pair, "conv-a", "conv-b", "hi")
    before = (await host_calls.list_events(pair, {}))["latestId"]
    told: list[list[types.Event]] = []
    monkeypatch.setattr(pair.feed, "poke", lambda written=None: told.append(list(written or [])))
    begun: list[object] = []
    begin = PostgresTransaction._begin

    async def counted_begin(self: PostgresTransaction) -> None:
        begun.append(self)
        await begin(self)

    monkeypatch.setattr(PostgresTransaction, "_begin", counted_begin)
    no_lease_expires_soon(pair)
    claimed = (await host_calls.claim_run(pair, {"workerId": "w1"}))["run"]
    assert claimed["id"] == sent["runId"]
    if pair.dialect == "postgresql":
        assert begun == []  # one statement, its own transaction: no BEGIN, no COMMIT
    listed = (await host_calls.list_events(pair, {"after": before}))["events"]
    assert [
        (e["type"], e.get("conversationId"), e.get("runId"), e.get("requestId")) for e in listed
    ] == [(types.RUN_STARTED, "conv-b", sent["runId"], sent["requestId"])]
    assert listed[0]["payload"] == {"kind": "cross_conversation", "workerId": "w1"}
    assert "peerConversationId" not in listed[0] and "messageId" not in listed[0]
    (started,) = (event for written in told for event in written)
    assert isinstance(started, types.RunStarted)
    assert (started.run_id, started.worker_id) == (sent["runId"], "w1")
    assert len(told) == 1 and started.payload() == listed[0]["payload"]


async def test_a_claim_with_extras_still_commits_its_run_event_and_credential_together(
    pair: Store,
) -> None:
    from tests.lifecycle_support import ask

    sent = await ask(pair, "conv-a", "conv-b", "hi")
    before = (await host_calls.list_events(pair, {}))["latestId"]
    no_lease_expires_soon(pair)
    claimed = await host_calls.claim_run(
        pair, {"workerId": "w1", "withConversation": True, "mintCredential": {}}
    )
    assert claimed["run"]["id"] == sent["runId"]
    assert claimed["conversation"]["id"] == "conv-b" and claimed["credential"]["token"]
    listed = (await host_calls.list_events(pair, {"after": before}))["events"]
    assert [(e["type"], e["payload"]) for e in listed] == [
        (types.RUN_STARTED, {"kind": "cross_conversation", "workerId": "w1"})
    ]


@asynccontextmanager
async def notices(store: Store) -> AsyncIterator[list[str]]:
    """The event notices (``pg_notify``) another connection hears while the block runs, as
    they come; none on SQLite, which has no notices."""
    from ccweb_store.store.postgres.listen import CHANNEL

    noticed: list[str] = []
    async with store.engine.connect() as listener:
        if store.dialect == "postgresql":
            driver = (await listener.get_raw_connection()).driver_connection
            await driver.add_listener(CHANNEL, lambda *args: noticed.append(args[-1]))
        yield noticed


async def test_a_claim_with_nothing_to_claim_writes_no_event_and_wakes_no_process(
    pair: Store,
) -> None:
    before = (await host_calls.list_events(pair, {}))["latestId"]
    async with notices(pair) as noticed:
        no_lease_expires_soon(pair)
        assert (await host_calls.claim_run(pair, {"workerId": "w1"}))["run"] is None
        await asyncio.sleep(0.3)
        if pair.dialect == "postgresql":
            async with pair.uow() as uow:  # a commit with an event is heard: the LISTEN works
                await uow.messages.append("conv-a", "user", "heard")
                await uow.commit()
            for _ in range(50):
                if noticed:
                    break
                await asyncio.sleep(0.05)
            assert len(noticed) == 1
    after = (await host_calls.list_events(pair, {"after": before}))["events"]
    assert [e["type"] for e in after] == ([types.MESSAGE_APPENDED] if noticed else [])


async def test_a_commit_of_several_events_publishes_them_in_order_with_one_notice(
    pair: Store,
) -> None:
    """A send writes three events in one commit: they are listed in the order written, the
    inbox is left empty, and another process hears one notice (PostgreSQL), not three."""
    from tests.lifecycle_support import ask, make_conversation

    await make_conversation(pair, "conv-t")
    before = (await host_calls.list_events(pair, {}))["latestId"]
    async with notices(pair) as noticed:
        await ask(pair, "conv-a", "conv-t", "go")
        await asyncio.sleep(0.3)
    listed = (await host_calls.list_events(pair, {"after": before}))["events"]
    assert [e["type"] for e in listed] == [
        types.MESSAGE_APPENDED,
        types.REPLY_WAITING,
        types.RUN_QUEUED,
    ]
    assert [e["id"] for e in listed] == sorted(e["id"] for e in listed)
    assert len(noticed) == (1 if pair.dialect == "postgresql" else 0)
    async with pair.read_uow() as uow:
        assert not await uow.events.inbox_holds_any()


async def strand(store: Store, numbers: range) -> None:
    """Commit events to the inbox as a process that died before it moved them leaves them."""
    from ccweb_store.store.repositories.events import INBOX

    async with store.uow() as uow:
        await uow._execute(sa.insert(INBOX), [_stranded(n) for n in numbers])
        await uow.commit()


def _stranded(number: int) -> dict[str, Any]:
    return {
        "type": types.MESSAGE_APPENDED,
        "conversation_id": "conv-a",
        "peer_conversation_id": None,
        "message_id": f"stranded-{number}",
        "run_id": None,
        "request_id": None,
        "created_at": utcnow(),
        "payload": {"stranded": number},
    }


async def test_events_left_in_the_inbox_are_published_by_the_next_move_and_at_start(
    pair: Store, database_url: str
) -> None:
    """Events a PostgreSQL process committed to the inbox but died before it moved (or that a
    copy from PostgreSQL brought, on either engine) are published in the order written: on
    PostgreSQL by the next commit with events of any process, before that commit's own; and,
    with no write at all, by a server as it starts."""
    before = (await host_calls.list_events(pair, {}))["latestId"]
    if pair.dialect == "postgresql":
        await strand(pair, range(3))
        assert (await host_calls.list_events(pair, {"after": before}))["events"] == []
        async with pair.uow() as uow:
            await uow.messages.append("conv-a", "user", "later")
            await uow.commit()
        listed = (await host_calls.list_events(pair, {"after": before}))["events"]
        assert [e["payload"].get("stranded") for e in listed] == [0, 1, 2, None]
        assert [e["id"] for e in listed] == sorted(e["id"] for e in listed)
        before = listed[-1]["id"]

    await strand(pair, range(3, 5))
    with serving(database_url) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            for _ in range(100):
                found = await call(client, "events.list", {"after": before})
                if found["events"]:
                    break
                await asyncio.sleep(0.05)
    assert [e["payload"] for e in found["events"]] == [{"stranded": 3}, {"stranded": 4}]
    assert await pair.move_stranded_events() == 0
    async with pair.read_uow() as uow:
        assert not await uow.events.inbox_holds_any()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_a_write_while_a_move_is_committing_is_seen_only_after_that_move(
    pair: Store,
) -> None:
    """PostgreSQL: while one move has drawn its ids and not yet committed, a claim (whose one
    statement writes its event itself) and a later commit's move both wait for it, so a reader
    never sees their events before the earlier ones, which would then appear with smaller
    ids."""
    from ccweb_store.store.repositories.events import _MOVE

    async with pair.uow() as uow:
        await uow.runs.enqueue("conv-b", "user_turn")
        await uow.commit()
    no_lease_expires_soon(pair)
    before = (await host_calls.list_events(pair, {}))["latestId"]
    await strand(pair, range(2))
    async with pair.engine.connect() as mover:  # a move that has drawn its ids, uncommitted
        assert (await mover.execute(_MOVE, {"origin": "test"})).scalar() == 2

        async def append() -> None:
            async with pair.uow() as uow:
                await uow.messages.append("conv-a", "user", "later")
                await uow.commit()

        writers = [
            asyncio.create_task(host_calls.claim_run(pair, {"workerId": "w1"})),
            asyncio.create_task(append()),
        ]
        await asyncio.sleep(0.5)
        seen = (await host_calls.list_events(pair, {"after": before}))["events"]
        assert seen == [] and not any(writer.done() for writer in writers)
        await mover.commit()
    await asyncio.gather(*writers)
    listed = (await host_calls.list_events(pair, {"after": before}))["events"]
    assert [e["payload"].get("stranded") for e in listed[:2]] == [0, 1]
    assert sorted(e["type"] for e in listed[2:]) == [types.MESSAGE_APPENDED, types.RUN_STARTED]
    assert [e["id"] for e in listed] == sorted(e["id"] for e in listed)


async def test_claimers_at_once_take_each_run_once_one_per_conversation(pair: Store) -> None:
    """Ten claimers at once over six conversations of two queued runs each: each claimed run
    went to one claimer, one run per conversation runs, and each claim wrote one event."""
    from tests.lifecycle_support import make_conversation

    conversations = [f"t-{index}" for index in range(6)]
    for conversation in conversations:
        await make_conversation(pair, conversation)
    async with pair.uow() as uow:
        for conversation in conversations * 2:
            await uow.runs.enqueue(conversation, "user_turn")
        await uow.commit()
    before = (await host_calls.list_events(pair, {}))["latestId"]
    no_lease_expires_soon(pair)
    results = await asyncio.gather(
        *(host_calls.claim_run(pair, {"workerId": f"w-{n}"}) for n in range(10))
    )
    claimed = [result["run"] for result in results if result["run"] is not None]
    while (late := (await host_calls.claim_run(pair, {"workerId": "w-late"}))["run"]) is not None:
        claimed.append(late)  # a claimer that lost every race left its run to the queue
    assert sorted(run["sessionId"] for run in claimed) == conversations
    assert len({run["id"] for run in claimed}) == len(conversations)
    started = (await host_calls.list_events(pair, {"after": before, "limit": 100}))["events"]
    assert sorted((e["runId"], e["payload"]["workerId"]) for e in started) == sorted(
        (run["id"], run["workerId"]) for run in claimed
    )
    assert {e["type"] for e in started} == {types.RUN_STARTED}


async def test_event_ids_become_visible_in_commit_order_while_claims_and_sends_run(
    pair: Store,
) -> None:
    """A reader that has seen event N never later finds a smaller id appear, while claims
    (on PostgreSQL one statement each) and sends (a transaction each) commit at once."""
    from tests.lifecycle_support import ask, make_conversation

    loops, rounds = 8, 3
    targets = [f"t-{index}" for index in range(loops * rounds)]
    for target in targets:
        await make_conversation(pair, target)
    no_lease_expires_soon(pair)
    late: list[int] = []
    polls = 0
    done = asyncio.Event()

    async def read() -> None:
        nonlocal polls
        known: set[int] = set()
        while not done.is_set() or polls == 0:
            async with pair.read_uow() as uow:
                ids = {row["id"] for row in await uow.events.after(0, 1000)}
            highest = max(known, default=0)
            late.extend(sorted(i for i in ids - known if i < highest))
            known |= ids
            polls += 1
            await asyncio.sleep(0)

    async def work(loop: int) -> None:
        for target in targets[loop::loops]:
            await ask(pair, "conv-a", target, "go")
            await host_calls.claim_run(
                pair, {"workerId": f"w-{loop}", "kinds": ["cross_conversation"]}
            )

    reader = asyncio.create_task(read())
    await asyncio.gather(*(work(loop) for loop in range(loops)))
    done.set()
    await reader
    assert late == []
    listed = (await host_calls.list_events(pair, {"limit": 1000}))["events"]
    started = [e for e in listed if e["type"] == types.RUN_STARTED]
    assert len({e["runId"] for e in started}) == len(started) == len(targets)
    assert polls > 1


async def test_event_ids_stay_in_commit_order_with_many_writers_across_two_server_processes(
    database_url: str,
) -> None:
    """The same guarantee with the writers in two server processes on one database: sends,
    claims and completions from eight client loops, half on each process, while a reader
    reads every event again and again; none ever finds a smaller id appear after a larger."""
    loops, rounds = 8, 3
    with serving(database_url) as first, serving(database_url) as second:
        async with (
            httpx.AsyncClient(base_url=first.url, timeout=60) as one,
            httpx.AsyncClient(base_url=second.url, timeout=60) as other,
        ):
            clients = [one, other]
            for loop in range(loops):
                await call(one, "session.create", {"id": f"src-{loop}"})
                for turn in range(rounds):
                    await call(other, "session.create", {"id": f"tgt-{loop}-{turn}"})
            late: list[int] = []
            polls = 0
            done = asyncio.Event()

            async def read() -> None:
                nonlocal polls
                known: set[int] = set()
                while not done.is_set() or polls == 0:
                    listed = await call(one, "events.list", {"after": 0, "limit": 500})
                    ids = {event["id"] for event in listed["events"]}
                    highest = max(known, default=0)
                    late.extend(sorted(i for i in ids - known if i < highest))
                    known |= ids
                    polls += 1

            async def work(loop: int) -> None:
                client = clients[loop % 2]
                for turn in range(rounds):
                    await send(client, f"src-{loop}", f"tgt-{loop}-{turn}", "go")
                    claimed = await call(
                        client,
                        "run.claim",
                        {"workerId": f"w-{loop}", "kinds": ["cross_conversation"]},
                    )
                    if claimed["run"] is not None:
                        run = claimed["run"]
                        await call(
                            client,
                            "run.complete",
                            {
                                "runId": run["id"],
                                "workerId": f"w-{loop}",
                                "status": "completed",
                                "output": "done",
                            },
                        )

            async def drain() -> None:
                """Runs a loop's claim did not find (another loop's claim took its own)."""
                while (
                    claimed := await call(
                        other, "run.claim", {"workerId": "w", "kinds": ["cross_conversation"]}
                    )
                )["run"] is not None:
                    params = {"runId": claimed["run"]["id"], "workerId": "w"}
                    await call(other, "run.complete", params | {"status": "completed"})

            reader = asyncio.create_task(read())
            await asyncio.gather(*(work(loop) for loop in range(loops)))
            await drain()
            done.set()
            await reader
            listed = (await call(other, "events.list", {"after": 0, "limit": 500}))["events"]
    assert late == []
    assert polls > 1
    kinds = [event["type"] for event in listed]
    assert kinds.count(types.REPLY_WAITING) == loops * rounds
    assert kinds.count(types.RUN_STARTED) == kinds.count(types.RUN_FINISHED) == loops * rounds
    assert [event["id"] for event in listed] == sorted(event["id"] for event in listed)


def test_a_subscriber_that_falls_behind_is_marked_and_holds_no_more() -> None:
    subscription = Subscription(lambda event: True, limit=3)
    for number in range(1, 11):
        subscription.push({"id": number, "type": "message.appended"})
    assert subscription.overflowed
    assert [event["id"] for event in subscription.queue] == [1, 2, 3]


# --- GET /events over real servers -------------------------------------------------------


async def test_events_stream_live_and_resume_after_a_restart_with_no_gap_or_repeat(
    database_url: str,
) -> None:
    with serving(database_url) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            await _two_conversations(client)
            async with stream(server.url, "/events?after=0") as events:
                created = await events.take(2)
                assert [kind for _, kind, _ in created] == [types.SESSION_CREATED] * 2
                await send(client, "conv-a", "conv-b", "first")
                live = await events.take(3)
                assert [kind for _, kind, _ in live] == [
                    types.MESSAGE_APPENDED,
                    types.REPLY_WAITING,
                    types.RUN_QUEUED,
                ]
                last_seen = live[-1][0]
                assert last_seen is not None
            # Written while no one listens, then the server restarts.
            await call(
                client, "message.append", {"sessionId": "conv-a", "role": "user", "content": "x"}
            )
    with serving(database_url) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            await call(
                client, "message.append", {"sessionId": "conv-b", "role": "user", "content": "y"}
            )
            everything = (await call(client, "events.list", {"after": last_seen}))["events"]
            async with stream(server.url, headers={"Last-Event-ID": str(last_seen)}) as events:
                resumed = await events.take(len(everything))
    assert [event_id for event_id, _, _ in resumed] == [e["id"] for e in everything]
    assert [data["conversationId"] for _, _, data in resumed] == ["conv-a", "conv-b"]
    assert all(event_id is not None and event_id > last_seen for event_id, _, _ in resumed)


async def test_an_event_committed_by_one_process_reaches_a_subscriber_of_another(
    database_url: str,
) -> None:
    with serving(database_url) as first, serving(database_url) as second:
        async with (
            httpx.AsyncClient(base_url=second.url, timeout=30) as writer,
            stream(first.url) as events,
        ):
            await _two_conversations(writer)
            await send(writer, "conv-a", "conv-b", "across processes")
            seen = await events.take(5)
    assert [kind for _, kind, _ in seen] == [
        types.SESSION_CREATED,
        types.SESSION_CREATED,
        types.MESSAGE_APPENDED,
        types.REPLY_WAITING,
        types.RUN_QUEUED,
    ]


async def test_a_credential_sees_only_its_conversation_and_its_replies(
    database_url: str,
) -> None:
    with serving(database_url) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            await _two_conversations(client)
            await call(client, "session.create", {"id": "conv-c", "title": "Elsewhere"})
            minted = await call(client, "credential.mint", {"sessionId": "conv-b"})
            headers = {"Authorization": f"Bearer {minted['token']}"}
            async with stream(server.url, "/events?after=0", headers=headers) as events:
                await call(
                    client,
                    "message.append",
                    {"sessionId": "conv-c", "role": "user", "content": "hidden"},
                )
                await send(client, "conv-c", "conv-a", "not b's business")
                await send(client, "conv-a", "conv-b", "for b")
                seen = await events.take(4)
            refused = await client.get(
                "/events", params={"conversation": "conv-c"}, headers=headers
            )
    kinds = [kind for _, kind, _ in seen]
    assert kinds == [
        types.SESSION_CREATED,
        types.MESSAGE_APPENDED,
        types.REPLY_WAITING,
        types.RUN_QUEUED,
    ]
    for _, _, data in seen:
        assert "conv-b" in (data.get("conversationId"), data.get("peerConversationId"))
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "conversation_forbidden"


def test_a_stream_whose_client_stopped_reading_is_cut_with_one_warning_line(
    database_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real uvicorn with small socket buffers, and a client that asks for every event and
    reads none: the stream is cut at the send timeout with one warning naming the client, and
    neither the app nor uvicorn logs an error or a traceback."""

    async def write_events() -> None:
        store = Store.from_settings(Settings(database_url=database_url))
        try:
            async with store.uow() as uow:  # one session.created event each
                for number in range(1500):
                    await uow.sessions.create(f"conv-{number}", title="t" * 200)
                await uow.commit()
        finally:
            await store.dispose()

    asyncio.run(write_events())
    monkeypatch.setattr(events_endpoint, "SEND_TIMEOUT_S", 0.5)
    caplog.set_level(logging.INFO)
    app = create_app(Settings(database_url=database_url, events_heartbeat_seconds=0.2))
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # inherited by connections
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    reader = socket.socket()
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.started
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.connect(("127.0.0.1", port))
        request = f"GET /events?after=0 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
        reader.sendall(request.encode())
        host, client_port = reader.getsockname()

        def cut() -> list[logging.LogRecord]:
            return [r for r in caplog.records if "events stream to" in r.getMessage()]

        while not cut() and time.monotonic() < deadline:
            time.sleep(0.05)
        # Reading now lets the server flush what it holds and close: it has logged all.
        reader.settimeout(20)
        while reader.recv(65536):
            pass
    finally:
        reader.close()
        server.should_exit = True
        thread.join(30)
    (warning,) = cut()
    assert warning.levelno == logging.WARNING and warning.exc_info is None
    assert f"events stream to {host}:{client_port} cut: the client read nothing for 0.5s" in (
        warning.getMessage()
    )
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []


async def test_events_refusals_are_json(database_url: str) -> None:
    with serving(database_url) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            bad_after = await client.get("/events", params={"after": "yesterday"})
            bad_type = await client.get("/events", params={"types": "run.exploded"})
            bad_credential = await client.get("/events", params={"credential": "ccw1.nope"})
    assert bad_after.status_code == 400
    assert "after must be an event id" in bad_after.json()["error"]["message"]
    assert bad_type.status_code == 400
    assert "unknown event type" in bad_type.json()["error"]["message"]
    assert bad_credential.status_code == 401
    assert bad_credential.json()["error"]["code"]


# --- long-poll claims ---------------------------------------------------------------------


async def test_a_long_poll_claim_wakes_on_a_send_and_takes_the_run(database_url: str) -> None:
    with serving(database_url) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            await _two_conversations(client)
            waiting = asyncio.create_task(
                call(client, "run.claim", {"workerId": "w-long", "waitSeconds": 30})
            )
            await asyncio.sleep(0.2)
            assert not waiting.done()
            sent = await send(client, "conv-a", "conv-b", "wake up")
            claimed = await asyncio.wait_for(waiting, 20)
    assert claimed["run"]["id"] == sent["runId"]
    assert claimed["run"]["workerId"] == "w-long"


async def test_a_long_poll_answers_null_at_its_deadline(database_url: str) -> None:
    with serving(database_url) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            claimed = await call(client, "run.claim", {"workerId": "w", "waitSeconds": 0.3})
    assert claimed == {"run": None}


async def test_a_long_poll_whose_client_left_claims_nothing(database_url: str) -> None:
    with serving(database_url) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            await _two_conversations(client)
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as leaving:
                gone = asyncio.create_task(
                    call(leaving, "run.claim", {"workerId": "w-gone", "waitSeconds": 30})
                )
                await asyncio.sleep(0.3)
                gone.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await gone
            await asyncio.sleep(0.3)
            sent = await send(client, "conv-a", "conv-b", "nobody waits")
            await asyncio.sleep(0.5)
            runs = await call(client, "run.list", {"sessionId": "conv-b"})
            assert [run["status"] for run in runs["runs"]] == ["queued"]
            claimed = await call(client, "run.claim", {"workerId": "w-here"})
    assert claimed["run"]["id"] == sent["runId"]


async def test_many_waiting_claims_get_each_run_once(database_url: str) -> None:
    with serving(database_url) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            for index in range(4):
                await call(client, "session.create", {"id": f"t-{index}"})
            waiters = [
                asyncio.create_task(
                    call(client, "run.claim", {"workerId": f"w-{n}", "waitSeconds": 5})
                )
                for n in range(8)
            ]
            await asyncio.sleep(0.3)
            for index in range(4):
                await call(client, "run.enqueue", {"sessionId": f"t-{index}", "kind": "user_turn"})
            results = await asyncio.gather(*waiters)
    claimed = [r["run"]["id"] for r in results if r["run"] is not None]
    assert len(claimed) == 4
    assert len(set(claimed)) == 4


def test_the_retention_setting_is_a_positive_number_of_days() -> None:
    from ccweb_store.config import Settings

    assert Settings().event_retention_days == 7
    with pytest.raises(ValueError):
        Settings(event_retention_days=0)
    assert Settings(event_retention_days=0.5).event_retention_days == 0.5


async def test_events_nobody_takes_wake_nobody_and_reach_no_later_subscriber(
    pair: Store,
) -> None:
    """A commit whose events no subscriber takes does not wake the reader; a subscriber that
    joins afterwards starts after them, and a later event still reaches everyone."""
    from ccweb_store.services.event_reads import EventFilter, follow

    async def append(conversation: str, text: str) -> None:
        async with pair.uow() as uow:
            await uow.messages.append(conversation, "user", text)
            await uow.commit()

    only_a = follow(pair, None, EventFilter(conversation="conv-a"), heartbeat_s=5)
    first = asyncio.ensure_future(only_a.__anext__())
    await asyncio.sleep(0.1)
    await append("conv-b", "nobody here follows b")
    everything = follow(pair, None, EventFilter(), heartbeat_s=5)
    second = asyncio.ensure_future(everything.__anext__())
    await asyncio.sleep(0.1)
    await append("conv-a", "for both")
    got_first = await asyncio.wait_for(first, 10)
    got_second = await asyncio.wait_for(second, 10)
    assert isinstance(got_first, list) and isinstance(got_second, list)
    assert [e["conversation_id"] for e in got_first] == ["conv-a"]
    assert [e["conversation_id"] for e in got_second] == ["conv-a"]
    await only_a.aclose()
    await everything.aclose()
