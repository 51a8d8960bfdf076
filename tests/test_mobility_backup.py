"""``ccweb-store backup``: a consistent copy of a SQLite database the server keeps writing to."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import threading
from contextlib import closing
from pathlib import Path

from tests.cli_support import run_cli
from tests.conftest import migrate_url
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
