"""``ccweb-store import-json``: every shape of a cc-web state goes in, once, losing nothing."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from ccweb_store.cli import app
from ccweb_store.domain.json_values import KEPT_AS_TEXT
from ccweb_store.domain.timestamps import iso
from ccweb_store.importer.legacy_json import parse_timestamp
from ccweb_store.importer.legacy_messages import RESERVED_METADATA_KEYS, normalise_message
from ccweb_store.importer.legacy_replies import ABSENT_KEY, REPLY_COLUMNS, REPLY_TIME_FIELDS
from ccweb_store.importer.legacy_sessions import LegacySession
from ccweb_store.importer.session_sync import plan_session
from ccweb_store.store.db import create_engine
from tests import forked
from tests.cli_support import COMMAND
from tests.servers import server_env

TABLES = {"sessions": "id", "messages": "id", "reply_requests": "request_id"}
#: A number of messages that several inserts of many rows take in turn.
ROWS_PER_INSERT = 100

ALPHA_MESSAGES: list[dict[str, Any]] = [
    {"id": "a-1", "role": "user", "content": "plain text", "timestamp": "2024-03-01T10:00:00.000Z"},
    {
        "messageId": "a-2",
        "role": "assistant",
        "content": [
            {"type": "text", "text": "first block"},
            {"type": "tool_use", "name": "Bash"},
            {"type": "text", "text": "second block"},
        ],
        "timestamp": 1709287260000,
        "toolCalls": [{"name": "Bash"}],
    },
    {"role": "user", "content": "no id, offset time", "createdAt": "2024-03-01T12:02:00+02:00"},
    {"id": "a-4", "role": "user", "content": "epoch ms as text", "timestamp": "1709287380000"},
    {
        "id": "a-5",
        "role": "user",
        "content": "please review",
        "metadata": {
            "crossConversation": {"sourceConversationId": "beta", "replyRequestId": "req-recover"}
        },
        "pinned": True,
    },
    {"id": "a-6", "role": "system", "content": "legacy row without a timestamp"},
]


def alpha_session() -> dict[str, Any]:
    return {
        "id": "alpha",
        "title": "Alpha",
        "agent": "claude",
        "cwd": "/srv/alpha",
        "createdAt": "2024-03-01T09:00:00.000Z",
        "updatedAt": 1709290800000,
        "claudeSessionId": "c-123",
        "permissionMode": {"nested": [1, 2, 3]},
        "messages": [dict(m) for m in ALPHA_MESSAGES],
    }


def beta_session() -> dict[str, Any]:
    """No session timestamps: they fall back to the first and last message times."""
    return {
        "id": "beta",
        "title": "Beta",
        "messages": [
            {"id": "b-1", "role": "user", "content": "hello", "timestamp": "2024-02-01T08:00:00Z"},
            {"id": "b-2", "role": "assistant", "content": "hi", "timestamp": "2024-02-01T08:05:00"},
        ],
    }


REPLIES: list[dict[str, Any]] = [
    {
        "requestId": "req-recover",
        "messageId": "a-5",
        "sourceConversationId": "beta",
        "sourceTitle": "Beta",
        "targetConversationId": "alpha",
        "targetTitle": "Alpha",
        "status": "pending",
        "createdAt": "2024-03-01T10:04:00.000Z",
        "hopCount": 1,
        "sourceAutoRun": True,
        "deliveryAttempts": [{"at": "2024-03-01T10:04:30.000Z", "ok": False}],
        "$schema": "cc-web/replies",
    },
    {
        "requestId": "req-ready",
        "sourceConversationId": "alpha",
        "targetConversationId": "beta",
        "status": "ready",
        "createdAt": 1709287500000,
        "replyText": "done",
        "completedAt": "2024-03-01T10:06:00.000Z",
        "originalRequest": "do the thing",
        "sourceTitle": 42,
        "lastError": None,
        "hopCount": "2",
        "sourceAutoRun": 1,
    },
    {
        "requestId": "req-orphan",
        "sourceConversationId": "gone-source",
        "targetConversationId": "gone-target",
        "status": "returned",
        "createdAt": "2024-01-01T00:00:00.000Z",
        "returnedAt": "2024-01-01T00:10:00.000Z",
        "replyMessageId": "x-1",
        "sourceAutoRun": False,
    },
]


def reply_file(shape: str, replies: list[dict[str, Any]]) -> Any:
    if shape == "list":
        return replies
    if shape == "wrapped":
        return {"replies": replies}
    return {r["requestId"]: {k: v for k, v in r.items() if k != "requestId"} for r in replies}


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, ensure_ascii=False, indent=1), encoding="utf-8")


def write_state(root: Path, *, reply_shape: str = "list") -> Path:
    write_json(root / "sessions" / "alpha.json", alpha_session())
    write_json(root / "sessions" / "beta.json", beta_session())
    write_json(
        root / "config" / "cross-conversation-replies.json", reply_file(reply_shape, REPLIES)
    )
    return root


def run_import(directory: Path, database_url: str, *flags: str) -> tuple[int, dict[str, Any], str]:
    """Run the CLI in-process with ``--json``; (exit code, summary, stderr)."""
    result = CliRunner().invoke(
        app, ["import-json", str(directory), "--database-url", database_url, "--json", *flags]
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, json.loads(result.stdout), result.stderr


async def _dump(url: str) -> dict[str, list[dict[str, Any]]]:
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            dump: dict[str, list[dict[str, Any]]] = {}
            for table, key in TABLES.items():
                rows = await connection.execute(sa.text(f"SELECT * FROM {table} ORDER BY {key}"))
                dump[table] = [_normalise_row(dict(row._mapping)) for row in rows]
            return dump
    finally:
        await engine.dispose()


def _normalise_row(row: dict[str, Any]) -> dict[str, Any]:
    """Backend-neutral values: JSON decoded, timestamps as aware UTC ISO text."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, str) and key in ("metadata", "extra"):
            value = json.loads(value)
        elif isinstance(value, str) and key.endswith("_at"):
            value = datetime.fromisoformat(value).replace(tzinfo=UTC)
        if isinstance(value, datetime):
            value = value.astimezone(UTC).isoformat()
        if key == "source_auto_run":
            value = bool(value)
        out[key] = value
    return out


def dump(url: str) -> dict[str, list[dict[str, Any]]]:
    return asyncio.run(_dump(url))


def by_id(rows: list[dict[str, Any]], key: str = "id") -> dict[str, dict[str, Any]]:
    return {row[key]: row for row in rows}


def file_states(root: Path) -> dict[Path, tuple[bytes, int]]:
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def rebuild_source_message(row: dict[str, Any]) -> dict[str, Any]:
    """Invert the importer's mapping (documented in ``legacy_json``) from a stored row."""
    metadata = dict(row["metadata"] or {})
    legacy = metadata.pop("legacy", {})
    blocks = metadata.pop("contentBlocks", None)
    fields = metadata.pop("legacyFields", [])
    assert not RESERVED_METADATA_KEYS & metadata.keys()
    source: dict[str, Any] = {"role": row["role"], "content": row["content"]}
    if blocks is not None:
        source["content"] = blocks
    if "messageId" not in legacy and not row["id"].startswith(f"{row['session_id']}:"):
        source["id"] = row["id"]
    if row["created_at"] is not None and not {"timestamp", "createdAt"} & legacy.keys():
        source["timestamp"] = iso(datetime.fromisoformat(row["created_at"]))
    own = {k: v for k, v in metadata.items() if k not in fields}
    if own:
        source["metadata"] = own
    source.update({k: metadata[k] for k in fields})
    source.update(legacy)
    return source


def rebuild_source_reply(row: dict[str, Any]) -> dict[str, Any]:
    """Invert the importer's mapping of a reply entry (``legacy_json``) from its stored row."""
    extra = dict(row["extra"] or {})
    absent = extra.pop(ABSENT_KEY, [])
    source: dict[str, Any] = {}
    for key, column in REPLY_COLUMNS.items():
        value = row[column]
        if value is not None and key in REPLY_TIME_FIELDS:
            value = iso(datetime.fromisoformat(value))
        if value is not None:
            source[key] = value
    source.update(
        {key.removeprefix("$") if key.startswith("$$") else key: v for key, v in extra.items()}
    )
    for key in absent:
        del source[key]
    return source


def test_every_shape_of_a_cc_web_state_is_imported(database_url: str, tmp_path: Path) -> None:
    state = write_state(tmp_path / "state")

    code, summary, _ = run_import(state, database_url)

    assert code == 0
    assert summary["sessions"] == {"imported": 2, "updated": 0, "unchanged": 0, "skipped": 0}
    assert summary["messages"]["imported"] == 8
    assert summary["replies"]["imported"] == 3
    tables = dump(database_url)
    sessions = by_id(tables["sessions"])
    alpha = sessions["alpha"]
    assert (alpha["title"], alpha["agent"], alpha["cwd"]) == ("Alpha", "claude", "/srv/alpha")
    assert alpha["created_at"] == "2024-03-01T09:00:00+00:00"
    assert alpha["updated_at"] == "2024-03-01T11:00:00+00:00"
    assert alpha["extra"] == {
        "updatedAt": 1709290800000,
        "claudeSessionId": "c-123",
        "permissionMode": {"nested": [1, 2, 3]},
    }
    assert sessions["beta"]["created_at"] == "2024-02-01T08:00:00+00:00"
    assert sessions["beta"]["updated_at"] == "2024-02-01T08:05:00+00:00"
    assert sessions["beta"]["extra"] is None

    messages = {(m["session_id"], m["seq"]): m for m in tables["messages"]}
    alpha_rows = [messages["alpha", seq] for seq in range(1, 7)]
    assert [m["id"] for m in alpha_rows] == ["a-1", "a-2", "alpha:2", "a-4", "a-5", "a-6"]
    assert alpha_rows[0]["content"] == "plain text"
    assert alpha_rows[1]["content"] == "first block\nsecond block"
    assert alpha_rows[1]["metadata"]["contentBlocks"] == ALPHA_MESSAGES[1]["content"]
    assert alpha_rows[1]["metadata"]["toolCalls"] == [{"name": "Bash"}]
    assert [m["created_at"] for m in alpha_rows] == [
        "2024-03-01T10:00:00+00:00",
        "2024-03-01T10:01:00+00:00",
        "2024-03-01T10:02:00+00:00",
        "2024-03-01T10:03:00+00:00",
        None,
        None,
    ]
    assert alpha_rows[4]["metadata"]["crossConversation"]["replyRequestId"] == "req-recover"
    assert alpha_rows[4]["metadata"]["pinned"] is True


def test_every_source_message_can_be_rebuilt_from_its_row(
    database_url: str, tmp_path: Path
) -> None:
    state = write_state(tmp_path / "state")
    run_import(state, database_url)

    rows = sorted(
        (m for m in dump(database_url)["messages"] if m["session_id"] == "alpha"),
        key=lambda m: m["seq"],
    )

    assert [rebuild_source_message(row) for row in rows] == ALPHA_MESSAGES


@pytest.mark.parametrize("shape", ["list", "keyed"])
def test_every_reply_entry_can_be_rebuilt_from_its_row(
    database_url: str, tmp_path: Path, shape: str
) -> None:
    state = write_state(tmp_path / "state", reply_shape=shape)

    _, summary, _ = run_import(state, database_url)

    assert summary["warnings"] == []
    replies = by_id(dump(database_url)["reply_requests"], "request_id")
    assert [rebuild_source_reply(replies[r["requestId"]]) for r in REPLIES] == REPLIES
    assert replies["req-recover"]["extra"] == {
        "status": "pending",
        "deliveryAttempts": [{"at": "2024-03-01T10:04:30.000Z", "ok": False}],
        "$$schema": "cc-web/replies",
        ABSENT_KEY: ["originalRequest"],
    }
    assert replies["req-ready"]["extra"] == {
        "createdAt": 1709287500000,
        "sourceTitle": 42,
        "lastError": None,
        "hopCount": "2",
        "sourceAutoRun": 1,
        ABSENT_KEY: ["targetTitle"],
    }
    assert (replies["req-ready"]["source_title"], replies["req-ready"]["hop_count"]) == ("42", 0)
    assert replies["req-ready"]["target_title"] == "Beta"  # its target's, from beta.json
    assert replies["req-orphan"]["extra"] == {ABSENT_KEY: ["hopCount"]}


def test_a_changed_reply_extra_is_updated_and_a_rerun_keeps_it(
    database_url: str, tmp_path: Path
) -> None:
    state = write_state(tmp_path / "state")
    run_import(state, database_url)
    changed = [dict(r) for r in REPLIES]
    changed[2]["archivedBy"] = "operator"
    write_json(state / "config" / "cross-conversation-replies.json", changed)

    _, first, _ = run_import(state, database_url)
    after_first = dump(database_url)
    _, second, _ = run_import(state, database_url)

    assert (first["replies"]["updated"], first["replies"]["unchanged"]) == (1, 2)
    assert second["replies"]["unchanged"] == 3
    orphan = by_id(after_first["reply_requests"], "request_id")["req-orphan"]
    assert orphan["extra"] == {"archivedBy": "operator", ABSENT_KEY: ["hopCount"]}
    assert rebuild_source_reply(orphan) == changed[2]
    assert dump(database_url) == after_first


@pytest.mark.parametrize("shape", ["list", "wrapped", "keyed"])
def test_the_reply_file_is_read_in_each_of_its_three_shapes(
    database_url: str, tmp_path: Path, shape: str
) -> None:
    state = write_state(tmp_path / "state", reply_shape=shape)

    code, summary, _ = run_import(state, database_url)

    assert code == 0
    assert summary["replies"]["imported"] == 3
    replies = by_id(dump(database_url)["reply_requests"], "request_id")
    assert replies["req-recover"]["status"] == "waiting"
    assert replies["req-recover"]["hop_count"] == 1
    assert replies["req-ready"]["created_at"] == "2024-03-01T10:05:00+00:00"
    assert replies["req-ready"]["original_request"] == "do the thing"
    orphan = replies["req-orphan"]
    assert (orphan["status"], orphan["source_auto_run"]) == ("returned", False)
    assert orphan["returned_at"] == "2024-01-01T00:10:00+00:00"


def test_a_legacy_original_request_is_recovered_from_the_target_message(
    database_url: str, tmp_path: Path
) -> None:
    state = write_state(tmp_path / "state")

    _, summary, _ = run_import(state, database_url)

    assert summary["replies"]["originalRequestRecovered"] == 1
    replies = by_id(dump(database_url)["reply_requests"], "request_id")
    assert replies["req-recover"]["original_request"] == "please review"
    assert replies["req-orphan"]["original_request"] is None


@pytest.mark.parametrize("when", ["now", "before"])
@pytest.mark.parametrize("mark", ["crossConversation", "top-level", "none"])
def test_an_original_request_is_recovered_from_a_session_inserted_now_or_before(
    database_url: str, tmp_path: Path, mark: str, when: str
) -> None:
    """The target's messages are searched unless the import itself just inserted the whole
    session from a file none of whose messages carries a reply request: a session imported
    before is searched (its rows may hold more than this file), whichever way it is marked."""
    state = write_state(tmp_path / "state")
    replies_path = state / "config" / "cross-conversation-replies.json"
    carrier: dict[str, Any] = {"id": "g-2", "role": "user", "content": "the request"}
    if mark == "crossConversation":
        carrier["metadata"] = {"crossConversation": {"replyRequestId": "req-g"}}
    elif mark == "top-level":
        carrier["metadata"] = {"replyRequestId": "req-g"}
    gamma = {"id": "gamma", "messages": [{"id": "g-1", "role": "user", "content": "hi"}, carrier]}
    reply = {
        "requestId": "req-g",
        "sourceConversationId": "alpha",
        "targetConversationId": "gamma",
        "status": "waiting",
    }
    write_json(state / "sessions" / "gamma.json", gamma)
    if when == "before":
        run_import(state, database_url)
    write_json(replies_path, [*REPLIES, reply])

    _, summary, _ = run_import(state, database_url)

    row = by_id(dump(database_url)["reply_requests"], "request_id")["req-g"]
    assert row["original_request"] == (None if mark == "none" else "the request")
    recovered = int(mark != "none") + int(when == "now")  # and req-recover's the first time
    assert summary["replies"]["originalRequestRecovered"] == recovered


def test_a_second_import_changes_nothing(database_url: str, tmp_path: Path) -> None:
    state = write_state(tmp_path / "state")
    run_import(state, database_url)
    first = dump(database_url)

    code, summary, _ = run_import(state, database_url)

    assert code == 0
    assert summary["sessions"] == {"imported": 0, "updated": 0, "unchanged": 2, "skipped": 0}
    assert summary["messages"] == {"imported": 0, "updated": 0, "unchanged": 8, "skipped": 0}
    assert summary["replies"]["unchanged"] == 3
    assert summary["replies"]["originalRequestRecovered"] == 0
    assert dump(database_url) == first


def test_messages_appended_to_a_session_file_are_added_with_the_next_seq(
    database_url: str, tmp_path: Path
) -> None:
    state = write_state(tmp_path / "state")
    run_import(state, database_url)
    beta = beta_session()
    beta["messages"].append({"role": "user", "content": "one more", "timestamp": 1706774700000})
    write_json(state / "sessions" / "beta.json", beta)

    code, summary, _ = run_import(state, database_url)

    assert code == 0
    assert summary["sessions"]["updated"] == 1
    assert summary["messages"]["imported"] == 1
    assert summary["messages"]["unchanged"] == 8
    beta_rows = [m for m in dump(database_url)["messages"] if m["session_id"] == "beta"]
    newest = max(beta_rows, key=lambda m: m["seq"])
    assert (newest["id"], newest["seq"], newest["content"]) == ("beta:2", 3, "one more")


def test_a_reply_status_only_moves_forward(database_url: str, tmp_path: Path) -> None:
    state = write_state(tmp_path / "state")
    replies_path = state / "config" / "cross-conversation-replies.json"
    run_import(state, database_url)
    moved = [dict(r) for r in REPLIES]
    moved[0].update(status="ready", replyText="reviewed", completedAt="2024-03-01T11:00:00.000Z")
    write_json(replies_path, moved)

    _, forward, _ = run_import(state, database_url)
    back = [dict(r) for r in REPLIES]
    back[0]["status"] = "pending"
    write_json(replies_path, back)
    _, backward, _ = run_import(state, database_url)

    assert forward["replies"]["updated"] == 1
    assert backward["replies"] == {
        "imported": 0,
        "updated": 0,
        "unchanged": 3,
        "skipped": 0,
        "originalRequestRecovered": 0,
    }
    row = by_id(dump(database_url)["reply_requests"], "request_id")["req-recover"]
    assert (row["status"], row["reply_text"]) == ("ready", "reviewed")
    assert row["original_request"] == "please review"


def test_broken_files_are_skipped_and_reported_and_the_rest_goes_in(
    database_url: str, tmp_path: Path
) -> None:
    state = write_state(tmp_path / "state")
    sessions = state / "sessions"
    (sessions / "not-json.json").write_text('{"id": "x", "messages": [', encoding="utf-8")
    write_json(sessions / "array.json", [{"id": "y"}])
    write_json(sessions / "no-id.json", {"title": "who am I", "messages": []})
    write_json(sessions / "bad-id.json", {"id": "../etc/passwd", "messages": []})
    before = file_states(state)

    code, summary, stderr = run_import(state, database_url)

    assert code == 1
    assert summary["sessions"]["imported"] == 2
    assert summary["sessions"]["skipped"] == 4
    reasons = {Path(s["path"]).name: s["reason"] for s in summary["skipped"]}
    assert reasons["not-json.json"].startswith("not valid JSON")
    assert reasons["array.json"] == "expected a JSON object, found an array"
    assert reasons["no-id.json"] == "the session has no 'id'"
    assert "invalid conversation id '../etc/passwd'" in reasons["bad-id.json"]
    assert f"skipped {sessions / 'array.json'}: expected a JSON object" in stderr
    assert {s["id"] for s in dump(database_url)["sessions"]} == {"alpha", "beta"}
    assert file_states(state) == before


def test_nan_where_a_time_belongs_no_longer_stops_the_import(
    database_url: str, tmp_path: Path
) -> None:
    """Python's JSON reader takes NaN; as a session's or a message's time it crashed the whole
    import, then the database refused it kept verbatim. Now it is no time, and the source
    value is kept as its JSON text: both files go in."""
    state = write_state(tmp_path / "state")
    sessions = state / "sessions"
    (sessions / "nan-created.json").write_text(
        '{"id": "nan-created", "createdAt": NaN, "messages": []}', encoding="utf-8"
    )
    (sessions / "nan-message.json").write_text(
        '{"id": "nan-message", "messages": [{"role": "user", "content": "hi", "timestamp": NaN}]}',
        encoding="utf-8",
    )

    code, summary, _ = run_import(state, database_url)

    assert code == 0, summary["skipped"]
    tables = dump(database_url)
    assert {s["id"] for s in tables["sessions"]} == {"alpha", "beta", "nan-created", "nan-message"}
    assert by_id(tables["sessions"])["nan-created"]["extra"] == {"createdAt": {KEPT_AS_TEXT: "NaN"}}
    message = next(m for m in tables["messages"] if m["session_id"] == "nan-message")
    assert (message["created_at"], message["metadata"]) == (
        None,
        {"legacy": {"timestamp": {KEPT_AS_TEXT: "NaN"}}},
    )


def refuse_message(database_url: str, message_id: str) -> Callable[[], None]:
    """Make the database refuse to insert the message ``message_id`` (a trigger); returns what
    drops the trigger again (the PostgreSQL database is shared by the tests)."""
    if database_url.startswith("sqlite"):
        statements = [
            f"CREATE TRIGGER refuse_message BEFORE INSERT ON messages WHEN NEW.id = "
            f"'{message_id}' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        ]
        drops = ["DROP TRIGGER refuse_message"]
    else:
        statements = [
            "CREATE FUNCTION refuse_message() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF NEW.id = '{message_id}' THEN RAISE EXCEPTION 'refused by the test'; END IF; "
            "RETURN NEW; END $$",
            "CREATE TRIGGER refuse_message BEFORE INSERT ON messages FOR EACH ROW "
            "EXECUTE FUNCTION refuse_message()",
        ]
        drops = ["DROP TRIGGER refuse_message ON messages", "DROP FUNCTION refuse_message()"]

    async def run(sql: list[str]) -> None:
        engine = create_engine(database_url)
        try:
            async with engine.begin() as connection:
                for statement in sql:
                    await connection.execute(sa.text(statement))
        finally:
            await engine.dispose()

    asyncio.run(run(statements))
    return lambda: asyncio.run(run(drops))


def test_a_long_session_goes_in_whole_and_in_order_and_a_bad_message_refuses_its_file(
    database_url: str, tmp_path: Path
) -> None:
    """On SQLite messages are inserted ``ROWS_PER_INSERT`` to a statement, the rest one by
    one: every row goes in, in file order; a message the database refuses in a later group
    leaves nothing of its file behind."""
    count = 2 * ROWS_PER_INSERT + 37
    state = write_state(tmp_path / "state")
    long = [
        {
            "id": f"long-{i}",
            "role": "user",
            "content": f"message {i}",
            "timestamp": 1709287380000 + i,
        }
        for i in range(count)
    ]
    write_json(state / "sessions" / "long.json", {"id": "long", "messages": long})
    bad = [{**m, "id": f"bad-{i}"} for i, m in enumerate(long)]
    (state / "sessions" / "bad.json").write_text(json.dumps({"id": "bad", "messages": bad}))
    allow = refuse_message(database_url, f"bad-{ROWS_PER_INSERT + 5}")

    try:
        code, summary, _ = run_import(state, database_url)
    finally:
        allow()

    assert code == 1
    assert [Path(s["path"]).name for s in summary["skipped"]] == ["bad.json"]
    rows = sorted(
        (m for m in dump(database_url)["messages"] if m["session_id"] in ("long", "bad")),
        key=lambda m: m["seq"],
    )
    assert [(m["id"], m["seq"], m["content"]) for m in rows] == [
        (f"long-{i}", i + 1, f"message {i}") for i in range(count)
    ]
    assert {s["id"] for s in dump(database_url)["sessions"]} == {"alpha", "beta", "long"}


@pytest.mark.parametrize(
    "epoch_ms",
    [0, 1, -1, 10**11, -(10**11), 1709287260123, -62135596800000, 253402300799999, 2**62],
)
def test_epoch_milliseconds_read_as_the_exact_utc_instant(epoch_ms: int) -> None:
    expected: datetime | None
    try:
        if abs(epoch_ms) < 1e11:  # small numbers are seconds
            expected = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=epoch_ms)
        else:
            expected = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=epoch_ms)
    except OverflowError:
        expected = None
    assert parse_timestamp(epoch_ms) == expected
    assert parse_timestamp(str(epoch_ms)) == expected


@given(st.integers(min_value=-(10**15), max_value=10**15) | st.sampled_from([2**62, -(2**62)]))
def test_a_message_reads_epoch_milliseconds_as_parse_timestamp_does(epoch_ms: int) -> None:
    """``normalise_message`` reads integer epoch milliseconds itself (the usual case), the
    same instant as ``parse_timestamp`` (None out of range), and keeps the source value."""
    message = normalise_message(0, {"role": "user", "content": "x", "timestamp": epoch_ms})
    assert message.created_at == parse_timestamp(epoch_ms)
    if epoch_ms == 0 or abs(epoch_ms) >= 1e11:
        expected: datetime | None
        try:
            expected = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=epoch_ms)
        except OverflowError:
            expected = None
        assert message.created_at == expected
    assert message.metadata["legacy"] == {"timestamp": epoch_ms}


def test_a_new_session_is_planned_as_the_general_loop_plans_it() -> None:
    """``plan_session``'s path for a session with nothing stored and no ids held elsewhere
    gives the rows of its general loop (taken here by naming an unrelated id's owner)."""
    raws: list[dict[str, Any]] = [
        {"id": "a", "role": "user", "content": "one", "timestamp": 1709287260123},
        {"role": "assistant", "content": "no id"},
        {"id": "a", "role": "user", "content": "the same id again"},
        {"messageId": "b", "role": "user", "content": "under messageId"},
        {"id": "b", "role": "user", "content": "b again", "metadata": {"k": 1}},
        {"id": "s:1", "content": "a positional id's text"},
        {"id": "", "role": "tool", "content": [{"type": "text", "text": "blocks"}]},
    ]
    messages = [normalise_message(index, raw) for index, raw in enumerate(raws)]
    moment = datetime(2024, 1, 1, tzinfo=UTC)
    legacy = LegacySession("s", None, None, None, moment, moment, None, None, messages)
    fast = plan_session(legacy, None, [], {})
    general = plan_session(legacy, None, [], {"elsewhere": "other-session"})
    assert fast.new_messages == general.new_messages
    assert [row["id"] for row in fast.new_messages] == ["a", "s:1", "s:2", "b", "s:4", "s:5", "s:6"]
    assert [row["seq"] for row in fast.new_messages] == list(range(1, 8))
    assert fast.new_messages[2]["metadata_"] == {"legacy": {"id": "a"}}


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), 1e300, True, None])
def test_a_number_that_is_no_instant_reads_as_no_time(value: Any) -> None:
    assert parse_timestamp(value) is None


def test_broken_messages_and_reply_entries_are_skipped_and_reported(
    database_url: str, tmp_path: Path
) -> None:
    state = write_state(tmp_path / "state")
    beta = beta_session()
    beta["messages"].insert(1, "just a string")
    write_json(state / "sessions" / "beta.json", beta)
    broken = [
        *REPLIES,
        {"requestId": "req-x", "status": "waiting"},
        {
            "requestId": "r",
            **{"sourceConversationId": "a", "targetConversationId": "b", "status": "lost"},
        },
    ]
    write_json(state / "config" / "cross-conversation-replies.json", broken)

    code, summary, _ = run_import(state, database_url)

    assert code == 1
    assert summary["messages"]["skipped"] == 1
    assert summary["replies"]["skipped"] == 2
    assert summary["replies"]["imported"] == 3
    reasons = sorted(s["reason"] for s in summary["skipped"])
    assert reasons == [
        "message 1 is a string, not an object",
        "reply 3: missing 'sourceConversationId'",
        "reply 4: unknown status 'lost'",
    ]
    beta_ids = [m["id"] for m in dump(database_url)["messages"] if m["session_id"] == "beta"]
    assert sorted(beta_ids) == ["b-1", "b-2"]


def test_a_reply_file_that_is_not_json_is_skipped_and_sessions_still_go_in(
    database_url: str, tmp_path: Path
) -> None:
    state = write_state(tmp_path / "state")
    (state / "config" / "cross-conversation-replies.json").write_text("{", encoding="utf-8")

    code, summary, _ = run_import(state, database_url)

    assert code == 1
    assert summary["sessions"]["imported"] == 2
    assert summary["replies"]["skipped"] == 1
    assert dump(database_url)["reply_requests"] == []


def test_a_message_id_held_by_another_session_gets_a_stable_derived_id(
    database_url: str, tmp_path: Path
) -> None:
    state = write_state(tmp_path / "state")
    gamma = {"id": "gamma", "messages": [{"id": "a-1", "role": "user", "content": "clash"}]}
    write_json(state / "sessions" / "gamma.json", gamma)

    run_import(state, database_url)
    _, again, _ = run_import(state, database_url)

    rows = [m for m in dump(database_url)["messages"] if m["session_id"] == "gamma"]
    assert [(m["id"], m["metadata"]["legacy"]) for m in rows] == [("gamma:0", {"id": "a-1"})]
    assert again["messages"]["imported"] == 0


def test_a_new_session_holding_another_sessions_id_late_in_the_file_goes_in_whole(
    database_url: str, tmp_path: Path
) -> None:
    """A new session is first written without looking its ids up; the id another session
    holds breaks that insert after whole groups of rows went in, and the file is written
    again with the lookup: every message once, the clashing one under a derived id."""
    state = write_state(tmp_path / "state")
    count = ROWS_PER_INSERT + 50
    messages = [{"id": f"d-{i}", "role": "user", "content": f"m{i}"} for i in range(count)]
    messages[ROWS_PER_INSERT + 20]["id"] = "a-1"  # alpha's
    write_json(state / "sessions" / "delta.json", {"id": "delta", "messages": messages})

    code, summary, _ = run_import(state, database_url)

    assert code == 0
    assert summary["sessions"]["imported"] == 3
    assert summary["messages"]["imported"] == 8 + count
    rows = sorted(
        (m for m in dump(database_url)["messages"] if m["session_id"] == "delta"),
        key=lambda m: m["seq"],
    )
    clash = ROWS_PER_INSERT + 20
    assert [m["id"] for m in rows] == [
        f"delta:{i}" if i == clash else f"d-{i}" for i in range(count)
    ]
    assert rows[clash]["metadata"] == {"legacy": {"id": "a-1"}}


def test_a_dry_run_writes_nothing(database_url: str, tmp_path: Path) -> None:
    state = write_state(tmp_path / "state")
    before = dump(database_url)

    code, summary, _ = run_import(state, database_url, "--dry-run")

    assert code == 0
    assert summary["dryRun"] is True
    assert summary["sessions"]["imported"] == 2
    assert summary["messages"]["imported"] == 8
    assert summary["replies"]["imported"] == 3
    assert dump(database_url) == before


def test_a_dry_run_does_not_create_a_missing_sqlite_database(tmp_path: Path) -> None:
    state = write_state(tmp_path / "state")
    database = tmp_path / "never.db"

    code, summary, stderr = run_import(state, f"sqlite+aiosqlite:///{database}", "--dry-run")

    assert code == 0
    assert summary["messages"]["imported"] == 8
    assert "counted against an empty one" in stderr
    assert not database.exists()


def test_the_plain_summary_counts_what_happened(database_url: str, tmp_path: Path) -> None:
    state = write_state(tmp_path / "state")

    result = CliRunner().invoke(app, ["import-json", str(state), "--database-url", database_url])

    assert result.exit_code == 0
    assert "sessions  2 imported, 0 updated, 0 unchanged, 0 skipped" in result.stdout
    assert "original requests recovered: 1" in result.stdout
    assert "[3/3]" in result.stderr


def test_a_directory_that_is_not_a_cc_web_state_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["import-json", str(tmp_path), "--database-url", f"sqlite:///{tmp_path / 'x.db'}"]
    )

    assert result.exit_code == 2
    assert "does not look like a cc-web state directory" in result.stderr


# --- killed in the middle -------------------------------------------------------------------


def write_large_state(root: Path, *, sessions: int = 60, messages: int = 200) -> Path:
    replies = []
    for s in range(sessions):
        session_id = f"conv-{s:03d}"
        rows = []
        for m in range(messages):
            row: dict[str, Any] = {
                "role": "user" if m % 2 == 0 else "assistant",
                "content": f"message {m} of {session_id} " + "lorem ipsum " * 20,
                "timestamp": 1709280000000 + s * 1_000_000 + m * 1000,
            }
            if m % 3:
                row["id"] = f"{session_id}-m{m}"
            if m == 0 and s > 0:
                row["metadata"] = {"crossConversation": {"replyRequestId": f"req-{s}"}}
            rows.append(row)
        write_json(root / "sessions" / f"{session_id}.json", {"id": session_id, "messages": rows})
        if s > 0:
            replies.append(
                {
                    "requestId": f"req-{s}",
                    "sourceConversationId": "conv-000",
                    "targetConversationId": session_id,
                    "status": "waiting",
                    "createdAt": 1709280000000 + s,
                }
            )
    write_json(root / "config" / "cross-conversation-replies.json", replies)
    return root


def cli_subprocess(*args: str, **kwargs: Any) -> forked.ForkedProcess:
    return forked.spawn([*COMMAND, *args], env=server_env(), text=True, **kwargs)


@pytest.mark.slow
def test_an_import_killed_midway_then_rerun_equals_a_clean_import(
    database_url: str, fresh_database_url: str, tmp_path: Path
) -> None:
    state = write_large_state(tmp_path / "state")
    process = cli_subprocess(
        "import-json",
        str(state),
        "--database-url",
        database_url,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    try:
        for line in process.stderr:
            if line.startswith("[8/"):
                process.send_signal(signal.SIGKILL)
                break
    finally:
        process.kill()
        process.wait(timeout=60)
        process.stderr.close()
    assert process.returncode == -signal.SIGKILL

    interrupted = dump(database_url)
    per_session: dict[str, int] = {}
    for message in interrupted["messages"]:
        per_session[message["session_id"]] = per_session.get(message["session_id"], 0) + 1
    assert 8 <= len(interrupted["sessions"]) < 60
    assert set(per_session.values()) == {200}
    assert interrupted["reply_requests"] == []

    rerun = cli_subprocess(
        "import-json",
        str(state),
        "--database-url",
        database_url,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    clean = cli_subprocess(
        "import-json",
        str(state),
        "--database-url",
        fresh_database_url,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    for finished in (rerun, clean):
        _, err = finished.communicate(timeout=300)
        assert finished.returncode == 0, err

    completed = dump(database_url)
    assert len(completed["messages"]) == 60 * 200
    assert completed == dump(fresh_database_url)
