"""Engines and migrations: the engine for a database URL (SQLite through aiosqlite,
PostgreSQL through asyncpg, each set up by its driver module) and Alembic upgrades to head.
Whether an error is the database failing is ``failures``'."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ccweb_store.config import database_kind, normalize_database_url
from ccweb_store.store.postgres.driver import create_postgres_engine
from ccweb_store.store.sqlite.driver import create_sqlite_engine, sqlite_url_file

PROJECT_ROOT = Path(__file__).resolve().parents[2]
ALEMBIC_INI = PROJECT_ROOT / "alembic.ini"
MIGRATIONS_DIR = PROJECT_ROOT / "migrations"


def create_engine(url: str, *, busy_timeout_ms: int = 30_000, **kwargs: Any) -> AsyncEngine:
    """An async engine for ``url`` with the connection setup this service relies on."""
    url = normalize_database_url(url)
    if database_kind(url) == "sqlite":
        return create_sqlite_engine(url, busy_timeout_ms, **kwargs)
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
    """Make the directory a SQLite file will be created in (``serve``, ``migrate``)."""
    path = database_file(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)


def shown_url(url: str) -> str:
    """``url`` as it may be printed: its password masked."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


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
