"""``ccweb-store worker``: the built-in runner that claims queued runs and runs an agent command.

It speaks only HTTP to the server's host API (``/rpc``, with the operator token), so it works
the same against SQLite and PostgreSQL, and several workers (processes, machines) may run at
once: the server leases each run to one of them. For each run it:

1. claims it (``run.claim``) and reads its conversation (``session.get``: agent, cwd);
2. mints a credential bound to that conversation and the run's hop count
   (``credential.mint``), lasting the command's timeout plus one lease;
3. runs the command of that conversation (``WorkerConfig.command_for``) in its own process
   group, in the conversation's ``cwd`` when it has one, the prompt (the run's
   ``runtimeText``) as an argument (``{prompt}``) or on stdin, and ``CCWEB_MCP_URL`` (the bound
   MCP URL) in its environment; the operator token, the signing secret and the database URL
   are left out of that environment;
4. heartbeats every lease/3 (``run.heartbeat``) while the command runs;
5. completes the run (``run.complete``) with the command's stdout as the assistant message,
   or fails it: a non-zero exit (with the tail of stderr), a timeout (the process group is
   killed), a command that cannot start;
6. revokes the credential.

A lost lease (``lease_lost``: the run was requeued meanwhile) kills the command and leaves the
run to whoever holds it; ``run.complete`` names this worker (``workerId``), so a completion
that comes after the lease moved is refused (``lease_lost``), logged in one line and not
retried: the run's new holder's output is the one that counts. A worker killed outright
leaves its run ``running`` until the lease expires; the server then requeues it and another
worker claims it. The first SIGINT/SIGTERM stops claiming and lets the current run finish
(exit 0); a second kills the command and puts its run back in the queue (``run.requeue``;
exit 130).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from typing import Any

import httpx

from ccweb_store.worker.config import (
    CommandSpec,
    ConfigError,
    WorkerConfig,
    child_environment,
    render_command,
)
from ccweb_store.worker.host import HostClient, HostError, Unusable
from ccweb_store.worker.process import (
    KILL_GRACE_SECONDS,
    Outcome,
    could_not_start,
    ended,
    kill_group,
    start_command,
)

log = logging.getLogger("ccweb_store.worker")

#: How often ``run.complete`` is tried when the server cannot be reached, with backoff.
COMPLETE_ATTEMPTS = 6
#: Exit codes of ``Worker.run``.
EXIT_OK = 0
EXIT_UNUSABLE = 2
EXIT_INTERRUPTED = 130


class Worker:
    """Claims runs one at a time until stopped (or, with ``once``, after one run or none)."""

    def __init__(
        self,
        client: HostClient,
        config: WorkerConfig,
        *,
        worker_id: str,
        lease_seconds: int = 300,
        poll_interval: float = 1.0,
        once: bool = False,
        kinds: list[str] | None = None,
    ) -> None:
        self.client = client
        self.config = config
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        self.once = once
        self.kinds = kinds
        self.stopping = False
        self.interrupted = False
        self._wake = asyncio.Event()
        self._child: asyncio.subprocess.Process | None = None
        self._current_run: str | None = None

    # signals

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self.request_stop)

    def request_stop(self) -> None:
        """First call: finish the current run, then stop. Second: kill it and stop now."""
        if not self.stopping:
            self.stopping = True
            self._wake.set()
            if self._current_run is not None:
                log.info(
                    "stopping after run %s finishes (Ctrl-C again to kill it and requeue it)",
                    self._current_run,
                )
            else:
                log.info("stopping")
            return
        if self.interrupted:
            return
        self.interrupted = True
        child = self._child
        if child is not None:
            log.warning(
                "killing the command of run %s; it goes back to the queue", self._current_run
            )
            asyncio.get_running_loop().create_task(kill_group(child))

    # the loop

    async def run(self) -> int:
        """Work until stopped; the process's exit code."""
        log.info(
            "worker %s claiming runs from %s (lease %ss)",
            self.worker_id,
            self.client.base_url,
            self.lease_seconds,
        )
        while not self.stopping:
            try:
                run = await self._claim()
            except Unusable as exc:
                log.error("%s", exc)
                return EXIT_UNUSABLE
            except (httpx.TransportError, HostError) as exc:
                log.warning("cannot claim a run (%s); trying again", _describe(exc))
                if self.once:
                    return EXIT_UNUSABLE
                await self._pause()
                continue
            if run is None:
                if self.once:
                    break
                await self._pause()
                continue
            try:
                await self.work_on(run)
            except Unusable as exc:
                log.error("%s", exc)
                return EXIT_UNUSABLE
            if self.once:
                break
        log.info("worker %s stopped", self.worker_id)
        return EXIT_INTERRUPTED if self.interrupted else EXIT_OK

    async def _claim(self) -> dict[str, Any] | None:
        params: dict[str, Any] = {"workerId": self.worker_id, "leaseSeconds": self.lease_seconds}
        if self.kinds:
            params["kinds"] = self.kinds
        claimed = await self.client.call("run.claim", params)
        run: dict[str, Any] | None = claimed["run"]
        return run

    async def _pause(self) -> None:
        """Wait ``poll_interval``, or less when a signal asks us to stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), self.poll_interval)

    async def work_on(self, run: dict[str, Any]) -> None:
        """Run one claimed run to its end (completed, failed, lost, or requeued)."""
        run_id, conversation_id = run["id"], run["sessionId"]
        started = time.monotonic()
        self._current_run = run_id
        log.info(
            "run %s claimed: %s of %s (hop %s, attempt %s)",
            run_id, run["kind"], conversation_id, run["hopCount"], run["attempts"] + 1,
        )  # fmt: skip
        try:
            outcome = await self._execute(run)
        except (httpx.TransportError, HostError) as exc:
            # We could not even start it (minting, reading the conversation): leave it to the
            # lease; it comes back to the queue.
            log.error("run %s abandoned: %s; its lease will expire", run_id, _describe(exc))
            outcome = None
        finally:
            self._current_run = None
        elapsed = time.monotonic() - started
        if outcome is None:
            return
        if await self._complete(run_id, outcome):
            if outcome.status == "completed":
                log.info(
                    "run %s completed in %.1fs (%d characters of output)",
                    run_id, elapsed, len(outcome.output or ""),
                )  # fmt: skip
            else:
                log.warning("run %s failed in %.1fs: %s", run_id, elapsed, outcome.error)

    async def _execute(self, run: dict[str, Any]) -> Outcome | None:
        """Mint the run's credential, run its command, revoke the credential."""
        session = await self.client.call("session.get", {"id": run["sessionId"]})
        try:
            spec = self.config.command_for(run["sessionId"], session.get("agent"))
        except ConfigError as exc:
            return Outcome("failed", error=str(exc))
        minted = await self.client.call(
            "credential.mint",
            {
                "sessionId": run["sessionId"],
                "hopCount": run["hopCount"],
                "expiresInSeconds": int(spec.timeout + self.lease_seconds + KILL_GRACE_SECONDS),
                "label": f"worker {self.worker_id}, run {run['id']}",
            },
        )
        try:
            return await self._run_command(run, spec, session.get("cwd"), minted["token"])
        finally:
            with contextlib.suppress(httpx.TransportError, HostError):
                await self.client.call(
                    "credential.revoke", {"credentialId": minted["credential"]["id"]}
                )

    async def _run_command(
        self, run: dict[str, Any], spec: CommandSpec, cwd: str | None, token: str
    ) -> Outcome | None:
        prompt = run.get("runtimeText") or ""
        command, on_stdin = render_command(
            spec.command,
            prompt=prompt,
            conversation_id=run["sessionId"],
            run_id=run["id"],
            hop_count=run["hopCount"],
        )
        # One stat, not worth a thread of its own.
        if cwd and not os.path.isdir(cwd):  # noqa: ASYNC240
            return Outcome(
                "failed",
                error=f"the conversation's working directory {cwd!r} does not exist on the "
                f"worker's machine ({self.worker_id})",
            )
        env = child_environment(
            os.environ,
            mcp_url=f"{self.client.base_url}/mcp?credential={token}",
            token=token,
            run=run,
        )
        try:
            child = await start_command(command, on_stdin=on_stdin, env=env, cwd=cwd)
        except OSError as exc:
            return could_not_start(exc, on_stdin=on_stdin)
        self._child = child
        try:
            return await self._supervise(run, spec, child, prompt.encode() if on_stdin else None)
        finally:
            self._child = None

    async def _supervise(
        self,
        run: dict[str, Any],
        spec: CommandSpec,
        child: asyncio.subprocess.Process,
        stdin: bytes | None,
    ) -> Outcome | None:
        """Wait for the command, heartbeating; kill it on timeout or a lost lease."""
        finished = asyncio.create_task(child.communicate(stdin))
        lease_lost = asyncio.create_task(self._keep_lease(run["id"]))
        try:
            done, _ = await asyncio.wait(
                {finished, lease_lost}, timeout=spec.timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            lease_lost.cancel()
        if finished not in done:
            await kill_group(child)
            with contextlib.suppress(Exception):
                await finished
            if lease_lost in done and not lease_lost.cancelled():
                log.warning(
                    "run %s: %s; killed its command and left the run to its holder",
                    run["id"], lease_lost.result(),
                )  # fmt: skip
                return None
            return Outcome(
                "failed",
                error=f"timed out after {spec.timeout:g}s; the worker killed the command",
            )
        stdout, stderr = finished.result()
        if self.interrupted:
            await self._requeue(run["id"])
            return None
        return ended(child.returncode, stdout, stderr)

    async def _keep_lease(self, run_id: str) -> str:
        """Heartbeat every lease/3 until cancelled; returns why the lease was lost."""
        interval = max(self.lease_seconds / 3, 0.1)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.client.call(
                    "run.heartbeat",
                    {
                        "runId": run_id,
                        "workerId": self.worker_id,
                        "leaseSeconds": self.lease_seconds,
                    },
                )
            except HostError as exc:
                if exc.code == "lease_lost":
                    return "lost its lease (it was requeued or claimed by another worker)"
                log.warning("heartbeat of run %s refused: %s", run_id, exc)
            except httpx.TransportError as exc:
                log.warning("heartbeat of run %s failed (%s); trying again", run_id, _describe(exc))

    async def _complete(self, run_id: str, outcome: Outcome) -> bool:
        """``run.complete``, retried with backoff while the server cannot be reached."""
        params = {
            "runId": run_id,
            "workerId": self.worker_id,
            "status": outcome.status,
            "output": outcome.output,
            "error": outcome.error,
        }
        for attempt in range(COMPLETE_ATTEMPTS):
            try:
                await self.client.call("run.complete", params)
                return True
            except HostError as exc:
                # Never retried: a refusal stays a refusal. ``lease_lost``: the run is another
                # worker's now (or ended without us), and our output was not recorded.
                if exc.code == "lease_lost":
                    log.warning(
                        "run %s: lease lost, its end is not recorded and not retried; this "
                        "worker's output is dropped and the run left to its holder (%s)",
                        run_id, exc,
                    )  # fmt: skip
                else:
                    log.error("run %s: the server refused its completion: %s", run_id, exc)
                return False
            except httpx.TransportError as exc:
                delay = 2.0**attempt
                log.warning(
                    "run %s: cannot report its end (%s); trying again in %gs",
                    run_id, _describe(exc), delay,
                )  # fmt: skip
                await asyncio.sleep(delay)
        log.error("run %s: gave up reporting its end; its lease will expire", run_id)
        return False

    async def _requeue(self, run_id: str) -> None:
        try:
            await self.client.call("run.requeue", {"runId": run_id})
            log.warning("run %s interrupted and put back in the queue", run_id)
        except (httpx.TransportError, HostError) as exc:
            log.error(
                "run %s interrupted; requeueing failed (%s), its lease will expire",
                run_id,
                _describe(exc),
            )


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def serve(
    config: WorkerConfig,
    *,
    base_url: str,
    token: str | None,
    worker_id: str,
    lease_seconds: int,
    poll_interval: float,
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
            poll_interval=poll_interval,
            once=once,
            kinds=kinds,
        )
        worker.install_signal_handlers()
        return await worker.run()
    finally:
        await client.close()
