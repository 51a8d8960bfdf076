"""Database URLs taken apart for the layers above the store: the parts they check (which
engine, which driver, which database), a URL without its credentials, and whether two URLs
name one SQLite file. The parsing is SQLAlchemy's, as the engine's own is; an URL it cannot
read raises ``UnparsableUrl``.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError


class UnparsableUrl(ValueError):
    """A text that is not a database URL."""


class UrlParts(NamedTuple):
    """What a database URL names."""

    #: The engine family: ``sqlite``, ``postgresql``.
    backend: str
    #: The driver it connects through: ``aiosqlite``, ``asyncpg``, ``pysqlite``.
    driver: str
    host: str | None
    port: int | None
    username: str | None
    #: The database's name, or a SQLite file's path as written (None: none given).
    database: str | None
    #: The query string's parameters (a repeated one: the last).
    query: dict[str, str]


def _parsed(url: str) -> URL:
    try:
        return make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise UnparsableUrl(str(exc)) from None


def url_parts(url: str) -> UrlParts:
    """The parts of ``url``; ``UnparsableUrl`` when it is not a database URL."""
    parsed = _parsed(url)
    query = parsed.query
    return UrlParts(
        parsed.get_backend_name(),
        parsed.get_driver_name(),
        parsed.host,
        parsed.port,
        parsed.username,
        parsed.database,
        {name: value if isinstance(value, str) else value[-1] for name, value in query.items()},
    )


def masked_url(url: str) -> str:
    """``url`` with its password masked and a SQLite file's relative path made absolute (the
    file it names in this working directory); ``UnparsableUrl`` when it is not a database URL
    (``db.shown_url`` shows any text)."""
    parsed = _parsed(url)
    database = parsed.database
    if _names_sqlite_file(parsed) and database and not os.path.isabs(database):
        parsed = parsed.set(database=os.path.abspath(database))
    return parsed.render_as_string(hide_password=True)


def keeps_nothing(url: str) -> bool:
    """Whether a SQLite URL names an in-memory database, which is gone when its process
    ends: no path (``sqlite:///``), ``:memory:``, or SQLite's ``mode=memory``."""
    parsed = _parsed(url)
    if parsed.get_backend_name() != "sqlite":
        return False
    database = parsed.database or ""
    if database in ("", ":memory:") or database.startswith("file::memory:"):
        return True
    modes = parsed.query.get("mode", ())
    return "memory" in ((modes,) if isinstance(modes, str) else modes) or (
        "mode=memory" in database
    )


def _names_sqlite_file(parsed: URL) -> bool:
    """Whether a parsed URL names a SQLite file by its path (not in memory, not a URI)."""
    database = parsed.database
    return (
        parsed.get_backend_name() == "sqlite"
        and bool(database)
        and database != ":memory:"
        and not parsed.query.get("uri")
    )


def credential_free_url(url: str) -> str:
    """``url`` without user name or password; a SQLite file as its resolved path."""
    parsed = _parsed(url)
    database = parsed.database
    if parsed.get_backend_name() == "sqlite" and database and database != ":memory:":
        database = os.path.realpath(database)
    bare = URL.create(
        parsed.drivername,
        host=parsed.host,
        port=parsed.port,
        database=database,
        query=parsed.query,
    )
    return bare.render_as_string(hide_password=True)


def postgres_url_problem(url: str) -> str | None:
    """Why ccweb-store cannot connect with the PostgreSQL URL ``url`` (a query parameter it
    does not understand, a bad ``sslmode``, a port that is not one), or None."""
    from ccweb_store.store.postgres.url_options import UnusableUrl, connect_options

    try:
        connect_options(_parsed(url))
    except UnusableUrl as problem:
        return str(problem)
    return None


def same_sqlite_file(first: str, second: str) -> bool:
    """Whether two SQLite URLs name one file, however spelled (``/./``, ``..``, symlinks)."""
    paths = []
    for url in (_parsed(first), _parsed(second)):
        if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
            return False
        paths.append(os.path.realpath(url.database))
    return paths[0] == paths[1]
