"""PostgreSQL: the service's own upkeep of its tables when the server's autovacuum is off:
``VACUUM`` and ``ANALYZE``, each on a table only when that table's counters call for it.

A round trip updates a run twice and a reply request, touches two conversations, marks
messages and empties the event inbox twice: each update or delete leaves a dead row version
behind, and a run's status change an entry in each of its indexes. Every insert, update and
delete also moves the table away from the statistics the planner chose its plans by. A server
configured without autovacuum (``autovacuum = off``, as on the machine CI runs on) clears
neither: dead rows pile up, so every claim and status change wades through more of them, and
a table that was never analyzed is planned by guesses (a bulk ``copy`` leaves every table so).

So a pass reads each table's counters from ``pg_stat_user_tables`` (``TableCounters``: its
dead rows, rows changed since its last ``ANALYZE`` and rows inserted since its last
``VACUUM``, against ``pg_class.reltuples``) and ``due`` picks what each table needs, by
autovacuum's own rule: a fixed number of rows plus a share of the table. Only those tables are
vacuumed or analyzed; an idle database costs one read of the counters a pass, whatever its
size. ``VACUUM (SKIP_LOCKED)`` and ``ANALYZE (SKIP_LOCKED)`` pass over a table another process
is working on, so several servers on one database do not queue behind each other; a table the
database user does not own is skipped by PostgreSQL with a warning.

``CCWEB_POSTGRES_VACUUM_SECONDS`` sets the interval between passes: unset, every
``AUTO_INTERVAL`` seconds when the server's autovacuum is off and never when it is on; ``0``,
never. ``analyze_tables`` is the ``ANALYZE`` of every table that ``copy`` and ``import-json``
end with.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ccweb_store.store.failures import database_failure
from ccweb_store.store.models import Base

log = logging.getLogger("ccweb_store.vacuum")

#: The interval when the server's autovacuum is off and none is configured.
AUTO_INTERVAL = 1.0

#: Dead rows that call for a ``VACUUM``: this many plus this share of the table's rows (a
#: smaller share than autovacuum's 0.2: the queue's tables are updated on every hand-off).
VACUUM_ROWS, VACUUM_SHARE = 50, 0.02
#: Rows inserted since the last ``VACUUM`` that call for one (it marks their pages all-visible,
#: for index-only scans): autovacuum's defaults.
INSERTED_ROWS, INSERTED_SHARE = 1000, 0.2
#: Rows changed since the last ``ANALYZE`` that call for one: autovacuum's defaults.
ANALYZE_ROWS, ANALYZE_SHARE = 50, 0.1


def schema_tables() -> tuple[str, ...]:
    """The service's tables, the ones a pass looks after."""
    return tuple(table.name for table in Base.metadata.sorted_tables)


@dataclass(frozen=True, slots=True)
class TableCounters:
    """What ``pg_stat_user_tables`` and ``pg_class`` say of one table."""

    name: str
    #: ``pg_class.reltuples``: the rows the last ``VACUUM`` or ``ANALYZE`` counted (-1: none has).
    rows: float
    dead: int
    changed_since_analyze: int
    inserted_since_vacuum: int


@dataclass(frozen=True, slots=True)
class Upkeep:
    """What a table needs now."""

    vacuum: bool
    analyze: bool


def due(table: TableCounters) -> Upkeep:
    """What ``table``'s counters call for (see the module docstring)."""
    rows = max(table.rows, 0.0)
    vacuum = (
        table.dead >= VACUUM_ROWS + VACUUM_SHARE * rows
        or table.inserted_since_vacuum >= INSERTED_ROWS + INSERTED_SHARE * rows
    )
    analyze = table.changed_since_analyze >= ANALYZE_ROWS + ANALYZE_SHARE * rows
    return Upkeep(vacuum, analyze)


@dataclass(frozen=True, slots=True)
class Pass:
    """The tables one pass vacuumed and analyzed."""

    vacuumed: tuple[str, ...]
    analyzed: tuple[str, ...]


#: Each of the service's tables' counters (a table not yet in the statistics is left out).
_COUNTERS = sa.text(
    "SELECT s.relname, c.reltuples, s.n_dead_tup, s.n_mod_since_analyze, s.n_ins_since_vacuum "
    "FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid "
    "WHERE s.schemaname = current_schema() AND s.relname = ANY(:names)"
)


async def table_counters(connection: AsyncConnection) -> list[TableCounters]:
    """The counters of the service's tables, as the statistics hold them now."""
    rows = await connection.execute(_COUNTERS, {"names": list(schema_tables())})
    return [
        TableCounters(str(name), float(rows_), int(dead), int(changed), int(inserted or 0))
        for name, rows_, dead, changed, inserted in rows
    ]


async def vacuum_interval(engine: AsyncEngine, configured: float | None) -> float:
    """Seconds between passes; 0 for none (a server whose autovacuum is on, unless
    ``configured`` says otherwise)."""
    if configured is not None:
        return configured
    async with engine.connect() as connection:
        autovacuum = (await connection.exec_driver_sql("SHOW autovacuum")).scalar()
    return AUTO_INTERVAL if autovacuum == "off" else 0.0


async def tend_tables(engine: AsyncEngine) -> Pass:
    """One pass: ``VACUUM`` and ``ANALYZE`` the tables whose counters call for it (outside
    any transaction, as ``VACUUM`` must be)."""
    autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
    async with autocommit.connect() as connection:
        needs = {table.name: due(table) for table in await table_counters(connection)}
        both = [name for name, need in needs.items() if need.vacuum and need.analyze]
        vacuum = [name for name, need in needs.items() if need.vacuum and not need.analyze]
        analyze = [name for name, need in needs.items() if need.analyze and not need.vacuum]
        for command, names in (
            ("VACUUM (SKIP_LOCKED, ANALYZE)", both),
            ("VACUUM (SKIP_LOCKED)", vacuum),
            ("ANALYZE (SKIP_LOCKED)", analyze),
        ):
            if names:
                await connection.exec_driver_sql(f"{command} {_listed(names)}")
    return Pass(tuple(sorted(both + vacuum)), tuple(sorted(both + analyze)))


async def analyze_tables(engine: AsyncEngine) -> None:
    """``ANALYZE`` every table of the service: after a bulk load, so that the planner knows
    what the tables hold."""
    autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
    async with autocommit.connect() as connection:
        await connection.exec_driver_sql(f"ANALYZE {_listed(schema_tables())}")


def _listed(names: list[str] | tuple[str, ...]) -> str:
    """Table names as SQL: the schema's own names, each quoted."""
    return ", ".join('"' + name.replace('"', '""') + '"' for name in names)


async def keep_vacuumed(engine: AsyncEngine, interval: float) -> None:
    """A pass every ``interval`` seconds, until cancelled. A failing pass (the database down)
    is logged and tried again at the next one."""
    log.debug("looking after the tables every %gs", interval)
    while True:
        await asyncio.sleep(interval)
        try:
            done = await tend_tables(engine)
        except Exception as exc:
            failure = database_failure(exc)
            if failure is None:
                log.exception(
                    "vacuuming and analyzing the tables failed; trying again in %gs", interval
                )
            else:  # the database down: said once a pass, without a traceback
                log.warning("vacuuming and analyzing the tables failed: %s", failure.message)
            continue
        if done.vacuumed or done.analyzed:
            log.debug(
                "vacuumed %s; analyzed %s",
                ", ".join(done.vacuumed) or "nothing",
                ", ".join(done.analyzed) or "nothing",
            )
