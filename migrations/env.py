"""Alembic environment: async engines, or a connection handed in by the app or the tests."""

from __future__ import annotations

import asyncio
import logging.config

from alembic import context
from sqlalchemy.engine import Connection

from ccweb_store.config import Settings
from ccweb_store.db import create_engine
from ccweb_store.models import Base

config = context.config
target_metadata = Base.metadata

if config.config_file_name is not None and not config.attributes.get("connection"):
    logging.config.fileConfig(config.config_file_name, disable_existing_loggers=False)


def _database_url() -> str:
    url = config.attributes.get("database_url")
    return str(url) if url else Settings().database_url


def _configure(**kwargs: object) -> None:
    context.configure(
        target_metadata=target_metadata,
        render_as_batch=True,
        compare_type=True,
        compare_server_default=False,
        **kwargs,  # type: ignore[arg-type]
    )


def _run_on_connection(connection: Connection) -> None:
    _configure(connection=connection)
    with context.begin_transaction():
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
