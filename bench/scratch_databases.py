"""Scratch PostgreSQL databases for the benchmarks and the tests: made on a server, dropped
after."""

from __future__ import annotations

from sqlalchemy import make_url, text

from ccweb_store.config import normalize_database_url
from ccweb_store.store.db import create_engine


async def create_database(server_url: str, name: str) -> str:
    """Create database ``name`` on the PostgreSQL server of ``server_url``; return its URL."""
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
