"""One claimed run of ``ccweb-store worker``, from its claim to its end.

``JobRunner.work`` takes a run the worker claimed (``runner``) through the steps the runner's
docstring lists: it heartbeats the lease, runs the conversation's command with the credential
that came with the claim, completes or fails the run (or requeues it when the worker cut it
off), and revokes the credential. Which runs to claim, how many at once, and stopping are the
runner's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from ccweb_store.domain.boxes import within
from ccweb_store.domain.kinds import RunStatus
from ccweb_store.worker.config import (
    BuiltinSpec,
    CommandSpec,
    ConfigError,
    WorkerConfig,
    child_environment,
    render_command,
)
from ccweb_store.worker.host import HostClient, HostError, describe
from ccweb_store.worker.launch import Finished, Launch
from ccweb_store.worker.process import Outcome, could_not_start, kill_group, start_command

log = logging.getLogger("ccweb_store.worker")

#: How often ``run.complete`` is tried when the server cannot be reached, with backoff.
COMPLETE_ATTEMPTS = 6


@dataclass
class Job:
    """A run this worker claimed, and what became of it so far."""

    run: dict[str, Any]
    #: The run's conversation (``session.get``) and its credential (``credential.mint``), which
    #: came with the claim.
    session: dict[str, Any] = field(default_factory=dict)
    minted: dict[str, Any] = field(default_factory=dict)
    child: asyncio.subprocess.Process | None = None
    #: Why the worker stopped it before it ended (it goes back to the queue), or None.
    cut_off: str | None = None
    #: It failed, or its end could not be recorded.
    failed: bool = False

    @property
    def id(self) -> str:
        run_id: str = self.run["id"]
        return run_id

    @property
    def conversation(self) -> str:
        conversation_id: str = self.run["sessionId"]
        return conversation_id


class JobRunner:
    """Runs claimed runs to their end, for the worker ``worker_id``; ``kill`` kills a command's
    process group in the background (the worker waits for those kills before it exits)."""

    def __init__(
        self,
        client: HostClient,
        config: WorkerConfig,
        *,
        worker_id: str,
        lease_seconds: int,
        kill: Callable[[asyncio.subprocess.Process], None],
    ) -> None:
        self.client = client
        self.config = config
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self._kill = kill

    async def work(self, job: Job, previous: asyncio.Task[None] | None) -> None:
        """Run one claimed run to its end (completed, failed, lost, or requeued)."""
        run = job.run
        started = time.monotonic()
        log.info(
            "run %s claimed: %s of %s (hop %s, attempts %s)",
            job.id, run["kind"], job.conversation, run["hopCount"], run["attempts"],
        )  # fmt: skip
        lease = asyncio.get_running_loop().create_task(self._keep_lease(job.id))
        try:
            if previous is not None and not previous.done():
                log.warning(
                    "run %s waits until this worker's run of %s ends", job.id, job.conversation
                )
                await asyncio.wait({previous})
            outcome = await self._execute(job, lease)
        except (httpx.TransportError, HostError) as exc:
            # We could not even start it (minting, reading the conversation): leave it to the
            # lease; it comes back to the queue.
            log.error("run %s abandoned: %s; its lease will expire", job.id, describe(exc))
            job.failed = True
            outcome = None
        finally:
            lease.cancel()
        if outcome is not None:
            elapsed = time.monotonic() - started
            # Not recorded: ``_complete`` said why (and a lost lease is not our failure).
            recorded = await self._complete(job, outcome)
            if recorded and outcome.status == RunStatus.COMPLETED:
                session = outcome.agent_session_id
                log.info(
                    "run %s completed in %.1fs (%d characters of output%s)",
                    job.id, elapsed, len(outcome.output or ""),
                    f"; agent session {session}" if session else "",
                )  # fmt: skip
            elif recorded:
                log.warning("run %s failed in %.1fs: %s", job.id, elapsed, outcome.error)
                job.failed = True

    async def _execute(self, job: Job, lease: asyncio.Task[str]) -> Outcome | None:
        """Run the command with the credential that came with the claim; revoke it after."""
        session, minted = job.session, job.minted
        if job.cut_off is not None:
            await self.revoke(minted)
            await self.requeue(job)
            return None
        try:
            spec = self.config.command_for(job.conversation, session.get("agent"))
        except ConfigError as exc:
            await self.revoke(minted)
            return Outcome(RunStatus.FAILED, error=str(exc))
        try:
            return await self._run(job, spec, minted["token"], lease)
        finally:
            await self.revoke(minted)

    async def revoke(self, minted: dict[str, Any]) -> None:
        """Revoke a credential that came with a claim; a failure leaves it to expire."""
        with contextlib.suppress(httpx.TransportError, HostError):
            await self.client.call(
                "credential.revoke", {"credentialId": minted["credential"]["id"]}
            )

    async def _run(
        self, job: Job, spec: CommandSpec | BuiltinSpec, token: str, lease: asyncio.Task[str]
    ) -> Outcome | None:
        """Run the conversation's command in its directory; a built-in agent resumes the
        conversation's agent session, or starts a new one when that session is gone."""
        cwd = job.session.get("cwd")
        # One stat, not worth a thread of its own.
        if cwd and not os.path.isdir(cwd):  # noqa: ASYNC240
            return Outcome(
                RunStatus.FAILED,
                error=f"the conversation's working directory {cwd!r} does not exist on the "
                f"worker's machine ({self.worker_id})",
            )
        boxed = self._in_box(job, cwd)
        if isinstance(boxed, Outcome):
            return boxed
        cwd = boxed
        resume = job.session.get("agentSessionId") or None
        env = child_environment(
            os.environ,
            endpoint=f"{self.client.base_url}/mcp",
            token=token,
            run=job.run,
            agent_session_id=resume,
        )
        launch = self._launch(job, spec, resume, env)
        if isinstance(launch, Outcome):
            return launch
        ended = await self._run_launch(job, launch, env, cwd, lease)
        if isinstance(ended, Finished) and resume and launch.refused_resume(ended):
            log.warning(
                "run %s: %s could not resume the conversation's session %s (%s); "
                "starting a new session",
                job.id, launch.title, resume, ended.said(),
            )  # fmt: skip
            launch = self._launch(job, spec, None, env)
            assert not isinstance(launch, Outcome)
            ended = await self._run_launch(job, launch, env, cwd, lease)
        return launch.outcome(ended) if isinstance(ended, Finished) else ended

    def _in_box(self, job: Job, cwd: str | None) -> str | Outcome | None:
        """The folder to run ``job``'s command in: ``cwd`` as it is for a conversation without
        a box; for one with a box, ``cwd`` resolved now (``realpath``), which must be inside
        the box, else the failure to record. The command runs in the resolved folder, so a
        symlink swapped in after this check cannot move it."""
        box = job.session.get("box")
        if box is None:
            return cwd
        real = os.path.realpath(cwd or os.getcwd())
        if within(real, box):
            return real
        log.warning(
            "run %s refused: %s resolves to %s, outside the conversation's box %s",
            job.id, cwd, real, box,
        )  # fmt: skip
        return Outcome(
            RunStatus.FAILED,
            error=f"refused to run outside the conversation's box: its working directory "
            f"{cwd!r} resolves to {real!r}, which is not inside {box!r}, the folder its creator "
            "was confined to (a symlink in its path now leads elsewhere). Remove the link, or "
            "run this work from a conversation whose folder is there",
        )

    def _launch(
        self, job: Job, spec: CommandSpec | BuiltinSpec, resume: str | None, env: dict[str, str]
    ) -> Launch | Outcome:
        """How to start the run's command, or why it cannot start (a CLI not found)."""
        prompt = job.run.get("runtimeText") or ""
        if isinstance(spec, CommandSpec):
            command, on_stdin = render_command(
                spec.command,
                prompt=prompt,
                conversation_id=job.conversation,
                run_id=job.id,
                hop_count=job.run["hopCount"],
            )
            return Launch(
                ["/bin/sh", "-c", command], prompt.encode() if on_stdin else None, spec.timeout
            )
        agent = spec.agent
        program = agent.find(env.get("PATH"))
        if program is None:
            return Outcome(
                RunStatus.FAILED,
                error=f"{agent.title} ({agent.program}) is not on the worker's PATH: install "
                f"it ({agent.install_hint()}), or give conversations of agent {agent.name!r} "
                "a command of your own (--command, or [agents."
                f"{agent.name}] in the --config file)",
            )
        argv = agent.command(
            program, endpoint=env["CCWEB_MCP_ENDPOINT"], resume=resume, args=spec.args
        )
        return Launch(argv, prompt.encode(), spec.timeout, agent=agent, resumed=resume)

    async def _run_launch(
        self,
        job: Job,
        launch: Launch,
        env: dict[str, str],
        cwd: str | None,
        lease: asyncio.Task[str],
    ) -> Finished | Outcome | None:
        """Start the command and wait for it: how it ended, a failure to start or a timeout,
        or None when the run was cut off or its lease lost."""
        if job.cut_off is not None:
            await self.requeue(job)
            return None
        on_stdin = launch.stdin is not None
        try:
            child = await start_command(launch.argv, on_stdin=on_stdin, env=env, cwd=cwd)
        except OSError as exc:
            return could_not_start(exc, on_stdin=on_stdin)
        job.child = child
        if job.cut_off is not None:  # cut off while the command was starting
            self._kill(child)
        return await self._supervise(job, launch, child, lease)

    async def _supervise(
        self,
        job: Job,
        launch: Launch,
        child: asyncio.subprocess.Process,
        lease: asyncio.Task[str],
    ) -> Finished | Outcome | None:
        """Wait for the command; kill it on timeout or a lost lease."""
        finished = asyncio.ensure_future(child.communicate(launch.stdin))
        done, _ = await asyncio.wait(
            {finished, lease}, timeout=launch.timeout, return_when=asyncio.FIRST_COMPLETED
        )
        if finished not in done:
            await kill_group(child)
            with contextlib.suppress(Exception):
                await finished
            if lease in done and not lease.cancelled():
                log.warning(
                    "run %s: %s; killed its command and left the run to its holder",
                    job.id, lease.result(),
                )  # fmt: skip
                return None
            return Outcome(
                RunStatus.FAILED,
                error=f"timed out after {launch.timeout:g}s; the worker killed the command",
            )
        stdout, stderr = finished.result()
        if job.cut_off is not None:
            await self.requeue(job)
            return None
        return Finished(child.returncode, stdout, stderr)

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
                log.warning("heartbeat of run %s failed (%s); trying again", run_id, describe(exc))

    async def _complete(self, job: Job, outcome: Outcome) -> bool:
        """``run.complete``, retried with backoff while the server cannot be reached; whether
        it was recorded (``job.failed`` when it was not, but for a lost lease)."""
        run_id = job.id
        params = {
            "runId": run_id,
            "workerId": self.worker_id,
            "status": outcome.status,
            "output": outcome.output,
            "error": outcome.error,
        }
        if outcome.agent_session_id is not None:
            params["agentSessionId"] = outcome.agent_session_id
        for attempt in range(COMPLETE_ATTEMPTS):
            try:
                completion = await self.client.call("run.complete", params)
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
                    job.failed = True
                return False
            except httpx.TransportError as exc:
                delay = 2.0**attempt
                log.warning(
                    "run %s: cannot report its end (%s); trying again in %gs",
                    run_id, describe(exc), delay,
                )  # fmt: skip
                await asyncio.sleep(delay)
                continue
            if completion["run"]["status"] == RunStatus.CANCELLED:
                # Cancelled while it ran (``runs cancel --force``): the server kept the run
                # as it was, so, as for a lost lease, this end is not this worker's to record.
                log.warning(
                    "run %s was cancelled while it ran: its output (%d characters) was not "
                    "recorded, and the run is not retried (%s)",
                    run_id, len(outcome.output or ""), completion["run"].get("error"),
                )  # fmt: skip
                return False
            return True
        log.error("run %s: gave up reporting its end; its lease will expire", run_id)
        job.failed = True
        return False

    async def requeue(self, job: Job) -> None:
        """Put a run the worker cut off back in the queue, and say so in one line."""
        try:
            await self.client.call("run.requeue", {"runId": job.id, "workerId": self.worker_id})
            log.warning(
                "run %s interrupted and put back in the queue (%s of %s: %s)",
                job.id, job.run["kind"], job.conversation, job.cut_off,
            )  # fmt: skip
        except (httpx.TransportError, HostError) as exc:
            log.error(
                "run %s interrupted (%s); requeueing failed (%s), its lease will expire",
                job.id, job.cut_off, describe(exc),
            )  # fmt: skip
