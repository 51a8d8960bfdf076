"""How a run's command starts (``Launch``: a command of the user's through the shell, or a
built-in agent's command line) and how its end reads (``Finished`` to ``Outcome``)."""

from __future__ import annotations

from dataclasses import dataclass

from ccweb_store.domain.kinds import RunStatus
from ccweb_store.worker.agents import BuiltinAgent, resume_refused
from ccweb_store.worker.process import Outcome, ended, how_it_failed


@dataclass(frozen=True)
class Finished:
    """A command that ran to its end: its exit code and what it printed."""

    code: int | None
    stdout: bytes
    stderr: bytes

    def said(self) -> str:
        """The last line of its stderr, else of its stdout: what it gave as the reason."""
        for stream in (self.stderr, self.stdout):
            lines = stream.decode(errors="replace").strip().splitlines()
            if lines:
                return lines[-1].strip()
        return f"exit code {self.code}"


@dataclass(frozen=True)
class Launch:
    """How to start a run's command: the program and its arguments (no shell), what goes on
    its stdin (None: nothing), how long it may run, and for a built-in agent which one and
    the agent session it resumes."""

    argv: list[str]
    stdin: bytes | None
    timeout: float
    agent: BuiltinAgent | None = None
    resumed: str | None = None

    @property
    def title(self) -> str:
        return self.agent.title if self.agent is not None else "the command"

    def outcome(self, finished: Finished) -> Outcome:
        """The run's end as ``run.complete`` takes it: a command of the user's gives its
        stdout; a built-in agent its final answer and its own session."""
        if self.agent is None:
            return ended(finished.code, finished.stdout, finished.stderr)
        reading = self.agent.read(finished.stdout.decode(errors="replace"))
        if finished.code == 0 and reading.error is None and reading.started:
            return Outcome(
                RunStatus.COMPLETED,
                output=(reading.answer or "").strip(),
                agent_session_id=reading.session_id,
            )
        said = reading.error
        if said is None and finished.code == 0:
            said = f"{self.agent.title} ended without a result"
        return Outcome(
            RunStatus.FAILED,
            error=how_it_failed(finished.code, finished.stderr, said),
            agent_session_id=reading.session_id,
        )

    def refused_resume(self, finished: Finished) -> bool:
        """Whether the agent could not resume its session (gone: another machine, a cleared
        cache) and stopped before any turn."""
        if self.agent is None or self.resumed is None:
            return False
        reading = self.agent.read(finished.stdout.decode(errors="replace"))
        printed = (finished.stdout + finished.stderr).decode(errors="replace")
        return resume_refused(reading, finished.code, printed, self.resumed)
