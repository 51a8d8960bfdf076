"""Engines and migrations: the engine for a database URL (SQLite through aiosqlite,
PostgreSQL through asyncpg, each set up by its driver module) and Alembic upgrades to head.
Whether an error is the database failing is ``failures``'."""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ccweb_store.config import database_kind, normalize_database_url
from ccweb_store.store.failures import connection_problem, driver_words
from ccweb_store.store.sqlite.driver import create_sqlite_engine, sqlite_url_file
from ccweb_store.store.sqlite.files import InUse, claiming_unused, holding_in_use
from ccweb_store.store.urls import UnparsableUrl, masked_url

#: The Alembic scripts travel inside the package, so an installed wheel migrates as a checkout
#: does; the checkout's top-level ``migrations`` is a link to this folder.
MIGRATIONS_DIR = Path(__file__).resolve().parents[1] / "migrations"
#: Where Alembic stamps the schema revision (its default name, which ``migrations/env.py``
#: keeps).
VERSION_TABLE = "alembic_version"
_READ_VERSION: sa.Select[str] = sa.select(sa.column("version_num", sa.String)).select_from(
    sa.table(VERSION_TABLE)
)

log = logging.getLogger("ccweb_store.migrations")


def create_engine(url: str, *, busy_timeout_ms: int = 30_000, **kwargs: Any) -> AsyncEngine:
    """An async engine for ``url`` with the connection setup this service relies on."""
    url = normalize_database_url(url)
    if database_kind(url) == "sqlite":
        return create_sqlite_engine(url, busy_timeout_ms, **kwargs)
    # Loaded when chosen: a command on SQLite never loads asyncpg.
    from ccweb_store.store.postgres.driver import create_postgres_engine

    return create_postgres_engine(url, **kwargs)


def database_file(url: str) -> Path | None:
    """The file a SQLite URL names, which connecting creates when it is absent; None for
    PostgreSQL (whose databases are created by their server), in-memory SQLite and
    ``file:`` URIs."""
    url = normalize_database_url(url)
    return sqlite_url_file(url) if database_kind(url) == "sqlite" else None


def missing_database(url: str) -> Path | None:
    """The SQLite file ``url`` names when it does not exist yet, else None: a command that
    only uses a database checks this first, so that it never creates an empty one."""
    path = database_file(url)
    return path if path is not None and not path.exists() else None


def prepare_database_home(url: str) -> None:
    """Make the directory a SQLite file will be created in (``serve``, ``migrate``): a new
    one is private (``0700``) whatever the umask, as the database in it is the users'
    conversations; an existing one is left as it is."""
    path = database_file(url)
    if path is None or path.parent.exists():
        return
    try:
        path.parent.mkdir(parents=True, mode=0o700)
    except FileExistsError:
        return
    path.parent.chmod(0o700)


def shown_url(url: str) -> str:
    """``url`` as it may be printed: its password masked (or, when it does not parse,
    everything before its host left out)."""
    try:
        return masked_url(url)
    except UnparsableUrl:
        scheme, _, rest = url.partition("://")
        return f"{scheme}://{rest.rpartition('@')[2]}" if rest else url


def alembic_config(url: str | None = None) -> Any:
    """An Alembic ``Config`` for this project, usable from any working directory and from an
    installed package (no ``alembic.ini`` needed: the settings it holds for the ``alembic``
    command line are set here)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")
    if url is not None:
        config.attributes["database_url"] = normalize_database_url(url)
    return config


async def migrate(engine: AsyncEngine, revision: str = "head") -> None:
    """Upgrade the database behind ``engine`` to ``revision``; logs one line when that
    changed the schema (Alembic's own lines, a docstring per migration, are debug chatter)."""
    async with engine.connect() as connection:
        before = await current_revision(connection)
    await _run_alembic(engine, "upgrade", revision)
    async with engine.connect() as connection:
        after = await current_revision(connection)
    if after != before:
        log.info("migrated the database schema from %s to %s", before or "empty", after)


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


async def unreachable(url: str, setting: str) -> str | None:
    """Why the database at ``url`` cannot be connected to (a line saying what to check in
    ``setting``, where the URL came from), or None when a connection opens: what ``serve``
    checks before it listens."""
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            await connection.execute(sa.text("SELECT 1"))
    except (OSError, DBAPIError) as error:
        return connection_problem(error, url, setting) or (
            f"{driver_words(error)}. Is the server running and the URL right ({setting})?"
        )
    finally:
        await engine.dispose()
    return None


async def current_revision(connection: AsyncConnection) -> str | None:
    """The schema revision stamped in the database, or None before any migration.

    Read straight from ``alembic_version``: Alembic's ``MigrationContext`` would log two INFO
    lines each time it is built, and ``/healthz`` reads the revision on every call.
    """
    try:
        versions = list((await connection.execute(_READ_VERSION)).scalars())
    except DBAPIError as error:
        try:
            await connection.rollback()
            stamped = await connection.run_sync(
                lambda sync: sa.inspect(sync).has_table(VERSION_TABLE)
            )
        except Exception:
            raise error from None
        if stamped:
            raise
        return None
    if len(versions) > 1:
        raise RuntimeError(
            f"the database is stamped with several revisions ({', '.join(versions)}): "
            "its schema has branched; see `alembic heads` and `alembic history`"
        )
    return str(versions[0]) if versions else None


def known_revisions() -> set[str]:
    """Every revision the migrations directory knows: a database stamped with another one was
    migrated by a newer ccweb-store."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    return {revision.revision for revision in script.walk_revisions()}


def serving_lock(url: str) -> AbstractContextManager[bool]:
    """Held by a process that serves the database of ``url`` for as long as it runs: on a
    SQLite file, the shared lock that makes ``restore`` refuse (``sqlite.files``). The block
    is given whether another process serves that SQLite file already."""
    path = database_file(url)
    return nullcontext(False) if path is None else holding_in_use(path)


#: Raised by ``unserved`` while a server holds the database (``InUse``: the lock file's path).
DatabaseInUse = InUse


def unserved(url: str) -> AbstractContextManager[None]:
    """Held by a process that fills the database of ``url`` with no server using it (``copy
    --to``): on a SQLite file, ``serving_lock``'s lock taken exclusively, at once, or
    ``DatabaseInUse`` while a server holds it; a server that starts meanwhile waits."""
    path = database_file(url)
    return nullcontext() if path is None else claiming_unused(path)


async def head_revision() -> str | None:
    """The newest revision the migrations directory knows."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()
