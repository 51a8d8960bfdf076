"""Whether an error is the database failing rather than the request: the one place that
tells, for both drivers, so that a client gets the retryable ``database_unavailable`` and
never a driver's error; and the errors the store raises, by the names the layers above catch
them by (``DatabaseError``, ``ConstraintViolation``), so that none of them imports the
database library."""

from __future__ import annotations

import re
import socket
import sqlite3
import sys

from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from ccweb_store.domain.errors import DatabaseUnavailable
from ccweb_store.store.urls import UnparsableUrl, url_parts

#: Any error the store raises when the database refuses a statement or cannot be used (the
#: base class of SQLAlchemy's errors, which the store's statements raise).
DatabaseError = SQLAlchemyError
#: A statement the database refused for breaking a constraint (a key already there, a row a
#: foreign key names that is gone).
ConstraintViolation = IntegrityError


def refusal_reason(error: DatabaseError) -> str:
    """The first line of the driver's own message for ``error``, without the statement and
    parameters SQLAlchemy's message adds to it."""
    orig = getattr(error, "orig", None)
    return str(orig if orig is not None else error).splitlines()[0]


def unsent_on_dead_connection(error: BaseException | None) -> bool:
    """Whether asyncpg refused to send a statement because its connection was still taking in
    an error the server sent unasked: the ``FATAL`` with which PostgreSQL ends a connection (a
    terminated backend, a shutdown). The statement never left, and the connection is dead.
    Without asyncpg loaded (a command on SQLite) no error can be asyncpg's."""
    exceptions = sys.modules.get("asyncpg.exceptions")
    if exceptions is None:
        return False
    while error is not None:
        if isinstance(error, exceptions.InternalClientError) and "another operation" in str(error):
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


#: The words SQLAlchemy and its asyncpg adapter put around a driver's message.
_WRAPPERS = re.compile(r"\(sqlalchemy\.[\w.]+\)\s*|<class '[\w.]+'>:\s*")
#: SQLSTATEs of a login the server refused (a wrong password, no such role, pg_hba.conf).
LOGIN_REFUSED_SQLSTATES = frozenset({"28P01", "28000"})
#: The ``sslmode`` values that make a connection fail where the server offers no TLS.
TLS_ONLY_MODES = frozenset({"require", "verify-ca", "verify-full"})


def driver_words(error: BaseException) -> str:
    """The first line of what the driver said about ``error``, without the class names
    SQLAlchemy and asyncpg put before it."""
    orig = getattr(error, "orig", None)
    text = str(orig if orig is not None else error) or type(error).__name__
    return _WRAPPERS.sub("", text.splitlines()[0]).strip()


def connection_problem(error: BaseException, url: str, setting: str) -> str | None:
    """What went wrong connecting to the PostgreSQL server of ``url``, in one line naming its
    host and port and saying what to check (``setting``: where the URL came from, e.g.
    ``CCWEB_DATABASE_URL (or --database-url)``); None when ``error`` is none of the usual
    mistakes (or ``url`` is SQLite's), so the caller says it in its own words."""
    try:
        parts = url_parts(url)
    except UnparsableUrl:
        return None
    if parts.backend != "postgresql":
        return None
    mode = parts.query.get("sslmode")
    host, port = parts.host or "localhost", parts.port or 5432
    where = f"{host}:{port}"
    for cause in _causes(error):
        sqlstate = getattr(cause, "sqlstate", None)
        if sqlstate == "3D000":
            user = f" -U {parts.username}" if parts.username else ""
            return (
                f"the database {parts.database!r} does not exist on the PostgreSQL server at "
                f"{where}: create it with `createdb -h {host} -p {port}{user} {parts.database}` "
                f"(ccweb-store migrate, or serve, then makes its tables), or name another one "
                f"in {setting}"
            )
        if sqlstate in LOGIN_REFUSED_SQLSTATES:
            return (
                f"the PostgreSQL server at {where} refused the login of "
                f"{parts.username or 'the current user'!r} ({driver_words(cause)}): check the "
                f"user and password in {setting}, and the server's pg_hba.conf"
            )
        if isinstance(cause, ConnectionRefusedError):
            return (
                f"nothing answers at {where} (connection refused): is PostgreSQL running "
                f"there? Check the host and port in {setting}"
            )
        if isinstance(cause, socket.gaierror):
            return f"the host {host!r} is not known ({cause.strerror}): check the host in {setting}"
        if isinstance(cause, TimeoutError):
            return f"connecting to {where} timed out: check the host and port in {setting}"
        if isinstance(cause, ConnectionError) and mode in TLS_ONLY_MODES:
            return (
                f"the PostgreSQL server at {where} does not offer TLS, which sslmode={mode} "
                f"requires ({driver_words(cause)}): turn TLS on at the server, or set "
                f"sslmode=prefer (or disable) in {setting}"
            )
        if isinstance(cause, OSError):
            reason = cause.strerror or driver_words(cause)
            return f"cannot reach {where} ({reason}): check the host and port in {setting}"
    return None


def _causes(error: BaseException) -> list[BaseException]:
    """``error`` and what it was raised from or wraps (SQLAlchemy's ``orig``), outermost
    first."""
    found: list[BaseException] = []
    cause: BaseException | None = error
    while cause is not None and cause not in found:
        found.append(cause)
        cause = cause.orig if isinstance(cause, DBAPIError) else cause.__cause__
    return found
