"""Alembic owns the schema: both directions work on both engines and nothing drifts."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from ccweb_store.store.db import alembic_config, create_engine, current_revision, downgrade, migrate

TABLES = {"sessions", "messages", "reply_requests", "runs"}


async def _tables_and_reply_columns(url: str) -> tuple[set[str], set[str]]:
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:

            def read(sync: Connection) -> tuple[set[str], set[str]]:
                inspector = sa.inspect(sync)
                tables = set(inspector.get_table_names()) - {"alembic_version"}
                columns = (
                    {c["name"] for c in inspector.get_columns("reply_requests")}
                    if "reply_requests" in tables
                    else set()
                )
                return tables, columns

            return await connection.run_sync(read)
    finally:
        await engine.dispose()


async def test_upgrade_downgrade_upgrade_round_trips(empty_database_url: str) -> None:
    engine = create_engine(empty_database_url)
    try:
        await migrate(engine)
        assert (await _tables_and_reply_columns(empty_database_url))[0] >= TABLES
        await downgrade(engine, "base")
        assert not (await _tables_and_reply_columns(empty_database_url))[0] & TABLES
        await migrate(engine)
        tables, columns = await _tables_and_reply_columns(empty_database_url)
        assert tables >= TABLES
        assert "original_request" in columns
        async with engine.connect() as connection:
            assert await current_revision(connection) is not None
    finally:
        await engine.dispose()


LEGACY_REPLY = {
    "request_id": "req-legacy-1",
    "message_id": "msg-target-1",
    "source_conversation_id": "source-a",
    "source_title": "Source A",
    "target_conversation_id": "target-b",
    "target_title": "Target B",
    "status": "waiting",
    "hop_count": 1,
    "source_auto_run": True,
    "reply_text": None,
    "last_error": "none yet",
}


async def test_legacy_reply_rows_survive_upgrade_and_downgrade(empty_database_url: str) -> None:
    engine = create_engine(empty_database_url)
    try:
        await migrate(engine, "0001")
        assert "original_request" not in (await _tables_and_reply_columns(empty_database_url))[1]
        async with engine.begin() as connection:
            await connection.execute(
                sa.text(
                    "INSERT INTO reply_requests (request_id, message_id, source_conversation_id,"
                    " source_title, target_conversation_id, target_title, status, hop_count,"
                    " source_auto_run, reply_text, last_error, created_at) VALUES (:request_id,"
                    " :message_id, :source_conversation_id, :source_title,"
                    " :target_conversation_id, :target_title, :status, :hop_count,"
                    " :source_auto_run, :reply_text, :last_error, :created_at)"
                ),
                {**LEGACY_REPLY, "created_at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)},
            )
            # A row written by hand with only the required values still inserts.
            await connection.execute(
                sa.text(
                    "INSERT INTO reply_requests (request_id, source_conversation_id,"
                    " target_conversation_id, status) VALUES ('req-minimal', 'a', 'b', 'ready')"
                )
            )

        await migrate(engine, "head")
        columns = ", ".join(LEGACY_REPLY)
        async with engine.connect() as connection:
            row = (
                await connection.execute(
                    sa.text(
                        f"SELECT {columns}, original_request FROM reply_requests"
                        " WHERE request_id = 'req-legacy-1'"
                    )
                )
            ).one()
            minimal = (
                await connection.execute(
                    sa.text(
                        "SELECT hop_count, source_auto_run, created_at, original_request"
                        " FROM reply_requests WHERE request_id = 'req-minimal'"
                    )
                )
            ).one()
        kept = {k: row._mapping[k] for k in LEGACY_REPLY}
        kept["source_auto_run"] = bool(kept["source_auto_run"])  # SQLite answers 1
        assert kept == LEGACY_REPLY
        assert row._mapping["original_request"] is None
        assert minimal.hop_count == 0 and bool(minimal.source_auto_run) is True
        assert minimal.created_at is not None and minimal.original_request is None

        await downgrade(engine, "0001")
        assert "original_request" not in (await _tables_and_reply_columns(empty_database_url))[1]
        async with engine.connect() as connection:
            after = (
                await connection.execute(
                    sa.text(
                        f"SELECT {columns} FROM reply_requests WHERE request_id = 'req-legacy-1'"
                    )
                )
            ).one()
        assert after._mapping["last_error"] == "none yet"
        assert after._mapping["target_title"] == "Target B"
        assert after._mapping["hop_count"] == 1
    finally:
        await engine.dispose()


async def test_reply_extra_comes_and_goes_while_the_debugging_views_stay(
    empty_database_url: str,
) -> None:
    """0004 neither rebuilds ``reply_requests`` nor touches the 0003 views that read it."""
    engine = create_engine(empty_database_url)
    pending = sa.text("SELECT request_id, status FROM pending_replies")
    try:
        await migrate(engine, "0003")
        async with engine.begin() as connection:
            await connection.execute(
                sa.text(
                    "INSERT INTO reply_requests (request_id, source_conversation_id,"
                    " target_conversation_id, status) VALUES ('req-open', 'a', 'b', 'failed')"
                )
            )

        await migrate(engine, "0004")
        assert "extra" in (await _tables_and_reply_columns(empty_database_url))[1]
        async with engine.begin() as connection:
            await connection.execute(
                sa.text("UPDATE reply_requests SET extra = :extra"), {"extra": '{"kept": 1}'}
            )
            assert (await connection.execute(pending)).all() == [("req-open", "failed")]

        await downgrade(engine, "0003")
        assert "extra" not in (await _tables_and_reply_columns(empty_database_url))[1]
        async with engine.connect() as connection:
            views = await connection.run_sync(lambda c: sa.inspect(c).get_view_names())
            assert {"pending_replies", "conversation_activity"} <= set(views)
            assert (await connection.execute(pending)).all() == [("req-open", "failed")]
            assert await current_revision(connection) == "0003"
    finally:
        await engine.dispose()


async def test_models_and_migrations_do_not_drift(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:

            def check(sync: Connection) -> None:
                config = alembic_config()
                config.attributes["connection"] = sync
                command.check(config)  # raises AutogenerateDiffsDetected on drift

            await connection.run_sync(check)
    finally:
        await engine.dispose()


async def test_a_database_at_head_reports_the_newest_revision(database_url: str) -> None:
    from ccweb_store.store.db import head_revision

    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:
            assert await current_revision(connection) == await head_revision()
    finally:
        await engine.dispose()


@pytest.mark.parametrize("revision", ["0001", "base"])
async def test_downgrading_an_empty_schema_then_upgrading_again_is_clean(
    empty_database_url: str, revision: str
) -> None:
    engine = create_engine(empty_database_url)
    try:
        await migrate(engine)
        await downgrade(engine, revision)
        await migrate(engine)
        async with engine.connect() as connection:
            count = (await connection.execute(sa.text("SELECT count(*) FROM sessions"))).scalar()
        assert count == 0
    finally:
        await engine.dispose()


async def _runs_indexes(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as connection:
        return await connection.run_sync(
            lambda sync: {index["name"] for index in sa.inspect(sync).get_indexes("runs")}
        )


async def test_a_claim_for_one_kind_reads_the_0005_index_which_comes_and_goes(
    empty_database_url: str,
) -> None:
    """0005 adds ``runs (status, kind, created_at, id)``; the claim's plan uses it."""
    from ccweb_store.store.repositories.run_leases import oldest_claimable

    index = "ix_runs_status_kind_created_at_id"
    engine = create_engine(empty_database_url)
    try:
        await migrate(engine, "0004")
        assert index not in await _runs_indexes(engine)

        await migrate(engine)
        assert index in await _runs_indexes(engine)
        claim = oldest_claimable(("cross_conversation",)).compile(
            dialect=engine.dialect, compile_kwargs={"literal_binds": True}
        )
        async with engine.connect() as connection:
            if engine.dialect.name == "sqlite":
                explain = f"EXPLAIN QUERY PLAN {claim}"
            else:  # an empty table: forbid the sequential scan that would otherwise win
                await connection.execute(sa.text("SET enable_seqscan = off"))
                explain = f"EXPLAIN {claim}"
            plan = " ".join(str(row) for row in (await connection.execute(sa.text(explain))))
        assert index in plan

        await downgrade(engine, "0004")
        assert index not in await _runs_indexes(engine)
        async with engine.connect() as connection:
            assert await current_revision(connection) == "0004"
    finally:
        await engine.dispose()


async def _messages_indexes(engine: AsyncEngine) -> set[str]:
    """From the catalog: SQLite's reflection skips (with a warning) expression indexes."""
    if engine.dialect.name == "sqlite":
        sql = "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'messages'"
    else:
        sql = "SELECT indexname FROM pg_indexes WHERE tablename = 'messages'"
    async with engine.connect() as connection:
        return set((await connection.execute(sa.text(sql))).scalars().all())


async def test_the_0006_reply_index_comes_and_goes_while_the_views_stay(
    empty_database_url: str,
) -> None:
    """0006 indexes ``metadata.replyToRequestId`` of the rows already there, drops cleanly,
    and neither direction touches the 0003 views or the messages."""
    from ccweb_store.store.models import REPLY_TO_REQUEST_ID_INDEX
    from ccweb_store.store.repositories.messages import REPLIES_TO_REQUEST

    metadata = '{"replyToRequestId": "req-1"}'
    if empty_database_url.startswith("postgresql"):
        metadata = f"CAST('{metadata}' AS JSONB)"
    else:
        metadata = f"'{metadata}'"
    lookup = sa.select(REPLIES_TO_REQUEST.subquery().c.id)  # the repository's lookup
    find = {"session_id": "a", "request_id": "req-1"}
    activity = sa.text("SELECT session_id, message_count FROM conversation_activity")
    engine = create_engine(empty_database_url)
    try:
        await migrate(engine, "0005")
        async with engine.begin() as connection:
            await connection.execute(sa.text("INSERT INTO sessions (id) VALUES ('a')"))
            await connection.execute(
                sa.text(
                    "INSERT INTO messages (id, session_id, seq, role, content, metadata)"
                    f" VALUES ('m1', 'a', 1, 'assistant', 'reply', {metadata}),"
                    " ('m2', 'a', 2, 'user', 'plain', NULL)"
                )
            )
        assert REPLY_TO_REQUEST_ID_INDEX not in await _messages_indexes(engine)

        for _ in range(2):
            await migrate(engine)
            assert REPLY_TO_REQUEST_ID_INDEX in await _messages_indexes(engine)
            async with engine.connect() as connection:
                assert (await connection.execute(lookup, find)).scalars().all() == ["m1"]
                assert (await connection.execute(activity)).all() == [("a", 2)]

            await downgrade(engine, "0005")
            assert REPLY_TO_REQUEST_ID_INDEX not in await _messages_indexes(engine)
            async with engine.connect() as connection:
                views = await connection.run_sync(lambda c: sa.inspect(c).get_view_names())
                assert {"pending_replies", "conversation_activity"} <= set(views)
                assert (await connection.execute(activity)).all() == [("a", 2)]
                assert (await connection.execute(lookup, find)).scalars().all() == ["m1"]
                assert await current_revision(connection) == "0005"
    finally:
        await engine.dispose()


async def _refuses(engine: AsyncEngine, statement: str) -> bool:
    """Whether the database refuses ``statement`` (a CHECK violation), leaving nothing."""
    try:
        async with engine.begin() as connection:
            await connection.execute(sa.text(statement))
    except sa.exc.IntegrityError:
        return True
    return False


async def test_the_0008_checks_allow_and_refuse_the_same_values_both_ways(
    empty_database_url: str,
) -> None:
    """0008 rewrites the enum CHECKs as chains of ``=``: the rows already there stay, the same
    values pass and the same are refused after the upgrade and after the downgrade, and the
    0003 views still read; on SQLite, writing a run no longer builds a temporary table."""
    sqlite = not empty_database_url.startswith("postgresql")
    insert_run = (
        "INSERT INTO runs (id, session_id, kind, status) VALUES ('{id}', 'a', '{kind}', '{status}')"
    )
    activity = sa.text("SELECT session_id, active_run_status FROM conversation_activity")
    engine = create_engine(empty_database_url)
    try:
        await migrate(engine, "0007")
        async with engine.begin() as connection:
            await connection.execute(sa.text("INSERT INTO sessions (id) VALUES ('a')"))
            await connection.execute(
                sa.text(insert_run.format(id="r0", kind="user_turn", status="queued"))
            )
        for step, revision in enumerate(("0008", "0007", "0008")):
            if revision == "0008":
                await migrate(engine, "0008")
            else:
                await downgrade(engine, "0007")
            bad = [
                insert_run.format(id="r-bad", kind="nap", status="queued"),
                insert_run.format(id="r-bad", kind="user_turn", status="asleep"),
                "INSERT INTO messages (id, session_id, seq, role, content)"
                " VALUES ('m-bad', 'a', 1, 'robot', 'x')",
                "INSERT INTO reply_requests (request_id, source_conversation_id,"
                " target_conversation_id, status) VALUES ('q-bad', 'a', 'a', 'lost')",
            ]
            for statement in bad:
                assert await _refuses(engine, statement), (revision, statement)
            good = insert_run.format(id=f"r-{step}", kind="reply_auto_run", status="failed")
            assert not await _refuses(engine, good)
            async with engine.connect() as connection:
                assert (await connection.execute(activity)).all() == [("a", "queued")]
                assert await current_revision(connection) == revision
                if sqlite:
                    plan = await connection.execute(
                        sa.text("EXPLAIN " + insert_run.format(id="x", kind="x", status="x"))
                    )
                    opcodes = {row[1] for row in plan}
                    assert ("OpenEphemeral" in opcodes) == (revision == "0007")
                    check = await connection.execute(sa.text("PRAGMA integrity_check"))
                    assert check.scalar() == "ok"
    finally:
        await engine.dispose()


async def test_0008_finishes_on_sqlite_after_a_run_that_stopped_half_way(tmp_path: Path) -> None:
    """An upgrade that stopped after rewriting one table's CHECK (a crash: SQLite's migrations
    run without a transaction) is finished by the next one."""
    path = tmp_path / "half.db"
    engine = create_engine(f"sqlite:///{path}")
    try:
        await migrate(engine, "0007")
        await engine.dispose()
        with sqlite3.connect(path) as raw:  # what the stopped run had done: messages alone
            (sql,) = raw.execute("SELECT sql FROM sqlite_master WHERE name = 'messages'").fetchone()
            rewritten = sql.replace(
                "role IN ('user', 'assistant', 'system', 'tool')",
                "role = 'user' OR role = 'assistant' OR role = 'system' OR role = 'tool'",
            )
            assert rewritten != sql
            (version,) = raw.execute("PRAGMA schema_version").fetchone()
            raw.execute("PRAGMA writable_schema = ON")
            raw.execute("UPDATE sqlite_master SET sql = ? WHERE name = 'messages'", (rewritten,))
            raw.execute(f"PRAGMA schema_version = {version + 1}")
            raw.execute("PRAGMA writable_schema = OFF")
        await migrate(engine, "0008")
        async with engine.connect() as connection:
            assert await current_revision(connection) == "0008"
            tables = await connection.execute(
                sa.text("SELECT sql FROM sqlite_master WHERE type = 'table'")
            )
            schema = "\n".join(row[0] for row in tables)
        assert " IN (" not in schema
        assert "role = 'user' OR role = 'assistant'" in schema
        assert "kind = 'user_turn' OR" in schema and "status = 'waiting' OR" in schema
        async with engine.begin() as connection:
            await connection.execute(sa.text("INSERT INTO sessions (id) VALUES ('a')"))
        for role, refused in (("robot", True), ("tool", False)):
            statement = (
                "INSERT INTO messages (id, session_id, seq, role, content)"
                f" VALUES ('m-{role}', 'a', 1, '{role}', 'x')"
            )
            assert await _refuses(engine, statement) is refused
    finally:
        await engine.dispose()
