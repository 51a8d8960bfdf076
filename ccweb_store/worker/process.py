"""A run's command as a process: started in its own process group, killed as a group, and
how it ended told the way ``run.complete`` takes it."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ccweb_store.domain.kinds import RunStatus

#: How much of a failed command's stderr goes into the run's error.
STDERR_TAIL_CHARS = 2000
#: How long a command has to exit after SIGTERM before its group gets SIGKILL.
KILL_GRACE_SECONDS = 5.0


@dataclass(frozen=True)
class Outcome:
    """How a command ended, as ``run.complete`` takes it."""

    status: str  # completed | failed
    output: str | None = None
    error: str | None = None
    #: The agent's own session the run ran in (a built-in agent says), for the next run.
    agent_session_id: str | None = None


async def start_command(
    argv: Sequence[str], *, on_stdin: bool, env: Mapping[str, str], cwd: str | None
) -> asyncio.subprocess.Process:
    """Run ``argv`` in a new process group, its output piped back; ``OSError`` when it cannot
    start (``could_not_start`` says why)."""
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if on_stdin else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=dict(env), cwd=cwd or None, start_new_session=True,
    )  # fmt: skip


def could_not_start(exc: OSError, *, on_stdin: bool) -> Outcome:
    """The failure of a command that could not start, with a hint when the prompt was too long
    to be an argument."""
    hint = ""
    if not on_stdin and exc.errno == errno.E2BIG:
        hint = "; the prompt is too long for an argument: leave {prompt} out (stdin)"
    return Outcome(RunStatus.FAILED, error=f"the command could not start: {exc}{hint}")


def ended(code: int | None, stdout: bytes, stderr: bytes) -> Outcome:
    """A finished command's outcome: its stdout when it exited 0, else how it ended and the
    tail of its stderr."""
    if code == 0:
        return Outcome(RunStatus.COMPLETED, output=stdout.decode(errors="replace").strip())
    return Outcome(RunStatus.FAILED, error=how_it_failed(code, stderr))


def how_it_failed(code: int | None, stderr: bytes, said: str | None = None) -> str:
    """Why a command failed: what its program ``said`` (when it did), else how it ended, and
    the tail of its stderr."""
    tail = stderr.decode(errors="replace").strip()[-STDERR_TAIL_CHARS:]
    if said is not None:
        return said + (f" ({tail})" if tail else "")
    if code is not None and code < 0:
        how = f"the command was killed by signal {-code}"
    else:
        how = f"the command exited with code {code}"
    return how + (f": {tail}" if tail else " (no stderr)")


async def kill_group(child: asyncio.subprocess.Process) -> None:
    """SIGTERM the command's process group, then SIGKILL what is left after a grace period."""
    for signum, grace in ((signal.SIGTERM, KILL_GRACE_SECONDS), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signum)
        if grace is None:
            break
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(child.wait(), grace)
            # The shell is gone; what it started may linger in the group.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            return
