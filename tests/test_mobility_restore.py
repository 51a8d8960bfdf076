"""``ccweb-store restore``: a backup put in place of the database, the former file kept
whole beside it, refused while a server has the database open or when the backup is unsound."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

from tests import forked
from tests.cli_support import run_cli
from tests.conftest import migrate_url
from tests.mobility_data import fill_every_kind_of_row
from tests.servers import ROOT, server_env, serving
from tests.test_mobility_backup import row_checksums, sqlite_url

#: Commits a change to the database in WAL mode and exits without closing it, so the change
#: stays in the -wal file (closing the last connection would fold it into the database).
CHANGE_LEFT_IN_WAL = """
import os, sqlite3, sys
connection = sqlite3.connect(sys.argv[1])
connection.execute("PRAGMA journal_mode = WAL")
connection.execute("PRAGMA wal_autocheckpoint = 0")
with connection:
    connection.execute("UPDATE sessions SET title = 'changed after the backup'")
os._exit(0)
"""


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def backed_up(tmp_path: Path) -> tuple[Path, str, Path]:
    """A database holding every kind of row, and a backup of it."""
    database = tmp_path / "live.db"
    url = sqlite_url(database)
    asyncio.run(migrate_url(url))
    asyncio.run(fill_every_kind_of_row(url))
    backup = tmp_path / "backup.db"
    result = run_cli("backup", str(backup), "--database-url", url)
    assert result.returncode == 0, result.stderr
    return database, url, backup


def titles(path: Path) -> set[str]:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as connection:
        return {row[0] for row in connection.execute("SELECT title FROM sessions")}


def test_a_restore_puts_the_backup_in_place_and_keeps_the_former_file_whole(
    tmp_path: Path,
) -> None:
    database, url, backup = backed_up(tmp_path)
    backup_bytes = digest(backup)
    subprocess.run(
        [sys.executable, "-c", CHANGE_LEFT_IN_WAL, str(database)], check=True, timeout=60
    )
    assert (tmp_path / "live.db-wal").stat().st_size > 0

    result = run_cli("restore", str(backup), "--json", "--database-url", url)

    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "live.db-wal").exists() and not (tmp_path / "live.db-shm").exists()
    report = json.loads(result.stdout)
    assert report["database"] == str(database) and report["needsMigration"] is False
    kept = Path(report["kept"])
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("live.db")) == [
        "live.db",
        kept.name,
        "live.db.lock",
    ]
    assert digest(backup) == backup_bytes  # the backup file itself stays
    assert row_checksums(database) == row_checksums(backup)
    assert "changed after the backup" not in titles(database)
    assert kept.name.startswith("live.db.before-restore-")
    # The former file alone (its -wal folded in) holds the change made after the backup.
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(kept, alone / "kept.db")
    assert titles(alone / "kept.db") == {"changed after the backup"}


def test_a_restore_is_refused_while_a_server_has_the_database_open(tmp_path: Path) -> None:
    database, url, backup = backed_up(tmp_path)
    (tmp_path / "backup-changed.db").write_bytes(backup.read_bytes())
    with closing(sqlite3.connect(tmp_path / "backup-changed.db")) as connection, connection:
        connection.execute("UPDATE sessions SET title = 'only in the backup'")
    rows = row_checksums(database)

    with serving(url):
        refused = run_cli("restore", str(tmp_path / "backup-changed.db"), "--database-url", url)
        files = sorted(p.name for p in tmp_path.iterdir())

    assert refused.returncode == 2, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "open in a ccweb-store server" in refused.stderr
    assert "live.db.lock" in refused.stderr and "stop it" in refused.stderr
    assert not [name for name in files if "before-restore" in name or name.endswith(".tmp")]
    assert row_checksums(database) == rows
    # Once the server has stopped, its lock is gone with it.
    restored = run_cli("restore", str(tmp_path / "backup-changed.db"), "--database-url", url)
    assert restored.returncode == 0, restored.stderr
    assert titles(database) == {"only in the backup"}


def test_a_restore_is_refused_while_another_process_has_the_file_open(tmp_path: Path) -> None:
    database, url, backup = backed_up(tmp_path)
    with subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
            "c.execute('PRAGMA journal_mode = WAL'); c.execute('SELECT 1 FROM sessions'); "
            "print('open', flush=True); sys.stdin.read()",
            str(database),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "open\n"
            refused = run_cli("restore", str(backup), "--database-url", url)
        finally:
            holder.kill()

    assert refused.returncode == 2, refused.stderr
    assert "open in another process" in refused.stderr
    assert not list(tmp_path.glob("*before-restore*"))


def test_a_restore_refuses_an_unsound_backup_and_leaves_the_database_untouched(
    tmp_path: Path,
) -> None:
    database, url, backup = backed_up(tmp_path)
    (tmp_path / "notes.txt").write_text("not a database\n" * 1000)
    corrupt = tmp_path / "corrupt.db"
    damaged = bytearray(backup.read_bytes())
    damaged[4096 * 3 : 4096 * 5] = b"\xff" * 8192
    corrupt.write_bytes(bytes(damaged))
    newer = tmp_path / "newer.db"
    shutil.copy(backup, newer)
    with closing(sqlite3.connect(newer)) as connection, connection:
        connection.execute("UPDATE alembic_version SET version_num = '9999_from_the_future'")
    before = digest(database)

    cases = {
        "notes.txt": "not a SQLite database",
        "corrupt.db": "cannot be restored",
        "newer.db": "upgrade ccweb-store",
        "missing.db": "no backup file",
        "live.db-wal": "the database itself or one of the files",
    }
    for name, reason in cases.items():
        result = run_cli("restore", str(tmp_path / name), "--database-url", url)

        assert result.returncode == 2, (name, result.stderr)
        assert reason in result.stderr, (name, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1
    assert digest(database) == before
    assert not [
        p.name for p in tmp_path.iterdir() if "before-restore" in p.name or p.suffix == ".tmp"
    ]


def test_a_backup_of_an_older_schema_is_restored_and_the_server_migrates_it(
    tmp_path: Path,
) -> None:
    old = tmp_path / "old.db"
    asyncio.run(migrate_url(sqlite_url(old), "0008"))
    database = tmp_path / "live.db"
    url = sqlite_url(database)
    asyncio.run(migrate_url(url))

    result = run_cli("restore", str(old), "--database-url", url)

    assert result.returncode == 0, result.stderr
    assert "older than this ccweb-store's" in result.stdout and "migrate" in result.stdout
    with closing(sqlite3.connect(database)) as connection:
        assert connection.execute("SELECT version_num FROM alembic_version").fetchone() == ("0008",)
    with serving(url):
        pass
    with closing(sqlite3.connect(database)) as connection:
        assert connection.execute("SELECT version_num FROM alembic_version").fetchone() != ("0008",)


def test_a_restore_on_postgresql_prints_the_pg_restore_command(
    database_url: str, backend: str, tmp_path: Path
) -> None:
    backup = tmp_path / "backup.db"
    if backend == "sqlite":
        assert run_cli("backup", str(backup), "--database-url", database_url).returncode == 0

    result = subprocess.run(
        [sys.executable, "-m", "ccweb_store", "restore", str(backup)],
        cwd=ROOT,
        env=server_env(CCWEB_DATABASE_URL=database_url),
        capture_output=True,
        text=True,
        timeout=60,
    )

    if backend == "sqlite":
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"restored {backup}")
        return
    assert result.returncode == 2
    assert result.stdout.startswith("pg_restore --no-owner --clean --if-exists")
    assert result.stdout.rstrip().endswith(str(backup))
    assert "pg_restore" in result.stderr


def test_a_restore_is_refused_while_mcp_stdio_serves_the_database(tmp_path: Path) -> None:
    database, url, backup = backed_up(tmp_path)
    initialize = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
    with forked.spawn(
        [*forked.COMMAND, "mcp-stdio", "--source-session", "alpha"],
        cwd=ROOT,
        env=server_env(CCWEB_DATABASE_URL=url),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as stdio:
        try:
            assert stdio.stdin is not None and stdio.stdout is not None
            stdio.stdin.write(initialize + "\n")
            stdio.stdin.flush()
            assert json.loads(stdio.stdout.readline())["id"] == 1
            refused = run_cli("restore", str(backup), "--database-url", url)
        finally:
            stdio.kill()

    assert refused.returncode == 2, refused.stderr
    assert "open in a ccweb-store server" in refused.stderr
    assert database.is_file() and not list(tmp_path.glob("*before-restore*"))


def test_a_restore_replaces_a_damaged_database_and_keeps_it_as_it_was(tmp_path: Path) -> None:
    database, url, backup = backed_up(tmp_path)
    database.write_bytes(b"damaged " * 4096)

    result = run_cli("restore", str(backup), "--json", "--database-url", url)

    assert result.returncode == 0, result.stderr
    assert Path(json.loads(result.stdout)["kept"]).read_bytes() == b"damaged " * 4096
    with closing(sqlite3.connect(database)) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_restore_through_a_symlinked_database_path_replaces_the_file_it_names(
    tmp_path: Path,
) -> None:
    database, _url, backup = backed_up(tmp_path)
    link = tmp_path / "elsewhere" / "link.db"
    link.parent.mkdir()
    link.symlink_to(database)
    with closing(sqlite3.connect(database)) as connection, connection:
        connection.execute("UPDATE sessions SET title = 'changed after the backup'")

    result = run_cli("restore", str(backup), "--database-url", sqlite_url(link))

    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and link.resolve() == database
    assert "changed after the backup" not in titles(database)
    assert list(tmp_path.glob("live.db.before-restore-*"))
