"""Every mistake that keeps `ccweb-store serve` from starting is one line on stderr naming what
to change, exit 2 (1 when the database server does not answer), never a traceback: run as
the operator runs it, as a subprocess."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest

from tests.cli_support import run_cli
from tests.servers import free_port, server_env, serving


def assert_one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("ccweb-store: ")]
    assert "Traceback" not in stderr, stderr
    assert "errors.pydantic.dev" not in stderr, stderr
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"CCWEB_TOKEN": "tiny"}, "CCWEB_TOKEN (--token) is shorter than 16 characters"),
        ({"CCWEB_PORT": "eighty"}, "CCWEB_PORT: Input should be a valid integer"),
        ({"CCWEB_MAX_HOPS": "-1"}, "CCWEB_MAX_HOPS: Input should be greater than or equal to 0"),
        (
            {"CCWEB_LOG_LEVEL": "verbose"},
            "CCWEB_LOG_LEVEL (--log-level) 'verbose' is not a log level: use debug, info, "
            "warning, error",
        ),
    ],
)
def test_invalid_settings_are_one_line_naming_the_variable(
    tmp_path: Path, env: dict[str, str], says: str
) -> None:
    result = run_cli("serve", env=server_env(CCWEB_DATA_DIR=str(tmp_path), **env))

    assert result.returncode == 2
    line = assert_one_line(result.stderr)
    assert line.startswith("ccweb-store: invalid settings: ")
    assert says in line


@pytest.mark.parametrize("command", [["serve"], ["worker"], ["mcp-stdio"]])
def test_an_unknown_log_level_flag_is_one_line_naming_the_levels(
    tmp_path: Path, command: list[str]
) -> None:
    result = run_cli(
        *command, "--log-level", "verbose", env=server_env(CCWEB_DATA_DIR=str(tmp_path))
    )

    assert result.returncode == 2
    line = assert_one_line(result.stderr)
    assert "--log-level" in line and "'verbose' is not a log level" in line
    assert "debug, info, warning, error" in line


def test_an_unsupported_database_url_is_one_line_naming_it(tmp_path: Path) -> None:
    result = run_cli("serve", env=server_env(CCWEB_DATABASE_URL="mysql://u:s3cret@db.example/db"))

    assert result.returncode == 2
    line = assert_one_line(result.stderr)
    assert "unsupported database URL scheme 'mysql'" in line
    assert "db.example" in line and "s3cret" not in line


def test_a_port_in_use_names_the_port_and_how_to_pick_another(tmp_path: Path) -> None:
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        result = run_cli("serve", "--port", str(port), env=server_env(CCWEB_DATA_DIR=str(tmp_path)))
    assert result.returncode == 2
    line = assert_one_line(result.stderr)
    assert f"port {port} on 127.0.0.1 is in use" in line
    assert "--port or CCWEB_PORT" in line


def test_an_unreachable_database_server_exits_1_naming_it(tmp_path: Path) -> None:
    url = f"postgresql+asyncpg://ccweb:secret@127.0.0.1:{free_port()}/nowhere"

    result = run_cli("serve", "--port", str(free_port()), env=server_env(CCWEB_DATABASE_URL=url))

    assert result.returncode == 1
    line = assert_one_line(result.stderr)
    assert "cannot open the database postgresql+asyncpg://ccweb:***@127.0.0.1:" in line
    assert "secret" not in result.stderr


def test_a_data_home_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")

    result = run_cli("serve", env=server_env(CCWEB_DATA_DIR=str(blocker / "home")))

    assert result.returncode == 2
    line = assert_one_line(result.stderr)
    assert "cannot create the database's folder" in line
    assert "CCWEB_DATA_DIR" in line


def test_a_second_server_on_one_sqlite_file_warns_at_startup_and_on_postgres_says_nothing(
    database_url: str, backend: str
) -> None:
    with serving(database_url) as first, serving(database_url) as second:
        assert httpx.get(f"{second.url}/healthz", timeout=10).json()["status"] == "ok"
        first_log, second_log = first.stop(), second.stop()

    assert "another ccweb-store process" not in first_log
    warned = [line for line in second_log.splitlines() if "another ccweb-store process" in line]
    if backend == "sqlite":
        assert len(warned) == 1, second_log
        assert "Run one server per SQLite file, or use PostgreSQL for several" in warned[0]
        assert database_url in warned[0]
    else:
        assert warned == [], second_log
