"""``python -m ccweb_store …`` as processes forked from ``tests/cli_zygote.py``: the same
process boundary as ``subprocess`` (arguments, environment, folder, stdin, stdout, stderr, exit
code, signals), without a fresh interpreter's imports.

``spawn`` starts one and hands back a ``ForkedProcess``, which answers the part of
``subprocess.Popen`` the tests use (``pid``, ``poll``, ``wait``, ``send_signal``, ``terminate``,
``kill``, ``returncode``); ``run`` runs one to its end as ``subprocess.run`` would with
``capture_output=True, text=True``.
"""

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
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
COMMAND = [sys.executable, "-m", "ccweb_store"]

#: Variables read when a module is imported (prometheus_client picks its value class then): a
#: command given one must run in a fresh interpreter, not forked from the preloaded one.
READ_AT_IMPORT = ("PROMETHEUS_MULTIPROC_DIR",)

#: Where a stream goes: a file (its descriptor is passed), ``subprocess.DEVNULL``,
#: ``subprocess.PIPE``, or None (stdin: nothing to read; stdout and stderr: this process's).
Stream = IO[bytes] | int | None


def forkable(env: Mapping[str, str]) -> bool:
    """Whether a command with this environment may be forked from the preloaded process."""
    return not any(name in env for name in READ_AT_IMPORT)


class ForkedProcess:
    """A command forked by the zygote; what it reports comes on its connection."""

    def __init__(
        self, args: list[str], connection: socket.socket, pipes: dict[str, IO[Any]]
    ) -> None:
        self.args = args
        self._connection = connection
        self._buffer = b""
        #: This end of each stream given as ``subprocess.PIPE`` (None: not a pipe).
        self.stdin: IO[Any] | None = pipes.get("stdin")
        self.stdout: IO[Any] | None = pipes.get("stdout")
        self.stderr: IO[Any] | None = pipes.get("stderr")
        self.pid: int = self._answer()["pid"]
        self.returncode: int | None = None

    def _answer(self, timeout: float | None = None) -> dict[str, int]:
        """The zygote's next answer (one JSON object per line), within ``timeout``."""
        self._connection.settimeout(timeout)
        while b"\n" not in self._buffer:
            chunk = self._connection.recv(4096)  # TimeoutError / BlockingIOError: not yet
            if not chunk:
                raise AssertionError("the CLI zygote closed the connection without an answer")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        answer: dict[str, int] = json.loads(line)
        return answer

    def _ended(self, status: int) -> int:
        self.returncode = os.waitstatus_to_exitcode(status)
        self._connection.close()
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                return self._ended(self._answer(timeout=0)["status"])
            except (BlockingIOError, TimeoutError):
                return None
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            try:
                return self._ended(self._answer(timeout)["status"])
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout or 0) from None
        return self.returncode

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:
        """As ``Popen.communicate``: ``input`` to stdin, then stdout and stderr read to their
        end (each pipe closed), and the process waited for."""
        read: dict[str, Any] = {}

        def drain(name: str, pipe: IO[Any]) -> None:
            with pipe:
                read[name] = pipe.read()

        readers = [
            threading.Thread(target=drain, args=(name, pipe), daemon=True)
            for name, pipe in (("stdout", self.stdout), ("stderr", self.stderr))
            if pipe is not None
        ]
        for reader in readers:
            reader.start()
        if self.stdin is not None:
            with self.stdin:
                if input is not None:
                    self.stdin.write(input)
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in readers:
            reader.join(None if deadline is None else max(deadline - time.monotonic(), 0))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.wait(None if deadline is None else max(deadline - time.monotonic(), 0))
        return read.get("stdout"), read.get("stderr")

    def __enter__(self) -> ForkedProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """As ``Popen``'s: close the pipes, then wait for the process."""
        for pipe in (self.stdin, self.stdout, self.stderr):
            if pipe is not None:
                pipe.close()
        self.wait()

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """This process's ``tests/cli_zygote.py``, started on first use, stopped at exit."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="ccweb-cli-zygote-")
        self.path = os.path.join(self.folder, "socket")
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.cli_zygote", self.path],
            cwd=ROOT,
            env=env,
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
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.log.seek(0)
        text = self.log.read().decode(errors="replace")
        self.log.close()
        shutil.rmtree(self.folder, ignore_errors=True)
        return text

    def spawn(
        self,
        args: list[str],
        env: Mapping[str, str],
        cwd: Path,
        streams: dict[str, Stream],
        text: bool,
    ) -> ForkedProcess:
        passed: list[int] = []  # the child's descriptors, closed here once sent
        closed: list[int] = []
        pipes: dict[str, IO[Any]] = {}
        for name, stream in streams.items():
            if stream is None and name != "stdin":
                passed.append(1 if name == "stdout" else 2)
            elif stream is None or stream == subprocess.DEVNULL:
                passed.append(os.open(os.devnull, os.O_RDWR))
                closed.append(passed[-1])
            elif stream == subprocess.PIPE:
                read, write = os.pipe()
                ours, theirs = (write, read) if name == "stdin" else (read, write)
                mode = ("w" if name == "stdin" else "r") + ("" if text else "b")
                pipes[name] = open(ours, mode)  # noqa: SIM115 (the caller's, as with Popen)
                passed.append(theirs)
                closed.append(theirs)
            else:
                assert not isinstance(stream, int), f"unsupported stream {stream}"
                passed.append(stream.fileno())
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(self.path)
            header = {"argv": args[len(COMMAND) :], "env": dict(env), "cwd": str(cwd)}
            socket.send_fds(connection, [json.dumps(header).encode()], passed)
            return ForkedProcess(args, connection, pipes)
        except BaseException:
            connection.close()
            for pipe in pipes.values():
                pipe.close()
            raise
        finally:
            for fd in closed:
                os.close(fd)


_zygotes: dict[int, Zygote] = {}
_starting = threading.Lock()


def _zygote() -> Zygote:
    """This process's zygote (a forked process starts its own)."""
    with _starting:
        if os.getpid() not in _zygotes:
            _zygotes[os.getpid()] = Zygote()
        return _zygotes[os.getpid()]


def spawn(
    args: list[str],
    *,
    env: Mapping[str, str],
    cwd: Path = ROOT,
    stdin: Stream = None,
    stdout: Stream = None,
    stderr: Stream = None,
    text: bool = False,
) -> ForkedProcess:
    """Start ``args`` (``COMMAND`` and the command's arguments) forked from the zygote, as
    ``subprocess.Popen`` would (``stdin`` None: nothing to read)."""
    assert args[: len(COMMAND)] == COMMAND, f"only {COMMAND} is forked, not {args}"
    assert forkable(env), f"{READ_AT_IMPORT} need a fresh interpreter"
    streams = {"stdin": stdin, "stdout": stdout, "stderr": stderr}
    return _zygote().spawn(args, env, cwd, streams, text)


def run(
    args: list[str],
    *,
    env: Mapping[str, str],
    cwd: Path = ROOT,
    input: str | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """``args`` run to its end, as ``subprocess.run(args, capture_output=True, text=True)``."""
    encoding = locale.getpreferredencoding(False)
    with (
        tempfile.TemporaryFile() as stdin,
        tempfile.TemporaryFile() as stdout,
        tempfile.TemporaryFile() as stderr,
    ):
        if input is not None:
            stdin.write(input.encode(encoding))
            stdin.seek(0)
        process = spawn(args, env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise subprocess.TimeoutExpired(
                args, timeout or 0, _text(stdout, encoding), _text(stderr, encoding)
            ) from None
        assert process.returncode is not None
        return subprocess.CompletedProcess(
            args, process.returncode, _text(stdout, encoding), _text(stderr, encoding)
        )


def _text(file: IO[bytes], encoding: str) -> str:
    """What a command wrote, decoded with universal newlines as ``text=True`` does."""
    file.seek(0)
    return file.read().decode(encoding).replace("\r\n", "\n").replace("\r", "\n")
