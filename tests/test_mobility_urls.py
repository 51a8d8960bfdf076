"""Every bad database URL a data tool is given is one line naming it (never its password),
with advice that fits the case, and no traceback."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from ccweb_store.mobility.locations import BadDatabaseUrl, checked_url, shown_url
from ccweb_store.store.db import create_engine, head_revision
from tests.cli_support import run_cli
from tests.conftest import migrate_url
from tests.servers import server_env, serving
from tests.test_mobility_copy import copy_cli, sqlite_url
from tests.test_mobility_copy_marker import every_checksum, small_source


def one_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    """The one line a refused command printed on stderr, after checking its exit code."""
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


async def stamp(url: str, revision: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.begin() as connection:
            await connection.exec_driver_sql(
                f"UPDATE alembic_version SET version_num = '{revision}'"
            )
    finally:
        await engine.dispose()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("garbage", "unsupported database URL scheme 'garbage'"),
        ("mysql://ccweb:s3cret@db.example/ccweb", "unsupported database URL scheme 'mysql'"),
        ("postgresql+psycopg2://ccweb:s3cret@db.example/ccweb", "'psycopg2'"),
        ("postgresql+asyncpg://ccweb:s3cret@db.example", "names no database"),
    ],
)
@pytest.mark.slow
def test_a_url_ccweb_store_cannot_use_is_one_line_and_exit_2_on_either_side(
    tmp_path: Path, url: str, says: str
) -> None:
    good = small_source(tmp_path / "good.db")
    for flags in (("--from", url, "--to", good), ("--from", good, "--to", url)):
        line = one_line(run_cli("copy", *flags), 2)
        assert says in line and ("--from" if flags[1] == url else "--to") in line
        assert "s3cret" not in line


def test_backup_and_export_json_read_a_bad_url_the_same_way(tmp_path: Path) -> None:
    url = "mysql://ccweb:s3cret@db.example/ccweb"
    for args in (("backup", str(tmp_path / "b.db")), ("export-json", str(tmp_path / "out"))):
        line = one_line(run_cli(*args, "--database-url", url), 2)
        assert "unsupported database URL scheme 'mysql'" in line and "s3cret" not in line
        assert "db.example" in line
    assert not (tmp_path / "out").exists()


def test_a_missing_file_or_folder_is_one_line_and_exit_2(tmp_path: Path) -> None:
    good = small_source(tmp_path / "good.db")

    missing = one_line(copy_cli(sqlite_url(tmp_path / "nothing.db"), good), 2)
    assert "--from: no SQLite database at" in missing and "nothing.db" in missing
    folder = one_line(copy_cli(sqlite_url(tmp_path), good), 2)
    assert "is a folder" in folder
    no_folder = one_line(copy_cli(good, sqlite_url(tmp_path / "absent" / "t.db")), 2)
    assert "--to" in no_folder and "absent" in no_folder and "create it first" in no_folder
    assert not (tmp_path / "absent").exists() and not (tmp_path / "nothing.db").exists()


def test_an_unreachable_server_is_one_line_naming_it_and_exit_1(tmp_path: Path) -> None:
    good = small_source(tmp_path / "good.db")
    down = "postgresql+asyncpg://ccweb:s3cret@127.0.0.1:9/ccweb"

    for flags, flag in (((down, good), "--from"), ((good, down), "--to")):
        line = one_line(copy_cli(*flags), 1)
        assert f"cannot use {flag} postgresql+asyncpg://ccweb:***@127.0.0.1:9/ccweb" in line
        assert "s3cret" not in line


def test_a_newer_schema_on_either_side_asks_for_a_newer_ccweb_store(
    tmp_path: Path, database_url: str
) -> None:
    good = small_source(tmp_path / "good.db")
    newer = small_source(tmp_path / "newer.db")
    asyncio.run(stamp(newer, "9999"))

    source = one_line(copy_cli(newer, database_url), 2)
    assert "--from" in source and "newer.db" in source
    assert "revision 9999, newer than this ccweb-store knows" in source
    assert "upgrade ccweb-store" in source

    asyncio.run(stamp(database_url, "9999"))
    try:
        before = every_checksum(good), every_checksum(database_url)
        target = one_line(copy_cli(good, database_url), 2)
        assert target.startswith("ccweb-store: --to ") and "upgrade ccweb-store" in target
        assert (every_checksum(good), every_checksum(database_url)) == before
    finally:
        asyncio.run(stamp(database_url, asyncio.run(head_revision()) or ""))


def test_an_older_schema_on_either_side_asks_for_a_migration(
    tmp_path: Path, database_url: str
) -> None:
    good = small_source(tmp_path / "good.db")
    old = sqlite_url(tmp_path / "old.db")
    asyncio.run(migrate_url(old, "0001"))

    source = one_line(copy_cli(old, database_url), 2)
    assert "--from" in source and "revision 0001, older than" in source
    assert "migrate it first (ccweb-store migrate --database-url FROM)" in source

    asyncio.run(stamp(database_url, "0009"))
    try:
        target = one_line(copy_cli(good, database_url), 2)
        assert "--to" in target and "revision 0009, older than" in target
        assert "ccweb-store migrate --database-url TO" in target
    finally:
        asyncio.run(stamp(database_url, asyncio.run(head_revision()) or ""))


def test_checked_url_names_the_async_driver_and_shown_url_hides_a_password(
    tmp_path: Path,
) -> None:
    assert checked_url(f"sqlite:///{tmp_path}/x.db", "--to", must_exist=False) == (
        f"sqlite+aiosqlite:///{tmp_path}/x.db"
    )
    assert checked_url("postgres://u@h/db", "--to", must_exist=False) == (
        "postgresql+asyncpg://u@h/db"
    )
    with pytest.raises(BadDatabaseUrl, match="no SQLite database"):
        checked_url(f"sqlite:///{tmp_path}/x.db", "--from", must_exist=True)
    assert shown_url("postgresql://u:pw@h/db") == "postgresql://u:***@h/db"
    assert "pw" not in shown_url("nonsense://u:pw@h:port:port/db")
    with pytest.raises(BadDatabaseUrl, match="is not a database URL"):
        checked_url("postgresql://u:pw@h:port:port/db", "--to", must_exist=False)


def test_import_json_and_migrate_read_a_bad_url_the_same_way(tmp_path: Path) -> None:
    (tmp_path / "state" / "sessions").mkdir(parents=True)
    for args in (("import-json", str(tmp_path / "state")), ("migrate",)):
        for url, says in (
            ("mysql://ccweb:s3cret@db.example/ccweb", "unsupported database URL scheme 'mysql'"),
            ("garbage", "unsupported database URL scheme 'garbage'"),
        ):
            line = one_line(run_cli(*args, "--database-url", url), 2)
            assert says in line and "s3cret" not in line


def test_copy_without_from_copies_the_database_in_the_data_directory(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    small_source(home / "ccweb.db")
    target = sqlite_url(tmp_path / "copy.db")
    env = server_env(CCWEB_DATA_DIR=str(home))
    env.pop("CCWEB_DATABASE_URL", None)

    result = run_cli("copy", "--to", target, "--json", env=env, timeout=120)

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert str(home / "ccweb.db") in report["from"]
    assert report["ok"] is True


def test_copy_to_a_sqlite_file_a_running_server_holds_is_refused_and_leaves_it_as_it_was(
    tmp_path: Path, database_url: str
) -> None:
    target = sqlite_url(tmp_path / "served.db")
    asyncio.run(migrate_url(target))
    before = every_checksum(target)
    with serving(target):
        refused = one_line(copy_cli(database_url, target), 2)
    assert refused == (
        f"ccweb-store: --to {target} is open in a ccweb-store server ({tmp_path}/served.db.lock "
        "is locked: every `ccweb-store serve` and `mcp-stdio` holds it while running): stop it, "
        "then copy"
    )
    assert every_checksum(target) == before
    assert copy_cli(database_url, target).returncode == 0  # once the server has stopped
