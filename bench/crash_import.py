"""kill -9 mid-import: a rerun after the kill ends with the same database as a clean import.

Generates a large cc-web state directory (``--sessions`` files of ``--messages`` messages, a
reply file covering every reply state), then on each backend:

1. imports it into a fresh database with ``ccweb-store import-json`` (the clean import);
2. imports it into a second fresh database, SIGKILLing the command ``--kills`` times, each
   time running it again: when its progress shows it 1/kills, 2/kills… of the way through
   the session files, and last while it imports the reply file (plus a few random
   milliseconds, to land inside a transaction); then runs it once more to the end (it must
   exit 0);
3. compares a canonical dump of both databases: every table, every row ordered by primary
   key, every column, ids included.

The only values that may differ are the import's own clock, and only where the importer
documents using it (``legacy_json``): a reply entry without ``createdAt`` gets the column
default (now) and one that arrives failed without ``returnedAt``, ``completedAt`` and
``createdAt`` is settled at the import time. Such a value is replaced by ``<import time>`` in
the dump, after checking that it lies inside that import's run. Exits 1 when the dumps differ.

    python bench/crash_import.py [--sessions 400] [--messages 250] [--kills 3] [--backend all]
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sqlalchemy as sa

from bench.harness import (
    ROOT,
    Report,
    command_line,
    databases,
    finish,
    machine,
    open_engine,
    options_from,
    row_counts,
)
from bench.legacy_state import generate_state
from ccweb_store.store.models import Base

IMPORT = [sys.executable, "-m", "ccweb_store", "import-json"]
PROGRESS = re.compile(r"^\[(\d+)/(\d+)\] ")
IMPORT_TIME = "<import time>"
#: (column, the entry field whose absence makes the importer fill it with its own clock)
CLOCK_COLUMNS = (("created_at", "createdAt"), ("returned_at", "returnedAt"))


@dataclass
class ImportOptions:
    sessions: int = 400
    messages: int = 250
    kills: int = 3
    seconds: float = 900.0  # cap on each import command
    seed: int = 1


@dataclass
class Kill:
    """One SIGKILL: how far the import had gone, and what the database held then."""

    files_done: int
    files_total: int
    rows: dict[str, int]


@dataclass
class Window:
    """When the imports into one database ran (the clock values they may leave)."""

    began: datetime
    ended: datetime

    def holds(self, value: datetime) -> bool:
        slack = timedelta(seconds=1)
        return self.began - slack <= value <= self.ended + slack


def _environment(database_url: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "CCWEB_DATABASE_URL": database_url}


def import_to_end(state: Path, database_url: str, timeout: float) -> dict[str, Any]:
    """Run ``import-json --json`` to its end; its summary (it must exit 0)."""
    done = subprocess.run(
        [*IMPORT, str(state), "--json"],
        cwd=ROOT,
        env=_environment(database_url),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"import-json exited {done.returncode}:\n{done.stderr[-3000:]}")
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


def import_and_kill(
    state: Path, database_url: str, fraction: float, rng: random.Random, timeout: float
) -> Kill:
    """Start ``import-json`` and SIGKILL it once ``fraction`` of its files are done (1.0:
    once it is on its last file)."""
    process = subprocess.Popen(
        [*IMPORT, str(state)],
        cwd=ROOT,
        env=_environment(database_url),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    deadline = time.monotonic() + timeout
    done = total = 0
    try:
        for line in process.stderr:
            match = PROGRESS.match(line)
            if match:
                done, total = int(match.group(1)), int(match.group(2))
                if done >= min(fraction * total, total - 1):
                    time.sleep(rng.uniform(0, 0.02))  # into the next file's transaction
                    break
            if time.monotonic() > deadline:
                break
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
        process.stderr.close()
    if not total:
        raise RuntimeError("the import printed no progress before it was killed")
    return Kill(done, total, asyncio.run(_counts(database_url)))


async def _counts(url: str) -> dict[str, int]:
    async with open_engine(url) as engine:
        return await row_counts(engine)


async def canonical_dump(url: str, window: Window) -> dict[str, list[list[Any]]]:
    """Every row of every table, ordered by primary key, as comparable plain values."""
    dump: dict[str, list[list[Any]]] = {}
    async with open_engine(url) as engine, engine.connect() as connection:
        version = await connection.execute(sa.text("SELECT version_num FROM alembic_version"))
        dump["alembic_version"] = [[row[0]] for row in version]
        for table in Base.metadata.sorted_tables:
            ordered = sa.select(table).order_by(*table.primary_key.columns)
            rows = (await connection.execute(ordered)).mappings().all()
            dump[table.name] = [
                [_plain(value) for value in _settle_clock(table.name, dict(row), window).values()]
                for row in rows
            ]
    return dump


def _settle_clock(table: str, row: dict[str, Any], window: Window) -> dict[str, Any]:
    """Replace the import-time values the importer documents by ``IMPORT_TIME``."""
    if table != "reply_requests":
        return row
    absent = (row.get("extra") or {}).get("$absent", [])
    for column, source_field in CLOCK_COLUMNS:
        value = row[column]
        if source_field in absent and isinstance(value, datetime) and window.holds(value):
            row[column] = IMPORT_TIME
    return row


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return value


def compare(clean: dict[str, list[list[Any]]], crashed: dict[str, list[list[Any]]]) -> list[str]:
    """The differences between two dumps, table by table (empty when equal)."""
    differences = []
    for table in clean:
        a, b = clean[table], crashed.get(table, [])
        if len(a) != len(b):
            differences.append(f"{table}: {len(a)} rows after a clean import, {len(b)} after kills")
        for row_a, row_b in zip(a, b, strict=False):
            if row_a != row_b:
                differences.append(f"{table}: {row_a!r:.300} != {row_b!r:.300}")
                break
    return differences


def kill_points(kills: int) -> list[float]:
    """When to kill, as the fraction of files done: evenly through the session files, and the
    last kill (of two or more) once every session file is done, inside the reply file's
    transaction."""
    if kills == 1:
        return [0.5]
    return [number / kills for number in range(1, kills)] + [1.0]


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class ImportRun:
    kills: list[Kill] = field(default_factory=list)
    final_summary: dict[str, Any] = field(default_factory=dict)
    clean_summary: dict[str, Any] = field(default_factory=dict)
    clean_seconds: float = 0.0
    differences: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    import_time_values: int = 0


def crash_import(
    state: Path, clean_url: str, crashed_url: str, options: ImportOptions
) -> ImportRun:
    run = ImportRun()
    began = _now()
    run.clean_summary = import_to_end(state, clean_url, options.seconds)
    clean_window = Window(began, _now())
    run.clean_seconds = (clean_window.ended - began).total_seconds()

    rng = random.Random(options.seed)
    began = _now()
    for fraction in kill_points(options.kills):
        run.kills.append(import_and_kill(state, crashed_url, fraction, rng, options.seconds))
    run.final_summary = import_to_end(state, crashed_url, options.seconds)
    crashed_window = Window(began, _now())

    clean = asyncio.run(canonical_dump(clean_url, clean_window))
    crashed = asyncio.run(canonical_dump(crashed_url, crashed_window))
    run.differences = compare(clean, crashed)
    run.rows = {table: len(rows) for table, rows in clean.items()}
    run.import_time_values = sum(row.count(IMPORT_TIME) for row in clean.get("reply_requests", []))
    return run


def import_report(title: str, run: ImportRun, total_messages: int) -> Report:
    report = Report(title)
    rows = ", ".join(f"{table} {count:,}" for table, count in run.rows.items())
    report.add("rows after a clean import", rows)
    report.add("clean import took", f"{run.clean_seconds:.1f} s")
    for number, kill in enumerate(run.kills, 1):
        held = ", ".join(f"{t} {c:,}" for t, c in kill.rows.items() if t != "alembic_version")
        report.add(
            f"kill {number}: SIGKILL once progress showed file",
            f"{kill.files_done}/{kill.files_total}; the database held {held}",
        )
    summary = run.final_summary
    sessions, messages, replies = (
        summary.get(key, {}) for key in ("sessions", "messages", "replies")
    )
    report.add(
        "the rerun to the end",
        f"sessions {sessions.get('imported', 0)} imported, {sessions.get('unchanged', 0)} "
        f"unchanged; messages {messages.get('imported', 0):,} imported; replies "
        f"{replies.get('imported', 0)} imported, {replies.get('unchanged', 0)} unchanged",
    )
    report.add("import-time values (reply entries without createdAt…)", run.import_time_values)
    report.add("messages imported in all", run.rows.get("messages", 0), must=total_messages)
    report.add("tables that differ from the clean import", len(run.differences), must=0)
    report.add("canonical dumps equal", "yes" if not run.differences else "NO", must="yes")
    report.problems += run.differences
    return report


def main(argv: Sequence[str] | None = None) -> int:
    helps = {
        "messages": "messages per session",
        "kills": "SIGKILLs per backend",
        "seconds": "cap on each import command",
    }
    parser = command_line(__doc__, ImportOptions(), helps)
    args = parser.parse_args(argv)
    options = options_from(args, ImportOptions)
    if options.sessions < 2 or options.kills < 1:
        parser.error("need at least 2 sessions and 1 kill")
    reports = []
    with (
        tempfile.TemporaryDirectory(prefix="ccweb-state-") as scratch,
        databases(args) as made,
    ):
        state = Path(scratch) / "state"
        total = generate_state(state, options.sessions, options.messages, every_reply_state=True)
        size = sum(path.stat().st_size for path in state.rglob("*.json")) / 1e6
        for backend in made.names:
            run = crash_import(
                state, made.new(backend, "clean"), made.new(backend, "killed"), options
            )
            reports.append(import_report(f"{backend}: import-json killed with SIGKILL", run, total))
    header = (
        f"kill -9 mid-import: {options.sessions} sessions x {options.messages} messages "
        f"({size:.0f} MB of JSON), {options.kills} kills; {machine()}"
    )
    return finish(reports, header)


if __name__ == "__main__":
    sys.exit(main())
