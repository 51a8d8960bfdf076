"""PostgreSQL: the tables a round trip updates, vacuumed by the service when the server's own
autovacuum is off.

A round trip updates a run twice and a reply request, touches two conversations, marks
messages and empties the event inbox twice: each update or delete leaves a dead row version
behind, and a run's status change an entry in
each of its indexes. PostgreSQL's autovacuum clears them. A server configured without it
(``autovacuum = off``, as on the machine CI runs on) lets them pile up, and every claim and
status change wades through more of them, so the cost of a round trip keeps growing under a
steady load; with these tables vacuumed every second or two it stays flat (docs/database.md).

``CCWEB_POSTGRES_VACUUM_SECONDS`` sets the interval: unset, every ``AUTO_INTERVAL`` seconds
when the server's autovacuum is off and never when it is on; ``0``, never. ``VACUUM
(SKIP_LOCKED)`` passes over a table another process is vacuuming, so several servers on one
database do not queue behind each other; a table the database user does not own is skipped
by PostgreSQL with a warning. Only pages changed since the last pass are read (the visibility
map), and PostgreSQL leaves the indexes alone while few pages hold dead rows.
"""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy.ext.asyncio import AsyncEngine

from ccweb_store.store.failures import database_failure

log = logging.getLogger("ccweb_store.vacuum")

#: The tables whose rows are updated, or deleted as they are used (the event inbox, emptied
#: by every commit that writes events); the others are only inserted into.
UPDATED_TABLES = ("runs", "reply_requests", "sessions", "messages", "event_inbox")

#: The interval when the server's autovacuum is off and none is configured.
AUTO_INTERVAL = 1.0

VACUUM = f"VACUUM (SKIP_LOCKED) {', '.join(UPDATED_TABLES)}"


async def vacuum_interval(engine: AsyncEngine, configured: float | None) -> float:
    """Seconds between vacuums of the updated tables; 0 for none (a server whose autovacuum is
    on, unless ``configured`` says otherwise)."""
    if configured is not None:
        return configured
    async with engine.connect() as connection:
        autovacuum = (await connection.exec_driver_sql("SHOW autovacuum")).scalar()
    return AUTO_INTERVAL if autovacuum == "off" else 0.0


async def vacuum_updated_tables(engine: AsyncEngine) -> None:
    """``VACUUM`` the tables whose rows are updated (outside any transaction, as it must)."""
    autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
    async with autocommit.connect() as connection:
        await connection.exec_driver_sql(VACUUM)


async def keep_vacuumed(engine: AsyncEngine, interval: float) -> None:
    """Vacuum the updated tables every ``interval`` seconds, until cancelled. A failing pass
    (the database down) is logged and tried again at the next one."""
    log.debug("vacuuming %s every %gs", ", ".join(UPDATED_TABLES), interval)
    while True:
        await asyncio.sleep(interval)
        try:
            await vacuum_updated_tables(engine)
        except Exception as exc:
            failure = database_failure(exc)
            if failure is None:
                log.exception("vacuuming the updated tables failed; trying again in %gs", interval)
            else:  # the database down: said once a pass, without a traceback
                log.warning("vacuuming the updated tables failed: %s", failure.message)
