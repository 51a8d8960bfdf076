"""``ccweb-store export-json``: the database back in cc-web's layout, round trips both ways."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from bench.legacy_state import generate_state
from ccweb_store.domain.timestamps import exact_iso
from ccweb_store.importer.legacy_json import exact_timestamp, parse_timestamp
from tests.cli_support import run_cli
from tests.mobility_data import fill_every_kind_of_row, raw_rows
from tests.test_importer import write_state

#: The keys an export adds to a session file that lacked them (docs/export.md).
ADDED_SESSION_KEYS = ("createdAt", "updatedAt")


def export(database_url: str, directory: Path, *flags: str) -> dict[str, Any]:
    result = run_cli(
        "export-json", str(directory), "--json", "--database-url", database_url, *flags
    )
    assert result.returncode == 0, result.stderr
    summary: dict[str, Any] = json.loads(result.stdout)
    return summary


def import_state(database_url: str, directory: Path) -> None:
    result = run_cli("import-json", str(directory), "--json", "--database-url", database_url)
    assert result.returncode == 0, result.stderr


def read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def replies_by_id(directory: Path) -> dict[str, Any]:
    document = read(directory / "config" / "cross-conversation-replies.json")
    if isinstance(document, dict):
        document = [{"requestId": key, **entry} for key, entry in document.items()]
    return {entry["requestId"]: entry for entry in document}


def assert_exported_as_imported(source: Path, exported: Path) -> None:
    """Every session file and reply entry of ``source`` comes back, field for field, but the
    differences docs/export.md allows."""
    names = sorted(path.name for path in (source / "sessions").glob("*.json"))
    assert sorted(path.name for path in (exported / "sessions").glob("*.json")) == names
    for name in names:
        original, written = read(source / "sessions" / name), read(exported / "sessions" / name)
        for key in ADDED_SESSION_KEYS:
            if key not in original:
                written.pop(key)
        assert written == original, name
    assert replies_by_id(exported) == replies_by_id(source)


@pytest.mark.parametrize("reply_shape", ["list", "keyed"])
def test_an_imported_state_exports_every_field_of_its_files_unknown_keys_included(
    database_url: str, tmp_path: Path, reply_shape: str
) -> None:
    source = write_state(tmp_path / "state", reply_shape=reply_shape)
    import_state(database_url, source)

    summary = export(database_url, tmp_path / "out")

    assert summary["sessions"] == 2 and summary["messages"] == 8 and summary["replies"] == 3
    assert_exported_as_imported(source, tmp_path / "out")


def test_the_generated_legacy_state_with_every_reply_state_exports_as_it_was(
    database_url: str, tmp_path: Path
) -> None:
    source = tmp_path / "state"
    generate_state(source, 6, 40, every_reply_state=True)
    import_state(database_url, source)

    export(database_url, tmp_path / "out")

    assert_exported_as_imported(source, tmp_path / "out")


def as_read(tables: dict[str, list[tuple[Any, ...]]]) -> dict[str, list[tuple[Any, ...]]]:
    """The rows as the store reads them: a JSON ``null`` is the SQL ``NULL`` it reads as (the
    importer writes the one where the service wrote the other)."""
    return {
        name: [tuple(None if value == ("json", None) else value for value in row) for row in rows]
        for name, rows in tables.items()
    }


def test_an_export_imported_into_an_empty_database_gives_the_same_conversations_and_replies(
    database_url: str, tmp_path: Path
) -> None:
    asyncio.run(fill_every_kind_of_row(database_url))
    export(database_url, tmp_path / "out")
    again = f"sqlite+aiosqlite:///{tmp_path / 'again.db'}"

    import_state(again, tmp_path / "out")

    before, after = (
        as_read(asyncio.run(raw_rows(database_url))),
        as_read(asyncio.run(raw_rows(again))),
    )
    for table in ("sessions", "messages"):
        assert after[table] == before[table], table
    # A failure the source was not yet told of is imported settled, as every failure of
    # cc-web's (docs/export.md): its returned_at and the "$absent" note are the difference.
    settled = {row[0]: row for row in after["reply_requests"]}
    for row in before["reply_requests"]:
        if row[6] == "failed" and row[12] is None:
            assert settled[row[0]][12] is not None
            continue
        assert settled[row[0]] == row


def test_one_conversation_is_exported_with_the_replies_it_sent_or_received(
    database_url: str, tmp_path: Path
) -> None:
    source = write_state(tmp_path / "state")
    import_state(database_url, source)

    summary = export(database_url, tmp_path / "out", "--conversation", "beta")

    assert summary == {
        "directory": str(tmp_path / "out"),
        "sessions": 1,
        "messages": 2,
        "replies": 2,
    }
    assert [p.name for p in (tmp_path / "out" / "sessions").iterdir()] == ["beta.json"]
    assert set(replies_by_id(tmp_path / "out")) == {"req-recover", "req-ready"}
    unknown = run_cli(
        "export-json", str(tmp_path / "x"), "--conversation", "nope", "--database-url", database_url
    )
    assert unknown.returncode == 3 and "no conversation 'nope'" in unknown.stderr


def test_a_time_finer_than_a_millisecond_is_written_so_an_import_reads_it_back_exactly() -> None:
    time = parse_timestamp("2024-03-01T10:00:00.123456Z")
    assert time is not None
    assert exact_iso(time) == "2024-03-01T10:00:00.123456Z"
    assert exact_timestamp("2024-03-01T10:00:00.123456Z", time)
    whole = parse_timestamp("2024-03-01T10:00:00.123Z")
    assert whole is not None and exact_iso(whole) == "2024-03-01T10:00:00.123Z"


def test_values_the_importer_kept_as_text_are_exported_as_the_values_they_stand_for(
    database_url: str, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    (state / "sessions").mkdir(parents=True)
    source = (
        '{"id": "odd", "title": "t\\u0000nul", "createdAt": "2024-03-01T10:00:00.000Z",'
        ' "updatedAt": "2024-03-01T10:00:00.000Z", "huge": 18446744073709551616,'
        ' "messages": [{"id": "m1", "role": "user", "content": "a\\u0000b",'
        ' "timestamp": "2024-03-01T10:00:00.000Z",'
        ' "metadata": {"nan": NaN, "deep": [[[1]]], "lone": "\\ud800"}}]}'
    )
    (state / "sessions" / "odd.json").write_text(source, encoding="utf-8")
    result = run_cli("import-json", str(state), "--json", "--database-url", database_url)
    assert json.loads(result.stdout)["keptAsText"]["count"] > 0

    export(database_url, tmp_path / "out")

    written = (tmp_path / "out" / "sessions" / "odd.json").read_text(encoding="utf-8")
    assert json.dumps(json.loads(written), sort_keys=True) == json.dumps(
        json.loads(source), sort_keys=True
    )
