"""Load with duplicated completions: nothing lost, nothing delivered twice.

Starts ``--servers`` real server processes (default two) on one fresh database, creates
``--conversations`` conversations, then:

- sender loops send ``--requests`` cross-conversation messages over ``/mcp``, from a random
  conversation to another, half ``one_way`` and half ``return_and_continue`` (a send the
  target refuses as ``target_busy`` is retried elsewhere and not counted as sent);
- worker loops claim every run over ``/rpc`` (the targets' runs and the sources' auto-runs)
  and complete each one TWICE at the same time, once through each server.

Then it reads the database and checks every acknowledged send: its message and run are
there, the run completed once, a ``return_and_continue`` request was returned exactly once
(one reply message in the source) and queued exactly one auto-run, nothing exists that was
not sent. Prints the figures and exits 1 when an invariant fails.

    python bench/stress_load.py [--requests 10000] [--conversations 200] [--backend all]
    CCWEB_BENCH_POSTGRES_URL=postgresql+asyncpg://root@127.0.0.1:5432/postgres \\
        python bench/stress_load.py --backend postgres
"""

from __future__ import annotations

import asyncio
import itertools
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sqlalchemy as sa

from bench.harness import (
    Report,
    RpcClient,
    RpcFailure,
    ServerGone,
    command_line,
    finish,
    machine,
    milliseconds,
    on_each_backend,
    open_engine,
    options_from,
    percentile,
    servers,
)
from ccweb_store.store.models import MessageRow, ReplyRequestRow, RunRow

ONE_WAY, RETURN = "one_way", "return_and_continue"


@dataclass
class LoadOptions:
    requests: int = 10_000
    conversations: int = 200
    senders: int = 8
    workers: int = 8
    servers: int = 2
    seconds: float = 1800.0  # the whole run's cap
    seed: int = 1


@dataclass
class Sent:
    """An acknowledged send: what the server said it wrote."""

    source: str
    target: str
    mode: str
    content: str
    message_id: str
    run_id: str
    request_id: str | None


@dataclass
class Traffic:
    """What the client side did and saw."""

    sent: list[Sent] = field(default_factory=list)
    refused_busy: int = 0
    completions: int = 0  # runs completed (each by two concurrent calls)
    mismatched_completions: int = 0
    send_latencies: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    timed_out: bool = False


def conversation_ids(count: int) -> list[str]:
    return [f"conv-{i:04d}" for i in range(count)]


async def generate_traffic(ports: Sequence[int], options: LoadOptions) -> Traffic:
    """Create the conversations, then send and complete until every send is done."""
    traffic = Traffic()
    rng = random.Random(options.seed)
    conversations = conversation_ids(options.conversations)
    setup = RpcClient(ports[0])
    for number, conversation in enumerate(conversations):
        await setup.rpc("session.create", {"id": conversation, "title": f"Conversation {number}"})
    await setup.close()

    began = time.perf_counter()
    deadline = began + options.seconds
    senders_done = asyncio.Event()
    reserved = 0
    attempts = itertools.count(1)  # numbers each send's content, so every content is unique

    async def sender(number: int) -> None:
        nonlocal reserved
        client = RpcClient(ports[number % len(ports)], traffic.latencies)
        try:
            while reserved < options.requests and time.perf_counter() < deadline:
                reserved += 1
                source, target = rng.sample(conversations, 2)
                mode = rng.choice((ONE_WAY, RETURN))
                arguments = {
                    "targetConversationId": target,
                    "content": f"job {next(attempts)} from {source}: run the tests and report back",
                    "replyMode": mode,
                }
                began_send = time.perf_counter()
                result = await client.tool(source, "ccweb_send_message", arguments)
                traffic.send_latencies.append(time.perf_counter() - began_send)
                if result["isError"]:
                    reserved -= 1
                    code = result["structuredContent"]["error"]["code"]
                    if code != "target_busy":
                        traffic.problems.append(f"send refused: {result['structuredContent']}")
                        return
                    traffic.refused_busy += 1
                    await asyncio.sleep(0.01)  # the queue is full: let the workers catch up
                    continue
                payload = result["structuredContent"]
                traffic.sent.append(
                    Sent(
                        source,
                        target,
                        mode,
                        arguments["content"],
                        payload["messageId"],
                        payload["runId"],
                        payload.get("requestId"),
                    )
                )
        finally:
            await client.close()

    async def worker(number: int) -> None:
        claimer = RpcClient(ports[number % len(ports)], traffic.latencies)
        completers = [
            RpcClient(ports[(number + i) % len(ports)], traffic.latencies) for i in range(2)
        ]
        try:
            while time.perf_counter() < deadline:
                run = (await claimer.rpc("run.claim", {"workerId": f"worker-{number}"}))["run"]
                if run is None:
                    if senders_done.is_set() and not await _open_runs(claimer):
                        return
                    await asyncio.sleep(0.005)
                    continue
                params = {
                    "runId": run["id"],
                    "workerId": f"worker-{number}",
                    "status": "completed",
                    "output": f"done {run['id']}",
                }
                first, second = await asyncio.gather(
                    *(client.rpc("run.complete", params) for client in completers)
                )
                traffic.completions += 1
                if not _same_completion(first, second):
                    traffic.mismatched_completions += 1
                    traffic.problems.append(f"two completions of {run['id']} disagree")
        finally:
            for client in (claimer, *completers):
                await client.close()

    async def senders() -> None:
        try:
            await asyncio.gather(*(sender(n) for n in range(options.senders)))
        finally:
            senders_done.set()

    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(senders())
            for number in range(options.workers):
                group.create_task(worker(number))
    except* (RpcFailure, ServerGone) as failures:
        traffic.problems += [f"a call failed: {failure}" for failure in failures.exceptions]
    traffic.seconds = time.perf_counter() - began
    traffic.timed_out = time.perf_counter() >= deadline
    if traffic.timed_out:
        traffic.problems.append(f"the load did not finish within {options.seconds:g} s")
    return traffic


async def _open_runs(client: RpcClient) -> bool:
    found = await client.rpc("run.list", {"status": ["queued", "running"], "limit": 1})
    return bool(found["runs"])


def _same_completion(first: dict[str, Any], second: dict[str, Any]) -> bool:
    """Both calls report the same run, output message and replies (a repeat changes nothing)."""
    return (
        first["run"] == second["run"]
        and first["message"] == second["message"]
        and [r["requestId"] for r in first["replies"]]
        == [r["requestId"] for r in second["replies"]]
    )


@dataclass
class Stored:
    """The rows the database holds after the load."""

    messages: dict[str, dict[str, Any]]
    runs: dict[str, dict[str, Any]]
    replies: dict[str, dict[str, Any]]


async def read_stored(url: str) -> Stored:
    async with open_engine(url) as engine, engine.connect() as connection:
        messages = await connection.execute(
            sa.select(
                MessageRow.id,
                MessageRow.session_id,
                MessageRow.role,
                MessageRow.content,
                MessageRow.metadata_,
            )
        )
        runs = await connection.execute(sa.select(*RunRow.__table__.c))
        replies = await connection.execute(sa.select(*ReplyRequestRow.__table__.c))
        return Stored(
            messages={row.id: dict(row._mapping) for row in messages},
            runs={row.id: dict(row._mapping) for row in runs},
            replies={row.request_id: dict(row._mapping) for row in replies},
        )


@dataclass
class Audit:
    """Every acknowledged send checked against the database."""

    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    returned_once: int = 0
    failed_noticed_once: int = 0
    auto_runs_once: int = 0
    unacknowledged_found: int = 0


def audit(sent: Sequence[Sent], stored: Stored, *, unacknowledged: Sequence[str] = ()) -> Audit:
    """Check each acknowledged send's rows; count what is missing, doubled or left open.

    ``unacknowledged`` lists the contents of sends whose answer never arrived (a crash): they
    may or may not have been written, and either is correct, but each at most once.
    """
    result = Audit()
    delivered: dict[str, list[str]] = {}
    outputs: Counter[str] = Counter()
    sends_by_content: Counter[str] = Counter()
    for message in stored.messages.values():
        metadata = message["metadata"] or {}
        if "replyToRequestId" in metadata:
            delivered.setdefault(metadata["replyToRequestId"], []).append(message["id"])
        if "runId" in metadata and message["role"] == "assistant":
            outputs[metadata["runId"]] += 1
        if "crossConversation" in metadata:
            sends_by_content[message["content"]] += 1
    auto_runs: Counter[str] = Counter(
        run["reply_request_id"] for run in stored.runs.values() if run["kind"] == "reply_auto_run"
    )

    for send in sent:
        label = f"{send.mode} {send.source}->{send.target} ({send.run_id})"
        sent_message = stored.messages.get(send.message_id)
        if sent_message is None or sent_message["session_id"] != send.target:
            result.lost.append(f"{label}: its message {send.message_id} is missing")
        run = stored.runs.get(send.run_id)
        if run is None:
            result.lost.append(f"{label}: its run is missing")
        elif run["status"] not in ("completed", "failed"):
            result.stuck.append(f"{label}: its run is still {run['status']}")
        if send.request_id is None:
            continue
        reply = stored.replies.get(send.request_id)
        if reply is None:
            result.lost.append(f"{label}: its reply request {send.request_id} is missing")
            continue
        messages = delivered.get(send.request_id, [])
        runs = auto_runs[send.request_id]
        if reply["status"] not in ("returned", "failed"):
            result.stuck.append(f"{label}: its reply is still {reply['status']}")
            continue
        if len(messages) == 0 and not (reply["status"] == "failed" and reply["returned_at"]):
            result.lost.append(f"{label}: its {reply['status']} reply never reached the source")
        if len(messages) == 1 and messages[0] == reply["reply_message_id"]:
            if reply["status"] == "returned":
                result.returned_once += 1
            else:
                result.failed_noticed_once += 1
        if runs == 1:
            result.auto_runs_once += 1

    # Nothing that was not sent: one message and one run per send, one output per run.
    for run in stored.runs.values():
        if run["status"] not in ("completed", "failed", "cancelled"):
            result.stuck.append(f"run {run['id']} ({run['kind']}) is still {run['status']}")
        if outputs[run["id"]] > 1:
            result.duplicated.append(f"run {run['id']}: {outputs[run['id']]} output messages")
        if run["status"] == "completed" and outputs[run["id"]] == 0:
            result.lost.append(f"run {run['id']}: completed without its output message")
    for reply in stored.replies.values():
        request_id = reply["request_id"]
        if reply["status"] in ("waiting", "ready"):
            result.stuck.append(f"reply {request_id} is still {reply['status']}")
        copies, runs = len(delivered.get(request_id, [])), auto_runs[request_id]
        if copies > 1 or runs > 1:
            result.duplicated.append(
                f"reply {request_id}: {copies} messages in its source and {runs} auto-runs"
            )
    acknowledged = {send.content for send in sent}
    maybe_sent = set(unacknowledged)
    for content, count in sends_by_content.items():
        if count > 1:
            result.duplicated.append(f"{count} messages for one send: {content[:60]!r}")
        if content in maybe_sent:
            result.unacknowledged_found += 1
        elif content not in acknowledged:
            result.duplicated.append(f"a message nobody sent: {content[:60]!r}")
    # A send writes its message and its run in one transaction: as many runs as messages.
    cross_runs = sum(run["kind"] == "cross_conversation" for run in stored.runs.values())
    cross_messages = sum(sends_by_content.values())
    if cross_runs != cross_messages:
        result.duplicated.append(
            f"{cross_runs} cross-conversation runs for {cross_messages} sent messages"
        )
    return result


def load_report(title: str, options: LoadOptions, traffic: Traffic, checked: Audit) -> Report:
    """The figures of a load run and the invariants they must meet."""
    sent = traffic.sent
    returning = [send for send in sent if send.mode == RETURN]
    report = Report(title)
    report.add("requests sent (acknowledged)", len(sent), must=options.requests)
    report.add(
        "  one_way / return_and_continue", f"{len(sent) - len(returning):,} / {len(returning):,}"
    )
    report.add("sends refused as target_busy (retried)", traffic.refused_busy)
    report.add("runs completed, each by 2 concurrent calls", traffic.completions)
    report.add("concurrent completions that disagreed", traffic.mismatched_completions, must=0)
    report.add("replies returned exactly once", checked.returned_once, must=len(returning))
    report.add("duplicates", len(checked.duplicated), must=0)
    report.add("lost", len(checked.lost), must=0)
    report.add("auto-runs queued exactly once", checked.auto_runs_once, must=len(returning))
    report.add("left open (run or reply not finished)", len(checked.stuck), must=0)
    report.add(
        "send latency p50 / p99",
        f"{milliseconds(percentile(traffic.send_latencies, 0.5))}"
        f" / {milliseconds(percentile(traffic.send_latencies, 0.99))}",
    )
    report.add(
        "all requests latency p50 / p99",
        f"{milliseconds(percentile(traffic.latencies, 0.5))}"
        f" / {milliseconds(percentile(traffic.latencies, 0.99))}",
    )
    seconds = max(traffic.seconds, 1e-9)
    report.add(
        "throughput",
        f"{len(sent) / seconds:,.0f} sends/s, {len(traffic.latencies) / seconds:,.0f} HTTP "
        f"requests/s ({len(traffic.latencies):,} requests in {traffic.seconds:.1f} s)",
    )
    report.problems += traffic.problems + checked.lost + checked.duplicated + checked.stuck
    return report


async def run_load(url: str, ports: Sequence[int], options: LoadOptions, title: str) -> Report:
    """Drive servers already running on ``ports`` over ``url``'s database; audit; report."""
    traffic = await generate_traffic(ports, options)
    checked = audit(traffic.sent, await read_stored(url))
    return load_report(title, options, traffic, checked)


def check_backend(name: str, url: str, options: LoadOptions) -> Report:
    """Start the servers on ``url``, run the load, stop them."""
    with servers(url, options.servers) as started:
        title = f"{name}: {options.servers} server processes, one database"
        report = asyncio.run(run_load(url, [s.port for s in started], options, title))
    if not report.ok:
        for server in started:
            tail = server.log_text()[-2000:]
            if tail:
                report.problems.append(f"server {server.port} log tail:\n{tail}")
    return report


def main(argv: list[str] | None = None) -> int:
    helps = {
        "requests": "sends to make",
        "senders": "sender loops",
        "workers": "worker loops",
        "servers": "server processes on the one database",
        "seconds": "cap on each backend's run",
    }
    parser = command_line(__doc__, LoadOptions(), helps)
    args = parser.parse_args(argv)
    options = options_from(args, LoadOptions)
    if options.conversations < 2 or options.requests < 1 or options.servers < 1:
        parser.error("need at least 2 conversations, 1 request and 1 server")
    reports = on_each_backend(
        args, "load", lambda backend, url: check_backend(backend, url, options)
    )
    header = (
        f"load: {options.requests:,} sends over {options.conversations} conversations, "
        f"{options.senders} senders, {options.workers} workers; {machine()}"
    )
    return finish(reports, header)


if __name__ == "__main__":
    sys.exit(main())
