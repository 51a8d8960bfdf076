"""``ccweb-store copy`` knows its source: the database's own identity, the copy marker it
writes into the target, and what ``--resume`` and the same-database rule make of them."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ccweb_store.config import Settings
from ccweb_store.mobility.copy import table_checksums
from ccweb_store.store.db import create_engine
from ccweb_store.store.uow import Store
from ccweb_store.store.whole_tables import schema_tables
from tests import forked
from tests.cli_support import COMMAND
from tests.conftest import (
    migrate_url,
)
from tests.mobility_data import fill_every_kind_of_row, raw_rows
from tests.servers import ROOT, server_env
from tests.test_mobility_copy import (
    copied_report,
    copy_cli,
    fill_many_messages,
    message_count,
    sqlite_url,
)


def every_checksum(url: str) -> list[tuple[int, str]]:
    """Every table's rows and checksum, the identity and the copy marker included."""

    async def read() -> list[tuple[int, str]]:
        store = Store.from_settings(Settings(database_url=url))
        try:
            return await table_checksums(store, schema_tables())
        finally:
            await store.dispose()

    return asyncio.run(read())


async def _rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            return [tuple(row) for row in await connection.execute(sa.text(sql))]
    finally:
        await engine.dispose()


def database_id(url: str) -> str:
    [(found,)] = asyncio.run(_rows(url, "SELECT id FROM database_identity"))
    return str(found)


def marker(url: str) -> tuple[str, str, str] | None:
    """The target's copy marker: (source id, source URL, state)."""
    try:
        rows = asyncio.run(_rows(url, "SELECT source_id, source_url, state FROM copy_marker"))
    except Exception:  # the target has no schema yet
        return None
    return (str(rows[0][0]), str(rows[0][1]), str(rows[0][2])) if rows else None


def small_source(path: Path, sessions: int = 2) -> str:
    url = sqlite_url(path)
    asyncio.run(migrate_url(url))
    asyncio.run(fill_many_messages(url, sessions=sessions, per_session=40))
    return url


def test_a_resume_into_an_unrelated_database_is_refused_and_leaves_it_unchanged(
    tmp_path: Path, database_url: str
) -> None:
    source = small_source(tmp_path / "source.db")
    asyncio.run(fill_every_kind_of_row(database_url))
    before = every_checksum(database_url)

    refused = copy_cli(source, database_url, "--resume")

    assert refused.returncode == 2, refused.stderr
    assert "rows no copy wrote" in refused.stderr and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert every_checksum(database_url) == before


def test_a_resume_into_a_copy_of_another_database_or_a_finished_copy_is_refused(
    tmp_path: Path, database_url: str
) -> None:
    first = small_source(tmp_path / "first.db")
    other = small_source(tmp_path / "other.db", sessions=3)
    assert copied_report(first, database_url)["ok"] is True
    before = every_checksum(database_url)

    from_other = copy_cli(other, database_url, "--resume")
    assert from_other.returncode == 2
    assert "a copy of another database" in from_other.stderr
    assert str(tmp_path / "first.db") in from_other.stderr
    assert every_checksum(database_url) == before

    again = copy_cli(first, database_url, "--resume")
    assert again.returncode == 2
    assert "a finished copy" in again.stderr and "nothing to resume" in again.stderr
    assert every_checksum(database_url) == before


def test_a_finished_copy_closes_its_marker_and_is_a_database_of_its_own(
    tmp_path: Path, database_url: str
) -> None:
    source = small_source(tmp_path / "source.db")
    assert copied_report(source, database_url)["ok"] is True

    source_id, target_id = database_id(source), database_id(database_url)
    assert target_id != source_id
    assert marker(database_url) == (
        source_id,
        f"sqlite+aiosqlite:///{os.path.realpath(tmp_path / 'source.db')}",
        "done",
    )
    # A copy of the copy is a third database, told apart from both.
    again = sqlite_url(tmp_path / "again.db")
    assert copied_report(database_url, again)["ok"] is True
    assert database_id(again) not in (source_id, target_id)
    copied = marker(again)
    assert copied is not None and copied[0] == target_id and copied[2] == "done"
    assert asyncio.run(raw_rows(again)) == asyncio.run(raw_rows(source))


def test_the_source_url_in_the_marker_carries_no_credentials(
    tmp_path: Path, fresh_postgres_url: str
) -> None:
    source = fresh_postgres_url
    asyncio.run(migrate_url(source))
    with_password = source.replace("root@", "root:hunter2@")
    target = sqlite_url(tmp_path / "target.db")

    assert copied_report(with_password, target)["ok"] is True

    found = marker(target)
    assert found is not None
    assert "hunter2" not in found[1] and "root" not in found[1]
    assert found[1].endswith(source.rsplit("@", 1)[1])


def test_the_same_sqlite_file_however_spelled_is_refused(tmp_path: Path) -> None:
    source = small_source(tmp_path / "source.db")
    (tmp_path / "link.db").symlink_to(tmp_path / "source.db")
    (tmp_path / "sub").mkdir()
    before = every_checksum(source)

    for spelled in (
        sqlite_url(Path(f"{tmp_path}/./source.db")),
        sqlite_url(tmp_path / "sub" / ".." / "source.db"),
        sqlite_url(tmp_path / "link.db"),
    ):
        refused = copy_cli(source, spelled, "--resume")
        assert refused.returncode == 2, refused.stderr
        assert "same database" in refused.stderr
    assert every_checksum(source) == before


def test_one_postgresql_database_by_two_host_names_is_refused(fresh_postgres_url: str) -> None:
    asyncio.run(migrate_url(fresh_postgres_url))
    asyncio.run(fill_every_kind_of_row(fresh_postgres_url))
    before = every_checksum(fresh_postgres_url)
    by_name = fresh_postgres_url.replace("@127.0.0.1", "@localhost")
    assert by_name != fresh_postgres_url

    refused = copy_cli(fresh_postgres_url, by_name, "--resume")

    assert refused.returncode == 2, refused.stderr
    assert "reach the same database" in refused.stderr
    assert every_checksum(fresh_postgres_url) == before


def kill_when(process: subprocess.Popen[str], ready: Any) -> None:
    """SIGKILL ``process`` as soon as ``ready()`` holds."""
    try:
        while not ready():
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()


def start_copy(source: str, target: str, *flags: str) -> forked.ForkedProcess:
    return forked.spawn(
        [*COMMAND, "copy", "--from", source, "--to", target, "--batch-rows", "100", *flags],
        cwd=ROOT,
        env=server_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_a_copy_killed_at_several_points_and_resumed_each_time_equals_a_clean_copy(
    tmp_path: Path, database_url: str
) -> None:
    source = sqlite_url(tmp_path / "source.db")
    asyncio.run(migrate_url(source))
    asyncio.run(fill_many_messages(source, sessions=20, per_session=1000))
    asyncio.run(fill_every_kind_of_row(source))
    source_id = database_id(source)

    # As soon as the marker is written: nothing, or only the first rows, copied yet.
    kill_when(start_copy(source, database_url), lambda: marker(database_url) is not None)
    first = marker(database_url)
    assert first is not None and first[0] == source_id and first[2] == "in progress"
    counts = [asyncio.run(message_count(database_url))]
    for at_least in (2_000, 12_000):
        kill_when(
            start_copy(source, database_url, "--resume"),
            lambda at_least=at_least: asyncio.run(message_count(database_url)) >= at_least,
        )
        found = marker(database_url)
        assert found is not None and found[2] == "in progress"
        counts.append(asyncio.run(message_count(database_url)))
    assert counts == sorted(counts) and 0 < counts[-1] < 20_000

    resumed = copied_report(source, database_url, "--resume")

    assert resumed["ok"] is True and resumed["resumed"] is True
    found = marker(database_url)
    assert found is not None and found[0] == source_id and found[2] == "done"
    clean = sqlite_url(tmp_path / "clean.db")
    assert copied_report(source, clean)["ok"] is True
    assert asyncio.run(raw_rows(database_url)) == asyncio.run(raw_rows(clean))
