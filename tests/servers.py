"""Real server processes for end-to-end tests: start one, wait until it answers, stop it."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

import httpx

from tests import forked

ROOT = forked.ROOT
SERVE = [*forked.COMMAND, "serve"]


# The ports below Linux's ephemeral range (32768-60999), split evenly among the pytest-xdist
# workers (gw0, gw1, …; a serial run is one worker with all of them): two workers never pick the
# same port, and no outgoing connection's source port takes one between the pick and the bind.
FIRST_PORT = 10000
END_PORT = 32768
_ports = random.Random()


def worker_ports() -> range:
    """The ports this process may hand out: its pytest-xdist worker's share."""
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    count = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")), index + 1)
    size = (END_PORT - FIRST_PORT) // count
    return range(FIRST_PORT + index * size, FIRST_PORT + (index + 1) * size)


def free_port() -> int:
    """A free port from this worker's share, picked at random (two runs side by side on one
    machine seldom try the same one)."""
    ports = worker_ports()
    for _ in range(len(ports)):
        port = _ports.choice(ports)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise AssertionError(f"no free port in {ports.start}-{ports.stop - 1}")


def server_env(**values: str) -> dict[str, str]:
    """This environment with ``values`` on top, importing this checkout, without a token, and
    without the terminal size pytest-xdist's workers set (``COLUMNS``, ``LINES``): a command
    sees what it sees in a user's pipe unless a test gives it a width."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **values}
    for name in ("CCWEB_TOKEN", "COLUMNS", "LINES"):
        if name not in values:
            env.pop(name, None)
    return env


class Process(Protocol):
    """What the tests ask of a server process: ``subprocess.Popen``, or one forked from the
    preloaded package (``tests/forked.py``)."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


@dataclass
class Server:
    """A running server process; its stderr goes to a file so a chatty log never blocks it."""

    process: Process
    url: str
    stderr: IO[bytes]

    log: str | None = None

    def stop(self) -> str:
        """Terminate the process and return everything it wrote to stderr (again: the same)."""
        if self.log is not None:
            return self.log
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.stderr.seek(0)
        self.log = self.stderr.read().decode(errors="replace")
        self.stderr.close()
        return self.log


def start_server(
    command: list[str],
    *,
    port: int,
    env: dict[str, str],
    cwd: Path = ROOT,
    timeout: float = 30,
    with_stdout: bool = False,
) -> Server:
    """Start ``command`` and wait until ``/healthz`` answers on ``port``.

    ``with_stdout``: its stdout (where uvicorn writes the access log) joins the stderr log.
    ``python -m ccweb_store …`` is forked from the preloaded package (``tests/forked.py``).
    """
    stderr = tempfile.TemporaryFile()  # noqa: SIM115 (Server.stop closes it)
    stdout = stderr if with_stdout else subprocess.DEVNULL
    process: Process
    if command[: len(forked.COMMAND)] == forked.COMMAND and forked.forkable(env):
        process = forked.spawn(command, env=env, cwd=cwd, stdout=stdout, stderr=stderr)
    else:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=stdout, stderr=stderr)
    server = Server(process, f"http://127.0.0.1:{port}", stderr)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            httpx.get(f"{server.url}/healthz", timeout=1)
            return server
        except httpx.TransportError:
            time.sleep(0.1)
    log = server.stop()
    raise AssertionError(f"server {' '.join(command)} did not answer on port {port}:\n{log}")


@contextmanager
def serving(database_url: str, *, with_stdout: bool = False, **env: str) -> Iterator[Server]:
    """``ccweb-store serve`` on a free port over ``database_url``, stopped on exit."""
    port = free_port()
    server = start_server(
        [*SERVE, "--port", str(port)],
        port=port,
        env=server_env(CCWEB_DATABASE_URL=database_url, **env),
        with_stdout=with_stdout,
    )
    try:
        yield server
    finally:
        server.stop()
