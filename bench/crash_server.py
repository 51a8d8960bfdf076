"""kill -9 under load: every acknowledged send survives and reaches its end state.

Starts a real server process on a fresh database with short leases
(``CCWEB_LEASE_SECONDS``, ``CCWEB_LEASE_SWEEP_SECONDS``), then runs senders and workers
against it. ``--kills`` times, in the middle of the load, it SIGKILLs the server and starts
it again on the same database and port:

- a send cut off by the kill has no answer: it may or may not have been written, and the
  check accepts either, but at most once;
- a worker whose claim or completion is cut off either dies with the server (its run keeps a
  lease nobody renews: the sweeper requeues it once the lease passes, and another worker
  claims it; the third expiry fails it like a failed run) or survives and completes its run
  again after the restart.

``--cut-connections`` (PostgreSQL only) keeps the server up and instead ends every connection
it has to the database (``pg_terminate_backend`` from another connection, as a restart of
PostgreSQL would): a unit of work whose connection died before its first statement runs it
again on a fresh one and its client sees nothing; one cut off later (mid-statement, or at
``COMMIT``) answers ``database_unavailable`` (retry after a moment), which the clients treat
like a request cut off by a kill: a send may or may not have been written, a claim may hold
a lease that expires, a completion is sent again. The report counts those answers, and any
internal error (JSON-RPC -32603), which is treated the same way.

After the last phase the senders stop and the workers run until no run is queued or running
and no reply is waiting or ready (or ``--seconds`` passes). Then every acknowledged send is
checked in the database: present, its run finished, its reply request returned or failed
with the notice delivered exactly once, one auto-run each, nothing doubled, nothing left in
a state with no way out. Exits 1 when an invariant fails.

    python bench/crash_server.py [--kills 3] [--phase-seconds 6] [--backend all]
    python bench/crash_server.py --cut-connections --kills 20 --phase-seconds 1 --backend postgres
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import random
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import (
    Report,
    RpcClient,
    RpcFailure,
    ServerGone,
    ServerProcess,
    command_line,
    end_other_connections,
    finish,
    machine,
    on_each_backend,
    options_from,
)
from bench.stress_load import (
    ONE_WAY,
    RETURN,
    Audit,
    Sent,
    Stored,
    audit,
    conversation_ids,
    read_stored,
)
from ccweb_store.protocol.jsonrpc import INTERNAL_ERROR

LEASE_SECONDS = 2


def _is_lease_lost(failure: RpcFailure) -> bool:
    """Whether ``run.complete`` was refused because this worker no longer holds the run."""
    error = failure.error
    data = error.get("data") if isinstance(error, dict) else None
    return isinstance(data, dict) and data.get("code") == "lease_lost"


class CutOff(Exception):
    """A request answered ``database_unavailable`` (or an internal error): its database
    connection was ended under it."""


#: The domain error a request whose database connection was ended under it answers.
DATABASE_UNAVAILABLE = "database_unavailable"


MAX_ATTEMPTS = 3  # the server's default: the third expired lease fails a run


@dataclass
class CrashOptions:
    kills: int = 3
    phase_seconds: float = 6.0
    conversations: int = 40
    senders: int = 4
    workers: int = 4
    seconds: float = 600.0  # cap on one backend's whole run
    seed: int = 1
    cut_connections: bool = False  # end the server's PostgreSQL connections instead


@dataclass
class CrashTraffic:
    """What the clients did and saw across the kills."""

    sent: list[Sent] = field(default_factory=list)
    cut_sends: list[str] = field(default_factory=list)  # contents of sends with no answer
    cut_claims: int = 0
    cut_completions: int = 0
    abandoned_runs: int = 0  # a worker that died with the server left its run leased
    completed_again: int = 0  # a worker that survived completed its run after the restart
    lease_lost_completions: int = 0  # refused: the run was requeued and claimed by another
    completions: int = 0
    refused_busy: int = 0
    kills: int = 0
    connections_ended: int = 0
    internal_errors: int = 0  # -32603 answers
    unavailable: int = 0  # database_unavailable answers: cut off by an ended connection
    drained: bool = False
    drain_seconds: float = 0.0
    problems: list[str] = field(default_factory=list)


class Crashing:
    """Runs the load and kills the server under it; clients wait for it to come back."""

    def __init__(self, server: ServerProcess, options: CrashOptions) -> None:
        self.server = server
        self.options = options
        self.traffic = CrashTraffic()
        self.rng = random.Random(options.seed)
        self.up = asyncio.Event()
        self.up.set()
        self.stop_sending = asyncio.Event()
        self.stop_working = asyncio.Event()
        self.numbers = itertools.count(1)
        self.conversations = conversation_ids(options.conversations)

    async def until_up(self, call: Callable[[], Awaitable[Any]]) -> Any:
        """``call()``, repeated after each restart (or internal error) until it is answered."""
        while True:
            try:
                return await call()
            except (ServerGone, CutOff):
                await self.up.wait()

    async def answer(self, call: Awaitable[Any]) -> Any:
        """The answer to ``call``; ``CutOff`` for ``database_unavailable`` or an internal
        error (a unit of work whose database connection was ended under it), counted. A tool
        call's ``database_unavailable`` is a tool error (``isError``) of its own."""
        try:
            answer = await call
        except RpcFailure as failure:
            error = failure.error if isinstance(failure.error, dict) else {}
            if error.get("code") == INTERNAL_ERROR:
                self.traffic.internal_errors += 1
            elif (error.get("data") or {}).get("code") == DATABASE_UNAVAILABLE:
                self.traffic.unavailable += 1
            else:
                raise
            raise CutOff from failure
        if isinstance(answer, dict) and answer.get("isError"):
            error = answer.get("structuredContent", {}).get("error", {})
            if error.get("code") == DATABASE_UNAVAILABLE:
                self.traffic.unavailable += 1
                raise CutOff(error.get("message"))
        return answer

    async def rpc_answer(self, client: RpcClient, method: str, params: dict[str, Any]) -> Any:
        return await self.answer(client.rpc(method, params))

    async def sender(self, number: int) -> None:
        client = RpcClient(self.server.port, retry_stale=False)
        while not self.stop_sending.is_set():
            source, target = self.rng.sample(self.conversations, 2)
            mode = self.rng.choice((ONE_WAY, RETURN))
            content = f"job {next(self.numbers)} from {source}: build it and report back"
            arguments = {"targetConversationId": target, "content": content, "replyMode": mode}
            try:
                result = await self.answer(client.tool(source, "ccweb_send_message", arguments))
            except (ServerGone, CutOff):
                self.traffic.cut_sends.append(content)
                await self.up.wait()
                continue
            if result["isError"]:
                code = result["structuredContent"]["error"]["code"]
                if code != "target_busy":
                    self.traffic.problems.append(f"send refused: {result['structuredContent']}")
                    return
                self.traffic.refused_busy += 1
                await asyncio.sleep(0.005)
                continue
            payload = result["structuredContent"]
            self.traffic.sent.append(
                Sent(
                    source,
                    target,
                    mode,
                    content,
                    payload["messageId"],
                    payload["runId"],
                    payload.get("requestId"),
                )
            )
        await client.close()

    async def worker(self, number: int) -> None:
        client = RpcClient(self.server.port, retry_stale=False)
        worker_id = f"worker-{number}"
        while not self.stop_working.is_set():
            try:
                claimed = await self.answer(
                    client.rpc("run.claim", {"workerId": worker_id, "leaseSeconds": LEASE_SECONDS})
                )
            except (ServerGone, CutOff):
                self.traffic.cut_claims += 1
                await self.up.wait()
                continue
            run = claimed["run"]
            if run is None:
                await asyncio.sleep(0.02)
                continue
            params = {
                "runId": run["id"],
                "workerId": worker_id,
                "status": "completed",
                "output": f"done {run['id']}",
            }
            try:
                try:
                    await self.answer(client.rpc("run.complete", params))
                except (ServerGone, CutOff) as cut:
                    self.traffic.cut_completions += 1
                    await self.up.wait()
                    if isinstance(cut, ServerGone) and self.rng.random() < 0.5:
                        self.traffic.abandoned_runs += 1
                        continue  # this worker died with the server: its lease will expire
                    complete = functools.partial(self.rpc_answer, client, "run.complete", params)
                    await self.until_up(complete)
                    self.traffic.completed_again += 1
            except RpcFailure as failure:
                if not _is_lease_lost(failure):
                    raise
                # The lease passed meanwhile (a restart, a slow moment): the run was requeued
                # and is another worker's now; this completion was refused, as it must be.
                self.traffic.lease_lost_completions += 1
                continue
            self.traffic.completions += 1
        await client.close()

    async def kill_and_restart(self) -> None:
        if self.options.cut_connections:
            await self.end_connections()
            self.traffic.kills += 1
            return
        self.up.clear()
        self.server.kill()
        self.traffic.kills += 1
        await asyncio.sleep(0.3)  # clients notice, cut off mid-request
        await asyncio.to_thread(self.server.start)
        self.up.set()

    async def end_connections(self) -> None:
        """End every connection to the server's database but this one's, and wait until they
        are gone: what a restart of PostgreSQL does to the server's connections."""
        ended = await end_other_connections(self.server.database_url)
        self.traffic.connections_ended += ended

    async def drained(self, client: RpcClient) -> bool:
        """No run queued or running and no reply waiting or ready."""
        runs = await client.rpc("run.list", {"status": ["queued", "running"], "limit": 1})
        replies = await client.rpc("reply.list", {"status": ["waiting", "ready"], "limit": 1})
        return not runs["runs"] and not replies["replies"]

    async def run(self) -> CrashTraffic:
        options = self.options
        deadline = time.monotonic() + options.seconds
        setup = RpcClient(self.server.port)
        for conversation in self.conversations:
            await setup.rpc("session.create", {"id": conversation})
        tasks = [asyncio.create_task(self.sender(n)) for n in range(options.senders)]
        tasks += [asyncio.create_task(self.worker(n)) for n in range(options.workers)]
        try:
            for _ in range(options.kills):
                await asyncio.sleep(options.phase_seconds * self.rng.uniform(0.7, 1.3))
                await self.kill_and_restart()
            await asyncio.sleep(options.phase_seconds)
            self.stop_sending.set()
            began = time.monotonic()
            while time.monotonic() < deadline:
                if await self.until_up(lambda: self.drained(setup)):
                    self.traffic.drained = True
                    break
                await asyncio.sleep(0.25)
            self.traffic.drain_seconds = time.monotonic() - began
            if not self.traffic.drained:
                self.traffic.problems.append(f"not drained within {options.seconds:g} s")
        finally:
            self.stop_sending.set()
            self.stop_working.set()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            self.traffic.problems += [f"a client failed: {r!r}" for r in results if r is not None]
            await setup.close()
        return self.traffic


def crash_report(title: str, traffic: CrashTraffic, stored: Stored) -> Report:
    checked = audit(traffic.sent, stored, unacknowledged=traffic.cut_sends)
    returning = [send for send in traffic.sent if send.mode == RETURN]
    runs = list(stored.runs.values())
    report = Report(title)
    if traffic.connections_ended:
        report.add(
            "times every PostgreSQL connection was ended",
            f"{traffic.kills} ({traffic.connections_ended} connections)",
        )
        report.add("requests answered database_unavailable", traffic.unavailable)
        report.add("requests answered an internal error (-32603)", traffic.internal_errors)
    else:
        report.add("server processes killed with SIGKILL", traffic.kills)
    report.add("sends acknowledged", len(traffic.sent))
    report.add("  of them present in the database", len(traffic.sent) - _missing(checked))
    report.add(
        "sends cut off (no answer, database_unavailable or an internal error)",
        f"{len(traffic.cut_sends)}, of which written: {checked.unacknowledged_found}",
    )
    report.add(
        "claims / completions cut off",
        f"{traffic.cut_claims} / {traffic.cut_completions} ({traffic.abandoned_runs} runs "
        f"abandoned, {traffic.completed_again} completed again after the restart)",
    )
    report.add(
        "late completions refused as lease_lost (the run was another worker's by then)",
        traffic.lease_lost_completions,
    )
    report.add(
        "runs requeued after an expired lease", sum(1 for run in runs if run["attempts"] > 0)
    )
    report.add(
        "runs failed after 3 expired leases",
        sum(1 for run in runs if run["status"] == "failed"),
    )
    report.add(
        "replies delivered exactly once (returned + failure notices)",
        f"{checked.returned_once:,} + {checked.failed_noticed_once:,}",
    )
    report.add(
        "acknowledged replies not delivered exactly once",
        len(returning) - checked.returned_once - checked.failed_noticed_once,
        must=0,
    )
    report.add("auto-runs queued exactly once", checked.auto_runs_once, must=len(returning))
    report.add("duplicates", len(checked.duplicated), must=0)
    report.add("lost", len(checked.lost), must=0)
    report.add("stuck (a run or reply not finished)", len(checked.stuck), must=0)
    report.add("drained after the last phase in", f"{traffic.drain_seconds:.1f} s")
    report.problems += traffic.problems + checked.lost + checked.duplicated + checked.stuck
    return report


def _missing(checked: Audit) -> int:
    return sum(1 for problem in checked.lost if "is missing" in problem)


def crash_backend(name: str, url: str, options: CrashOptions) -> Report:
    env = {
        "CCWEB_LEASE_SECONDS": str(LEASE_SECONDS),
        "CCWEB_LEASE_SWEEP_SECONDS": "0.5",
        "CCWEB_MAX_ATTEMPTS": str(MAX_ATTEMPTS),
    }
    server = ServerProcess(url, env).start()
    try:
        traffic = asyncio.run(Crashing(server, options).run())
    finally:
        server.stop()
    stored = asyncio.run(read_stored(url))
    what = "its PostgreSQL connections ended" if options.cut_connections else "SIGKILLed"
    report = crash_report(f"{name}: one server process, {what} under load", traffic, stored)
    if not report.ok:
        report.problems.append("server log tail:\n" + server.log_text()[-3000:])
    return report


def main(argv: list[str] | None = None) -> int:
    helps = {
        "kills": "SIGKILLs per backend",
        "phase_seconds": "load before each kill",
        "seconds": "cap on each backend's run",
        "cut_connections": "end the server's PostgreSQL connections instead of SIGKILLing it",
    }
    parser = command_line(__doc__, CrashOptions(), helps)
    args = parser.parse_args(argv)
    options = options_from(args, CrashOptions)
    if options.cut_connections and args.backend != "postgres":
        parser.error("--cut-connections ends PostgreSQL connections: add --backend postgres")
    reports = on_each_backend(
        args, "crash", lambda backend, url: crash_backend(backend, url, options)
    )
    what = "connections ended" if options.cut_connections else "kill -9"
    header = (
        f"{what} under load: {options.kills} kills, {options.phase_seconds:g} s of load "
        f"between them, leases of {LEASE_SECONDS} s; {machine()}"
    )
    return finish(reports, header)


if __name__ == "__main__":
    sys.exit(main())
