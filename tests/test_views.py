"""The debugging views (migration 0003) and the queries of docs/operator.md, on both engines."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy.engine import Connection

from ccweb_store.contract.operator import OperatorReplyStory, PendingReply
from ccweb_store.domain.durations import format_duration, parse_duration
from ccweb_store.domain.errors import InvalidInput, NotFound
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.importer.load import import_state
from ccweb_store.services.debugging import list_pending_replies, reply_story
from ccweb_store.store.db import alembic_config, create_engine, current_revision, downgrade, migrate
from ccweb_store.store.repositories.sessions import BY_ACTIVITY, BY_CREATION
from ccweb_store.store.uow import Store
from tests import debugging_data as data
from tests import host_calls
from tests.conftest import migrate_url
from tests.lifecycle_support import ask, claim, complete, make_conversation
from tests.plans import query_plan

ROOT = Path(__file__).resolve().parents[1]
QUERIES_FILE = ROOT / "ccweb_store" / "debug_queries.sql"

PENDING_COLUMNS = [
    "request_id",
    "status",
    "source_conversation_id",
    "source_title",
    "target_conversation_id",
    "target_title",
    "age_seconds",
    "hop_count",
    "source_auto_run",
    "original_request_known",
    "last_error",
    "created_at",
    "target_run_id",
    "target_run_status",
    "target_run_worker_id",
    "target_run_lease_expires_at",
    "target_run_attempts",
    "source_running",
]
#: The operator's "most recently active first", and the index that serves it (migration 0014).
ACTIVITY_ORDER = "ORDER BY last_message_at DESC LIMIT 20"
ACTIVITY_INDEX = "ix_sessions_last_message_at"
ACTIVITY_COLUMNS = [
    "session_id",
    "title",
    "message_count",
    "last_message_at",
    "active_run_id",
    "active_run_kind",
    "active_run_status",
    "waiting_as_source",
    "ready_as_source",
    "failed_as_source",
    "waiting_as_target",
    "ready_as_target",
    "failed_as_target",
]


async def select(url: str, sql: str) -> tuple[list[str], list[dict[str, Any]]]:
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            result = await connection.execute(sa.text(sql))
            keys = list(result.keys())
            return keys, [dict(zip(keys, row, strict=True)) for row in result.all()]
    finally:
        await engine.dispose()


def debug_queries() -> dict[str, str]:
    """The named queries of ``debug_queries.sql``: name -> SQL text (comment line included)."""
    queries: dict[str, str] = {}
    for block in re.split(r"^-- name: ", QUERIES_FILE.read_text(), flags=re.MULTILINE)[1:]:
        name, _, body = block.partition("\n")
        queries[name.strip()] = body.strip()
    return queries


async def test_pending_replies_shows_each_open_request_with_its_target_run(
    database_url: str,
) -> None:
    runs = await data.seed(database_url)

    columns, rows = await select(database_url, "SELECT * FROM pending_replies")
    by_id = {row["request_id"]: row for row in rows}

    assert columns == PENDING_COLUMNS
    assert sorted(by_id) == sorted(data.OPEN_REQUESTS)
    waiting = by_id[data.WAITING]
    assert (waiting["status"], waiting["source_title"], waiting["target_title"]) == (
        "waiting",
        "Alpha",
        "Beta",
    )
    assert 7200 - 5 <= waiting["age_seconds"] <= 7200 + 60
    assert waiting["hop_count"] == 3
    assert bool(waiting["source_auto_run"]) and bool(waiting["original_request_known"])
    # the latest cross-conversation run, not the cancelled one before it
    assert waiting["target_run_id"] == runs["waiting_target"]
    assert (waiting["target_run_status"], waiting["target_run_attempts"]) == ("queued", 1)
    assert waiting["target_run_worker_id"] is None
    assert not waiting["source_running"]


async def test_pending_replies_tells_ready_failed_and_legacy_requests_apart(
    database_url: str,
) -> None:
    runs = await data.seed(database_url)

    _, rows = await select(database_url, "SELECT * FROM pending_replies")
    by_id = {row["request_id"]: row for row in rows}

    ready = by_id[data.READY]
    assert ready["status"] == "ready" and bool(ready["source_running"])
    assert ready["target_run_status"] == "completed"
    failed = by_id[data.FAILED]
    assert failed["last_error"] == "target run failed: boom"
    assert (failed["target_run_id"], failed["target_run_status"]) == (
        runs["failed_target"],
        "failed",
    )
    legacy = by_id[data.LEGACY]
    assert not legacy["original_request_known"] and not legacy["source_auto_run"]
    assert legacy["source_title"] == "Ghost"  # the stored title, its session being gone
    assert legacy["age_seconds"] >= 2 * 86400
    assert (legacy["target_run_status"], legacy["target_run_worker_id"]) == ("running", "w-delta")
    assert legacy["target_run_lease_expires_at"] is not None
    assert data.RETURNED not in by_id


async def test_conversation_activity_counts_messages_runs_and_open_requests(
    database_url: str,
) -> None:
    runs = await data.seed(database_url)

    columns, rows = await select(database_url, "SELECT * FROM conversation_activity")
    by_id = {row["session_id"]: row for row in rows}

    assert columns == ACTIVITY_COLUMNS
    assert sorted(by_id) == ["alpha", "beta", "delta", "eps", "gamma", "quiet"]
    counts = {sid: row["message_count"] for sid, row in by_id.items()}
    assert counts == {"alpha": 2, "beta": 1, "gamma": 1, "delta": 2, "eps": 1, "quiet": 0}
    assert by_id["quiet"]["last_message_at"] is None
    assert by_id["alpha"]["last_message_at"] is not None
    # running beats an older queued run; else the oldest queued; else nothing
    assert (by_id["gamma"]["active_run_id"], by_id["gamma"]["active_run_status"]) == (
        runs["gamma_running"],
        "running",
    )
    assert (by_id["beta"]["active_run_id"], by_id["beta"]["active_run_kind"]) == (
        runs["waiting_target"],
        "cross_conversation",
    )
    assert by_id["alpha"]["active_run_id"] is None
    open_counts = {
        sid: tuple(row[name] for name in ACTIVITY_COLUMNS[7:]) for sid, row in by_id.items()
    }
    assert open_counts == {
        "alpha": (1, 0, 1, 0, 0, 0),
        "beta": (0, 0, 0, 1, 0, 0),
        "gamma": (0, 1, 0, 0, 0, 0),
        "delta": (0, 0, 0, 1, 1, 0),
        "eps": (0, 0, 0, 0, 0, 1),
        "quiet": (0, 0, 0, 0, 0, 0),
    }


async def test_views_survive_downgrade_to_0002_and_upgrade_to_head(
    empty_database_url: str,
) -> None:
    await migrate_url(empty_database_url)
    await data.seed(empty_database_url)
    _, before = await select(empty_database_url, "SELECT * FROM conversation_activity")
    engine = create_engine(empty_database_url)
    try:
        await downgrade(engine, "0002")
        async with engine.connect() as connection:
            views = await connection.run_sync(lambda c: sa.inspect(c).get_view_names())
            assert await current_revision(connection) == "0002"
        assert "pending_replies" not in views and "conversation_activity" not in views
        _, requests = await select(empty_database_url, "SELECT request_id FROM reply_requests")
        assert len(requests) == 5

        await migrate(engine)
    finally:
        await engine.dispose()
    _, pending = await select(empty_database_url, "SELECT request_id FROM pending_replies")
    _, after = await select(empty_database_url, "SELECT * FROM conversation_activity")
    assert sorted(row["request_id"] for row in pending) == sorted(data.OPEN_REQUESTS)
    # The view has no ORDER BY: compare its rows, not the order a plan returns them in.
    assert sorted(after, key=_session_id) == sorted(before, key=_session_id)


def _session_id(row: dict[str, Any]) -> str:
    return str(row["session_id"])


async def test_alembic_check_stays_clean_with_the_views_in_place(database_url: str) -> None:
    def check(connection: Connection) -> None:
        config = alembic_config()
        config.attributes["connection"] = connection
        command.check(config)  # raises when the models and the database differ

    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(check)
    finally:
        await engine.dispose()


@pytest.mark.parametrize(
    "name",
    ["stuck-waiting", "ready-blocked", "failures-by-error", "hop-limit-chains", "request-story"],
)
def test_each_ready_to_paste_query_is_printed_verbatim_in_the_operator_docs(name: str) -> None:
    operator_docs = (ROOT / "docs" / "operator.md").read_text()
    assert debug_queries()[name] in operator_docs


def test_the_readme_shows_the_stuck_waiting_query_verbatim() -> None:
    readme = (ROOT / "README.md").read_text()
    assert debug_queries()["stuck-waiting"] in readme


async def test_the_ready_to_paste_queries_answer_on_this_engine(database_url: str) -> None:
    runs = await data.seed(database_url)
    queries = debug_queries()
    assert len(queries) == 5

    _, stuck = await select(database_url, queries["stuck-waiting"])
    assert [row["request_id"] for row in stuck] == [data.LEGACY, data.WAITING]

    _, blocked = await select(database_url, queries["ready-blocked"])
    assert [(row["request_id"], row["source_run_id"]) for row in blocked] == [
        (data.READY, runs["gamma_running"])
    ]

    _, failures = await select(database_url, queries["failures-by-error"])
    assert [(row["error"], row["requests"]) for row in failures] == [("target run failed: boom", 1)]

    _, chains = await select(database_url, queries["hop-limit-chains"])
    assert [(row["request_id"], row["chain"]) for row in chains] == [
        (data.FAILED, "Alpha (alpha) -> Eps (eps)"),
        (data.WAITING, "Alpha (alpha) -> Beta (beta)"),
    ]

    _, story = await select(database_url, queries["request-story"])
    assert [row["part"] for row in story] == [
        "request",
        "request message (target)",
        "run cross_conversation",
        "reply message (source)",
        "run reply_auto_run",
    ]
    assert story[-2]["detail"] == "All reviewed"


async def test_list_pending_replies_filters_by_status_conversation_and_age(
    store: Store,
) -> None:
    await data.seed(store.settings.database_url)

    everything = await list_pending_replies(store)
    ready = await list_pending_replies(store, statuses=["ready"])
    for_delta = await list_pending_replies(store, conversation_id="delta")
    old = await list_pending_replies(store, older_than_seconds=2 * 3600 + 600)

    assert [p.reply.request_id for p in everything] == list(data.OPEN_REQUESTS)
    assert [p.reply.request_id for p in ready] == [data.READY]
    assert (
        ready[0].source_running and PendingReply.of(ready[0]).model_dump()["sourceRunning"] is True
    )
    assert [p.reply.request_id for p in for_delta] == [data.LEGACY, data.READY]
    assert [p.reply.request_id for p in old] == [data.LEGACY, data.FAILED]
    with pytest.raises(InvalidInput, match="returned"):
        await list_pending_replies(store, statuses=["returned"])


async def test_reply_story_gathers_the_request_its_runs_and_both_messages(store: Store) -> None:
    runs = await data.seed(store.settings.database_url)

    story = await reply_story(store, OperatorReplyStory(request_id=data.RETURNED))

    assert [run.id for run in story.runs] == [runs["returned_target"], runs["returned_follow_up"]]
    assert story.request_message is not None and story.request_message.session_id == "alpha"
    assert story.reply_message is not None and story.reply_message.id == data.REPLY_MESSAGE
    with pytest.raises(NotFound) as raised:
        await reply_story(store, OperatorReplyStory(request_id="req_missing"))
    assert raised.value.code == "request_not_found"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("10m", 600), ("2h", 7200), ("1d", 86400), ("1h30m", 5400), (" 45 ", 45)],
)
def test_durations_read_as_seconds(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "ten minutes", "10x", "-5m", "1.5h", "m10", "10m5"])
def test_malformed_durations_are_refused_with_an_example(text: str) -> None:
    with pytest.raises(ValueError, match=r"e\.g\. 90s, 10m"):
        parse_duration(text)


def test_ages_print_in_their_two_largest_units() -> None:
    assert [format_duration(s) for s in (0, 45, 605, 7380, 277_200, None)] == [
        "0s",
        "45s",
        "10m 5s",
        "2h 3m",
        "3d 5h",
        "-",
    ]


async def newest_messages(store: Store) -> list[tuple[str, Any, Any]]:
    """Each conversation's ``conversation_activity.last_message_at`` beside the newest
    ``created_at`` of its messages, read from the messages themselves."""
    async with store.engine.connect() as connection:
        rows = await connection.execute(
            sa.text(
                "SELECT a.session_id, a.last_message_at, "
                "(SELECT MAX(m.created_at) FROM messages m WHERE m.session_id = a.session_id) "
                "FROM conversation_activity a ORDER BY a.session_id"
            )
        )
        return [tuple(row) for row in rows]


def legacy_state(folder: Path, stamps: list[str | None]) -> Path:
    """A cc-web state of one conversation, ``old``, whose messages carry ``stamps``."""
    messages = [
        {"id": f"old-{n}", "role": "user", "content": f"line {n}"}
        | ({"timestamp": stamp} if stamp is not None else {})
        for n, stamp in enumerate(stamps)
    ]
    (folder / "sessions").mkdir(parents=True, exist_ok=True)
    document = {"id": "old", "title": "Old", "messages": messages}
    (folder / "sessions" / "old.json").write_text(json.dumps(document))
    return folder


async def test_last_message_at_is_the_newest_message_however_messages_were_written(
    store: Store, tmp_path: Path
) -> None:
    for name in ("asker", "answerer", "silent"):
        await make_conversation(store, name)
    await host_calls.call(
        store, "message.append", {"sessionId": "asker", "role": "user", "content": "hi"}
    )
    await ask(store, "asker", "answerer", "Check it")  # a send: the target's batch
    run = await claim(store, "w-1")
    assert run is not None
    await complete(store, run["id"], "Checked", workerId="w-1")  # output and the reply
    # An import whose times are out of order, one missing; then one that moves the newest.
    stamps = ["2025-05-01T09:00:00Z", "2025-05-03T09:00:00Z", None, "2025-05-02T09:00:00Z"]
    await import_state(store, legacy_state(tmp_path / "first", stamps))
    moved = [*stamps[:1], "2025-04-01T09:00:00Z", *stamps[2:]]
    await import_state(store, legacy_state(tmp_path / "second", moved))

    rows = await newest_messages(store)
    assert [row[0] for row in rows] == ["answerer", "asker", "old", "silent"]
    assert all(kept == newest for _, kept, newest in rows), rows
    by_id = {row[0]: row[1] for row in rows}
    assert by_id["silent"] is None
    assert str(by_id["old"]).startswith("2025-05-02")


@pytest.mark.parametrize(
    ("statement", "index"),
    [
        (sa.text(f"SELECT * FROM conversation_activity {ACTIVITY_ORDER}"), ACTIVITY_INDEX),
        (BY_CREATION.first, "ix_sessions_created_at_id"),
        (BY_CREATION.after, "ix_sessions_created_at_id"),
        (BY_ACTIVITY.after, "ix_sessions_updated_at_id"),
    ],
    ids=["conversation_activity", "session.list", "session.list-next", "console"],
)
async def test_the_newest_first_orders_are_read_in_order_from_an_index(
    store: Store, statement: Any, index: str
) -> None:
    params = {"limit": 51, "after_at": utcnow(), "after_id": "conv-x"}
    plan = await query_plan(store, statement, params)

    assert index in plan, plan
    before = plan.split(index)[0]  # nothing above the index scan sorts what it read
    assert "Sort" not in before and "TEMP B-TREE" not in before, plan
