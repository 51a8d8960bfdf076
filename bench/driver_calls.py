"""The driver calls of one send, one claim, one completion and one round trip, per engine,
counted from the driver during real calls to the service in process.

Each step runs against a ``Store`` on a migrated database, after a warm-up round trip, so
that connections are open and statements prepared, as in a running server:

- **send**: ``ccweb_send_message`` (``return_and_continue``) to an idle target;
- **claim**: ``run.claim`` of that send's ``cross_conversation`` run (no extras, the lease
  probe not due: the claim as it runs between probes, which come at most once a second);
- **complete**: ``run.complete`` (``completed``, with an output) of that run, which returns
  the reply to the source and queues the source's ``reply_auto_run``;
- **round trip**: the three again, to another idle target, counted as one.

What counts as a driver call:

- SQLite: every call to aiosqlite's connection that hands work to its thread (``execute``,
  ``execute_fetchall``, ``executemany``, ``executescript``, ``commit``, ``rollback``, and
  fetching from a cursor ``execute`` gave), counted by wrapping those methods of each
  connection the engine opens. One call may run several statements: an ``executemany``
  (one per row), the ``BEGIN IMMEDIATE`` sqlite3 issues before a statement that writes, a
  batch's trigger. The calls are named from the statements ``sqlite3``'s trace callback
  reported during each (``Connection.set_trace_callback``), a batch by its steps.
- PostgreSQL: every query asyncpg sends for ``execute``, ``fetch``, ``fetchrow``,
  ``fetchval`` and ``executemany``, a transaction's ``BEGIN`` and ``COMMIT`` included, as
  asyncpg's query loggers (``Connection.add_query_logger``) report them, plus every
  ``prepare``, every call on a prepared statement and every ``copy_records_to_table`` (which
  the query loggers do not see), counted by a ``Connection`` subclass of asyncpg's (its
  ``connection_class``).

``compare.py`` prints the counts as a table of its own; ``tests/test_bench_driver_calls.py``
pins them, so that a change that adds a call shows up in review.

    python bench/driver_calls.py [--verbose]   # SQLite, and PostgreSQL when
                                               # CCWEB_BENCH_POSTGRES_URL names a server
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy import event
from sqlalchemy.dialects.sqlite import dialect as sqlite_dialect
from sqlalchemy.pool import ConnectionPoolEntry

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.scratch_databases import create_database, drop_database
from ccweb_store.config import Settings, database_kind, normalize_database_url
from ccweb_store.contract.runs import ClaimRun, CompleteRun
from ccweb_store.contract.sessions import CreateSession
from ccweb_store.domain.context import Source
from ccweb_store.domain.kinds import RunKind, RunStatus
from ccweb_store.protocol import registry as tools
from ccweb_store.services import conversations, runs
from ccweb_store.store.db import create_engine, migrate
from ccweb_store.store.statements import Batch
from ccweb_store.store.uow import Store

POSTGRES_ENV = "CCWEB_BENCH_POSTGRES_URL"
STEPS = ("send", "claim", "complete", "round trip")
WORKER = "w"


@dataclass
class CallLog:
    """The driver calls, in order, each as the statements it ran (SQLite: joined by
    ``CALL_PARTS``)."""

    statements: list[str] = field(default_factory=list)
    #: What sqlite3's trace callback reported since the current call began.
    traced: list[str] = field(default_factory=list)

    def sqlite_statement(self, sql: str) -> None:
        """``sqlite3``'s trace callback (on aiosqlite's thread)."""
        self.traced.append(sql)

    def sqlite_call(self, sql: str) -> None:
        """An aiosqlite call that ended, which ran ``sql`` (and what the trace reported)."""
        traced, self.traced = self.traced, []
        ran = [t for t in traced if not t.upper().startswith("BEGIN")]
        parts = [sql]
        if len(ran) > len(set(ran)) and not _BATCH_VIEW.match(sql):
            parts.append(TRIGGER)  # the trace names a trigger's statements by their caller's
        if len(ran) < len(traced) and not sql.upper().startswith("BEGIN"):
            parts.insert(0, "BEGIN IMMEDIATE")
        self.statements.append(CALL_PARTS.join(parts))

    def postgres_query(self, record: asyncpg.connection.LoggedQuery) -> None:
        """An asyncpg query logger."""
        self.statements.append(record.query)

    def take(self) -> list[str]:
        taken, self.statements = self.statements, []
        return taken


#: A SQLite statement's trigger, as a part of its call.
TRIGGER = "TRIGGER"
#: Between the statements one SQLite call ran (the ``BEGIN`` sqlite3 issued, then the SQL).
CALL_PARTS = "\n-- and --\n"
#: The aiosqlite connection's methods that hand work to its thread.
SQLITE_CALLS = (
    "execute",
    "execute_fetchall",
    "execute_insert",
    "executemany",
    "executescript",
    "commit",
    "rollback",
)


def count_sqlite_calls(driver: Any, log: CallLog) -> None:
    """Log each call to ``driver`` (an aiosqlite connection) that hands work to its thread:
    its public methods, and the fetches of the cursors ``execute`` returns."""

    def counted(name: str, method: Any) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            log.traced = []
            result = await method(*args, **kwargs)
            log.sqlite_call(str(args[0]) if args else name.upper())
            return CountedCursor(result, log) if name == "execute" else result

        return call

    for name in SQLITE_CALLS:
        setattr(driver, name, counted(name, getattr(driver, name)))


class CountedCursor:
    """An aiosqlite cursor whose fetches are logged as calls of their own."""

    def __init__(self, cursor: Any, log: CallLog) -> None:
        self._cursor, self._log = cursor, log

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._cursor, name)
        if name not in ("fetchone", "fetchmany", "fetchall"):
            return attribute

        async def fetch(*args: Any, **kwargs: Any) -> Any:
            result = await attribute(*args, **kwargs)
            self._log.sqlite_call(f"FETCH {name}")
            return result

        return fetch


@dataclass(frozen=True)
class StepCalls:
    """One step's driver calls: the statements, in order."""

    step: str
    statements: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.statements)


def counting_sqlite(engine_url: str, log: CallLog) -> Store:
    """A store on a SQLite URL whose every new driver connection reports its calls to ``log``
    (set after the store's own setup on connect, so its pragmas are not counted)."""
    engine = create_engine(engine_url)

    @event.listens_for(engine.sync_engine, "connect")
    def _trace(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
        dbapi_connection.run_async(lambda driver: driver.set_trace_callback(log.sqlite_statement))
        count_sqlite_calls(dbapi_connection.driver_connection, log)

    return Store(engine, Settings(database_url=engine_url))


def counting_postgres(engine_url: str, log: CallLog) -> Store:
    """A store on a PostgreSQL URL whose every new asyncpg connection reports its queries to
    ``log``: the query loggers for what they see, the connection class for prepared
    statements."""

    class CountingConnection(asyncpg.Connection):  # type: ignore[misc]
        async def prepare(self, query: str, *args: Any, **kwargs: Any) -> Any:
            log.statements.append(f"PREPARE {query}")
            return CountedStatement(await super().prepare(query, *args, **kwargs), query, log)

        async def copy_records_to_table(self, table_name: str, **kwargs: Any) -> Any:
            log.statements.append(f"COPY {table_name}")
            return await super().copy_records_to_table(table_name, **kwargs)

    engine = create_engine(engine_url, connect_args={"connection_class": CountingConnection})

    @event.listens_for(engine.sync_engine, "connect")
    def _log_queries(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
        dbapi_connection.driver_connection.add_query_logger(log.postgres_query)

    return Store(engine, Settings(database_url=engine_url))


class CountedStatement:
    """A prepared statement whose calls that reach the server are logged; the rest pass."""

    RUNS = frozenset(
        ("fetch", "fetchrow", "fetchval", "fetchmany", "executemany", "explain", "cursor")
    )

    def __init__(self, statement: Any, query: str, log: CallLog) -> None:
        self._statement, self._query, self._log = statement, query, log

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._statement, name)
        if name not in self.RUNS:
            return attribute

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._log.statements.append(self._query)
            return attribute(*args, **kwargs)

        return counted


async def send(store: Store, source: str, target: str) -> None:
    result = await tools.call_tool(
        store,
        Source(source, 0),
        "ccweb_send_message",
        {
            "targetConversationId": target,
            "content": "Run the tests and report back.",
            "replyMode": "return_and_continue",
        },
    )
    if result.get("status") != "waiting":
        raise RuntimeError(f"send failed: {result}")


async def claim(store: Store) -> str:
    # No lease probe due: the claim as it runs between probes, which ask the database at
    # most once a second (``Store.no_lease_expires_before``), whatever this machine's speed.
    store.no_lease_expires_before = datetime.max.replace(tzinfo=UTC)
    claimed = await runs.claim_run(
        store, ClaimRun(worker_id=WORKER, kinds=[RunKind.CROSS_CONVERSATION])
    )
    if claimed.run is None:
        raise RuntimeError("nothing to claim")
    return claimed.run.id


async def complete(store: Store, run_id: str) -> None:
    done = await runs.complete_run(
        store,
        CompleteRun(run_id=run_id, worker_id=WORKER, status=RunStatus.COMPLETED, output="Done."),
    )
    if [reply.status for reply in done.replies] != ["returned"]:
        raise RuntimeError(f"reply not returned: {done.replies}")


async def count_steps(url: str) -> list[StepCalls]:
    """Each step's driver calls on the database at ``url``, migrated first (it must hold no
    conversations of this script's names)."""
    log = CallLog()
    url = normalize_database_url(url)
    maker = counting_sqlite if database_kind(url) == "sqlite" else counting_postgres
    store = maker(url, log)
    try:
        await migrate(store.engine)
        await conversations.create_session(store, CreateSession(id="src", title="Source"))
        for target in ("warm", "tgt-1", "tgt-2"):
            await conversations.create_session(store, CreateSession(id=target, title=target))
        await send(store, "src", "warm")
        await complete(store, await claim(store))
        results = []

        async def counted(step: str, call: Callable[[], Awaitable[Any]]) -> Any:
            # asyncpg calls its query loggers soon after each query (``loop.call_soon``), not
            # during it: one turn of the loop lets the previous step's reach the log first.
            await asyncio.sleep(0)
            log.take()
            value = await call()
            await asyncio.sleep(0)
            results.append(StepCalls(step, tuple(log.take())))
            return value

        await counted("send", lambda: send(store, "src", "tgt-1"))
        run_id = await counted("claim", lambda: claim(store))
        await counted("complete", lambda: complete(store, run_id))

        async def round_trip() -> None:
            await send(store, "src", "tgt-2")
            await complete(store, await claim(store))

        await counted("round trip", round_trip)
    finally:
        await store.dispose()
    return results


#: A write and its table; ``FOR UPDATE`` (a lock) is no write.
_WRITES = re.compile(r"(?<!FOR )\b(UPDATE|INSERT INTO|DELETE FROM)\s+(\w+)", re.I)
_FIRST_TABLE = re.compile(r"\sFROM\s+(\w+)", re.I)


_BATCH_VIEW = re.compile(r'INSERT INTO "?temp"?\.(ccweb_batch_\d+)', re.I)


def brief(sql: str) -> str:
    """A statement named by its verb and table (``INSERT messages``); a ``WITH`` by every
    table it writes (``UPDATE sessions + INSERT messages``); a SQLite call that ran several,
    by each (``BEGIN IMMEDIATE + UPDATE runs``); a SQLite batch by its steps."""
    if CALL_PARTS in sql:
        return " + ".join(brief(part) for part in sql.split(CALL_PARTS))
    if sql == TRIGGER:
        return "its trigger"
    batch = _BATCH_VIEW.match(sql)
    if batch is not None:
        return f"batch ({batch_steps(batch[1])})"
    text = " ".join(sql.split()).rstrip(";")
    verb = text.split(" ", 1)[0].upper()
    if verb in ("BEGIN", "COMMIT", "ROLLBACK", "COPY"):
        return text.upper() if verb != "COPY" else text
    if verb == "PREPARE":
        return f"PREPARE {brief(text.split(' ', 1)[1])}"
    if verb == "WITH":
        writes = [f"{found[1].split()[0].upper()} {found[2]}" for found in _WRITES.finditer(text)]
        return " + ".join(writes) if writes else f"SELECT {_table(text)}"
    if verb in ("UPDATE", "INSERT", "DELETE"):
        found = _WRITES.match(text)
        return f"{found[1].split()[0].upper()} {found[2]}" if found else text[:40]
    if verb == "SELECT":
        locks = " FOR UPDATE" if " FOR UPDATE" in text.upper() else ""
        return f"SELECT {_table(text)}{locks}"
    return text[:40]


def batch_steps(view: str) -> str:
    """The steps of the batch SQLite runs as ``view``'s trigger (``store.sqlite.one_statement``)."""
    index = int(view.rsplit("_", 1)[1])
    dialect = sqlite_dialect()
    steps = [brief(str(stmt.compile(dialect=dialect))) for stmt in Batch.made[index].unread]
    return " + ".join([*steps, "INSERT events"])


def _table(text: str) -> str:
    found = _FIRST_TABLE.search(text)
    return found[1] if found else "…"


def named_calls(statements: Sequence[str]) -> str:
    """The statements named briefly, in order; a run of one name as ``name ×n``."""
    names: list[tuple[str, int]] = []
    for name in map(brief, statements):
        if names and names[-1][0] == name:
            names[-1] = (name, names[-1][1] + 1)
        else:
            names.append((name, 1))
    return ", ".join(name if times == 1 else f"{name} ×{times}" for name, times in names)


def print_table(counts: dict[str, list[StepCalls] | None]) -> None:
    """Steps down, engines across; an engine not measured shows why."""
    engines = list(counts)
    header = ["driver calls", *engines]
    lines = [header]
    for index, step in enumerate(STEPS):
        line = [step]
        for engine in engines:
            measured = counts[engine]
            line.append(str(measured[index].count) if measured else f"skipped: set {POSTGRES_ENV}")
        lines.append(line)
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    lines.insert(1, ["-" * width for width in widths])
    for line in lines:
        cells = (cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        print("  ".join(cells).rstrip())


def print_statements(counts: dict[str, list[StepCalls] | None]) -> None:
    """Each measured step's calls, named briefly, in order."""
    for engine, measured in counts.items():
        for step in measured or []:
            if step.step == "round trip":
                continue
            print(f"  {engine} {step.step} ({step.count}): {named_calls(step.statements)}")


def measure(
    engines: Sequence[str], postgres_server: str | None, tmp: Path
) -> dict[str, list[StepCalls] | None]:
    """The counts of each of ``engines`` ("SQLite", "PostgreSQL"): on a fresh SQLite file in
    ``tmp``, on a scratch database of the PostgreSQL server (None when none is named)."""
    counts: dict[str, list[StepCalls] | None] = {}
    if "SQLite" in engines:
        counts["SQLite"] = asyncio.run(count_steps(f"sqlite+aiosqlite:///{tmp / 'calls.db'}"))
    if "PostgreSQL" in engines:
        counts["PostgreSQL"] = None
        if postgres_server:
            name = f"ccweb_bench_{uuid.uuid4().hex[:8]}"
            url = asyncio.run(create_database(postgres_server, name))
            try:
                counts["PostgreSQL"] = asyncio.run(count_steps(url))
            finally:
                asyncio.run(drop_database(postgres_server, name))
    return counts


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--verbose", action="store_true", help="name each step's calls")
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ccweb-driver-calls-") as tmp:
        counts = measure(("SQLite", "PostgreSQL"), os.environ.get(POSTGRES_ENV), Path(tmp))
    print_table(counts)
    if options.verbose:
        print_statements(counts)


if __name__ == "__main__":
    main()
