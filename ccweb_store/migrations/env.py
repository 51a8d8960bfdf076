"""Alembic environment: async engines, or a connection handed in by the app or the tests."""

from __future__ import annotations

import asyncio
import logging.config
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SAWarning
from sqlalchemy.schema import SchemaItem

from ccweb_store.config import Settings
from ccweb_store.store.db import create_engine
from ccweb_store.store.models import MIGRATION_OWNED_INDEXES, Base

config = context.config
target_metadata = Base.metadata

if config.config_file_name is not None and not config.attributes.get("connection"):
    logging.config.fileConfig(config.config_file_name, disable_existing_loggers=False)


def _database_url() -> str:
    url = config.attributes.get("database_url")
    return str(url) if url else Settings().database_url


def _include_object(
    item: SchemaItem, name: str | None, type_: str, reflected: bool, compare_to: object
) -> bool:
    """Leave the migration-owned expression indexes (``models.MIGRATION_OWNED_INDEXES``) out
    of autogenerate: the ORM does not declare them, so ``alembic check`` would otherwise ask
    to drop them (PostgreSQL reflects them; SQLite skips them, see below)."""
    return not (type_ == "index" and name in MIGRATION_OWNED_INDEXES)


@contextmanager
def _quiet_owned_index_reflection() -> Iterator[None]:
    """Silence SQLAlchemy's warning that SQLite cannot reflect our expression indexes.

    SQLite reflection skips an expression index with an ``SAWarning`` before any
    ``include_object`` hook sees it. Only that warning, and only for the indexes named in
    ``MIGRATION_OWNED_INDEXES``, is ignored; any other expression index still warns.
    """
    with warnings.catch_warnings():
        for name in MIGRATION_OWNED_INDEXES:
            warnings.filterwarnings(
                "ignore",
                message=re.escape(
                    f"Skipped unsupported reflection of expression-based index {name}"
                )
                + "$",
                category=SAWarning,
            )
        yield


def _configure(**kwargs: object) -> None:
    context.configure(
        target_metadata=target_metadata,
        render_as_batch=True,
        compare_type=True,
        compare_server_default=False,
        include_object=_include_object,
        **kwargs,  # type: ignore[arg-type]
    )


def _run_on_connection(connection: Connection) -> None:
    _configure(connection=connection)
    with context.begin_transaction(), _quiet_owned_index_reflection():
        context.run_migrations()


async def _run_online() -> None:
    engine = create_engine(_database_url())
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run_on_connection)
            await connection.commit()
    finally:
        await engine.dispose()


def run_migrations_offline() -> None:
    _configure(url=_database_url(), literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_on_connection(connection)
    else:
        asyncio.run(_run_online())


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
