"""``import-json`` of records holding values no column holds as they are (an integer beyond 64
bits, NaN, Infinity, nesting beyond 64 levels, lone surrogates, NUL), on both engines: the
rest of the record goes in, each such value is kept as its JSON text and reported, the
conversation reads back over HTTP, a dry run reports the same, a second run changes nothing.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from ccweb_store.domain import json_values
from ccweb_store.domain.json_values import KEPT_AS_TEXT, MAX_DEPTH, find_problem
from ccweb_store.domain.storable_json import NUL_IN_KEY, NUL_IN_TEXT, storable, surely_storable
from ccweb_store.importer.console import KEPT_SHOWN
from ccweb_store.importer.legacy_json import TOO_DEEP_TO_READ, LegacyFileError, load_screened_json
from ccweb_store.importer.legacy_messages import normalise_message
from ccweb_store.importer.legacy_replies import normalise_reply
from ccweb_store.importer.legacy_sessions import read_session_file
from ccweb_store.importer.load import import_state
from ccweb_store.store.db import create_engine
from ccweb_store.store.uow import Store
from tests.cli_support import run_cli
from tests.http_client import app_client, rpc_result
from tests.json_support import nested, same

INF = "__1e400__"  # written into the file as the literal 1e400, which json.loads reads as inf


def message(message_id: str, content: Any = "text", **fields: Any) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "content": content, **fields}


#: (the message, the metadata its row must read back to once kept values are restored,
#: the places reported) — the places of a message whose own metadata is the base.
POISON_MESSAGES: list[tuple[dict[str, Any], dict[str, Any], list[str]]] = [
    (message("m-fine", metadata={"ok": [1, 2.5, "x"]}), {"ok": [1, 2.5, "x"]}, []),
    (message("m-int", metadata={"x": 2**64}), {"x": 2**64}, ["metadata.x"]),
    (message("m-neg", metadata={"x": -(2**63) - 1}), {"x": -(2**63) - 1}, ["metadata.x"]),
    (message("m-inf", metadata={"x": INF}), {"x": math.inf}, ["metadata.x"]),
    (message("m-nan", metadata={"x": math.nan}), {"x": math.nan}, ["metadata.x"]),
    (
        message("m-deep", metadata={"x": nested(300)}),
        {"x": nested(300)},
        ["metadata.x" + ".a" * (MAX_DEPTH - 2)],
    ),
    (message("m-lone", metadata={"x": "a\ud800b"}), {"x": "a\ud800b"}, ["metadata.x"]),
    (message("m-key", metadata={"x": {"\udc00k": 1}}), {"x": {"\udc00k": 1}}, ["metadata.x"]),
    (
        message("m-text", "lone \ud800 here"),
        {"legacy": {"content": "lone \ud800 here"}},
        ["content", "metadata.legacy.content"],
    ),
    (
        message("m-nul", "a\x00b"),
        {"legacy": {"content": "a\x00b"}},
        ["content", "metadata.legacy.content"],
    ),
    (
        message("m-blocks", [{"type": "text", "text": "nul\x00"}]),
        {"contentBlocks": [{"type": "text", "text": "nul\x00"}]},
        ["content", "metadata.contentBlocks[0].text"],
    ),
    (
        message("m-two", metadata={"x": math.nan, "y": [2**64]}),
        {"x": math.nan, "y": [2**64]},
        ["metadata.x", "metadata.y[0]"],
    ),
]
CONTENT = {"m-text": "lone \ufffd here", "m-nul": "a\ufffdb", "m-blocks": "nul\ufffd"}
POISON_REPLY = {
    "requestId": "r-poison",
    "sourceConversationId": "fine",
    "targetConversationId": "poison",
    "status": "ready",
    "replyText": "done\x00",
    "hopCount": 2**40,
    "trace": {"big": 2**70, "deep": nested(100)},
}


def write_poison_state(root: Path) -> Path:
    """A cc-web state: ``poison`` holds every kind of value, ``fine`` none, ``deep`` cannot be
    read at all (nested 5,000 levels), and a reply entry holds some too."""
    sessions = root / "sessions"
    sessions.mkdir(parents=True)
    poison = {
        "id": "poison",
        "title": "nul\x00title",
        "big": 2**64,
        "messages": [raw for raw, _, _ in POISON_MESSAGES],
    }
    text = json.dumps(poison).replace(json.dumps(INF), "1e400")
    (sessions / "poison.json").write_text(text, encoding="utf-8")
    fine = {"id": "fine", "title": "Fine", "messages": [message("f-1", "hello")]}
    (sessions / "fine.json").write_text(json.dumps(fine), encoding="utf-8")
    deep = '{"id": "deep", "messages": [' + "[" * 5000 + "]" * 5000 + "]}"
    (sessions / "deep.json").write_text(deep, encoding="utf-8")
    (root / "config").mkdir()
    replies = json.dumps([POISON_REPLY])
    (root / "config" / "cross-conversation-replies.json").write_text(replies, encoding="utf-8")
    return root


def reported(summary: dict[str, Any]) -> set[tuple[str, str, str]]:
    """(file name, record, path) of every value the summary lists as kept or given U+FFFD."""
    return {
        (Path(item["file"]).name, item["record"], item["path"])
        for item in summary["keptAsText"]["values"]
    }


EXPECTED_REPORT = {
    ("poison.json", "session poison", "title"),
    ("poison.json", "session poison", "extra.title"),
    ("poison.json", "session poison", "extra.big"),
    *(
        ("poison.json", f"message {index} (id {raw['id']})", path)
        for index, (raw, _, paths) in enumerate(POISON_MESSAGES)
        for path in paths
    ),
    ("cross-conversation-replies.json", "reply 0 (request r-poison)", "replyText"),
    ("cross-conversation-replies.json", "reply 0 (request r-poison)", "extra.replyText"),
    ("cross-conversation-replies.json", "reply 0 (request r-poison)", "extra.trace.big"),
    (
        "cross-conversation-replies.json",
        "reply 0 (request r-poison)",
        "extra.trace.deep" + ".a" * (MAX_DEPTH - 3),
    ),
}


async def stored_extras(database_url: str) -> dict[str, Any]:
    """``sessions.extra`` and ``reply_requests.extra`` as the columns hold them."""
    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:
            sessions = await connection.execute(sa.text("SELECT id, extra FROM sessions"))
            replies = await connection.execute(
                sa.text("SELECT request_id, hop_count, extra FROM reply_requests")
            )
            return {
                "sessions": {row.id: row.extra for row in sessions},
                "replies": {row.request_id: (row.hop_count, row.extra) for row in replies},
            }
    finally:
        await engine.dispose()


def as_value(column: Any) -> Any:
    return json.loads(column) if isinstance(column, str) else column


async def test_a_poisoned_state_imports_with_every_bad_value_kept_as_text_and_reads_back(
    store: Store, tmp_path: Path
) -> None:
    state = write_poison_state(tmp_path / "state")

    dry = (await import_state(store, state, dry_run=True)).as_dict()
    real = (await import_state(store, state)).as_dict()
    again = (await import_state(store, state)).as_dict()

    assert reported(real) == EXPECTED_REPORT
    assert real["keptAsText"]["count"] == len(EXPECTED_REPORT)
    assert dry["keptAsText"] == real["keptAsText"] == again["keptAsText"]
    assert dry["skipped"] == real["skipped"] == again["skipped"]
    assert [(Path(s["path"]).name, s["reason"]) for s in real["skipped"]] == [
        ("deep.json", TOO_DEEP_TO_READ)
    ]
    assert "nested too deep to read" in TOO_DEEP_TO_READ
    assert real["sessions"] == {"imported": 2, "updated": 0, "unchanged": 0, "skipped": 1}
    assert real["messages"]["imported"] == len(POISON_MESSAGES) + 1
    assert (dry["sessions"], dry["messages"]["imported"]) == (
        real["sessions"],
        real["messages"]["imported"],
    )
    for counts in ("sessions", "messages", "replies"):
        assert again[counts]["imported"] == again[counts]["updated"] == 0, again
    assert again["messages"]["unchanged"] == len(POISON_MESSAGES) + 1
    assert again["replies"]["unchanged"] == 1

    async with app_client(store) as client:
        listed = await rpc_result(client, "message.list", {"sessionId": "poison", "limit": 500})
        fine = await rpc_result(client, "message.list", {"sessionId": "fine"})
        replies = await rpc_result(client, "reply.list", {})
        session = await rpc_result(client, "session.get", {"id": "poison"})
    rows = {row["id"]: row for row in listed["messages"]}
    assert [row["content"] for row in fine["messages"]] == ["hello"]
    assert [reply["requestId"] for reply in replies["replies"]] == ["r-poison"]
    assert replies["replies"][0]["replyText"] == "done\ufffd"
    assert session["title"] == "nul\ufffdtitle"
    for raw, source, _ in POISON_MESSAGES:
        row = rows[raw["id"]]
        assert find_problem(row["metadata"], "metadata") is None
        assert same(json_values.restored(row["metadata"]), source), raw["id"]
        assert row["content"] == CONTENT.get(raw["id"], raw["content"])

    extras = await stored_extras(store.settings.database_url)
    session_extra = as_value(extras["sessions"]["poison"])
    assert session_extra["big"] == {KEPT_AS_TEXT: str(2**64)}
    assert json_values.restored(session_extra) == {"title": "nul\x00title", "big": 2**64}
    hop_count, reply_extra = extras["replies"]["r-poison"]
    reply_extra = as_value(reply_extra)
    assert find_problem(reply_extra, "extra") is None
    assert hop_count == 0  # beyond the column's 32 bits: kept in extra instead
    assert json_values.restored(reply_extra) == {
        "replyText": "done\x00",
        "hopCount": 2**40,
        "trace": POISON_REPLY["trace"],
        "$absent": ["createdAt", "sourceAutoRun", "sourceTitle", "targetTitle"],
    }
    # The entry had no titles: its conversations' are filled in (U+FFFD where poison's NUL was).
    assert [(r["sourceTitle"], r["targetTitle"]) for r in replies["replies"]] == [
        ("Fine", "nul\ufffdtitle")
    ]


def test_the_command_reports_each_kept_value_and_a_dry_run_reports_the_same(
    database_url: str, tmp_path: Path
) -> None:
    state = write_poison_state(tmp_path / "state")
    flags = ["--database-url", database_url]

    dry = run_cli("import-json", str(state), "--dry-run", "--json", *flags)
    real = run_cli("import-json", str(state), *flags)
    again = run_cli("import-json", str(state), "--json", *flags)

    assert (dry.returncode, real.returncode, again.returncode) == (1, 1, 1)  # deep.json
    dry_summary, again_summary = json.loads(dry.stdout), json.loads(again.stdout)
    assert reported(dry_summary) == reported(again_summary) == EXPECTED_REPORT
    assert again_summary["messages"]["imported"] == again_summary["messages"]["updated"] == 0
    poison = state / "sessions" / "poison.json"
    assert f"values kept as text (or given U+FFFD): {len(EXPECTED_REPORT)}" in real.stdout
    assert (
        f"{poison}: message 1 (id m-int): metadata.x kept as text: the integer "
        f"{2**64} is outside the signed 64-bit range"
    ) in real.stdout
    shown = len(EXPECTED_REPORT) - KEPT_SHOWN
    assert f"… and {shown} more (--json lists every one)" in real.stdout
    assert f"skipped {state / 'sessions' / 'deep.json'}: nested too deep to read" in real.stderr


def test_a_file_nested_just_short_of_the_recursion_limit_is_skipped_as_too_deep(
    tmp_path: Path,
) -> None:
    """``json.loads`` may read it (depending on how deep the stack already is), but it cannot
    be written back as text where it sits: either way the file is reported, not a crash."""
    path = tmp_path / "near.json"
    path.write_text('{"id": "near", "x": ' + "[" * 990 + "]" * 990 + ', "messages": []}')

    with pytest.raises(LegacyFileError) as caught:
        read_session_file(path)

    assert caught.value.reason == TOO_DEEP_TO_READ


def test_a_number_of_more_digits_than_python_reads_makes_a_broken_file(tmp_path: Path) -> None:
    path = tmp_path / "digits.json"
    path.write_text('{"id": "digits", "x": ' + "9" * 5000 + ', "messages": []}')

    with pytest.raises(LegacyFileError) as caught:
        read_session_file(path)

    assert caught.value.reason.startswith("a number cannot be read: Exceeds the limit")


def test_a_key_that_is_not_valid_unicode_keeps_the_whole_metadata_as_text_even_with_a_new_id() -> (
    None
):
    raw = {"id": "m-1", "role": "user", "content": "x", "\ud800": 1}

    normalised = normalise_message(4, raw)
    renamed = normalised.metadata_with_replaced_id()

    assert json_values.kept_text(normalised.metadata) is not None
    assert normalised.notes == (
        ("metadata", "kept as text: the key '\\ud800' is not valid Unicode text"),
    )
    assert json_values.restored(renamed) == {
        "\ud800": 1,
        "legacyFields": ["\ud800"],
        "legacy": {"id": "m-1"},
    }


def test_a_message_id_no_column_holds_is_replaced_by_its_derived_id_and_kept_as_text() -> None:
    normalised = normalise_message(2, {"id": "m\x00", "role": "user", "content": "x"})

    assert normalised.wanted_id is None
    assert normalised.metadata == {"legacy": {"id": {KEPT_AS_TEXT: '"m\\u0000"'}}}
    assert normalised.notes == (("metadata.legacy.id", f"kept as text: {NUL_IN_TEXT}"),)


def test_a_reply_entry_with_a_bad_key_keeps_its_extra_whole_as_text_with_the_absent_fields() -> (
    None
):
    entry = {
        "requestId": "r",
        "sourceConversationId": "a",
        "targetConversationId": "b",
        "status": "waiting",
        "\udc00": 1,
    }

    reply = normalise_reply(entry, label="reply 0")
    extra = reply.extra(reply.columns)

    assert reply.label == "reply 0"
    assert json_values.kept_text(extra) is not None
    assert json_values.restored(extra) == {
        "\udc00": 1,
        "$absent": ["createdAt", "hopCount", "sourceAutoRun"],
    }


@pytest.mark.parametrize(
    ("value", "path", "reason"),
    [
        ({"k": "a\x00"}, "v.k", NUL_IN_TEXT),
        ({"k": {"a\x00": 1}}, "v.k", NUL_IN_KEY),
        ({"a key": [2**64]}, 'v["a key"][0]', "the integer 18446744073709551616 is outside"),
        ({"k": math.nan}, "v.k", "nan is not a finite number"),
        ({"k": nested(MAX_DEPTH)}, "v.k" + ".a" * (MAX_DEPTH - 2), "nested deeper than 64"),
    ],
)
def test_storable_says_where_each_kept_part_was_and_why(value: Any, path: str, reason: str) -> None:
    kept, places = storable(value, "v", nul=True)

    assert [place for place, _ in places] == [path]
    assert places[0][1].startswith(reason)
    assert find_problem(kept, "v") is None
    assert same(json_values.restored(kept), value)
    assert "\x00" not in json.dumps(kept, ensure_ascii=False)


def test_storable_leaves_a_value_within_the_rule_as_it_is() -> None:
    value = {"a": [1, 2.5, "é", None, True, {"b": nested(MAX_DEPTH - 3)}], "nul": "\\u0000"}

    kept, places = storable(value, "v", nul=True)

    assert kept is value
    assert places == []


def test_a_reason_naming_a_number_of_hundreds_of_digits_is_cut() -> None:
    _, places = storable({"k": 10**400}, "v")

    assert len(places[0][1]) <= 160
    assert places[0][1].endswith("…")
    assert re.match(r"the integer 1000", places[0][1])


def test_importing_the_poisoned_state_through_the_command_leaves_no_row_breaking_the_rule(
    database_url: str, tmp_path: Path
) -> None:
    """Every JSON column of every imported row keeps the rule (read as the database holds it)."""
    state = write_poison_state(tmp_path / "state")
    assert run_cli("import-json", str(state), "--database-url", database_url).returncode == 1

    async def columns() -> list[Any]:
        engine = create_engine(database_url)
        postgres = database_url.startswith("postgresql")
        text = "::text" if postgres else ""
        try:
            async with engine.connect() as connection:
                found: list[Any] = []
                for table, column in (
                    ("messages", "metadata"),
                    ("sessions", "extra"),
                    ("reply_requests", "extra"),
                ):
                    rows = await connection.execute(
                        sa.text(f"SELECT {column}{text} FROM {table} WHERE {column} IS NOT NULL")
                    )
                    found += [as_value(row[0]) for row in rows]
                return found
        finally:
            await engine.dispose()

    values = asyncio.run(columns())
    assert len(values) >= len(POISON_MESSAGES)
    assert all(find_problem(value, "column") is None for value in values)


JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([2**53, 2**63, -(2**63) - 1, 2**64])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
    | st.sampled_from(["\x00", "a\ud800", "\udfff", "🙂"])
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text() | st.sampled_from(["\ud800", "\x00"]), children, max_size=4)
    ),
    max_leaves=30,
) | st.integers(min_value=MAX_DEPTH - 3, max_value=MAX_DEPTH + 3).map(nested)


@given(JSON_VALUES)
def test_the_quick_check_passes_only_values_that_keep_the_rule_and_hold_no_nul(value: Any) -> None:
    """``surely_storable`` (for values without NaN or Infinity) may send a fine value to the
    full check, never let a bad one through."""
    if surely_storable(value):
        assert find_problem(value, "v") is None
        assert "\x00" not in json.dumps(value, ensure_ascii=False)
    kept, _ = storable(value, "v", nul=True)
    assert find_problem(kept, "v") is None
    assert same(json_values.restored(kept), value)


@pytest.mark.parametrize(
    ("text", "finite"),
    [
        ('{"a": [1, 2.5, "NaN", "Infinity"]}', True),
        ('{"a": NaN}', False),
        ('{"a": -Infinity}', False),
        ('{"a": 1e400}', False),
        ('{"a": -1' + "0" * 400 + ".0}", False),
        ('{"a": 1' + "0" * 400 + "}", True),  # an integer: the quick check refuses it instead
    ],
)
def test_a_file_says_whether_it_holds_nan_or_infinity(
    tmp_path: Path, text: str, finite: bool
) -> None:
    path = tmp_path / "value.json"
    path.write_text(text)

    assert load_screened_json(path)[1] is finite
