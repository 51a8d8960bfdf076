"""``bench/floor.py``, the aiosqlite floor of ``compare.py``'s floor rows: its statements must
be the ones a real send, list and round trip run, so its send and its round trip must write
the rows the app writes, and its list must read the inputs the tool answers. Real SQLite
files."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

from bench import floor, user_inputs
from ccweb_store.config import Settings
from ccweb_store.store.db import migrate
from ccweb_store.store.uow import Store
from tests.http_client import app_client, call_tool, rpc_result

SENT = "Run the tests and report back."
OUTPUT = "All 42 tests pass."
#: Every row a send writes or changes, ordered the same way in both databases.
TABLES = {
    "sessions": "SELECT * FROM sessions ORDER BY id",
    "messages": "SELECT * FROM messages ORDER BY session_id, seq",
    "reply_requests": "SELECT * FROM reply_requests ORDER BY created_at",
    "runs": "SELECT * FROM runs ORDER BY created_at",
    "events": "SELECT * FROM events ORDER BY id",
}
IDS = re.compile(r"\b(msg|req|run)_[0-9a-f]{20,}\b")
TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?$")


async def prepared(path: Path, listed: int = 0) -> Store:
    """A migrated SQLite file with a source and a target conversation (and a conversation of
    ``listed`` messages, when asked), as ``compare.py`` prepares both databases."""
    store = Store.from_settings(Settings(database_url=f"sqlite+aiosqlite:///{path}", token=None))
    await migrate(store.engine)
    async with store.uow() as uow:
        await uow.sessions.create("sender", title="Sender")
        await uow.sessions.create("target", title="Target")
        await uow.commit()
    if listed:
        await user_inputs.fill(store, listed, user_inputs.conversation_messages(listed))
    return store


def rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every table a send writes, ids and times written as placeholders (each differs by
    nature between two sends); every other value as stored."""

    def blank(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        return "<time>" if TIME.match(value) else IDS.sub(r"<\1 id>", value)

    with sqlite3.connect(path) as connection:
        return {
            table: [tuple(blank(value) for value in row) for row in connection.execute(query)]
            for table, query in TABLES.items()
        }


async def test_a_floor_send_writes_the_rows_a_send_through_the_app_writes(tmp_path: Path) -> None:
    store = await prepared(tmp_path / "app.db")
    try:
        async with app_client(store) as client:
            arguments = {
                "targetConversationId": "target",
                "content": SENT,
                "replyMode": "return_and_continue",
            }
            result = await call_tool(
                client, "ccweb_send_message", arguments, query="?sourceSessionId=sender"
            )
            assert not result.get("isError"), result
    finally:
        await store.dispose()
    await (await prepared(tmp_path / "floor.db")).dispose()
    opened = await floor.Floor.open(str(tmp_path / "floor.db"))
    try:
        sent = await opened.send("sender", "target", SENT)
    finally:
        await opened.close()

    written = rows(tmp_path / "floor.db")
    assert written == rows(tmp_path / "app.db")
    assert len(written["messages"]) == len(written["reply_requests"]) == len(written["runs"]) == 1
    with sqlite3.connect(tmp_path / "floor.db") as connection:
        ids = connection.execute(
            "SELECT m.id, q.request_id, r.id FROM messages m JOIN reply_requests q"
            " ON q.message_id = m.id JOIN runs r ON r.reply_request_id = q.request_id"
        ).fetchall()
    assert ids == [(sent["messageId"], sent["requestId"], sent["runId"])]


async def test_a_floor_round_trip_writes_the_rows_a_round_trip_through_the_app_writes(
    tmp_path: Path,
) -> None:
    """send → ``run.claim`` → ``run.complete``, as ``bench/roundtrip.py`` makes them: the
    output on the target, the reply returned to the source, the source's auto-run queued."""
    store = await prepared(tmp_path / "app.db")
    try:
        async with app_client(store) as client:
            arguments = {
                "targetConversationId": "target",
                "content": SENT,
                "replyMode": "return_and_continue",
            }
            sent = await call_tool(
                client, "ccweb_send_message", arguments, query="?sourceSessionId=sender"
            )
            assert not sent.get("isError"), sent
            claimed = await rpc_result(
                client, "run.claim", {"workerId": "w0", "kinds": ["cross_conversation"]}
            )
            completed = await rpc_result(
                client,
                "run.complete",
                {
                    "runId": claimed["run"]["id"],
                    "workerId": "w0",
                    "status": "completed",
                    "output": OUTPUT,
                },
            )
            assert [reply["status"] for reply in completed["replies"]] == ["returned"]
    finally:
        await store.dispose()
    await (await prepared(tmp_path / "floor.db")).dispose()
    opened = await floor.Floor.open(str(tmp_path / "floor.db"))
    try:
        await opened.send("sender", "target", SENT)
        run = await opened.claim("w0", "cross_conversation")
        assert run is not None
        assert await opened.claim("w1", "cross_conversation") is None
        done = await opened.complete(run["id"], "w0", OUTPUT)
    finally:
        await opened.close()

    assert [reply["status"] for reply in done["replies"]] == ["returned"]
    written = rows(tmp_path / "floor.db")
    assert written == rows(tmp_path / "app.db")
    assert [(row[2], row[3]) for row in written["runs"]] == [
        ("cross_conversation", "completed"),
        ("reply_auto_run", "queued"),
    ]
    assert [(row[1], row[3]) for row in written["messages"]] == [
        ("sender", "assistant"),
        ("target", "user"),
        ("target", "assistant"),
    ]


async def test_a_floor_completion_of_a_run_held_by_another_worker_writes_nothing(
    tmp_path: Path,
) -> None:
    await (await prepared(tmp_path / "floor.db")).dispose()
    opened = await floor.Floor.open(str(tmp_path / "floor.db"))
    try:
        await opened.send("sender", "target", SENT)
        run = await opened.claim("w0", "cross_conversation")
        assert run is not None
        before = rows(tmp_path / "floor.db")
        try:
            await opened.complete(run["id"], "w1", OUTPUT)
        except floor.NotCovered as error:
            assert "not held by 'w1'" in str(error)
        else:
            raise AssertionError("a run held by another worker was completed")
    finally:
        await opened.close()
    assert rows(tmp_path / "floor.db") == before


async def test_a_floor_send_to_a_busy_target_writes_nothing(tmp_path: Path) -> None:
    await (await prepared(tmp_path / "floor.db")).dispose()
    opened = await floor.Floor.open(str(tmp_path / "floor.db"))
    try:
        await opened.send("sender", "target", SENT)
        before = rows(tmp_path / "floor.db")
        try:
            await opened.send("sender", "target", SENT)
        except floor.TargetBusy as error:
            assert "busy" in str(error)
        else:
            raise AssertionError("a send to a busy target went through")
    finally:
        await opened.close()
    assert rows(tmp_path / "floor.db") == before


async def test_the_floor_list_reads_the_inputs_the_tool_answers(tmp_path: Path) -> None:
    size = 1_000
    store = await prepared(tmp_path / "floor.db", listed=size)
    try:
        async with app_client(store) as client:
            answer = await call_tool(
                client, "ccweb_list_user_inputs", query=f"?sourceSessionId=bench-{size}"
            )
    finally:
        await store.dispose()
    opened = await floor.Floor.open(str(tmp_path / "floor.db"))
    try:
        read = await opened.latest_inputs(f"bench-{size}")
    finally:
        await opened.close()

    answered = [item["messageId"] for item in answer["structuredContent"]["inputs"]]
    assert answered, answer
    assert len(read) == floor.FIRST_BATCH
    # The tool answers oldest first what its first read found newest first, and stops at the
    # input its budget cuts: every input it answers was read by that one statement.
    assert set(answered) <= {item["messageId"] for item in read}
    assert [item["seq"] for item in read] == sorted((item["seq"] for item in read), reverse=True)
