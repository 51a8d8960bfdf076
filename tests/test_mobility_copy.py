"""``ccweb-store copy``: a whole database moved between engines, verified, resumable."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ccweb_store.config import Settings
from ccweb_store.mobility.copy import (
    CopyRefused,
    copied_tables,
    copy_database,
    table_checksums,
)
from ccweb_store.store.db import create_engine
from ccweb_store.store.uow import Store
from tests import forked
from tests.cli_support import COMMAND, run_cli
from tests.conftest import (
    migrate_url,
)
from tests.mobility_data import (
    api_answers,
    fill_every_kind_of_row,
    issued_event_ids,
    raw_rows,
)
from tests.servers import ROOT, server_env


def sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


def copy_cli(source: str, target: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return run_cli("copy", "--from", source, "--to", target, *flags, timeout=300)


def copied_report(source: str, target: str, *flags: str) -> dict[str, Any]:
    result = copy_cli(source, target, "--json", *flags)
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


async def planner_statistics(url: str) -> dict[str, tuple[bool, float]]:
    """Per table of a PostgreSQL database: whether it was analyzed, and the rows the planner
    believes it holds (``pg_class.reltuples``; -1 before any ``ANALYZE`` or ``VACUUM``)."""
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            rows = await connection.execute(
                sa.text(
                    "SELECT s.relname, s.last_analyze IS NOT NULL, c.reltuples "
                    "FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid"
                )
            )
            return {name: (bool(analyzed), float(believed)) for name, analyzed, believed in rows}
    finally:
        await engine.dispose()


def test_a_copy_to_postgresql_and_back_keeps_every_row_and_every_api_answer(
    tmp_path: Path, fresh_postgres_url: str
) -> None:
    source = sqlite_url(tmp_path / "source.db")
    asyncio.run(migrate_url(source))
    asyncio.run(fill_every_kind_of_row(source))
    before = asyncio.run(api_answers(source))
    rows_before = asyncio.run(raw_rows(source))

    there = copied_report(source, fresh_postgres_url)
    back_url = sqlite_url(tmp_path / "back.db")
    back = copied_report(fresh_postgres_url, back_url)

    for report in (there, back):
        assert report["ok"] is True
        assert all(table["ok"] for table in report["tables"])
        assert {t["table"] for t in report["tables"]} == {t.name for t in copied_tables()}
    counts = {t["table"]: t["rows"] for t in there["tables"]}
    statistics = asyncio.run(planner_statistics(fresh_postgres_url))
    assert all(statistics[table.name][0] for table in copied_tables()), statistics
    assert statistics["messages"][1] == counts["messages"]
    assert counts["messages"] > 0 and counts["conversation_credentials"] == 2
    assert counts["server_secrets"] == 1 and counts["reply_requests"] == 5
    assert counts["events"] > 0
    assert before["events.list"]["events"], "the outbox holds the changes"
    issued = asyncio.run(issued_event_ids(source))
    assert asyncio.run(issued_event_ids(fresh_postgres_url)) == issued
    assert asyncio.run(issued_event_ids(back_url)) == issued
    assert asyncio.run(api_answers(fresh_postgres_url)) == before
    assert asyncio.run(api_answers(back_url)) == before
    assert asyncio.run(raw_rows(fresh_postgres_url)) == rows_before
    assert asyncio.run(raw_rows(back_url)) == rows_before
    # The same checksums on either engine: the rows are the same.
    assert [t["checksum"] for t in there["tables"]] == [t["checksum"] for t in back["tables"]]


async def fill_many_messages(url: str, sessions: int, per_session: int) -> None:
    store = Store.from_settings(Settings(database_url=url))
    try:
        for s in range(sessions):
            async with store.uow() as uow:
                await uow.sessions.create(f"s{s:03d}", title=f"Session {s}")
                await uow.messages.insert_many(
                    [
                        {
                            "id": f"m{s:03d}-{m:05d}",
                            "session_id": f"s{s:03d}",
                            "seq": m + 1,
                            "role": "user" if m % 2 else "assistant",
                            "content": f"message {m} of session {s}",
                            "created_at": None,
                            "metadata_": {"n": m} if m % 3 else None,
                        }
                        for m in range(per_session)
                    ]
                )
                await uow.commit()
    finally:
        await store.dispose()


async def message_count(url: str) -> int:
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            return int(
                (await connection.execute(sa.text("SELECT count(*) FROM messages"))).scalar_one()
            )
    except Exception:  # not created yet
        return 0
    finally:
        await engine.dispose()


def settled_count(database_url: str) -> int:
    """The target's messages once nothing more lands: a COMMIT the killed copy had sent still
    completes on a PostgreSQL server after its client is gone."""
    count = asyncio.run(message_count(database_url))
    while True:
        time.sleep(0.3)
        again = asyncio.run(message_count(database_url))
        if again == count:
            return count
        count = again


@pytest.mark.slow
def test_a_copy_killed_midway_and_resumed_equals_a_clean_copy(
    tmp_path: Path, database_url: str
) -> None:
    source = sqlite_url(tmp_path / "source.db")
    asyncio.run(migrate_url(source))
    asyncio.run(fill_many_messages(source, sessions=20, per_session=1500))
    total = 20 * 1500

    process = forked.spawn(
        [*COMMAND, "copy", "--from", source, "--to", database_url, "--batch-rows", "100"],
        cwd=ROOT,
        env=server_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while asyncio.run(message_count(database_url)) < 500:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()
    partial = settled_count(database_url)
    assert 0 < partial < total

    refused = copy_cli(source, database_url)
    assert refused.returncode == 2
    assert "not empty" in refused.stderr and "--resume" in refused.stderr

    resumed = copied_report(source, database_url, "--resume")

    assert resumed["ok"] is True and resumed["resumed"] is True
    messages = next(t for t in resumed["tables"] if t["table"] == "messages")
    assert messages["rows"] == total
    assert messages["copied"] == total - partial
    clean = sqlite_url(tmp_path / "clean.db")
    assert copied_report(source, clean)["ok"] is True
    assert asyncio.run(raw_rows(database_url)) == asyncio.run(raw_rows(clean))


async def execute(url: str, *statements: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.begin() as connection:
            for statement in statements:
                await connection.execute(sa.text(statement))
    finally:
        await engine.dispose()


def test_a_resume_from_a_source_changed_since_fails_its_verification(
    tmp_path: Path, database_url: str
) -> None:
    source = sqlite_url(tmp_path / "source.db")
    asyncio.run(migrate_url(source))
    asyncio.run(fill_many_messages(source, sessions=2, per_session=50))
    assert copied_report(source, database_url)["ok"] is True

    async def change_a_copied_message() -> None:
        engine = create_engine(source)
        try:
            async with engine.begin() as connection:
                await connection.execute(
                    sa.text("UPDATE messages SET content = 'changed' WHERE id = 'm000-00001'")
                )
        finally:
            await engine.dispose()

    asyncio.run(change_a_copied_message())
    # As if the copy had been killed after its last row, before it closed its marker.
    asyncio.run(execute(database_url, "UPDATE copy_marker SET state = 'in progress'"))
    result = copy_cli(source, database_url, "--resume", "--json")

    assert result.returncode == 1
    assert "verification failed: messages differ" in result.stderr
    report = json.loads(result.stdout)
    assert [t["table"] for t in report["tables"] if not t["ok"]] == ["messages"]


def test_a_copy_refuses_an_unmigrated_source_a_missing_file_and_the_same_database(
    tmp_path: Path, database_url: str
) -> None:
    missing = copy_cli(sqlite_url(tmp_path / "nothing.db"), database_url)
    assert missing.returncode == 2 and "no SQLite database" in missing.stderr
    assert not (tmp_path / "nothing.db").exists()

    same = copy_cli(database_url, database_url)
    assert same.returncode == 2 and "same database" in same.stderr

    old = sqlite_url(tmp_path / "old.db")
    asyncio.run(migrate_url(old, "0001"))
    refused = copy_cli(old, database_url)
    assert refused.returncode == 2
    assert "migrate it first" in refused.stderr


#: A table the schema may gain (an events log): an integer id the database counts out.
EXTRA = sa.MetaData()
COUNTED = sa.Table(
    "copy_test_counted",
    EXTRA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("payload", sa.JSON),
    sqlite_autoincrement=True,
)


async def _with_counted_table(url: str, *rows: str, delete_above: int | None = None) -> None:
    engine = create_engine(url)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(EXTRA.create_all)
            for body in rows:
                await connection.execute(COUNTED.insert().values(body=body, payload={"b": body}))
            if delete_above is not None:
                await connection.execute(COUNTED.delete().where(COUNTED.c.id > delete_above))
    finally:
        await engine.dispose()


async def _next_id(url: str) -> int:
    engine = create_engine(url)
    try:
        async with engine.begin() as connection:
            result = await connection.execute(
                COUNTED.insert().values(body="after the copy").returning(COUNTED.c.id)
            )
            return int(result.scalar_one())
    finally:
        await engine.dispose()


async def _drop_counted(url: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(EXTRA.drop_all)
    finally:
        await engine.dispose()


async def _copy_counted(source: str, target: str) -> list[tuple[int, str]]:
    reading = Store.from_settings(Settings(database_url=source))
    writing = Store.from_settings(Settings(database_url=target))
    try:
        report = await copy_database(reading, writing, tables=[COUNTED])
        assert report.ok
        return await table_checksums(writing, [COUNTED])
    finally:
        await reading.dispose()
        await writing.dispose()


def test_a_table_with_a_counted_id_goes_on_counting_past_every_id_the_source_handed_out(
    tmp_path: Path, database_url: str
) -> None:
    source = sqlite_url(tmp_path / "source.db")
    asyncio.run(migrate_url(source))
    # Five ids handed out, the last two deleted: the next id is 6, never 4 again.
    asyncio.run(_with_counted_table(source, "a", "b", "c", "d", "e", delete_above=3))
    asyncio.run(_with_counted_table(database_url))
    try:
        [(rows, _)] = asyncio.run(_copy_counted(source, database_url))
        assert rows == 3
        assert asyncio.run(_next_id(database_url)) == 6
        back = sqlite_url(tmp_path / "back.db")
        asyncio.run(migrate_url(back))
        asyncio.run(_with_counted_table(back))
        asyncio.run(_copy_counted(database_url, back))
        assert asyncio.run(_next_id(back)) == 7
    finally:
        asyncio.run(_drop_counted(database_url))


def test_copy_database_refuses_a_target_that_holds_rows(tmp_path: Path, database_url: str) -> None:
    source = sqlite_url(tmp_path / "source.db")
    asyncio.run(migrate_url(source))
    asyncio.run(fill_every_kind_of_row(database_url))

    async def attempt() -> str:
        reading = Store.from_settings(Settings(database_url=source))
        writing = Store.from_settings(Settings(database_url=database_url))
        try:
            await copy_database(reading, writing)
        except CopyRefused as refused:
            return refused.reason
        finally:
            await reading.dispose()
            await writing.dispose()
        return ""

    assert "not empty" in asyncio.run(attempt())
