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


def _parsed(url: str) -> URL:
    try:
        return make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise UnparsableUrl(str(exc)) from None


def url_parts(url: str) -> UrlParts:
    """The parts of ``url``; ``UnparsableUrl`` when it is not a database URL."""
    parsed = _parsed(url)
    return UrlParts(
        parsed.get_backend_name(),
        parsed.get_driver_name(),
        parsed.host,
        parsed.port,
        parsed.username,
        parsed.database,
    )


def masked_url(url: str) -> str:
    """``url`` with its password masked; ``UnparsableUrl`` when it is not a database URL
    (``db.shown_url`` shows any text)."""
    return _parsed(url).render_as_string(hide_password=True)


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


def same_sqlite_file(first: str, second: str) -> bool:
    """Whether two SQLite URLs name one file, however spelled (``/./``, ``..``, symlinks)."""
    paths = []
    for url in (_parsed(first), _parsed(second)):
        if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
            return False
        paths.append(os.path.realpath(url.database))
    return paths[0] == paths[1]
