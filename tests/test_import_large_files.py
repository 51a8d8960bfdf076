"""Session files too large to read whole are imported a message at a time, into the same
database, with the same summary, as when they are read whole."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from ccweb_store.importer import console, large_sessions
from tests.mobility_data import fill_every_kind_of_row, raw_rows
from tests.test_importer import (
    dump,
    run_import,
    write_json,
    write_large_state,
    write_state,
)
from tests.test_mobility_export import as_read, export

Outcome = tuple[int, dict[str, Any], dict[str, list[dict[str, Any]]]]


def streamed_and_whole(
    state: Path, urls: tuple[str, str], monkeypatch: pytest.MonkeyPatch, *flags: str
) -> tuple[Outcome, Outcome]:
    """Import ``state`` into the first database with every session file streamed, and into
    the second with every file read whole: (exit code, summary, dump) of each."""
    with monkeypatch.context() as patched:
        patched.setattr(large_sessions, "STREAM_FROM_BYTES", 0)
        patched.setattr(large_sessions, "BATCH", 7)  # several batches per file
        code, summary, _ = run_import(state, urls[0], *flags)
    streamed = (code, summary, dump(urls[0]))
    code, summary, _ = run_import(state, urls[1], *flags)
    whole = (code, summary, dump(urls[1]))
    for outcome in (streamed, whole):  # each names its own database
        outcome[1].pop("database", None)
    return streamed, whole


def test_streamed_files_go_in_as_files_read_whole(
    database_url: str, fresh_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = write_large_state(write_state(tmp_path / "state"), sessions=4, messages=40)
    sessions = state / "sessions"
    # Columns after the messages, times taken from them, values kept as text.
    (sessions / "late.json").write_text(
        '{"messages": [{"role": "user", "content": "a\\u0000b", "timestamp": 1709287260000},'
        ' 17, {"role": "x", "content": {"o": NaN}}], "id": "late", "title": 5}',
        encoding="utf-8",
    )
    # Two messages with one id: the streamed insert breaks the key and the file goes in whole.
    twice = [{"id": "t-1", "role": "user", "content": f"m{i}"} for i in range(20)]
    write_json(sessions / "twice.json", {"id": "twice", "messages": twice})
    # An id another session holds, in a later batch.
    clash = [{"id": f"c-{i}", "role": "user", "content": f"m{i}"} for i in range(20)]
    clash[15]["id"] = "a-1"
    write_json(sessions / "clash.json", {"id": "clash", "messages": clash})
    (sessions / "broken.json").write_text('{"id": "broken", "messages": [1,', encoding="utf-8")

    streamed, whole = streamed_and_whole(state, (database_url, fresh_database_url), monkeypatch)

    assert streamed == whole
    code, summary, tables = streamed
    assert code == 1  # the broken file
    assert summary["sessions"]["imported"] == 2 + 4 + 3
    assert [s["reason"][:14] for s in summary["skipped"]] == [
        "not valid JSON",
        "message 1 is a",
    ]
    assert {m["id"] for m in tables["messages"] if m["session_id"] == "twice"} == {
        "t-1",
        *(f"twice:{i}" for i in range(1, 20)),
    }


def test_a_streamed_dry_run_counts_as_one_reading_files_whole(
    database_url: str, fresh_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = write_large_state(write_state(tmp_path / "state"), sessions=3, messages=30)
    twice = [{"id": "t-1", "role": "user", "content": "m"}, {"id": "t-1", "role": "user"}]
    write_json(state / "sessions" / "twice.json", {"id": "twice", "messages": twice})

    streamed, whole = streamed_and_whole(
        state, (database_url, fresh_database_url), monkeypatch, "--dry-run"
    )

    assert streamed == whole
    assert streamed[1]["messages"]["imported"] == 8 + 3 * 30 + 2
    # req-1 and req-2 (the large state's reply file), from the messages carrying them.
    assert streamed[1]["replies"]["originalRequestRecovered"] == 2


def test_a_streamed_file_imported_again_is_compared_whole_and_unchanged(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = write_large_state(tmp_path / "state", sessions=2, messages=30)
    monkeypatch.setattr(large_sessions, "STREAM_FROM_BYTES", 0)
    run_import(state, database_url)
    path = state / "sessions" / "conv-001.json"
    session = json.loads(path.read_text(encoding="utf-8"))
    session["messages"].append({"id": "new", "role": "user", "content": "appended"})
    write_json(path, session)

    code, summary, _ = run_import(state, database_url)

    assert code == 0
    assert summary["sessions"] == {"imported": 0, "updated": 1, "unchanged": 1, "skipped": 0}
    assert summary["messages"]["imported"] == 1
    rows = [m for m in dump(database_url)["messages"] if m["session_id"] == "conv-001"]
    assert max(rows, key=lambda m: m["seq"])["id"] == "new"


def test_an_export_imported_streamed_gives_the_same_conversations(
    database_url: str, fresh_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(fill_every_kind_of_row(database_url))
    export(database_url, tmp_path / "out")
    monkeypatch.setattr(large_sessions, "STREAM_FROM_BYTES", 0)
    monkeypatch.setattr(large_sessions, "BATCH", 3)

    code, summary, _ = run_import(tmp_path / "out", fresh_database_url)

    assert code == 0, summary["skipped"]
    before = as_read(asyncio.run(raw_rows(database_url)))
    after = as_read(asyncio.run(raw_rows(fresh_database_url)))
    for table in ("sessions", "messages"):
        assert after[table] == before[table], table


def test_a_streamed_file_reports_how_far_its_messages_got(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = write_large_state(tmp_path / "state", sessions=1, messages=40)
    monkeypatch.setattr(large_sessions, "STREAM_FROM_BYTES", 0)
    monkeypatch.setattr(large_sessions, "BATCH", 7)
    monkeypatch.setattr(console, "PLAIN_EVERY", 10)

    code, _, stderr = run_import(state, database_url)

    assert code == 0
    path = state / "sessions" / "conv-000.json"
    # After the batches that passed 10, 20 and 30 messages; then the file's own line.
    assert [line.strip() for line in stderr.splitlines() if "messages" in line] == [
        f"{path}: {done} of 40 messages" for done in (14, 21, 35)
    ]
    assert f"[1/2] {path}: imported" in stderr
