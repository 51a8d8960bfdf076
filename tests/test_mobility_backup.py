"""``ccweb-store backup``: a consistent copy of a SQLite database the server keeps writing to."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing
from pathlib import Path

import pytest

from ccweb_store.config import Settings
from ccweb_store.mobility.copy import table_checksums
from ccweb_store.store.sqlite.bulk import BACKUP_PAUSE_ENV
from ccweb_store.store.uow import Store
from ccweb_store.store.whole_tables import schema_tables
from tests import forked
from tests.cli_support import COMMAND, run_cli
from tests.conftest import migrate_url
from tests.mobility_data import fill_every_kind_of_row
from tests.servers import ROOT, server_env

#: Appends a message at a time through the store, printing each id once it is committed.
WRITER = """
import asyncio, sys
from ccweb_store.config import Settings
from ccweb_store.store.uow import Store

async def main() -> None:
    store = Store.from_settings(Settings(database_url=sys.argv[1]))
    async with store.uow() as uow:
        await uow.sessions.create("load", title="Load")
        await uow.commit()
    n = 0
    while True:
        n += 1
        async with store.uow() as uow:
            await uow.messages.append("load", "user", f"write {n}", id=f"w{n}")
            await uow.commit()
        print(f"w{n}", flush=True)

asyncio.run(main())
"""


def test_a_backup_taken_under_write_load_opens_and_holds_every_write_acknowledged_before_it(
    tmp_path: Path,
) -> None:
    database = tmp_path / "live.db"
    url = f"sqlite+aiosqlite:///{database}"
    asyncio.run(migrate_url(url))
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, url],
        cwd=ROOT,
        env=server_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    acknowledged: list[str] = []
    started = threading.Event()
    assert writer.stdout is not None
    stdout = writer.stdout

    def read_acknowledgements() -> None:
        for line in stdout:
            acknowledged.append(line.strip())
            if len(acknowledged) >= 200:
                started.set()

    reader = threading.Thread(target=read_acknowledgements, daemon=True)
    reader.start()
    try:
        assert started.wait(120), "the writer acknowledged too few writes"
        before_backup = set(acknowledged)
        result = run_cli("backup", str(tmp_path / "copy.db"), "--json", "--database-url", url)
        after_backup = len(acknowledged)
    finally:
        writer.kill()
        writer.wait()
        reader.join(10)
        stdout.close()

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["revision"] is not None and report["rows"]["sessions"] == 1
    assert after_backup > len(before_backup), "the writer kept writing during the backup"
    with closing(sqlite3.connect(tmp_path / "copy.db")) as copy:
        assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        held = {row[0] for row in copy.execute("SELECT id FROM messages")}
    assert before_backup <= held
    assert report["rows"]["messages"] == len(held)


def test_a_backup_never_overwrites_a_file(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'live.db'}"
    asyncio.run(migrate_url(url))
    (tmp_path / "taken.db").write_text("mine")

    result = run_cli("backup", str(tmp_path / "taken.db"), "--database-url", url)

    assert result.returncode == 2 and "exists" in result.stderr
    assert (tmp_path / "taken.db").read_text() == "mine"


def test_a_backup_of_postgresql_prints_the_pg_dump_command(
    database_url: str, backend: str, tmp_path: Path
) -> None:
    result = run_cli("backup", str(tmp_path / "dump"), "--database-url", database_url)

    if backend == "sqlite":
        assert result.returncode == 0, result.stderr
        assert "backed up" in result.stdout
        return
    assert result.returncode == 2
    assert result.stdout.startswith("pg_dump --format=custom")
    assert f"--file={tmp_path / 'dump'}" in result.stdout
    assert "pg_dump" in result.stderr


def sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


def row_checksums(path: Path) -> list[tuple[int, str]]:
    """Each table's (rows, checksum) in the SQLite file at ``path``."""

    async def read() -> list[tuple[int, str]]:
        store = Store.from_settings(Settings(database_url=sqlite_url(path)))
        try:
            return await table_checksums(store, schema_tables())
        finally:
            await store.dispose()

    return asyncio.run(read())


def staging_files(directory: Path) -> list[Path]:
    return sorted(directory.glob(".*.tmp*"))


def test_a_backup_killed_at_any_point_leaves_nothing_at_its_path_and_a_retry_equals_a_clean_one(
    tmp_path: Path,
) -> None:
    database = tmp_path / "live.db"
    url = sqlite_url(database)
    asyncio.run(migrate_url(url))
    asyncio.run(fill_every_kind_of_row(url))
    with closing(sqlite3.connect(database)) as connection, connection:
        connection.executemany(
            "INSERT INTO messages (id, session_id, seq, role, content, created_at) "
            "VALUES (?, 'quiet', ?, 'user', ?, '2025-01-01 00:00:00')",
            [(f"bulk{n}", 100 + n, "x" * 500) for n in range(400)],
        )
    clean = tmp_path / "clean.db"
    assert run_cli("backup", str(clean), "--database-url", url).returncode == 0
    pages = clean.stat().st_size // 4096
    assert pages > 60
    destination = tmp_path / "backups" / "copy.db"
    destination.parent.mkdir()
    slow = server_env(**{BACKUP_PAUSE_ENV: "0.02"})

    # Killed early, midway and late in the page-by-page copy.
    for after in (0.0, pages * 0.02 / 2, pages * 0.02 * 0.7):
        process = forked.spawn(
            [*COMMAND, "backup", str(destination), "--database-url", url],
            cwd=ROOT,
            env=slow,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while not staging_files(destination.parent):
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.01)
            time.sleep(after)
            process.send_signal(signal.SIGKILL)
            assert process.wait(timeout=30) == -signal.SIGKILL
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        assert not os.path.lexists(destination)
        assert staging_files(destination.parent)  # what the killed run left, for the retry

    retried = run_cli("backup", str(destination), "--database-url", url)

    assert retried.returncode == 0, retried.stderr
    assert staging_files(destination.parent) == []
    assert sorted(p.name for p in destination.parent.iterdir()) == ["copy.db"]
    with closing(sqlite3.connect(destination)) as copy:
        assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert row_checksums(destination) == row_checksums(clean)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["live.db", "live.db-wal", "live.db-shm", "live.db-journal"])
def test_a_backup_refuses_the_database_and_the_files_sqlite_keeps_beside_it(
    tmp_path: Path, name: str
) -> None:
    database = tmp_path / "live.db"
    url = sqlite_url(database)
    asyncio.run(migrate_url(url))
    before = database.read_bytes()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "link.db").symlink_to(tmp_path / name)

    for destination in (tmp_path / name, elsewhere / "link.db"):
        result = run_cli("backup", str(destination), "--database-url", url)

        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert "the database itself or one of the files SQLite keeps beside it" in result.stderr
    assert database.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "live.db"]
