"""Push, not poll: hand-off latency through the bundled worker, and what the event stream costs.

    python bench/handoff.py [--sends 500] [--hops 100] [--poll-sends 40] [--quick]

On SQLite (a file) and, with ``CCWEB_BENCH_POSTGRES_URL``, on PostgreSQL, against a real
``ccweb-store serve`` process:

- **hand-off**: from the answer of a ``ccweb_send_message`` (``one_way``) to the moment the
  bundled worker's command starts (the command writes its run id to a FIFO this script reads);
  p50 and p99. Beside it, the same with a polling worker as the worker was before long-poll
  claims (a claim every 1.0 s when idle, in this script), in the same run.
- **hop**: one ``return_and_continue`` round A→B→A, from the send's answer to the moment A's
  ``reply_auto_run`` command starts (B's command answers at once).
- **events**: from the answer of a ``message.append`` to the moment an SSE client of
  ``GET /events`` has the event (p50); send throughput with 100 connected subscribers against
  none (alternating rounds, the subscribers in a process of their own): subscribers that each
  follow one conversation (a UI per conversation; the goal) and subscribers that each follow
  every event (reported: each send is then written to every one of them); the server's
  resident memory per subscriber.

Goals: hand-off p50 ≤ 5 ms and p99 ≤ 25 ms per engine; events p50 ≤ 5 ms; 100 subscribers
cost ≤ 5 % of send throughput (ratio ≥ 0.95).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import multiprocessing
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import ROOT, ServerProcess, machine, percentile
from bench.scratch_databases import create_database, drop_database

MARK = 'printf \'%s %s\\n\' "$CCWEB_RUN_ID" "$CCWEB_CONVERSATION_ID" > {fifo}; printf done'
_ids = itertools.count(1)


async def call(client: httpx.AsyncClient, method: str, params: dict[str, Any]) -> Any:
    message = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params}
    response = await client.post("/rpc", json=message)
    body = response.json()
    if "result" not in body:
        raise RuntimeError(f"{method}: {body}")
    return body["result"]


async def send(client: httpx.AsyncClient, source: str, target: str, mode: str) -> dict[str, Any]:
    result: dict[str, Any] = await call(
        client,
        "tools.call",
        {
            "tool": "ccweb_send_message",
            "sourceSessionId": source,
            "args": {"targetConversationId": target, "content": "go", "replyMode": mode},
        },
    )
    return result


class Marks:
    """Lines the commands write to a FIFO, each timed as it arrives: (run id, conversation)."""

    def __init__(self, path: Path, loop: asyncio.AbstractEventLoop) -> None:
        os.mkfifo(path)
        self.path = path
        self.loop = loop
        self.queue: asyncio.Queue[tuple[float, str, str]] = asyncio.Queue()
        # Opened read-write: the FIFO always has a writer, so reads never see an end.
        self.fd = os.open(path, os.O_RDWR)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        with os.fdopen(self.fd, "r", buffering=1) as lines:
            for line in lines:
                stamp = time.monotonic()
                run_id, _, conversation = line.strip().partition(" ")
                self.loop.call_soon_threadsafe(self.queue.put_nowait, (stamp, run_id, conversation))

    async def wait_for(self, accept: Callable[[str, str], bool]) -> float:
        while True:
            stamp, run_id, conversation = await asyncio.wait_for(self.queue.get(), 60)
            if accept(run_id, conversation):
                return stamp


async def polling_worker(url: str, command: str, stop: asyncio.Event) -> None:
    """The worker as it was before long-poll claims: claim, and sleep 1.0 s when idle."""
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        while not stop.is_set():
            claimed = (await call(client, "run.claim", {"workerId": "poller"}))["run"]
            if claimed is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)
                continue
            env = {
                **os.environ,
                "CCWEB_RUN_ID": claimed["id"],
                "CCWEB_CONVERSATION_ID": claimed["sessionId"],
            }
            process = await asyncio.create_subprocess_exec(
                "/bin/sh", "-c", command, env=env, stdout=asyncio.subprocess.PIPE
            )
            output, _ = await process.communicate()
            await call(
                client,
                "run.complete",
                {
                    "runId": claimed["id"],
                    "workerId": "poller",
                    "status": "completed",
                    "output": output.decode(),
                },
            )


def start_worker(url: str, command: str) -> Any:
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CCWEB_TOKEN", None)
    return subprocess.Popen(
        [sys.executable, "-m", "ccweb_store", "worker", "--url", url, "--command", command,
         "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


async def handoffs(client: httpx.AsyncClient, marks: Marks, count: int, prefix: str) -> list[float]:
    """Seconds from each ``one_way`` send's answer to its command's start."""
    targets = [f"{prefix}-t{i}" for i in range(min(count, 50))]
    await call(client, "session.create", {"id": f"{prefix}-src"})
    for target in targets:
        await call(client, "session.create", {"id": target})
    latencies = []
    for index in range(count):
        sent = await send(client, f"{prefix}-src", targets[index % len(targets)], "one_way")
        answered = time.monotonic()
        started = await marks.wait_for(partial(_is_run, sent["runId"]))
        latencies.append(started - answered)
        await wait_idle(client, targets[(index + 1) % len(targets)])
    return latencies


def _is_run(run_id: str, run: str, _conversation: str) -> bool:
    return run == run_id


def _in_conversation(source: str, _run: str, conversation: str) -> bool:
    return conversation == source


async def hops(client: httpx.AsyncClient, marks: Marks, count: int, prefix: str) -> list[float]:
    """Seconds from a ``return_and_continue`` send's answer to the source's auto-run start."""
    pairs = [(f"{prefix}-a{i}", f"{prefix}-b{i}") for i in range(min(count, 20))]
    for source, target in pairs:
        await call(client, "session.create", {"id": source})
        await call(client, "session.create", {"id": target})
    latencies = []
    for index in range(count):
        source, target = pairs[index % len(pairs)]
        await send(client, source, target, "return_and_continue")
        answered = time.monotonic()
        started = await marks.wait_for(partial(_in_conversation, source))
        latencies.append(started - answered)
        next_source, next_target = pairs[(index + 1) % len(pairs)]
        await wait_idle(client, next_source)
        await wait_idle(client, next_target)
    return latencies


async def wait_idle(client: httpx.AsyncClient, conversation: str) -> None:
    """Until the conversation has no queued or running run (the previous round finished)."""
    while True:
        runs = (await call(client, "run.list", {"sessionId": conversation, "limit": 5}))["runs"]
        if all(run["status"] not in ("queued", "running") for run in runs):
            return
        await asyncio.sleep(0.005)


async def event_latencies(url: str, count: int) -> list[float]:
    """Seconds from a ``message.append`` answer to its event on an SSE stream."""
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        await call(client, "session.create", {"id": "ev-conv"})
        arrived: asyncio.Queue[tuple[float, str]] = asyncio.Queue()

        async def read() -> None:
            async with client.stream("GET", "/events?types=message.appended") as response:
                async for line in response.aiter_lines():
                    if line.startswith("data:"):
                        data = json.loads(line[5:])
                        arrived.put_nowait((time.monotonic(), data["messageId"]))

        reader = asyncio.create_task(read())
        await asyncio.sleep(0.3)
        latencies = []
        for _ in range(count):
            appended = await call(
                client,
                "message.append",
                {"sessionId": "ev-conv", "role": "user", "content": "x"},
            )
            answered = time.monotonic()
            message_id = appended["id"]
            while True:
                stamp, seen = await asyncio.wait_for(arrived.get(), 30)
                if seen == message_id:
                    latencies.append(max(0.0, stamp - answered))
                    break
        reader.cancel()
        return latencies


def _subscribers(url: str, count: int, everything: bool, ready: Any, stop: Any) -> None:
    async def hold() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=None) as client:

            async def one(index: int) -> None:
                path = "/events" if everything else f"/events?conversation=watched-{index}"
                async with client.stream("GET", path) as response:
                    async for _ in response.aiter_lines():
                        pass

            tasks = [asyncio.create_task(one(index)) for index in range(count)]
            await asyncio.sleep(1.0)
            ready.set()
            await asyncio.to_thread(stop.wait)
            for task in tasks:
                task.cancel()

    asyncio.run(hold())


async def send_rate(client: httpx.AsyncClient, sends: int, prefix: str) -> float:
    """``one_way`` sends per second, each to a conversation of its own (none busy)."""
    await call(client, "session.create", {"id": f"{prefix}-src"})
    targets = [f"{prefix}-{i}" for i in range(sends)]
    for target in targets:
        await call(client, "session.create", {"id": target})
    started = time.perf_counter()
    for target in targets:
        await send(client, f"{prefix}-src", target, "one_way")
    return sends / (time.perf_counter() - started)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def measure(url_of_db: str, label: str, options: argparse.Namespace) -> dict[str, Any]:
    server = ServerProcess(url_of_db).start()
    figures: dict[str, Any] = {"engine": label}
    tmp = Path(tempfile.mkdtemp(prefix="handoff-"))
    loop = asyncio.get_running_loop()
    marks = Marks(tmp / "marks", loop)
    command = MARK.format(fifo=marks.path)
    url = f"http://127.0.0.1:{server.port}"
    try:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            worker = start_worker(url, command)
            try:
                await asyncio.sleep(1.0)
                figures["handoff"] = await handoffs(client, marks, options.sends, "h")
                figures["hop"] = await hops(client, marks, options.hops, "p")
            finally:
                worker.terminate()
                worker.wait(timeout=60)
            stop = asyncio.Event()
            poller = asyncio.create_task(polling_worker(url, command, stop))
            try:
                figures["poll"] = await handoffs(client, marks, options.poll_sends, "q")
            finally:
                stop.set()
                await poller
        figures["events"] = await event_latencies(url, options.events)
        figures |= await subscriber_cost(url, server.pid, options)
    finally:
        server.stop()
    return figures


async def subscriber_cost(url: str, pid: int, options: argparse.Namespace) -> dict[str, Any]:
    """Send throughput with no subscriber, with subscribers that each follow a conversation
    of their own (a UI per conversation), and with subscribers that follow every event (an
    operator's console each), in alternating rounds; the server's RSS per subscriber."""
    context = multiprocessing.get_context("spawn")
    rates: dict[str, list[float]] = {"none": [], "own": [], "all": []}
    rss_before = rss_kib(pid)
    rss_with = rss_before
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for index in range(options.subscribers):
            await call(client, "session.create", {"id": f"watched-{index}"})
        for round_number in range(options.rounds):
            rates["none"].append(await send_rate(client, options.rate_sends, f"n{round_number}"))
            for kind in ("own", "all"):
                ready, stop = context.Event(), context.Event()
                process = context.Process(
                    target=_subscribers,
                    args=(url, options.subscribers, kind == "all", ready, stop),
                )
                process.start()
                await asyncio.to_thread(ready.wait, 60)
                prefix = f"{kind}{round_number}"
                rates[kind].append(await send_rate(client, options.rate_sends, prefix))
                rss_with = max(rss_with, rss_kib(pid))
                stop.set()
                await asyncio.to_thread(process.join, 30)
                await asyncio.sleep(0.5)

    def median_ratio(kind: str) -> float:
        ratios = sorted(m / n for m, n in zip(rates[kind], rates["none"], strict=True))
        return ratios[len(ratios) // 2]

    return {
        "ratio_own": median_ratio("own"),
        "ratio_all": median_ratio("all"),
        "rate_none": sorted(rates["none"])[len(rates["none"]) // 2],
        "kib_per_subscriber": max(0, rss_with - rss_before) / options.subscribers,
    }


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def verdict(ok: bool) -> str:
    return "meets" if ok else "MISSES"


def report(figures: list[dict[str, Any]], options: argparse.Namespace) -> None:
    print(f"\nbench/handoff.py — {machine()}")
    print(
        f"{options.sends} hand-offs, {options.hops} hops, {options.poll_sends} polled hand-offs, "
        f"{options.events} events, {options.subscribers} subscribers\n"
    )
    print("| engine | measure | p50 | p99 | goal | verdict |")
    print("|---|---|---|---|---|---|")
    for row in figures:
        engine = row["engine"]
        handoff, hop, poll = row["handoff"], row["hop"], row["poll"]
        p50, p99 = percentile(handoff, 0.5), percentile(handoff, 0.99)
        print(
            f"| {engine} | hand-off, long-poll worker | {ms(p50)} | {ms(p99)} | "
            f"≤ 5 ms / ≤ 25 ms | {verdict(p50 <= 0.005 and p99 <= 0.025)} |"
        )
        print(
            f"| {engine} | hand-off, polling worker (1.0 s) | {ms(percentile(poll, 0.5))} | "
            f"{ms(percentile(poll, 0.99))} | (baseline) | |"
        )
        print(
            f"| {engine} | hop A→B→A | {ms(percentile(hop, 0.5))} | "
            f"{ms(percentile(hop, 0.99))} | | |"
        )
        events = row["events"]
        print(
            f"| {engine} | commit → SSE event | {ms(percentile(events, 0.5))} | "
            f"{ms(percentile(events, 0.99))} | p50 ≤ 5 ms | "
            f"{verdict(percentile(events, 0.5) <= 0.005)} |"
        )
        own, every = row["ratio_own"], row["ratio_all"]
        print(
            f"| {engine} | sends/s with {options.subscribers} subscribers, each following its "
            f"conversation ÷ with none | {own:.2f} ({row['rate_none']:.0f}/s with none) | | "
            f"≥ 0.95 | {verdict(own >= 0.95)} |"
        )
        print(
            f"| {engine} | sends/s with {options.subscribers} subscribers following every "
            f"event ÷ with none | {every:.2f} | | (reported) | |"
        )
        print(
            f"| {engine} | server memory per subscriber | "
            f"{row['kib_per_subscriber']:.0f} KiB | | | |"
        )


async def main(options: argparse.Namespace) -> None:
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        figures.append(await measure(f"sqlite+aiosqlite:///{tmp}/handoff.db", "SQLite", options))
    server_url = os.environ.get("CCWEB_BENCH_POSTGRES_URL")
    if server_url:
        name = f"handoff_{uuid.uuid4().hex[:8]}"
        url = await create_database(server_url, name)
        try:
            figures.append(await measure(url, "PostgreSQL", options))
        finally:
            await drop_database(server_url, name)
    report(figures, options)


def parse_options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sends", type=int, default=500, help="hand-offs measured")
    parser.add_argument("--hops", type=int, default=100, help="A→B→A hops measured")
    parser.add_argument("--poll-sends", type=int, default=40, help="hand-offs, polling worker")
    parser.add_argument("--events", type=int, default=500, help="events timed on SSE")
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--rate-sends", type=int, default=400, help="sends per throughput round")
    parser.add_argument("--rounds", type=int, default=3, help="throughput rounds (each way)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks it runs")
    options = parser.parse_args(argv)
    if options.quick:
        options.sends, options.hops, options.poll_sends = 10, 4, 2
        options.events, options.subscribers, options.rate_sends, options.rounds = 10, 5, 20, 1
    return options


if __name__ == "__main__":
    asyncio.run(main(parse_options()))
