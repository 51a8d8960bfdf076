"""Database URLs as every command takes them (the data tools, ``copy``, ``backup``,
``export-json``, and through ``cli.common.require_usable_url`` every other): checked before
anything connects, so a mistake is one line naming the URL (never its password) and
saying what to do, and shown without credentials.
"""

from __future__ import annotations

from ccweb_store.config import database_kind, normalize_database_url
from ccweb_store.store.db import database_file, shown_url
from ccweb_store.store.urls import UnparsableUrl, keeps_nothing, postgres_url_problem, url_parts

#: The drivers ccweb-store connects through, by engine family.
DRIVERS = {"sqlite": "aiosqlite", "postgresql": "asyncpg"}
_FORMS = "use sqlite+aiosqlite:///PATH or postgresql+asyncpg://USER@HOST/DB"


class BadDatabaseUrl(Exception):
    """A URL that names no database ccweb-store can use; ``reason`` says why and what to do."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


#: A SQLite URL that names a file, to show in a refusal.
_FILE_EXAMPLE = "sqlite+aiosqlite:////var/lib/ccweb-store/ccweb.db"


def usable_url(url: str, flag: str) -> str:
    """``url`` with its async driver named, or ``BadDatabaseUrl`` naming ``flag`` when its
    scheme or driver is not one ccweb-store uses, it does not parse, it is SQLite in memory
    (which keeps nothing), or (PostgreSQL) it names no database, carries a parameter
    ccweb-store does not understand or a port that is not one. Nothing is looked at on a
    server, nor on disk but a ``sslrootcert`` file the URL names."""
    shown = shown_url(url)
    try:
        kind = database_kind(url)
    except ValueError as exc:
        raise BadDatabaseUrl(f"{flag} {shown}: {exc}") from None
    normalized = normalize_database_url(url)
    try:
        parsed = url_parts(normalized)
    except UnparsableUrl:
        raise BadDatabaseUrl(f"{flag} {shown} is not a database URL: {_FORMS}") from None
    driver = parsed.driver
    if driver != DRIVERS[kind]:
        raise BadDatabaseUrl(
            f"{flag} {shown}: ccweb-store does not connect through {driver!r}: {_FORMS}"
        )
    if kind == "sqlite" and keeps_nothing(normalized):
        raise BadDatabaseUrl(  # as written: a SQLite URL holds no password
            f"{flag} {url} is a SQLite database in memory, which keeps nothing once the "
            f"command ends: name a file, e.g. {_FILE_EXAMPLE} (four slashes: an absolute path)"
        )
    if kind == "postgresql":
        if not parsed.database:
            raise BadDatabaseUrl(f"{flag} {shown} names no database: {_FORMS}")
        problem = postgres_url_problem(normalized)
        if problem is not None:
            raise BadDatabaseUrl(f"{flag} {shown}: {problem}")
    return normalized


def checked_url(url: str, flag: str, *, must_exist: bool) -> str:
    """``usable_url``, and for a SQLite file also ``BadDatabaseUrl`` when it is not there
    (``must_exist``), is a folder, or could not be created (its folder is missing)."""
    normalized = usable_url(url, flag)
    shown = shown_url(url)
    path = database_file(normalized)
    if path is None:
        if must_exist and database_kind(normalized) == "sqlite":
            raise BadDatabaseUrl(f"{flag} {shown} is not a SQLite file: name an existing file")
        return normalized
    if path.is_dir():
        raise BadDatabaseUrl(f"{flag} {shown} is a folder: name a SQLite file")
    if must_exist and not path.is_file():
        raise BadDatabaseUrl(f"{flag}: no SQLite database at {shown}: name an existing file")
    if not path.parent.is_dir():
        raise BadDatabaseUrl(
            f"{flag} {shown}: the folder {path.parent} does not exist: create it first, or "
            "name a file in a folder that does"
        )
    return normalized
