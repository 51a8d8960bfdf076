"""SQLite's writer: the one connection a process writes to a SQLite file with, the turns on
it, and the commits it groups (see ``SQLiteWriter``). The unit of work (``uow.py``) takes a
turn for each writing transaction on SQLite."""

from __future__ import annotations

import asyncio
import sqlite3

from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ccweb_store.store.db import (
    end_sqlite_transaction,
    run_on_sqlite_driver,
    sqlite_driver,
    sqlite_file,
    sqlite_file_watch,
)
from ccweb_store.store.sqlite.checkpoints import WalCheckpointer

#: The savepoint a unit of work joining an open transaction works in (one at a time).
SAVEPOINT = "ccweb_unit_of_work"
#: Sleeps between attempts at SQLite's write lock: from this, doubling up to the next.
BEGIN_RETRY_FIRST_S = 0.0002
BEGIN_RETRY_MAX_S = 0.01


class SQLiteWriter:
    """The one connection this process writes to a SQLite file with: the turns on it, and the
    commits it groups.

    Turns. SQLite lets one transaction write at a time. Writers of this process queue on
    ``lock`` instead of in SQLite's busy handler, and whoever holds the lock holds the
    connection, so it stays open from one unit of work to the next (no pool checkout and reset
    per write). The ``BEGIN IMMEDIATE`` that takes SQLite's write lock is tried without
    waiting (this connection's busy timeout is 0) and retried after short sleeps on the event
    loop, for up to the configured busy timeout: a writer that waits for another process (or
    another store of this one) lets this process's event loop run meanwhile. Transactions
    begin and end straight on the driver (``db.end_sqlite_transaction``).

    Group commit. A unit of work's ``commit`` does not COMMIT at once: it passes the turn on
    and waits, while the units of work ready to run on the event loop go on in the same
    SQLite transaction, each inside a savepoint of its own, so that one that fails undoes
    only its own writes. The COMMIT waits for one more turn of the event loop, so that the
    requests whose bytes arrived meanwhile are read and join the group too; it makes them all
    durable, and only then do their ``commit`` calls return; if it fails, they all raise.
    Nothing is reported done before it is committed, but a burst of concurrent requests pays
    for one COMMIT, and writes each page they share to the WAL once, instead of once per
    request. (Waiting that one turn more, eight clients sending at once share a COMMIT among
    6.2 sends instead of 3.4: 0.37 → 0.33 ms of server CPU per send; a second turn gained
    nothing.)

    Without a savepoint. A savepoint costs its unit of work more than its two statements:
    SQLite copies every page the unit changes that an earlier unit of the group changed
    already (the same last pages of each table and index, mostly) into the savepoint's
    journal first, ~8 µs of a send's ~125. A unit of work that makes every refusal before its
    first write (``acquire(savepoint=False)``) works straight in the open transaction
    instead. If it fails without having written (``total_changes`` unchanged: a send refused
    because its target is busy), the others go on as before. If it fails after writing,
    which it promised not to, its writes cannot be undone alone: the whole transaction is
    rolled back, and every unit of work waiting for its COMMIT raises, as when the COMMIT
    fails. Either way nothing that is reported done is lost, and nothing half-done is kept.
    """

    def __init__(self, engine: AsyncEngine, busy_timeout_ms: int) -> None:
        self.engine = engine
        self.busy_timeout_ms = busy_timeout_ms
        self.lock = asyncio.Lock()
        self._connection: AsyncConnection | None = None
        #: Whether the unit of work holding the turn works inside a savepoint (it joined a
        #: transaction that others committed in) rather than in a transaction it began.
        self._in_savepoint = False
        #: The driver's ``total_changes`` when a unit of work joined the open transaction
        #: without a savepoint (None otherwise): whether it wrote, should it fail.
        self._changes_when_joined: int | None = None
        #: One future per unit of work that committed into the open transaction.
        self._waiting: list[asyncio.Future[None]] = []
        self._commit_scheduled = False
        path = sqlite_file(engine)
        #: Whether the path still names the file the engine opened, checked before every
        #: COMMIT (None for an in-memory database).
        self.file_watch = sqlite_file_watch(engine)
        #: Checkpoints the WAL off the event loop's thread (None for an in-memory database).
        self.checkpointer = (
            WalCheckpointer(path, file_watch=self.file_watch) if path is not None else None
        )

    async def acquire(self, *, savepoint: bool = True) -> AsyncConnection:
        """Take the turn: the connection, in a transaction of this unit of work's own, or in a
        savepoint of the open one that others committed in. Without ``savepoint`` it works
        straight in the open one: for a unit of work that refuses only before its first
        write (see the class)."""
        await self.lock.acquire()
        try:
            connection = self._connection
            if connection is None or connection.invalidated:
                connection = self._connection = await self.engine.connect()
                run_on_sqlite_driver(connection, "PRAGMA busy_timeout = 0")  # see _begin
            driver = sqlite_driver(connection)
            joined = driver.in_transaction
            self._in_savepoint = joined and savepoint
            self._changes_when_joined = driver.total_changes if joined and not savepoint else None
            if self._in_savepoint:
                run_on_sqlite_driver(connection, f"SAVEPOINT {SAVEPOINT}")
            elif not joined:
                await self._begin(connection)
        except BaseException:
            self._pass_turn()
            raise
        return connection

    async def _begin(self, connection: AsyncConnection) -> None:
        """``BEGIN IMMEDIATE``, retried while another connection writes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.busy_timeout_ms / 1000
        delay = BEGIN_RETRY_FIRST_S
        while True:
            try:
                run_on_sqlite_driver(connection, "BEGIN IMMEDIATE")
                return
            except OperationalError as error:
                if not _is_busy(error) or loop.time() >= deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, BEGIN_RETRY_MAX_S)

    async def commit(self) -> None:
        """End the turn keeping this unit of work's writes; return once they are committed."""
        if self._in_savepoint:
            try:
                run_on_sqlite_driver(self._current(), f"RELEASE {SAVEPOINT}")
            except BaseException:
                self.release()
                raise
        committed = asyncio.get_running_loop().create_future()
        self._waiting.append(committed)
        self._pass_turn()
        await committed

    def release(self) -> None:
        """End the turn undoing this unit of work's writes (only its own, unless it joined
        the open transaction without a savepoint and wrote: see the class)."""
        try:
            connection = self._current()
            if self._in_savepoint:
                run_on_sqlite_driver(connection, f"ROLLBACK TO {SAVEPOINT}")
                run_on_sqlite_driver(connection, f"RELEASE {SAVEPOINT}")
            elif self._changes_when_joined is not None:
                driver = sqlite_driver(connection)
                # (Not in a transaction any more: SQLite rolled it all back after an error.)
                if driver.total_changes != self._changes_when_joined or not driver.in_transaction:
                    self._fail_waiting(
                        RuntimeError(
                            "a unit of work failed after writing in a transaction it shared "
                            "without a savepoint; the whole transaction was rolled back"
                        )
                    )
                    end_sqlite_transaction(connection, commit=False)
                # else it wrote nothing: the transaction goes on for those waiting on it
            else:  # it began the transaction: nobody else is in it
                end_sqlite_transaction(connection, commit=False)
        except BaseException as error:
            self._discard(error)
            raise
        finally:
            self._pass_turn()

    def _pass_turn(self) -> None:
        self.lock.release()
        if self._waiting and not self._commit_scheduled:
            self._commit_scheduled = True
            asyncio.get_running_loop().call_soon(self._commit_next_iteration)

    def _commit_next_iteration(self) -> None:
        """Let the event loop go round once more before the COMMIT: the requests it read
        meanwhile join the group (see the class)."""
        asyncio.get_running_loop().call_soon(self._commit_when_idle)

    def _commit_when_idle(self) -> None:
        self._commit_scheduled = False
        if not self.lock.locked():  # else whoever holds the turn schedules this again
            self._commit_waiting()

    def _commit_waiting(self) -> None:
        """COMMIT the open transaction for every unit of work waiting on it, unless the file
        was removed or replaced meanwhile: a write committed to a file the path no longer
        names would be answered as done and be gone at the next start, so the transaction
        is rolled back and they all raise ``DatabaseFileMissing``."""
        waiting, self._waiting = self._waiting, []
        if not waiting:
            return
        try:
            if self.file_watch is not None:
                self.file_watch.check()
            end_sqlite_transaction(self._current(), commit=True)
        except Exception as error:
            self._waiting = waiting
            self._discard(error)
            return
        if self.checkpointer is not None:
            self.checkpointer.note_commit()
        for committed in waiting:
            if not committed.done():
                committed.set_result(None)

    def _current(self) -> AsyncConnection:
        assert self._connection is not None, "no connection: no unit of work holds the turn"
        return self._connection

    def _fail_waiting(self, error: BaseException) -> None:
        """Fail the units of work waiting for the open transaction's COMMIT with ``error``."""
        waiting, self._waiting = self._waiting, []
        for committed in waiting:
            if not committed.done():
                committed.set_exception(error)

    def _discard(self, error: BaseException | None = None) -> None:
        """Drop a connection whose transaction could not end cleanly (rolling it back if it
        still can): the units of work waiting for its COMMIT fail, and the next turn connects
        afresh."""
        self._fail_waiting(
            error or RuntimeError("the SQLite transaction was lost before its COMMIT")
        )
        connection = self._connection
        if connection is None:
            return
        self._connection = None
        sync = connection.sync_connection
        try:
            end_sqlite_transaction(connection, commit=False)
        finally:
            if sync is not None:
                sync.invalidate()

    async def close(self) -> None:
        """Commit what waits for it, give the connection back to the pool, and stop the
        checkpoint thread (after the checkpoint it may be running)."""
        async with self.lock:
            self._commit_waiting()
            if self.checkpointer is not None:
                self.checkpointer.stop()
            if self._connection is not None:
                timeout = int(self.busy_timeout_ms)
                run_on_sqlite_driver(self._connection, f"PRAGMA busy_timeout = {timeout}")
                await self._connection.close()
                self._connection = None


def _is_busy(error: OperationalError) -> bool:
    """Whether SQLite refused because another connection holds the lock (SQLITE_BUSY)."""
    code = getattr(error.orig, "sqlite_errorcode", None)
    return code is not None and code & 0xFF == sqlite3.SQLITE_BUSY
