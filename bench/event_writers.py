"""Event-writing commits on PostgreSQL from concurrent writers in several processes, with the
database a little way off: what the ordering of events costs them.

Each writer is a loop of units of work that append one message (its ``message.appended``
event included) and commit, through the store as the server runs them, in ``--processes``
processes of ``--writers`` loops each, for ``--seconds``. Between the writers and PostgreSQL
sits a TCP forwarder (a process of its own) that holds every chunk ``--delay-ms`` in each
direction, as a network between a server and its database does: a lock held from a
transaction's events to its commit is then held across round trips, and the commits of every
process take turns at it, however many cores there are.

With ``--vs PATH``, the same writers also run the ``ccweb_store`` package of another checkout
(``git worktree add PATH COMMIT``), in turn with this one, ``--rounds`` times, and the ratio
of commits/s is printed per count of processes.

    CCWEB_BENCH_POSTGRES_URL=postgresql+asyncpg://root@127.0.0.1:5432/test \\
        python bench/event_writers.py [--processes 1,2,4] [--writers 16] [--seconds 5] \\
        [--delay-ms 1] [--rounds 2] [--vs ../before]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

#: This checkout. Nothing of ``ccweb_store`` is imported at the top of this module, so that a
#: writer process (``write``) imports the package from the checkout it is given.
ROOT = Path(__file__).resolve().parents[1]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Forward what ``reader`` gets to ``writer``, each chunk ``delay`` seconds after it came,
    in order."""
    due: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            at, chunk = await due.get()
            if not chunk:
                break
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            writer.write(chunk)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(send())
    try:
        while chunk := await reader.read(65536):
            due.put_nowait((time.monotonic() + delay, chunk))
    except OSError:
        pass
    due.put_nowait((time.monotonic() + delay, b""))
    await sender


def forward(port: int, host: str, target: int, delay: float) -> None:
    """Listen on 127.0.0.1:``port`` and forward each connection to ``host``:``target``."""

    async def connected(client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        server_in, server_out = await asyncio.open_connection(host, target)
        await asyncio.gather(
            _pipe(client_in, server_out, delay),
            _pipe(server_in, client_out, delay),
            return_exceptions=True,
        )

    async def main() -> None:
        server = await asyncio.start_server(connected, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def write(root: str, url: str, writers: int, seconds: float, start: float, counts: object) -> None:
    """One process's writers: ``ccweb_store`` from ``root``, each loop appending to a
    conversation of its own and committing, from ``start`` (a ``time.time``) for ``seconds``;
    the commits made go to ``counts`` (a queue)."""
    sys.path.insert(0, root)
    import ccweb_store
    from ccweb_store.config import Settings
    from ccweb_store.store.uow import Store

    if not Path(ccweb_store.__file__).resolve().is_relative_to(Path(root).resolve()):
        raise SystemExit(f"ccweb_store came from {ccweb_store.__file__}, not from {root}")

    async def main() -> int:
        store = Store.from_settings(Settings(database_url=url))
        names = [f"w-{uuid.uuid4().hex[:12]}" for _ in range(writers)]
        async with store.uow() as uow:
            for name in names:
                await uow.sessions.create(name)
            await uow.commit()
        await asyncio.sleep(max(0.0, start - time.time()))
        stop = time.monotonic() + seconds
        made = 0

        async def loop(name: str) -> None:
            nonlocal made
            while time.monotonic() < stop:
                async with store.uow() as uow:
                    await uow.messages.append(name, "user", "x")
                    await uow.commit()
                made += 1

        await asyncio.gather(*(loop(name) for name in names))
        await store.dispose()
        return made

    counts.put(asyncio.run(main()))  # type: ignore[attr-defined]


def commits_per_second(root: Path, url: str, processes: int, options: argparse.Namespace) -> float:
    context = multiprocessing.get_context("spawn")
    counts = context.Queue()
    start = time.time() + 2.0  # every process has opened its store and made its conversations
    children = [
        context.Process(
            target=write,
            args=(str(root), url, options.writers, options.seconds, start, counts),
        )
        for _ in range(processes)
    ]
    for child in children:
        child.start()
    for child in children:
        child.join()
        if child.exitcode != 0:
            raise SystemExit(f"a writer process failed (exit code {child.exitcode})")
    made: int = sum(counts.get() for _ in children)
    return made / float(options.seconds)


async def migrated(url: str) -> None:
    from ccweb_store.store.db import create_engine, migrate

    engine = create_engine(url)
    try:
        await migrate(engine)
    finally:
        await engine.dispose()


def main() -> None:
    sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
    from harness import free_port
    from roundtrip import process_counts

    from bench.scratch_databases import create_database, drop_database

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="example: CCWEB_BENCH_POSTGRES_URL=postgresql+asyncpg://root@127.0.0.1:5432/test"
        " python bench/event_writers.py --processes 1,2 --vs ../before",
    )
    parser.add_argument("--processes", type=process_counts, default=[1, 2, 4])
    parser.add_argument("--writers", type=int, default=16, help="writer loops per process")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument(
        "--delay-ms", type=float, default=1.0, help="added each way (0: no forwarder)"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--vs", type=Path, help="a checkout whose ccweb_store is the baseline")
    options = parser.parse_args()
    server = os.environ.get("CCWEB_BENCH_POSTGRES_URL")
    if not server:
        parser.error("set CCWEB_BENCH_POSTGRES_URL to a PostgreSQL server URL")
    if options.vs is not None and not (options.vs / "ccweb_store").is_dir():
        parser.error(f"--vs {options.vs}: no ccweb_store package there")

    from sqlalchemy.engine import make_url

    name = f"ccweb_bench_writers_{uuid.uuid4().hex[:8]}"
    scratch = asyncio.run(create_database(server, name))
    forwarder = None
    try:
        asyncio.run(migrated(scratch))
        url = scratch
        if options.delay_ms > 0:
            target = make_url(scratch)
            port = free_port()
            forwarder = multiprocessing.get_context("spawn").Process(
                target=forward,
                args=(
                    port,
                    target.host or "127.0.0.1",
                    target.port or 5432,
                    options.delay_ms / 1000,
                ),
                daemon=True,
            )
            forwarder.start()
            wait_for_forwarder(port)
            url = target.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
        versions = [("this checkout", ROOT)]
        if options.vs is not None:
            versions.append((f"--vs {options.vs}", options.vs.resolve()))
        print(
            f"{options.writers} writers per process, {options.seconds:g} s each, "
            f"{options.delay_ms:g} ms added each way to PostgreSQL, {os.cpu_count()} cores"
        )
        for processes in options.processes:
            rates: dict[str, list[float]] = {label: [] for label, _ in versions}
            for _ in range(options.rounds):
                for label, root in versions:
                    rates[label].append(commits_per_second(root, url, processes, options))
            shown = ", ".join(
                f"{label}: {statistics.median(found):,.0f} commits/s"
                for label, found in rates.items()
            )
            line = f"{processes} process(es): {shown}"
            if options.vs is not None:
                pairs = [a / b for a, b in zip(*rates.values(), strict=True)]
                line += (
                    f"; ratio {statistics.median(pairs):.2f} ({min(pairs):.2f}–{max(pairs):.2f})"
                )
            print(line, flush=True)
    finally:
        if forwarder is not None:
            forwarder.kill()
        asyncio.run(drop_database(server, name))


def wait_for_forwarder(port: int) -> None:
    """Return once 127.0.0.1:``port`` takes connections (the forwarder has started)."""
    import socket

    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"the forwarder on port {port} did not start")


if __name__ == "__main__":
    main()
