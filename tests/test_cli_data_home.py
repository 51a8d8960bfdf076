"""One data home: without CCWEB_DATABASE_URL every command uses ccweb.db in CCWEB_DATA_DIR,
whatever the working directory, says which database it opened, and only the commands that
create a database (migrate, serve, import-json) create one."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli_support import run_cli
from tests.servers import server_env


def home_env(data_dir: Path) -> dict[str, str]:
    env = server_env(CCWEB_DATA_DIR=str(data_dir))
    env.pop("CCWEB_DATABASE_URL", None)
    return env


def test_a_command_with_no_database_says_where_it_looked_and_creates_none(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "home"

    result = run_cli("replies", "list", env=home_env(data_dir), cwd=tmp_path)

    assert result.returncode == 1
    assert f"no database at {data_dir / 'ccweb.db'}" in result.stderr
    assert "ccweb-store migrate" in result.stderr and "ccweb-store serve" in result.stderr
    assert not data_dir.exists()
    assert list(tmp_path.iterdir()) == []


def test_mcp_stdio_started_where_no_database_is_refuses_and_creates_none(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "home"
    initialize = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})

    result = run_cli(
        "mcp-stdio",
        "--source-session",
        "planner",
        env=home_env(data_dir),
        cwd=tmp_path,
        input=initialize + "\n",
    )

    assert result.returncode == 1
    assert result.stdout == ""  # nothing an MCP client would take for an answer
    assert f"no database at {data_dir / 'ccweb.db'}" in result.stderr
    assert not data_dir.exists()
    assert list(tmp_path.iterdir()) == []


def test_migrate_creates_the_data_home_and_other_commands_find_it_from_any_folder(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "home" / "nested"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = home_env(data_dir)

    migrated = run_cli("migrate", env=env, cwd=tmp_path)
    listed = run_cli("replies", "list", "--json", env=env, cwd=elsewhere)

    assert migrated.returncode == 0, migrated.stderr
    assert (data_dir / "ccweb.db").is_file()
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["count"] == 0
    opened = f"ccweb-store: database sqlite+aiosqlite:///{data_dir / 'ccweb.db'}"
    assert opened in listed.stderr and "CCWEB_DATA_DIR" in listed.stderr
    assert list(elsewhere.iterdir()) == []


def test_the_database_a_command_opens_is_printed_without_its_password(tmp_path: Path) -> None:
    url = "postgresql+asyncpg://ccweb:s3cret-pass@127.0.0.1:1/ccweb"

    result = run_cli("replies", "list", env=server_env(CCWEB_DATABASE_URL=url), cwd=tmp_path)

    assert result.returncode == 1
    assert "ccweb-store: database postgresql+asyncpg://ccweb:***@127.0.0.1:1/ccweb" in result.stderr
    assert "s3cret-pass" not in result.stderr + result.stdout
