"""Side by side: each figure of ccweb-store as a ratio to a peer measured in the same run.

A ratio measured in one run means something on a noisy machine where a rate alone does not:
whatever slows the machine down slows both sides. HTTP figures come in rounds that
interleave every measurement (``--rounds``), so drift hits all of them alike; each ratio is
the median of its rounds, with their spread. Rows (``--only`` picks some):

  send       ``tools/call`` of ``ccweb_send_message`` (``return_and_continue``) over ``/mcp``,
             requests/s, against a bare Starlette JSON endpoint (goal ≥ 0.30 of it); and
             against the aiosqlite floor (``floor.py``): the same SQL statements run straight
             on aiosqlite by a bare Starlette endpoint (≥ 0.8 of it)
  list       ``tools/call`` of ``ccweb_list_user_inputs`` over ``/mcp``, the same two peers
             (≥ 0.50 of the bare endpoint, ≥ 0.8 of the floor)
  sdk        a trivial tool call on our ``/mcp`` against the official MCP Python SDK's
             stateless Streamable HTTP server serving one trivial tool (goal ≥ 2×)
  roundtrip  send → ``run.claim`` → ``run.complete``, round trips/s, against a third of the
             bare endpoint's requests/s, a round trip being three requests (goal
             ``roundtrip.GOALS``: ≥ 0.13 of it on SQLite, ≥ 0.08 on PostgreSQL); on SQLite
             also against the aiosqlite floor's round trip, the same three requests' SQL run
             straight on aiosqlite (≥ 0.8 of it)
  latency    ``ccweb_list_user_inputs`` latency in process on a 100,000-message conversation
             against a 1,000-message one (≤ 1.3×) and against cc-web's way, loading the
             session's JSON file and filtering it in Python (≥ 1000× faster)
  import     ``import-json`` rows/s against ``sqlite3.executemany`` of the same rows (≥ 0.5),
             with the importer's peak RSS

Every run (whatever ``--only`` picks, ``--quick`` too) also prints the driver calls of a
send, a claim, a completion and a round trip per engine, counted from the driver in process
(``driver_calls.py``): a table of its own, no goal.

Every server runs in its own process under uvicorn with the same settings, driven by the
same client (``harness.Client``) at the same concurrency. ``roundtrip`` and ``latency`` run
on SQLite and, when ``CCWEB_BENCH_POSTGRES_URL`` names a PostgreSQL server (a scratch
database is made and dropped there), on PostgreSQL; the other rows are SQLite's, the
embedded default. The floor rows tell what the SQLite driver's thread hand-off costs by
itself: where 0.8 of the floor (its goal) stays below a bare-endpoint goal (send, list,
SQLite's round trip), that goal is out of reach through the driver, the bare row shows the
floor's share instead of a verdict, and the floor's goal applies.
About three minutes at the defaults; ``--quick`` checks that everything
runs in seconds (its figures mean nothing).

    python bench/compare.py [--seconds 1.5] [--rounds 5] [--only send,list,...] [--quick]

The HTTP rows are measured by ``compare_http.py``, the table drawn by ``compare_rows.py``;
the in-process rows (latency, import) are here.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import platform
import statistics
import tempfile
import time
from contextlib import ExitStack
from importlib.metadata import version
from pathlib import Path

import driver_calls
import user_inputs
from compare_http import (
    Window,
    http_measurements,
    mcp_rows,
    print_http_details,
    roundtrip_rows,
    servers,
)
from compare_rows import POSTGRES_ENV, SKIPPED_POSTGRES, Row, at_least, database_url, print_table

import_bench = importlib.import_module("import")  # bench/import.py ("import" is a keyword)

ROWS = ("send", "list", "sdk", "roundtrip", "latency", "import")
#: A bound on sends per second, to create enough targets (each send needs an idle one).
MAX_SENDS_PER_SECOND = 6_000


# --- In process: ccweb_list_user_inputs latency ------------------------------------------------


def latency_rows(options: argparse.Namespace, tmp: Path) -> list[Row]:
    small, large = options.latency_sizes
    rows = []
    for backend in options.backends:
        growth = Row(f"list_user_inputs latency, {large:,} vs {small:,} msgs, {backend}")
        versus = Row(f"list_user_inputs at {large:,} msgs vs JSON file, {backend}")
        if backend not in options.measured_backends:
            growth.skipped = versus.skipped = SKIPPED_POSTGRES
            rows += [growth, versus]
            continue
        url = database_url(backend, options, tmp, "latency")
        sql_ms, json_ms = asyncio.run(measure_latency(options, url, tmp))
        growth.ours = f"{statistics.median(sql_ms[large]):.3f} ms"
        growth.peer = f"{statistics.median(sql_ms[small]):.3f} ms"
        growth.ratios = [b / s for b, s in zip(sql_ms[large], sql_ms[small], strict=True)]
        growth.goal = "≤ 1.3×"
        growth.met = statistics.median(growth.ratios) <= 1.3
        versus.ours = growth.ours
        versus.peer = f"{statistics.median(json_ms):.1f} ms"
        versus.ratios = [j / s for j, s in zip(json_ms, sql_ms[large], strict=True)]
        rows += [growth, at_least(versus, user_inputs.TARGET_SPEEDUP, "× faster")]
    return rows


async def measure_latency(
    options: argparse.Namespace, url: str, json_dir: Path
) -> tuple[dict[int, list[float]], list[float]]:
    """Per round: the median latency at each size, and one load-and-filter of the large JSON
    file; the same code as ``user_inputs.py``, in rounds so that each gives a ratio."""
    sizes = options.latency_sizes
    store, sources = await user_inputs.prepare(url, json_dir, sizes)
    sql_ms: dict[int, list[float]] = {size: [] for size in sizes}
    json_ms = []
    try:
        await user_inputs.sql_round(store, sources, options.latency_runs)  # warm up
        for _ in range(options.latency_rounds):
            measured = await user_inputs.sql_round(store, sources, options.latency_runs)
            for size, samples in measured.items():
                sql_ms[size].append(statistics.median(samples))
            json_ms.append(user_inputs.json_sample_ms(json_dir, sizes[-1]))
    finally:
        await store.dispose()
    return sql_ms, json_ms


# --- import-json -----------------------------------------------------------------------------


def import_rows(options: argparse.Namespace, tmp: Path) -> tuple[list[Row], str]:
    """The import row, and a line of details: rounds of the importer (in a process of its
    own, for its peak RSS) then the plain copy of the rows it wrote."""
    sessions, messages = options.import_size
    state = tmp / "state"
    import_bench.generate_state(state, sessions, messages)
    runs, peers = [], []
    for i in range(options.import_rounds):
        imported = tmp / f"importer-{i}.db"
        run = import_bench.import_in_subprocess(imported, state)
        seconds, cpu, rows = import_bench.plain_sqlite_insert(imported, tmp / f"baseline-{i}.db")
        if rows != run.rows:
            raise RuntimeError(f"the importer wrote {run.rows} rows, the copy {rows}")
        runs.append(run)
        peers.append((seconds, cpu))
    rows = runs[0].rows
    row = Row(
        f"import-json ({rows:,} rows) vs sqlite3.executemany",
        f"{statistics.median(rows / run.seconds for run in runs):,.0f} rows/s;"
        f" peak RSS {max(run.peak_rss_mb for run in runs):.0f} MB"
        f" ({max(run.rss_before_mb for run in runs):.0f} before)",
        f"{statistics.median(rows / seconds for seconds, _ in peers):,.0f} rows/s",
        [seconds / run.seconds for run, (seconds, _) in zip(runs, peers, strict=True)],
    )
    by_cpu = [cpu / run.cpu_seconds for run, (_, cpu) in zip(runs, peers, strict=True)]
    details = (
        f"import: {sessions} sessions x {messages} messages; importer CPU"
        f" {', '.join(f'{run.cpu_seconds:.2f}' for run in runs)} s, copy CPU"
        f" {', '.join(f'{cpu:.2f}' for _, cpu in peers)} s: ratio by CPU time"
        f" {statistics.median(by_cpu):.2f}"
    )
    return [at_least(row, 0.5)], details


# --- main ------------------------------------------------------------------------------------


def parse_options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=1.5, help="length of each HTTP window")
    parser.add_argument("--rounds", type=int, default=5, help="HTTP rounds (each window once)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent client loops")
    parser.add_argument(
        "--backend",
        choices=["sqlite", "postgres", "all"],
        default="all",
        help=f"for roundtrip and latency; all: SQLite, and PostgreSQL when {POSTGRES_ENV} is set",
    )
    parser.add_argument(
        "--only",
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        default=list(ROWS),
        help=f"comma-separated rows to measure, of: {', '.join(ROWS)}",
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes and windows: checks it runs, nothing more"
    )
    options = parser.parse_args(argv)
    unknown = set(options.only) - set(ROWS)
    if unknown:
        parser.error(f"unknown rows {sorted(unknown)}; choose among {', '.join(ROWS)}")
    options.postgres = os.environ.get(POSTGRES_ENV)
    if options.backend == "postgres" and not options.postgres:
        parser.error(f"--backend postgres needs {POSTGRES_ENV}")
    options.backends = {
        "sqlite": ["SQLite"],
        "postgres": ["PostgreSQL"],
        "all": ["SQLite", "PostgreSQL"],
    }[options.backend]
    options.measured_backends = [b for b in options.backends if b == "SQLite" or options.postgres]
    options.latency_sizes = (1_000, 100_000)
    options.latency_rounds, options.latency_runs = 7, 50
    options.import_size, options.import_rounds = (100, 1_000), 3
    if options.quick:
        options.seconds, options.rounds = 0.2, 1
        options.latency_sizes, options.latency_rounds, options.latency_runs = (10, 100), 1, 3
        options.import_size, options.import_rounds = (3, 20), 1
    options.targets = int(options.rounds * options.seconds * MAX_SENDS_PER_SECOND) + 100
    return options


def main(argv: list[str] | None = None) -> None:
    options = parse_options(argv)
    wanted = set(options.only)
    began = time.perf_counter()
    load = os.getloadavg()
    rows: list[Row] = []
    windows: dict[str, list[Window]] = {}
    import_details = ""
    with tempfile.TemporaryDirectory(prefix="ccweb-compare-") as scratch, ExitStack() as cleanup:
        options.cleanup = cleanup
        tmp = Path(scratch)
        if wanted & {"send", "list", "sdk", "roundtrip"}:
            with servers(options, tmp, wanted) as started:
                windows = http_measurements(options, started, wanted)
            rows += mcp_rows(windows)
        if "latency" in wanted:
            rows += latency_rows(options, tmp)
        if "import" in wanted:
            imported, import_details = import_rows(options, tmp)
            rows += imported
        if "roundtrip" in wanted:
            rows += roundtrip_rows(options, windows)
        calls = driver_calls.measure(options.backends, options.postgres, tmp)
    print(
        f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()},"
        f" mcp {version('mcp')}; load average {load[0]:.2f} before, {os.getloadavg()[0]:.2f}"
        f" after; {time.perf_counter() - began:.0f} s"
    )
    print(
        f"HTTP: {options.rounds} rounds of {options.seconds:g} s windows, {options.clients}"
        " clients; ratio = median of the rounds' ratios (min–max)\n"
    )
    print_table(rows)
    print("\nDriver calls per step, counted from the driver in process (driver_calls.py):\n")
    driver_calls.print_table(calls)
    if windows:
        print_http_details(windows)
    if import_details:
        print(f"\n{import_details}")


if __name__ == "__main__":
    main()
