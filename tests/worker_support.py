"""Real ``ccweb-store worker`` processes against a real server: a ``Bench`` holds the server
(with the operator token) and the workers a test starts, and speaks the host API to it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

import httpx

from ccweb_store.config import Settings
from ccweb_store.store.uow import Store
from tests import forked
from tests.servers import ROOT, Process, Server, server_env, serving

TOKEN = "worker-test-operator-token"
AGENT = f"{sys.executable} {ROOT / 'tests' / 'fake_agent.py'}"
DEADLINE = 90.0  # against a hang, never a timing assertion


@dataclass
class WorkerProcess:
    """A ``ccweb-store worker`` process; its stderr goes to a file."""

    process: Process
    log: IO[bytes]

    def finish(self, timeout: float = DEADLINE) -> tuple[int, str]:
        """Wait for it to exit; its exit code and its log."""
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise
        self.log.seek(0)
        return code, self.log.read().decode(errors="replace")

    def text(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")


class Bench:
    """A real server with the operator token, and the worker processes a test starts."""

    def __init__(self, server: Server, database_url: str) -> None:
        self.server = server
        self.database_url = database_url
        self.http = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
        )
        self.workers: list[WorkerProcess] = []

    def rpc(self, method: str, params: dict[str, Any]) -> Any:
        message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        body = self.http.post("/rpc", json=message).json()
        assert "result" in body, body
        return body["result"]

    def conversation(self, conversation_id: str, **fields: Any) -> None:
        self.rpc(
            "session.create", {"id": conversation_id, "title": conversation_id.title(), **fields}
        )

    def person_writes(self, conversation_id: str, text: str) -> str:
        """What a host does when a person writes: the message, and a run for a worker."""
        self.rpc("message.append", {"sessionId": conversation_id, "role": "user", "content": text})
        run_id: str = self.rpc("run.enqueue", {"sessionId": conversation_id, "runtimeText": text})[
            "id"
        ]
        return run_id

    def worker(
        self, *args: str, command: str | None = AGENT + " {prompt}", **env: str
    ) -> WorkerProcess:
        log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by the fixture)
        argv = [*forked.COMMAND, "worker", "--url", self.server.url, *args]
        if command is not None:
            argv += ["--command", command]
        process = forked.spawn(
            argv,
            env=server_env(
                **{"CCWEB_TOKEN": TOKEN, "CCWEB_DATABASE_URL": self.database_url, **env}
            ),
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        started = WorkerProcess(process, log)
        self.workers.append(started)
        return started

    def runs(self, **params: Any) -> list[dict[str, Any]]:
        runs: list[dict[str, Any]] = self.rpc("run.list", {"limit": 500, **params})["runs"]
        return runs

    def wait_until(self, what: str, condition: Callable[[], Any]) -> Any:
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            found = condition()
            if found:
                return found
            time.sleep(0.1)
        logs = "\n".join(worker.text() for worker in self.workers)
        raise AssertionError(f"never happened: {what}\nruns: {self.runs()}\nworkers:\n{logs}")

    def idle(self) -> bool:
        """Every run finished."""
        return all(run["status"] in ("completed", "failed") for run in self.runs())

    def close(self) -> None:
        for worker in self.workers:
            if worker.process.poll() is None:
                worker.process.kill()
                worker.process.wait()
            worker.log.close()
        self.http.close()


@contextmanager
def bench_on(database_url: str) -> Iterator[Bench]:
    """A ``Bench`` on a real server of ``database_url``; its workers are killed at the end."""
    with serving(
        database_url, CCWEB_TOKEN=TOKEN, CCWEB_LEASE_SWEEP_SECONDS="0.5", CCWEB_LOG_LEVEL="warning"
    ) as server:
        started = Bench(server, database_url)
        try:
            yield started
        finally:
            started.close()


def read_database(database_url: str, read: Callable[[Store], Any]) -> Any:
    """What ``read`` finds in the database itself."""

    async def go() -> Any:
        store = Store.from_settings(Settings(database_url=database_url))
        try:
            return await read(store)
        finally:
            await store.dispose()

    return asyncio.run(go())
