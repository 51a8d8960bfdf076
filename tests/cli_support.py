"""Running the ``ccweb-store`` command in tests: in-process through typer's runner, or as
``python -m ccweb_store`` in a subprocess that imports this worktree's package."""

from __future__ import annotations

import atexit
import json
import locale
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from typer.testing import CliRunner, Result

from ccweb_store.cli import app
from tests.servers import ROOT, server_env

COMMAND = [sys.executable, "-m", "ccweb_store"]


def ccweb_store(database_url: str, *args: str) -> Result:
    """The command run in-process on ``database_url``."""
    return CliRunner().invoke(app, [*args, "--database-url", database_url])


def as_json(result: Result) -> Any:
    """What a command that must succeed printed as JSON."""
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


#: Variables read when a module is imported (prometheus_client picks its value class then): a
#: command given one runs in a fresh interpreter, not forked from the preloaded one.
READ_AT_IMPORT = ("PROMETHEUS_MULTIPROC_DIR",)


def run_cli(
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: Path = ROOT,
    input: str | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """``python -m ccweb_store ARGS`` run to its end in a process of its own, its output
    captured as text (as ``subprocess.run`` gives it).

    ``env`` defaults to ``server_env()``: this environment importing this checkout, no token.
    The process is forked from one that has the package imported (``tests/cli_zygote.py``).
    """
    environment = dict(env) if env is not None else server_env()
    if any(name in environment for name in READ_AT_IMPORT):
        return subprocess.run(
            [*COMMAND, *args],
            input=input,
            cwd=cwd,
            env=environment,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    return _zygote().run([*COMMAND, *args], list(args), environment, cwd, input, timeout)


class Zygote:
    """This process's ``tests/cli_zygote.py``, started on first use, stopped at exit."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="ccweb-cli-zygote-")
        self.path = os.path.join(self.folder, "socket")
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.cli_zygote", self.path],
            cwd=ROOT,
            env=server_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.log,
        )
        assert self.process.stdout is not None
        if self.process.stdout.readline() != b"ready\n":
            raise AssertionError(f"the CLI zygote did not start:\n{self.stop()}")
        atexit.register(self.stop)

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.log.seek(0)
        text = self.log.read().decode(errors="replace")
        self.log.close()
        shutil.rmtree(self.folder, ignore_errors=True)
        return text

    def run(
        self,
        shown: list[str],
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        input: str | None,
        timeout: float,
    ) -> subprocess.CompletedProcess[str]:
        encoding = locale.getpreferredencoding(False)
        with (
            tempfile.TemporaryFile() as stdin,
            tempfile.TemporaryFile() as stdout,
            tempfile.TemporaryFile() as stderr,
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection,
        ):
            if input is not None:
                stdin.write(input.encode(encoding))
                stdin.seek(0)
            connection.connect(self.path)
            header = json.dumps({"argv": argv, "env": env, "cwd": str(cwd)}).encode()
            socket.send_fds(
                connection, [header], [stdin.fileno(), stdout.fileno(), stderr.fileno()]
            )
            answers = _Answers(connection)
            pid = answers.next()["pid"]
            connection.settimeout(timeout)
            try:
                status = answers.next()["status"]
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                connection.settimeout(None)
                answers.next()
                raise subprocess.TimeoutExpired(
                    shown, timeout, _text(stdout, encoding), _text(stderr, encoding)
                ) from None
            return subprocess.CompletedProcess(
                shown, os.waitstatus_to_exitcode(status), _text(stdout, encoding),
                _text(stderr, encoding),
            )  # fmt: skip


class _Answers:
    """The zygote's answers on one connection: one JSON object per line."""

    def __init__(self, connection: socket.socket) -> None:
        self.connection = connection
        self.buffer = b""

    def next(self) -> dict[str, int]:
        while b"\n" not in self.buffer:
            chunk = self.connection.recv(4096)
            if not chunk:
                raise AssertionError("the CLI zygote closed the connection without an answer")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        answer: dict[str, int] = json.loads(line)
        return answer


def _text(file: IO[bytes], encoding: str) -> str:
    """What a command wrote, decoded with universal newlines as ``text=True`` does."""
    file.seek(0)
    return file.read().decode(encoding).replace("\r\n", "\n").replace("\r", "\n")


_zygotes: dict[int, Zygote] = {}
_starting = threading.Lock()


def _zygote() -> Zygote:
    """This process's zygote (a forked process starts its own)."""
    with _starting:
        if os.getpid() not in _zygotes:
            _zygotes[os.getpid()] = Zygote()
        return _zygotes[os.getpid()]
