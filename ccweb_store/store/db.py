"""Engines, connection setup, transactions on the driver, and migrating to head.

SQLite gets its pragmas on every connection and begins writing transactions with
``BEGIN IMMEDIATE``: a deferred transaction that later upgrades to a write fails with
SQLITE_BUSY at once, whatever the busy timeout. PostgreSQL runs on asyncpg; a pooled
connection is pinged only after sitting idle. A store's units of work begin and end their
transactions straight on the driver (``end_sqlite_transaction``, ``begin_postgres_transaction``
and ``end_postgres_transaction``), and statements SQLAlchemy runs join them.
"""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import suppress
from json import encoder as json_encoder
from pathlib import Path
from typing import Any, NoReturn

import orjson
from asyncpg.exceptions import InternalClientError
from sqlalchemy import JSON, event, text
from sqlalchemy.dialects import registry
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.engine import URL, Connection, Dialect, ExceptionContext, make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError, StatementError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import AsyncAdaptedQueuePool, ConnectionPoolEntry, Pool, StaticPool
from sqlalchemy.sql.elements import Null
from sqlalchemy.util import await_only
from sqlalchemy.util.concurrency import in_greenlet

from ccweb_store.config import database_kind, normalize_database_url
from ccweb_store.domain import json_values
from ccweb_store.domain.errors import DatabaseUnavailable
from ccweb_store.store.sqlite.file_watch import SQLiteFileWatch

PROJECT_ROOT = Path(__file__).resolve().parents[2]
ALEMBIC_INI = PROJECT_ROOT / "alembic.ini"
MIGRATIONS_DIR = PROJECT_ROOT / "migrations"

#: Pages of WAL after which a commit checkpoints it into the database file (SQLite's default:
#: 1000). A store's ``checkpoints.WalCheckpointer`` thread does most of that work before then;
#: this limit bounds the WAL if it falls behind, and lets the writer start the WAL over.
WAL_AUTOCHECKPOINT_PAGES = 10_000

#: Execution option naming how a SQLite transaction begins: "IMMEDIATE" or "DEFERRED".
SQLITE_BEGIN = "ccweb_sqlite_begin"


def create_engine(url: str, *, busy_timeout_ms: int = 30_000, **kwargs: Any) -> AsyncEngine:
    """An async engine for ``url`` with the connection setup this service relies on."""
    url = normalize_database_url(url)
    if database_kind(url) == "sqlite":
        return _create_sqlite_engine(url, busy_timeout_ms, **kwargs)
    kwargs.setdefault("pool_size", 10)
    kwargs.setdefault("max_overflow", 10)
    kwargs.setdefault("json_deserializer", loads_postgres_json)
    engine = create_async_engine(url, **kwargs)
    if not kwargs.get("pool_pre_ping"):
        _ping_after_idle(engine)

    @event.listens_for(engine.sync_engine, "handle_error")
    def _dead_connection(context: ExceptionContext) -> None:
        if unsent_on_dead_connection(context.original_exception):
            context.is_disconnect = True  # SQLAlchemy invalidates the connection

    return engine


def loads_postgres_json(text: str) -> Any:
    """A PostgreSQL JSON column's value. ``jsonb`` keeps numbers as ``numeric``, so a float
    such as ``1e20`` comes back written as an integer; orjson reads an integer beyond 64 bits
    as the float it was. Text orjson refuses takes ``json_values.loads_stored``."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json_values.loads_stored(text)


#: A pooled PostgreSQL connection idle for longer than this is pinged before it is used.
PING_AFTER_IDLE_S = 1.0
_IDLE_SINCE = "ccweb_idle_since"


def _ping_after_idle(engine: AsyncEngine) -> None:
    """Ping a pooled connection before use only when it sat idle for ``PING_AFTER_IDLE_S``.

    SQLAlchemy's ``pool_pre_ping`` pings at every checkout; with asyncpg a ping is three round
    trips to the server (``BEGIN``, ``;``, ``ROLLBACK``), against the few a unit of work needs.
    A connection handed back moments ago has just worked, unless asyncpg has seen the server
    close it since (``driver_closed``: a terminated backend, a restart), which costs no round
    trip to check; one that sat in the pool may have been closed unnoticed (an idle timeout
    across a network) and is pinged. Either is replaced here, as the pre-ping would. A
    connection that dies unnoticed within the second fails the statement that finds out; a
    unit of work runs its first statement again on a fresh connection then (``uow``).
    """

    @event.listens_for(engine.sync_engine, "checkin")
    def _note_idle(_dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine.sync_engine, "checkout")
    def _ping_if_idle(dbapi_connection: Any, record: ConnectionPoolEntry, _proxy: Any) -> None:
        if driver_closed(dbapi_connection):
            raise DisconnectionError("the server closed a pooled connection")
        idle_since = record.info.get(_IDLE_SINCE)
        if idle_since is None or time.monotonic() - idle_since < PING_AFTER_IDLE_S:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as error:  # the pool replaces the connection and tries again
            raise DisconnectionError(f"a pooled connection failed its ping: {error}") from error


def driver_closed(dbapi_connection: Any) -> bool:
    """Whether asyncpg knows the connection under SQLAlchemy's adapter to be closed: it reads
    the socket whenever the event loop runs, so it sees the server end the connection (a
    terminated backend, a restart) without a round trip."""
    is_closed = getattr(dbapi_connection.driver_connection, "is_closed", None)
    return bool(is_closed()) if is_closed is not None else False


def unsent_on_dead_connection(error: BaseException | None) -> bool:
    """Whether asyncpg refused to send a statement because its connection was still taking in
    an error the server sent unasked: the ``FATAL`` with which PostgreSQL ends a connection (a
    terminated backend, a shutdown), read before the connection's end. The statement never
    left, and the connection is dead; SQLAlchemy's own test of a disconnect (whether asyncpg
    has seen the end yet) may not know it."""
    while error is not None:
        if isinstance(error, InternalClientError) and "another operation" in str(error):
            return True
        error = error.__cause__
    return False


#: PostgreSQL errors that say the server cannot serve now, whatever the request: its
#: shutdown, crash or start (``57P01``-``57P03``), no connection slot left (``53300``), and
#: every connection exception (class ``08``).
UNAVAILABLE_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "53300"})
#: SQLite's (primary) result codes that say the file cannot be read or written now, and the
#: reason a client is told.
UNAVAILABLE_SQLITE_CODES = {
    sqlite3.SQLITE_IOERR: "the database file cannot be read or written (disk I/O error)",
    sqlite3.SQLITE_CANTOPEN: "the database file cannot be opened",
    sqlite3.SQLITE_BUSY: (
        "the database is busy: another process held its write lock for longer than "
        "CCWEB_SQLITE_BUSY_TIMEOUT_MS"
    ),
    sqlite3.SQLITE_LOCKED: "the database is busy (locked)",
    sqlite3.SQLITE_FULL: "the database is full: the disk holding it has no room left",
}


def database_failure(error: BaseException) -> DatabaseUnavailable | None:
    """The ``DatabaseUnavailable`` to answer when ``error`` is the database failing rather
    than the request (a connection refused or lost, a server shutting down or starting up, a
    SQLite file that cannot be opened, read or written, or stays locked); None for any other.

    Looks through SQLAlchemy's wrapper (``orig``) and the exceptions each was raised from.
    The reason names neither the database's host nor its path.
    """
    if isinstance(error, DBAPIError) and error.connection_invalidated:
        return DatabaseUnavailable("the database is unreachable (the connection to it was lost)")
    if isinstance(error, PoolTimeout):
        return DatabaseUnavailable(
            "every connection of the server to the database is in use (the pool timed out)"
        )
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, sqlite3.Error):
            reason = UNAVAILABLE_SQLITE_CODES.get(getattr(cause, "sqlite_errorcode", 0) & 0xFF)
            return DatabaseUnavailable(reason) if reason is not None else None
        sqlstate = getattr(cause, "sqlstate", None)
        if isinstance(sqlstate, str) and (
            sqlstate in UNAVAILABLE_SQLSTATES or sqlstate.startswith("08")
        ):
            # The server's own words ("the database system is shutting down"), without the
            # "<class …>: " SQLAlchemy's asyncpg adapter puts before them.
            said = str(cause).rsplit("'>: ", 1)[-1]
            return DatabaseUnavailable(f"the database is unreachable ({said or sqlstate})")
        if isinstance(cause, ConnectionRefusedError):
            return DatabaseUnavailable("the database is unreachable (the connection was refused)")
        if isinstance(cause, TimeoutError):
            return DatabaseUnavailable("the database is unreachable (connecting timed out)")
        if isinstance(cause, OSError):
            detail = cause.strerror or type(cause).__name__
            return DatabaseUnavailable(f"the database is unreachable ({detail})")
        if unsent_on_dead_connection(cause):
            return DatabaseUnavailable(
                "the database is unreachable (the connection to it was lost)"
            )
        cause = cause.orig if isinstance(cause, DBAPIError) else cause.__cause__
    return None


def postgres_connection_closed(connection: AsyncConnection) -> bool:
    """``driver_closed`` for an async connection of a PostgreSQL engine."""
    return driver_closed(_asyncpg_adapter(connection))


async def _ready() -> None:
    return None


class InlineCursor(sqlite3.Cursor):
    """A ``sqlite3`` cursor that passes for an async driver's under SQLAlchemy's asyncio layer,
    and runs plain synchronous statements outside it.

    ``AsyncConnection.execute`` insists that a statement awaited something (a check against
    sync drivers configured by mistake), so inside SQLAlchemy's greenlet each statement awaits
    one finished coroutine: a single round trip to the event loop. Called outside any greenlet
    (``repositories.base.Repository._execute`` on SQLite), it simply runs: no greenlet, no
    switch. The asyncio layer also soft-closes a cursor with an awaitable before its results
    leave the greenlet; a ``sqlite3`` cursor has fetched nothing ahead, so there is nothing to do.
    """

    def execute(self, sql: str, parameters: Any = (), /) -> InlineCursor:
        if in_greenlet():
            await_only(_ready())
        return super().execute(sql, parameters)

    def executemany(self, sql: str, seq_of_parameters: Any, /) -> InlineCursor:
        if in_greenlet():
            await_only(_ready())
        return super().executemany(sql, seq_of_parameters)

    async def _async_soft_close(self) -> None:
        return None


class InlineConnection(sqlite3.Connection):
    """A ``sqlite3`` connection whose cursors are ``InlineCursor``s."""

    def cursor(self, factory: Any = InlineCursor) -> Any:
        return super().cursor(factory)


class InlineSQLiteDialect(SQLiteDialect_pysqlite):
    """The standard library's ``sqlite3`` under the asyncio engine, on the loop's own thread.

    A statement on a local SQLite file takes microseconds. Run through aiosqlite, each one
    costs hand-offs to its worker thread, and through SQLAlchemy's async adaptation several
    greenlet switches (cursor, execute, fetch, close), which together cost several times the
    statement. Here the driver is synchronous: a call made through ``AsyncConnection`` runs in
    one greenlet from start to end, and the repositories skip even that (see
    ``InlineCursor``). This process's writers take turns on one connection
    (``sqlite_writer.SQLiteWriter``), which waits for another process's write lock on the
    event loop before it begins, so no statement blocks the loop waiting for a lock.

    Users still write ``sqlite+aiosqlite:///PATH`` (or ``sqlite:///PATH``); ``create_engine``
    picks this dialect for them.
    """

    driver = "ccweb_inline"
    is_async = True
    supports_statement_cache = True
    #: Whether the engine's path still names the file it opened (``create_engine`` sets it
    #: for a file on disk); every engine has a dialect of its own.
    file_watch: SQLiteFileWatch | None = None

    @classmethod
    def get_pool_class(cls, url: URL) -> type[Pool]:
        if cls._is_url_file_db(url):
            return AsyncAdaptedQueuePool
        return StaticPool

    def create_connect_args(self, url: URL) -> Any:
        args, kwargs = super().create_connect_args(url)
        # BEGIN is ours (see do_begin); the pool may hand the connection to any task.
        kwargs.update(factory=InlineConnection, isolation_level=None, check_same_thread=False)
        return args, kwargs

    def do_begin(self, dbapi_connection: Any) -> None:
        """``BEGIN IMMEDIATE`` (or the mode the engine's ``begin`` event noted), straight on the
        driver: SQLAlchemy calls this inside its error handling, so a ``database is locked``
        comes out as its ``OperationalError``.

        A connection already in a transaction (one a store began on the driver, see
        ``end_sqlite_transaction``) is joined: SQLAlchemy's transaction is then that one.
        """
        if dbapi_connection.in_transaction:
            return
        mode = dbapi_connection.info.get(SQLITE_BEGIN, "IMMEDIATE")
        dbapi_connection.execute(f"BEGIN {mode}")


registry.register("sqlite.ccweb_inline", __name__, "InlineSQLiteDialect")


_make_encoder = getattr(json_encoder, "c_make_encoder", None)
#: ``json.dumps``'s own C encoder with its settings (ASCII only, ``": "`` and ``", "``, NaN
#: allowed), made once, without its check for circular references (``markers``, a dict of
#: the containers it is inside, which cost a third of encoding a message's small metadata).
_encode = (
    None
    if _make_encoder is None
    else _make_encoder(
        None,
        json.JSONEncoder().default,
        json_encoder.encode_basestring_ascii,
        None,
        ": ",
        ", ",
        False,
        False,
        True,
    )
)


def sqlite_json_dumps(value: Any) -> str:
    """``json.dumps(value)``: the very same text, how SQLite engines store JSON columns.

    ``json.dumps`` sets up its encoder in Python on every call, which costs more than
    encoding a message's small metadata; this calls the same C encoder, made once
    (``import-json`` writes one per message), and keeps no state between calls. It does not
    look for circular references: a circular value recurses until Python's recursion limit,
    and ``json.dumps`` then refuses it with its own error (``ValueError``), as it refuses a
    value nested too deeply (``RecursionError``, as before).
    """
    if _encode is None or isinstance(value, str):
        return json.dumps(value)
    try:
        return "".join(_encode(value, 0))
    except RecursionError:
        return json.dumps(value)


def sqlite_json_bind(value: Any) -> str | None:
    """SQLAlchemy's ``JSON`` bind processor on SQLite engines (``sqlite_json_dumps``, for a
    JSON type that keeps None as JSON ``null``: ``none_as_null`` false), in one call instead
    of its wrapper around ours: ``sa.null()`` is SQL NULL, anything else its JSON text,
    ``JSON.NULL`` and None ``null``. A dict, the usual value, is encoded right here
    (``repositories.direct.execute_many`` converts a column of them: 1,260 instructions a
    value less)."""
    if type(value) is dict and _encode is not None:
        try:
            return "".join(_encode(value, 0))
        except RecursionError:
            return json.dumps(value)
    if value is JSON.NULL:
        value = None
    elif isinstance(value, Null):
        return None
    return sqlite_json_dumps(value)


def _create_sqlite_engine(url: str, busy_timeout_ms: int, **kwargs: Any) -> AsyncEngine:
    sqlite_url = make_url(url).set(drivername="sqlite+ccweb_inline")
    # Every SQLite engine the same: repositories.direct compiles a statement once per process.
    kwargs["json_serializer"] = sqlite_json_dumps
    kwargs.setdefault("json_deserializer", json_values.loads_stored)
    if InlineSQLiteDialect._is_url_file_db(sqlite_url):
        # The most recently returned connection first: one connection stays in use (its page
        # cache warm) unless several units of work overlap.
        kwargs.setdefault("pool_use_lifo", True)
    engine = create_async_engine(sqlite_url, **kwargs)
    sync_engine = engine.sync_engine
    path = sqlite_file(engine)
    watch = SQLiteFileWatch(path) if path is not None else None
    dialect = engine.dialect
    assert isinstance(dialect, InlineSQLiteDialect)
    dialect.file_watch = watch

    if watch is not None:

        @event.listens_for(sync_engine, "do_connect")
        def _refuse_another_file(*_args: Any) -> None:
            # Before SQLite opens the path: it would create an empty file where the store's
            # was deleted, or read another file moved there with the store's WAL.
            watch.check()

    @event.listens_for(sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
        if watch is not None:
            try:
                watch.opened()
            except BaseException:
                dbapi_connection.close()
                raise
        # Let us issue BEGIN ourselves (see _on_begin) instead of the driver's implicit one.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA foreign_keys = ON")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            cursor.execute("PRAGMA synchronous = NORMAL")
            # Temporary storage in memory, not in files: a unit of work inside a group commit
            # (sqlite_writer) writes in a savepoint, whose journal of the pages it changes
            # would otherwise be a temporary file opened, written and deleted per unit of work.
            cursor.execute("PRAGMA temp_store = MEMORY")
            # Checkpoint the WAL every ~40 MB instead of every ~4 MB: a checkpoint copies each
            # changed page once and syncs the file, so rarer ones copy the hot pages (the
            # queue's indexes, the conversations) far fewer times per write. A store's
            # background thread (checkpoints.WalCheckpointer) copies most pages before then.
            cursor.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}")
        finally:
            cursor.close()

    @event.listens_for(sync_engine, "begin")
    def _on_begin(connection: Connection) -> None:
        # Runs just before the dialect's do_begin, which issues the BEGIN in this mode.
        mode = connection.get_execution_options().get(SQLITE_BEGIN, "IMMEDIATE")
        if mode not in ("IMMEDIATE", "DEFERRED", "EXCLUSIVE"):
            raise ValueError(f"unknown SQLite transaction mode {mode!r}")
        connection.connection.info[SQLITE_BEGIN] = mode

    return engine


def sqlite_file_watch(engine: AsyncEngine) -> SQLiteFileWatch | None:
    """The watch on the SQLite file behind ``engine`` (``sqlite_file_watch``); None for an
    in-memory database or a ``file:`` URI."""
    dialect = engine.dialect
    return dialect.file_watch if isinstance(dialect, InlineSQLiteDialect) else None


def sqlite_driver(connection: AsyncConnection) -> sqlite3.Connection:
    """The ``sqlite3`` connection under an async connection of a SQLite engine."""
    sync = connection.sync_connection
    assert sync is not None, "the connection is closed"
    return driver_of(sync)


def driver_of(sync: Connection) -> sqlite3.Connection:
    """The ``sqlite3`` connection under a sync connection of a SQLite engine (for callers that
    hold the sync connection already: one lookup less on their busy path)."""
    driver: sqlite3.Connection = sync.connection.dbapi_connection  # type: ignore[assignment]
    return driver


def end_sqlite_transaction(connection: AsyncConnection, *, commit: bool) -> None:
    """COMMIT (or ROLLBACK) a transaction a store began on the driver.

    A store's SQLite units of work begin and end their transactions straight on the
    ``sqlite3`` connection (``sqlite_writer``, ``kept_connections``): SQLAlchemy's transaction
    objects, events and checks cost more than the ``BEGIN`` and ``COMMIT`` themselves. A
    statement SQLAlchemy runs meanwhile joins that transaction (``InlineSQLiteDialect.do_begin``)
    and leaves SQLAlchemy believing it began one; that one is ended through SQLAlchemy, which
    ends both.
    """
    sync = connection.sync_connection
    assert sync is not None, "the connection is closed"
    if sync.in_transaction():
        if commit:
            sync.commit()
        else:
            sync.rollback()
    driver = driver_of(sync)
    if driver.in_transaction:
        _run_on_driver(driver, "COMMIT" if commit else "ROLLBACK", sync.dialect)


def run_on_sqlite_driver(connection: AsyncConnection, statement: str) -> None:
    """Run a statement that returns nothing (``BEGIN``, ``COMMIT``, ``SAVEPOINT`` …) straight
    on the ``sqlite3`` connection; a driver error comes out as SQLAlchemy's, as from any
    other statement."""
    sync = connection.sync_connection
    assert sync is not None, "the connection is closed"
    _run_on_driver(driver_of(sync), statement, sync.dialect)


def _run_on_driver(driver: sqlite3.Connection, statement: str, dialect: Dialect) -> None:
    try:
        plain_cursor(driver).execute(statement)
    except sqlite3.Error as error:
        raise sqlalchemy_error(error, statement, (), dialect) from error


def plain_cursor(driver: sqlite3.Connection) -> sqlite3.Cursor:
    """The plain ``sqlite3`` cursor that statements run on straight on the driver, one per
    connection (``run_on_sqlite_driver``, ``repositories.direct``): no greenlet there, so none
    of ``InlineCursor``'s async manners. Each statement is read to its end, or is one whose
    row nobody reads (a ``PRAGMA`` setting), before the next resets it, so one cursor serves
    them all."""
    try:
        cursor: sqlite3.Cursor = driver.plain_cursor  # type: ignore[attr-defined]
    except AttributeError:
        cursor = sqlite3.Cursor(driver)
        with suppress(AttributeError):  # a plain sqlite3.Connection takes no attributes
            driver.plain_cursor = cursor  # type: ignore[attr-defined]
    return cursor


def sqlalchemy_error(
    error: sqlite3.Error, statement: str, parameters: Any, dialect: Dialect
) -> StatementError:
    """A ``sqlite3`` error of a statement run straight on the driver, as the SQLAlchemy
    exception its execution through SQLAlchemy would raise (``IntegrityError``, …)."""
    return DBAPIError.instance(statement, parameters, error, sqlite3.Error, dialect=dialect)


def _asyncpg_adapter(connection: AsyncConnection) -> Any:
    """SQLAlchemy's adapter of the asyncpg connection under ``connection``."""
    sync = connection.sync_connection
    assert sync is not None, "the connection is closed"
    return sync.connection.dbapi_connection


async def begin_postgres_transaction(connection: AsyncConnection) -> Any:
    """Begin a transaction on PostgreSQL as SQLAlchemy's asyncpg adapter begins one for its
    first statement (none in autocommit), unless one is open; the asyncpg connection to run
    statements on.

    The statements a unit of work runs straight on asyncpg (``repositories.direct``) and
    those SQLAlchemy runs share this transaction: the adapter holds it (its ``_transaction``,
    begun by its ``_start_transaction``) and runs its own statements in it.
    ``end_postgres_transaction`` ends it. These two private names of SQLAlchemy's adapter,
    and its ``_handle_exception`` (``raise_as_sqlalchemy_would``), are all this module uses of
    it; the tests run every unit of work through them.
    """
    adapter = _asyncpg_adapter(connection)
    if adapter._transaction is None:
        await adapter._start_transaction()
    return adapter.driver_connection


async def end_postgres_transaction(connection: AsyncConnection, *, commit: bool) -> None:
    """COMMIT (or ROLLBACK) the transaction ``begin_postgres_transaction`` began.

    Through SQLAlchemy when a statement it ran made it believe it began one (it then ends
    the adapter's); else straight on the adapter's asyncpg transaction, which saves SQLAlchemy's
    transaction object and its greenlets around a unit of work. An invalidated connection
    has nothing left to end.
    """
    if connection.invalidated:
        return
    sync = connection.sync_connection
    assert sync is not None, "the connection is closed"
    if sync.in_transaction():
        await (connection.commit() if commit else connection.rollback())
        return
    adapter = _asyncpg_adapter(connection)
    transaction = adapter._transaction
    if transaction is None:
        return
    statement = "COMMIT" if commit else "ROLLBACK"
    try:
        await (transaction.commit() if commit else transaction.rollback())
    except Exception as error:
        await raise_as_sqlalchemy_would(connection, error, statement, [])
    finally:
        adapter._transaction = None


async def raise_as_sqlalchemy_would(
    connection: AsyncConnection, error: Exception, statement: str, arguments: list[Any]
) -> NoReturn:
    """Raise an error of asyncpg's as SQLAlchemy's execution would have: translated to the
    DBAPI's error and wrapped in SQLAlchemy's (an ``IntegrityError`` for a unique violation);
    a connection the server closed is invalidated, so it is never used again."""
    adapter = _asyncpg_adapter(connection)
    dbapi = adapter.dbapi
    try:
        if not isinstance(error, dbapi.Error):
            adapter._handle_exception(error)  # raises the DBAPI's error for an asyncpg one
        raise error
    except dbapi.Error as dbapi_error:
        disconnect = connection.dialect.is_disconnect(
            dbapi_error, adapter, None
        ) or unsent_on_dead_connection(error)
        wrapped = DBAPIError.instance(
            statement,
            arguments,
            dbapi_error,
            dbapi.Error,
            connection_invalidated=disconnect,
            dialect=connection.dialect,
        )
        if disconnect:
            await connection.invalidate(wrapped)
        raise wrapped from error


def sqlite_file(engine: AsyncEngine) -> str | None:
    """The path of the SQLite file behind ``engine``; None for PostgreSQL, an in-memory
    database, or a ``file:`` URI (``?uri=true``), which is passed to SQLite as it is."""
    if engine.dialect.name != "sqlite" or not InlineSQLiteDialect._is_url_file_db(engine.url):
        return None
    args, kwargs = engine.dialect.create_connect_args(engine.url)
    if kwargs.get("uri"):
        return None
    path: str = args[0]
    return path


def read_only(engine: AsyncEngine) -> AsyncEngine:
    """The same engine for connections that only read.

    SQLite: transactions begin DEFERRED (no write lock; one snapshot from the first read).
    PostgreSQL: autocommit, each statement a transaction of its own. At READ COMMITTED every
    statement reads a snapshot of its own inside a transaction too, so the reads see the same;
    they only skip the ``BEGIN`` and ``ROLLBACK`` round trips to the server.
    """
    if engine.dialect.name == "postgresql":
        return engine.execution_options(isolation_level="AUTOCOMMIT")
    return engine.execution_options(**{SQLITE_BEGIN: "DEFERRED"})


def alembic_config(url: str | None = None) -> Any:
    """An Alembic ``Config`` for this project, usable from any working directory."""
    from alembic.config import Config

    config = Config(str(ALEMBIC_INI))
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        config.attributes["database_url"] = normalize_database_url(url)
    return config


async def migrate(engine: AsyncEngine, revision: str = "head") -> None:
    """Upgrade the database behind ``engine`` to ``revision``."""
    await _run_alembic(engine, "upgrade", revision)


async def downgrade(engine: AsyncEngine, revision: str) -> None:
    """Downgrade the database behind ``engine`` to ``revision``."""
    await _run_alembic(engine, "downgrade", revision)


async def _run_alembic(engine: AsyncEngine, verb: str, revision: str) -> None:
    from alembic import command

    def run(sync_connection: Connection) -> None:
        config = alembic_config()
        config.attributes["connection"] = sync_connection
        getattr(command, verb)(config, revision)

    async with engine.begin() as connection:
        await connection.run_sync(run)


async def current_revision(connection: AsyncConnection) -> str | None:
    """The schema revision stamped in the database, or None before any migration."""

    def read(sync_connection: Connection) -> str | None:
        from alembic.runtime.migration import MigrationContext

        return MigrationContext.configure(sync_connection).get_current_revision()

    return await connection.run_sync(read)


async def head_revision() -> str | None:
    """The newest revision the migrations directory knows."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


async def ping(engine: AsyncEngine) -> None:
    """Raise if the database cannot answer a trivial query."""
    async with read_only(engine).connect() as connection:
        await connection.execute(text("SELECT 1"))


async def create_database(server_url: str, name: str) -> str:
    """Create database ``name`` on the PostgreSQL server of ``server_url``; return its URL.

    For tests and benchmarks that want a scratch database of their own.
    """

    await _run_autocommit(server_url, f'CREATE DATABASE "{name}"')
    return (
        make_url(normalize_database_url(server_url))
        .set(database=name)
        .render_as_string(hide_password=False)
    )


async def drop_database(server_url: str, name: str) -> None:
    """Drop database ``name`` (closing its connections) if it exists."""
    await _run_autocommit(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _run_autocommit(server_url: str, statement: str) -> None:
    engine = create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as connection:
            await connection.execute(text(statement))
    finally:
        await engine.dispose()
