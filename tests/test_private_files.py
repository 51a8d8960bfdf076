"""The data home and the SQLite files are private whatever the umask: the directory
``migrate``/``serve`` makes is ``0700``, the database and its ``-wal``/``-shm`` files are
``0600``; ``doctor`` warns about a database others can read and prints the ``chmod``."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.cli_support import run_cli
from tests.servers import SERVE, free_port, server_env, start_server


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The common umask, under which files are created readable by everyone (the children
    started here inherit it)."""
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


def test_migrate_makes_a_private_data_home_and_database(tmp_path: Path, umask_022: None) -> None:
    home = tmp_path / "home" / "ccweb-store"
    result = run_cli("migrate", env=server_env(CCWEB_DATA_DIR=str(home)))
    assert result.returncode == 0, result.stderr
    assert mode(home) == 0o700
    assert mode(home / "ccweb.db") == 0o600


def test_a_served_database_and_its_wal_and_shm_are_private(tmp_path: Path, umask_022: None) -> None:
    home = tmp_path / "data"
    port = free_port()
    env = server_env(CCWEB_DATA_DIR=str(home))
    server = start_server([*SERVE, "--port", str(port)], port=port, env=env)
    try:
        create = {"jsonrpc": "2.0", "id": 1, "method": "session.create", "params": {"id": "a"}}
        answer = httpx.post(f"{server.url}/rpc", json=create, timeout=30)
        assert "error" not in answer.json(), answer.text
        files = {path.name: mode(path) for path in home.iterdir()}
    finally:
        server.stop()
    assert mode(home) == 0o700
    assert files == {
        "ccweb.db": 0o600,
        "ccweb.db-wal": 0o600,
        "ccweb.db-shm": 0o600,
        "ccweb.db.lock": 0o600,  # held while the server runs (restore refuses then)
    }


def test_an_existing_data_home_keeps_its_mode(tmp_path: Path, umask_022: None) -> None:
    home = tmp_path / "shared"
    home.mkdir(mode=0o755)
    result = run_cli("migrate", env=server_env(CCWEB_DATA_DIR=str(home)))
    assert result.returncode == 0, result.stderr
    assert mode(home) == 0o755
    assert mode(home / "ccweb.db") == 0o600


def test_doctor_warns_about_a_database_others_can_read(tmp_path: Path) -> None:
    home = tmp_path / "data"
    env = server_env(CCWEB_DATA_DIR=str(home))
    assert run_cli("migrate", env=env).returncode == 0
    database = home / "ccweb.db"
    quiet = json.loads(run_cli("doctor", "--json", env=env).stdout)
    assert {c["name"]: c["status"] for c in quiet["checks"]}["files"] == "ok"

    database.chmod(0o644)
    result = run_cli("doctor", "--json", env=env)
    [files] = [c for c in json.loads(result.stdout)["checks"] if c["name"] == "files"]
    assert files["status"] == "warning"
    # Opening the database made its -wal and -shm with its permissions: all three are named.
    assert files["fix"].startswith(f"chmod 600 {database}")
    assert files["items"][0] == f"{database}: mode 0644"
    text = run_cli("doctor", env=env)
    assert f"fix: chmod 600 {database}" in text.stdout
