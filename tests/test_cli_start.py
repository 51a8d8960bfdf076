"""What a ``ccweb-store`` command loads before it does anything: ``--version`` and ``--help``
load neither the settings (pydantic) nor the database layers, and a read command on SQLite
loads neither PostgreSQL's driver nor the server's libraries. Each runs in a fresh interpreter,
as a user's command does (bench/cli_start.py times them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import copy_migrated_sqlite
from tests.servers import ROOT, server_env

#: Prints the modules a command loaded, once it has run (``python -m ccweb_store ARGS``).
PROBE = """
import atexit, runpy, sys
listing = sys.argv.pop(1)
atexit.register(lambda: open(listing, "w").write("\\n".join(sorted(sys.modules))))
sys.argv = ["ccweb-store", *sys.argv[1:]]
runpy.run_module("ccweb_store", run_name="__main__", alter_sys=True)
"""
#: What neither ``--version`` nor ``--help`` needs.
NOT_FOR_HELP = (
    "asyncio",
    "pydantic",
    "pydantic_settings",
    "sqlalchemy",
    "prometheus_client",
    "httpx",
    "uvicorn",
    "starlette",
    "alembic",
    "ccweb_store.config",
    "ccweb_store.contract",
    "ccweb_store.store",
    "ccweb_store.services",
    "ccweb_store.protocol",
)
#: What a read command on SQLite does not need: the server, PostgreSQL, the data tools.
NOT_FOR_READS = (
    "asyncpg",
    "prometheus_client",
    "uvicorn",
    "starlette",
    "httpx",
    "alembic",
    "jinja2",
    "ccweb_store.http",
    "ccweb_store.worker",
    "ccweb_store.importer",
    "ccweb_store.store.postgres.driver",
)


def loaded_by(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> set[str]:
    listing = tmp_path / "modules.txt"
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(listing), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env or server_env(),
    )
    assert result.returncode == 0, result.stderr
    return set(listing.read_text().split())


def heavy(loaded: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(
        name for name in loaded if any(name == n or name.startswith(f"{n}.") for n in names)
    )


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["replies", "--help"]])
def test_version_and_help_load_neither_the_settings_nor_the_database_layers(
    tmp_path: Path, args: list[str]
) -> None:
    loaded = loaded_by(tmp_path, *args)

    assert "ccweb_store.cli.replies" in loaded  # every command was registered
    assert heavy(loaded, NOT_FOR_HELP) == []


def test_a_read_command_on_sqlite_loads_neither_postgresql_nor_the_server(
    tmp_path: Path, migrated_sqlite_template: Path
) -> None:
    url = copy_migrated_sqlite(migrated_sqlite_template, tmp_path / "ccweb.db")
    env = server_env(CCWEB_DATABASE_URL=url)

    loaded = loaded_by(tmp_path, "replies", "list", env=env)

    assert "ccweb_store.store.uow" in loaded  # it read the database
    assert heavy(loaded, NOT_FOR_READS) == []
