"""Database URLs as every command that keeps data takes them, as a user sees it in a real
process: an in-memory SQLite database is refused (it keeps nothing), a relative SQLite path
is shown absolute and its folder must exist, a managed PostgreSQL URL's libpq parameters
connect (anything else, or a bad port, is one line), and a wrong PostgreSQL URL says which
host, port, database and setting to look at."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa

from ccweb_store.store.db import create_engine
from tests.cli_support import run_cli
from tests.servers import SERVE, free_port, server_env, start_server
from tests.test_mobility_copy import sqlite_url
from tests.test_mobility_copy_marker import small_source


def one_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    """The last line a refused command printed on stderr (the line before it, if any, names
    the database it opens), after checking its exit code and that no traceback came."""
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert 1 <= len(lines) <= 2, result.stderr
    return lines[-1]


def state_folder(root: Path) -> Path:
    """A cc-web state folder holding one conversation (what import-json reads)."""
    sessions = root / "state" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "a.json").write_text(json.dumps({"id": "a", "title": "A", "messages": []}))
    return root / "state"


def commands_keeping_data(url: str, tmp_path: Path, good: str) -> list[list[str]]:
    """Every command that opens a database, with ``url`` as the database it keeps."""
    named = ["--database-url", url]
    return [
        ["serve", "--port", str(free_port()), *named],
        ["migrate", *named],
        ["import-json", str(state_folder(tmp_path)), *named],
        ["copy", "--from", good, "--to", url],
        ["copy", "--from", url, "--to", sqlite_url(tmp_path / "copy.db")],
        ["restore", str(tmp_path / "backup.db"), *named],
        ["backup", str(tmp_path / "backup-out.db"), *named],
        ["export-json", str(tmp_path / "export"), *named],
        ["mcp-stdio", "--source-session", "a", *named],
        ["conversation-url", "a", *named],
        ["credentials", "list", *named],
        ["conversations", "list", *named],
        ["replies", "list", *named],
    ]


IN_MEMORY = [
    "sqlite+aiosqlite:///",
    "sqlite+aiosqlite:///:memory:",
    "sqlite://",
    "sqlite+aiosqlite:///file:kept?mode=memory&uri=true",
]


@pytest.mark.slow
def test_every_command_that_keeps_data_refuses_an_in_memory_sqlite_database(
    tmp_path: Path,
) -> None:
    good = small_source(tmp_path / "good.db")
    for index, url in enumerate(IN_MEMORY):
        for command in commands_keeping_data(url, tmp_path / str(index), good):
            line = one_line(run_cli(*command, input=""), 2)
            assert f"{url} is a SQLite database in memory, which keeps nothing" in line, command
            assert "name a file, e.g. sqlite+aiosqlite:////" in line, command
    assert not (tmp_path / "0" / "copy.db").exists()
    assert not (tmp_path / "0" / "export").exists()


def test_a_relative_sqlite_path_is_shown_absolute_and_its_folder_is_never_made(
    tmp_path: Path,
) -> None:
    missing = run_cli("migrate", "--database-url", "sqlite:///nodir/x.db", cwd=tmp_path)
    line = one_line(missing, 2)
    assert f"sqlite:///{tmp_path}/nodir/x.db" in line
    assert f"the folder {tmp_path / 'nodir'} does not exist: create it first" in line
    assert not (tmp_path / "nodir").exists()

    (tmp_path / "data").mkdir()
    made = run_cli("migrate", "--database-url", "sqlite:///data/x.db", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert f"database sqlite:///{tmp_path}/data/x.db" in made.stderr
    assert (tmp_path / "data" / "x.db").is_file()

    port = free_port()
    server = start_server(
        [*SERVE, "--port", str(port), "--database-url", "sqlite+aiosqlite:///data/x.db"],
        port=port,
        env=server_env(),
        cwd=tmp_path,
    )
    log = server.stop()
    assert f"listening on http://127.0.0.1:{port}, database sqlite+aiosqlite:///" in log
    assert f"database sqlite+aiosqlite:///{tmp_path}/data/x.db;" in log


def postgres_url(migrated_postgres_url: str, query: str) -> str:
    return f"{migrated_postgres_url}?{query}"


@pytest.mark.parametrize("mode", ["disable", "prefer", "allow"])
def test_a_managed_postgres_url_with_an_sslmode_the_server_allows_connects(
    migrated_postgres_url: str, mode: str
) -> None:
    url = postgres_url(migrated_postgres_url, f"sslmode={mode}&application_name=ccweb-edge")
    migrated = run_cli("migrate", "--database-url", url)
    assert migrated.returncode == 0, migrated.stderr
    assert "database at revision" in migrated.stdout

    async def application_name() -> str:
        engine = create_engine(url)
        try:
            async with engine.connect() as connection:
                query = sa.text("SELECT current_setting('application_name')")
                return str((await connection.execute(query)).scalar_one())
        finally:
            await engine.dispose()

    assert asyncio.run(application_name()) == "ccweb-edge"


def test_sslmode_require_on_a_server_without_tls_is_one_clear_line(
    migrated_postgres_url: str, tmp_path: Path
) -> None:
    url = postgres_url(migrated_postgres_url, "sslmode=require")
    for command in (["migrate"], ["conversations", "list"], ["serve", "--port", str(free_port())]):
        line = one_line(run_cli(*command, "--database-url", url), 1)
        assert "does not offer TLS, which sslmode=require requires" in line, command
        assert "127.0.0.1:5432" in line and "sslmode=prefer" in line
        assert "sqlalchemy" not in line and "asyncpg" not in line.replace("+asyncpg", "")


@pytest.mark.parametrize(
    ("query", "says"),
    [
        (
            "sslmode=require&connect_timeout=3",
            "the parameter 'connect_timeout' is not one ccweb-store understands: a PostgreSQL "
            "URL may carry only sslmode, sslrootcert, application_name",
        ),
        ("sslmode=sometimes", "sslmode='sometimes' is not a mode: use one of disable, allow"),
        ("sslrootcert=/nonexistent/ca.pem", "sslrootcert is used to check the server's"),
        ("sslmode=verify-full&sslrootcert=/nonexistent/ca.pem", "no such file"),
    ],
)
def test_a_postgres_url_parameter_ccweb_store_does_not_understand_is_refused_by_every_command(
    tmp_path: Path, query: str, says: str
) -> None:
    url = f"postgresql+asyncpg://ccweb:s3cret@127.0.0.1:5432/ccweb?{query}"
    good = small_source(tmp_path / "good.db")
    for command in commands_keeping_data(url, tmp_path, good):
        line = one_line(run_cli(*command, input=""), 2)
        assert says in line, command
        assert "s3cret" not in line


def test_a_port_that_is_not_one_is_refused_in_one_line(tmp_path: Path) -> None:
    for url in ("postgresql://ccweb@127.0.0.1:70000/ccweb", "postgresql+asyncpg://h:0/db"):
        for command in (["migrate"], ["serve", "--port", str(free_port())], ["doctor"]):
            line = one_line(run_cli(*command, "--database-url", url), 2)
            assert "is not a port: use a number from 1 to 65535" in line, command


def test_a_postgres_server_that_is_not_there_names_its_host_port_and_the_setting() -> None:
    port = free_port()
    url = f"postgresql+asyncpg://root@127.0.0.1:{port}/ccweb"
    for command, code in ((["serve", "--port", str(free_port())], 1), (["migrate"], 1)):
        line = one_line(run_cli(*command, "--database-url", url), code)
        assert f"nothing answers at 127.0.0.1:{port} (connection refused)" in line, command
        assert "--database-url (or CCWEB_DATABASE_URL)" in line
    copied = one_line(run_cli("copy", "--from", url, "--to", "sqlite:////tmp/never.db"), 1)
    assert f"--from {url}: nothing answers at 127.0.0.1:{port}" in copied
    assert "Check the host and port in --from" in copied


def test_a_missing_postgres_database_says_so_and_shows_createdb(
    migrated_postgres_url: str,
) -> None:
    url = migrated_postgres_url.rsplit("/", 1)[0] + "/ccweb_no_such_database"
    for command in (["serve", "--port", str(free_port())], ["migrate"], ["runs", "list"]):
        line = one_line(run_cli(*command, "--database-url", url), 1)
        assert "the database 'ccweb_no_such_database' does not exist" in line, command
        assert "createdb -h 127.0.0.1 -p 5432 -U root ccweb_no_such_database" in line
        assert "sqlalchemy" not in line and "Error" not in line
