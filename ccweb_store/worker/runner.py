"""``ccweb-store worker``: the built-in runner that claims queued runs and runs an agent command.

It speaks only HTTP to the server's host API (``/rpc``, with the operator token), so it works
the same against SQLite and PostgreSQL, and several workers (processes, machines) may run at
once: the server leases each run to one of them.

It waits for work with long-poll claims: ``run.claim`` with ``waitSeconds`` returns as soon as
a run is claimable, so a run starts when it is queued, without a polling interval. An empty
answer that comes back well before its wait ran out (a server that does not hold claims, a
claim that lost every race) is followed by a short pause, doubled up to a second while it
lasts, so the worker never asks in a tight loop.

Up to ``concurrency`` runs go on at once, each in a task of its own, each of a different
conversation: the server never leases two runs of one conversation at once, and the worker
holds a run of a conversation it is still running until that one ends. For each run it:

1. claims it (``run.claim``), heartbeats its lease every lease/3 (``run.heartbeat``) until it
   ends, and reads its conversation (``session.get``: agent, cwd);
2. mints a credential bound to that conversation and the run's hop count
   (``credential.mint``), lasting the command's timeout plus one lease;
3. runs the command of that conversation (``WorkerConfig.command_for``) in its own process
   group, in the conversation's ``cwd`` when it has one, the prompt (the run's
   ``runtimeText``) as an argument (``{prompt}``) or on stdin, and ``CCWEB_MCP_URL`` (the bound
   MCP URL) in its environment; the operator token, the signing secret and the database URL
   are left out of that environment;
4. completes the run (``run.complete``) with the command's stdout as the assistant message,
   or fails it: a non-zero exit (with the tail of stderr), a timeout (the process group is
   killed), a command that cannot start;
5. revokes the credential.

A lost lease (``lease_lost``: the run was requeued meanwhile) kills the command and leaves the
run to whoever holds it; ``run.complete`` names this worker (``workerId``), so a completion
that comes after the lease moved is refused (``lease_lost``), logged in one line and not
retried: the run's new holder's output is the one that counts. A worker killed outright
leaves its runs ``running`` until their leases expire; the server then requeues them and
another worker claims them.

The first SIGINT/SIGTERM stops claiming and gives the running commands ``grace`` seconds to
finish; what still runs then is killed and its run put back in the queue (``run.requeue``),
one log line per run (exit 130). A second signal does that at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import httpx

from ccweb_store.worker.config import WorkerConfig
from ccweb_store.worker.host import HostClient, HostError, Unusable, describe
from ccweb_store.worker.job import Job, JobRunner
from ccweb_store.worker.process import KILL_GRACE_SECONDS, kill_group

log = logging.getLogger("ccweb_store.worker")

T = TypeVar("T")

#: How long one ``run.claim`` may wait on the server for a run (its ``waitSeconds``).
CLAIM_WAIT_SECONDS = 30
#: The pause after an empty answer that came back early, doubled while they keep coming.
SHORTEST_PAUSE_SECONDS = 0.05
LONGEST_PAUSE_SECONDS = 1.0
#: The pause before claiming again when the server could not be reached or refused a claim.
RETRY_SECONDS = 1.0
#: How long running commands may go on after the first stop signal.
DEFAULT_GRACE_SECONDS = 30.0
#: Exit codes of ``Worker.run``.
EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_UNUSABLE = 2
EXIT_INTERRUPTED = 130


class Worker:
    """Claims runs, up to ``concurrency`` at once, until stopped (or, with ``once``, after one
    run or none)."""

    def __init__(
        self,
        client: HostClient,
        config: WorkerConfig,
        *,
        worker_id: str,
        lease_seconds: int = 300,
        concurrency: int = 1,
        grace_seconds: float = DEFAULT_GRACE_SECONDS,
        claim_wait_seconds: int = CLAIM_WAIT_SECONDS,
        once: bool = False,
        kinds: list[str] | None = None,
    ) -> None:
        self.client = client
        self.config = config
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self.concurrency = concurrency
        #: Revocations of credentials that came with a run this worker did not start.
        self._revoking: set[asyncio.Task[None]] = set()
        self.grace_seconds = grace_seconds
        self.claim_wait_seconds = claim_wait_seconds
        self.once = once
        self.kinds = kinds
        self.stopping = False
        self.interrupted = False
        #: An exit code that ends the worker whatever its runs did (the server unusable).
        self.fatal: int | None = None
        self.failed_runs = 0
        self.cut_off_runs = 0
        self._stop = asyncio.Event()
        self._kill_now = asyncio.Event()
        self._jobs: dict[asyncio.Task[None], Job] = {}
        #: Each conversation's latest job here: a new run of it waits for that one to end.
        self._latest: dict[str, asyncio.Task[None]] = {}
        self._kills: set[asyncio.Task[None]] = set()
        self._pause = SHORTEST_PAUSE_SECONDS
        self._runner = JobRunner(
            client, config, worker_id=worker_id, lease_seconds=lease_seconds, kill=self._kill
        )

    # signals

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self.request_stop)

    def request_stop(self) -> None:
        """First call: claim no more, give running commands the grace period, then kill them
        and requeue their runs. Second: do that now."""
        if not self.stopping:
            self._stop_claiming()
            running = ", ".join(job.id for job in self._jobs.values())
            if running:
                log.info(
                    "stopping: no new runs; waiting up to %gs for %s to finish "
                    "(Ctrl-C again to kill and requeue at once)",
                    self.grace_seconds, running,
                )  # fmt: skip
            else:
                log.info("stopping")
            return
        if self.interrupted:
            return
        self.interrupted = True
        self._kill_now.set()
        for job in list(self._jobs.values()):
            self._cut_off(job, "stopped by a second signal")

    def _stop_claiming(self) -> None:
        self.stopping = True
        self._stop.set()

    def _cut_off(self, job: Job, reason: str) -> None:
        """Kill the job's command (if it started) and have its run requeued."""
        if job.cut_off is not None:
            return
        job.cut_off = reason
        self.cut_off_runs += 1
        if job.child is not None:
            self._kill(job.child)

    def _kill(self, child: asyncio.subprocess.Process) -> None:
        """Kill a command's process group in the background (``_finish_runs`` waits for it)."""
        if child.returncode is None:
            kill = asyncio.get_running_loop().create_task(kill_group(child))
            self._kills.add(kill)
            kill.add_done_callback(self._kills.discard)

    # the loop

    async def run(self) -> int:
        """Work until stopped; the process's exit code."""
        log.info(
            "worker %s claiming runs from %s (lease %ss, up to %d at once)",
            self.worker_id, self.client.base_url, self.lease_seconds, self.concurrency,
        )  # fmt: skip
        try:
            await self._claim_runs()
        except Unusable as exc:
            log.error("%s", exc)
            self.fatal = EXIT_UNUSABLE
            self._stop_claiming()
        await self._finish_runs()
        log.info("worker %s stopped", self.worker_id)
        if self.fatal is not None:
            return self.fatal
        if self.interrupted or self.cut_off_runs:
            return EXIT_INTERRUPTED
        return EXIT_RUN_FAILED if self.once and self.failed_runs else EXIT_OK

    async def _claim_runs(self) -> None:
        """Claim while a slot is free, until stopped (or, with ``once``, one claim)."""
        while not self.stopping:
            if len(self._jobs) >= self.concurrency:
                await self._unless_stopped(
                    asyncio.wait(set(self._jobs), return_when=asyncio.FIRST_COMPLETED)
                )
                continue
            # ``once`` takes what is queued now rather than waiting for work.
            wait = 0 if self.once else self.claim_wait_seconds
            asked = time.monotonic()
            try:
                run = await self._unless_stopped(self._claim(wait))
            except (httpx.TransportError, HostError) as exc:
                if self.once:
                    log.error(
                        "cannot claim a run from %s (%s); --once gives up (exit %d)",
                        self.client.base_url, describe(exc), EXIT_UNUSABLE,
                    )  # fmt: skip
                    self.fatal = EXIT_UNUSABLE
                    return
                log.warning("cannot claim a run (%s); trying again", describe(exc))
                await self._unless_stopped(asyncio.sleep(RETRY_SECONDS))
                continue
            if run is not None:
                self._pause = SHORTEST_PAUSE_SECONDS
                self._start(run)
            if self.once or self.stopping:
                return
            if run is None and time.monotonic() - asked < wait / 2:
                await self._unless_stopped(asyncio.sleep(self._pause))
                self._pause = min(self._pause * 2, LONGEST_PAUSE_SECONDS)

    async def _claim(self, wait: int) -> dict[str, Any] | None:
        params: dict[str, Any] = {
            "workerId": self.worker_id,
            "leaseSeconds": self.lease_seconds,
            "waitSeconds": wait,
            # What the run's command needs, in the same answer: it starts at once.
            "withConversation": True,
            "mintCredential": {
                "expiresInSeconds": int(
                    self.config.longest_timeout + self.lease_seconds + KILL_GRACE_SECONDS
                ),
                "label": f"worker {self.worker_id}",
            },
        }
        if self.kinds:
            params["kinds"] = self.kinds
        log.debug("claiming a run (waiting up to %ss)", wait)
        claimed = await self.client.call("run.claim", params, waits=wait)
        return claimed if claimed["run"] is not None else None

    async def _unless_stopped(self, awaitable: Awaitable[T]) -> T | None:
        """What ``awaitable`` gives, or None when a stop signal comes first (it is cancelled
        then, unless it finished meanwhile: a run claimed at that moment is still ours)."""
        task = asyncio.ensure_future(awaitable)
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not task.done():
                task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            return await task
        return None

    def _start(self, claimed: dict[str, Any]) -> None:
        job = Job(claimed["run"], claimed["conversation"], claimed["credential"])
        if any(other.id == job.id for other in self._jobs.values()):
            # The lease ran out here unnoticed and the server leased the run to us again:
            # the command already running does the work, its heartbeats keep the new lease.
            log.warning("run %s leased again to this worker, which still runs it", job.id)
            revoking = asyncio.get_running_loop().create_task(self._runner.revoke(job.minted))
            self._revoking.add(revoking)  # the credential that came with it is not used
            revoking.add_done_callback(self._revoking.discard)
            return
        previous = self._latest.get(job.conversation)
        task = asyncio.get_running_loop().create_task(self._work(job, previous))
        self._jobs[task] = job
        self._latest[job.conversation] = task
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        job = self._jobs.pop(task)
        if self._latest.get(job.conversation) is task:
            del self._latest[job.conversation]
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, Unusable):
            log.error("%s", exc)
            self.fatal = EXIT_UNUSABLE
            self._stop_claiming()
        elif exc is not None:
            log.error("run %s: the worker failed on it", job.id, exc_info=exc)

    async def _finish_runs(self) -> None:
        """Wait for the runs in hand; once stopped, for the grace period at most, then cut off
        what is left."""
        if not self._jobs:
            return
        jobs = asyncio.gather(*self._jobs, return_exceptions=True)
        if not self.stopping:
            await self._unless_stopped(asyncio.shield(jobs))
        if not jobs.done() and not self.interrupted:
            kill_now = asyncio.ensure_future(self._kill_now.wait())
            either: set[asyncio.Future[Any]] = {jobs, kill_now}
            await asyncio.wait(
                either, timeout=self.grace_seconds, return_when=asyncio.FIRST_COMPLETED
            )
            kill_now.cancel()
            if not jobs.done() and not self.interrupted:
                log.warning(
                    "the grace period of %gs is over: killing the commands of %d run(s)",
                    self.grace_seconds, len(self._jobs),
                )  # fmt: skip
                for job in list(self._jobs.values()):
                    self._cut_off(job, f"still running when the {self.grace_seconds:g}s grace "
                                       "period ended")  # fmt: skip
        await jobs
        if self._kills:
            await asyncio.wait(set(self._kills))

    async def _work(self, job: Job, previous: asyncio.Task[None] | None) -> None:
        """Run one claimed run to its end, once ``previous`` (this conversation's last) ended."""
        await self._runner.work(job, previous)
        if job.failed:
            self.failed_runs += 1


async def serve(
    config: WorkerConfig,
    *,
    base_url: str,
    token: str | None,
    worker_id: str,
    lease_seconds: int,
    concurrency: int = 1,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    once: bool,
    kinds: list[str] | None,
) -> int:
    """Run a worker until it stops; the process's exit code."""
    client = HostClient(base_url, token)
    try:
        worker = Worker(
            client,
            config,
            worker_id=worker_id,
            lease_seconds=lease_seconds,
            concurrency=concurrency,
            grace_seconds=grace_seconds,
            once=once,
            kinds=kinds,
        )
        worker.install_signal_handlers()
        return await worker.run()
    finally:
        await client.close()
