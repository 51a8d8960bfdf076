"""``ccweb-store repair-json`` on both engines: rows written before the stored-value rule (put
in here with raw SQL, as an older version or a hand could write them) read over HTTP, are
rewritten with each offending part kept as its JSON text, losslessly, and a second run (or a
dry run) writes nothing.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from ccweb_store.cli import app
from ccweb_store.config import Settings
from ccweb_store.domain import json_values
from ccweb_store.domain.json_values import KEPT_AS_TEXT, MAX_DEPTH, find_problem
from ccweb_store.services.json_repair import (
    NOT_JSON,
    TOO_DEEP_TO_READ,
    JsonColumn,
    json_columns,
    repair_json,
    repaired_value,
)
from ccweb_store.store.db import create_engine
from ccweb_store.store.uow import Store
from tests.cli_support import run_cli
from tests.http_client import app_client, rpc_result
from tests.json_support import same


def nested_text(levels: int) -> str:
    return '{"a": ' * levels + "1" + "}" * levels


def arrays_text(levels: int) -> str:
    return "[" * levels + "]" * levels


#: Nested beyond Python's recursion limit (``json.loads`` cannot read it back) and within
#: what each engine's JSON parser takes: SQLite's stops at 2,000 levels, and the index on
#: ``messages.metadata`` (``json_extract``) parses every metadata written.
UNREADABLE = {"sqlite": arrays_text(1500), "postgres": arrays_text(2000)}

#: Per engine, (message id, its metadata as raw JSON text, whether repair-json rewrites it).
#: SQLite's text holds whatever ``json.dumps`` wrote, but not NaN in ``messages.metadata``
#: (its index's ``json_extract`` refuses it); PostgreSQL's jsonb holds deep nesting and big
#: numbers (a float such as 1e20 is kept as the integer 100000000000000000000, which is how
#: jsonb stores a large float, so it is not repaired) but never NaN or a lone surrogate.
MESSAGES: dict[str, list[tuple[str, str, bool]]] = {
    "sqlite": [
        ("m-fine", '{"ok": [1, 2.5, "x"]}', False),
        ("m-big", '{"x": 18446744073709551616, "y": -9223372036854775809}', True),
        ("m-lone", '{"x": "a\\ud800b", "\\udc00": 1}', True),
        ("m-deep", f'{{"x": {nested_text(300)}}}', True),
        ("m-unreadable", f'{{"x": {UNREADABLE["sqlite"]}}}', True),
    ],
    "postgres": [
        ("m-fine", '{"ok": [1, 2.5, "x"]}', False),
        ("m-float", '{"x": 1e20, "y": 18446744073709551616}', False),
        ("m-deep", f'{{"x": {nested_text(300)}}}', True),
        ("m-unreadable", f'{{"x": {UNREADABLE["postgres"]}}}', True),
    ],
}
SESSION_EXTRA = {
    "sqlite": ('{"n": NaN, "inf": Infinity, "i": 18446744073709551616}', True),
    "postgres": ('{"f": 1e20, "i": 18446744073709551616}', False),
}
REPLY_EXTRA = {
    "sqlite": ('{"n": -Infinity, "ok": "fine"}', True),
    "postgres": (f'{{"deep": {nested_text(100)}}}', True),
}


def engine_of(database_url: str) -> str:
    return "postgres" if database_url.startswith("postgresql") else "sqlite"


async def execute(database_url: str, statements: list[tuple[str, dict[str, Any]]]) -> None:
    engine = create_engine(database_url)
    try:
        async with engine.begin() as connection:
            for statement, params in statements:
                await connection.execute(sa.text(statement), params)
    finally:
        await engine.dispose()


def insert_poison(database_url: str) -> None:
    """The poison rows of this engine, written as raw JSON text."""
    kind = engine_of(database_url)
    value = "CAST(:value AS jsonb)" if kind == "postgres" else ":value"
    statements = [
        (
            f"INSERT INTO sessions (id, extra) VALUES ('poison', {value})",
            {"value": SESSION_EXTRA[kind][0]},
        ),
        (f"INSERT INTO sessions (id, extra) VALUES ('other', {value})", {"value": '{"k": 1}'}),
        (
            "INSERT INTO reply_requests (request_id, source_conversation_id, "
            f"target_conversation_id, status, extra) VALUES ('r-poison', 'other', 'poison', "
            f"'waiting', {value})",
            {"value": REPLY_EXTRA[kind][0]},
        ),
    ]
    for seq, (message_id, text, _) in enumerate(MESSAGES[kind], 1):
        statements.append(
            (
                "INSERT INTO messages (id, session_id, seq, role, content, metadata) "
                f"VALUES (:id, 'poison', :seq, 'user', 'x', {value})",
                {"id": message_id, "seq": seq, "value": text},
            )
        )
    asyncio.run(execute(database_url, statements))


async def _stored(database_url: str) -> dict[tuple[str, str], str]:
    """Every JSON column's text as the database holds it, by (column, row id)."""
    engine = create_engine(database_url)
    cast = "::text" if engine.dialect.name == "postgresql" else ""
    found: dict[tuple[str, str], str] = {}
    try:
        async with engine.connect() as connection:
            for column in json_columns():
                rows = await connection.execute(
                    sa.text(
                        f"SELECT {column.key}, {column.column}{cast} FROM {column.table} "
                        f"WHERE {column.column} IS NOT NULL"
                    )
                )
                found.update({(column.name, row[0]): row[1] for row in rows})
    finally:
        await engine.dispose()
    return found


def stored(database_url: str) -> dict[tuple[str, str], str]:
    return asyncio.run(_stored(database_url))


def expected_rewrites(database_url: str) -> set[tuple[str, str]]:
    kind = engine_of(database_url)
    rewritten = {("messages.metadata", mid) for mid, _, bad in MESSAGES[kind] if bad}
    if SESSION_EXTRA[kind][1]:
        rewritten.add(("sessions.extra", "poison"))
    if REPLY_EXTRA[kind][1]:
        rewritten.add(("reply_requests.extra", "r-poison"))
    return rewritten


async def list_messages(database_url: str, session_id: str) -> list[dict[str, Any]]:
    store = Store.from_settings(Settings(database_url=database_url, token=None))
    try:
        async with app_client(store) as client:
            listed = await rpc_result(client, "message.list", {"sessionId": session_id})
            replies = await rpc_result(client, "reply.list", {})
        assert [reply["requestId"] for reply in replies["replies"]] == ["r-poison"]
        messages: list[dict[str, Any]] = listed["messages"]
        return messages
    finally:
        await store.dispose()


def test_repair_json_rewrites_every_poison_row_losslessly_and_a_second_run_writes_nothing(
    database_url: str,
) -> None:
    insert_poison(database_url)
    kind = engine_of(database_url)
    before = stored(database_url)
    flags = ["--database-url", database_url]

    listed = asyncio.run(list_messages(database_url, "poison"))  # reads already answer
    assert [m["id"] for m in listed] == [mid for mid, _, _ in MESSAGES[kind]]
    assert all(find_problem(m["metadata"], "metadata") is None for m in listed)

    dry = run_cli("repair-json", "--dry-run", "--json", *flags)
    assert dry.returncode == 0, dry.stderr
    assert stored(database_url) == before  # a dry run writes nothing
    found = json.loads(dry.stdout)
    assert {(f"{r['table']}.{r['column']}", r["id"]) for r in found["rows"]} == (
        expected_rewrites(database_url)
    )

    real = run_cli("repair-json", *flags)
    assert real.returncode == 0, real.stderr
    after = stored(database_url)
    rewritten = {place for place in before if after[place] != before[place]}
    assert rewritten == expected_rewrites(database_url)
    assert f"{len(rewritten)} row(s) rewritten" in real.stdout
    assert "repair-json: messages.metadata: " in real.stderr  # a progress line per batch
    assert "messages.metadata m-deep: metadata.x.a.a" in real.stdout
    for place in rewritten:
        value = json.loads(after[place])
        assert repaired_value(after[place], "v", numeric_numbers=kind == "postgres") is None
        assert find_problem(value, "v") is None, place
        if place[1] == "m-unreadable":  # kept whole: the text is the stored text
            assert value == {KEPT_AS_TEXT: before[place]}
        else:
            assert same(json_values.restored(value), json.loads(before[place])), place

    again = run_cli("repair-json", "--json", *flags)
    assert json.loads(again.stdout)["rowsRewritten"] == 0
    assert json.loads(again.stdout)["rows"] == []
    assert stored(database_url) == after

    listed = asyncio.run(list_messages(database_url, "poison"))
    by_id = {m["id"]: m for m in listed}
    assert by_id["m-deep"]["metadata"] == json.loads(after["messages.metadata", "m-deep"])


def test_the_human_output_names_the_table_the_row_and_the_path(database_url: str) -> None:
    insert_poison(database_url)

    result = CliRunner().invoke(app, ["repair-json", "--dry-run", "--database-url", database_url])

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    deep = "messages.metadata m-deep: metadata.x" + ".a" * (MAX_DEPTH - 2)
    assert f"{deep} kept as text: nested deeper than 64 levels of arrays and objects" in lines
    assert f"messages.metadata m-unreadable: metadata kept as text: {TOO_DEEP_TO_READ}" in lines
    count = len(expected_rewrites(database_url))
    assert lines[-1] == f"dry run (nothing written): {count} row(s) to rewrite"


async def test_rows_are_read_in_batches_by_primary_key_and_each_one_is_rewritten(
    store: Store,
) -> None:
    metadata = [f'{{"i": {i}, "big": {2**64 + i}}}' for i in range(7)]
    if store.dialect == "postgresql":  # jsonb keeps big numbers: make them too deep instead
        metadata = [f'{{"i": {i}, "deep": {nested_text(70)}}}' for i in range(7)]
    value = "CAST(:value AS jsonb)" if store.dialect == "postgresql" else ":value"
    statements = [("INSERT INTO sessions (id) VALUES ('batched')", {})]
    statements += [
        (
            "INSERT INTO messages (id, session_id, seq, role, content, metadata) "
            f"VALUES (:id, 'batched', :seq, 'user', 'x', {value})",
            {"id": f"m-{i}", "seq": i + 1, "value": text},
        )
        for i, text in enumerate(metadata)
    ]
    await _execute_async(store, statements)
    batches: list[tuple[str, int, int]] = []

    summary = await repair_json(
        store,
        dry_run=False,
        batch_rows=2,
        on_batch=lambda c: batches.append((c.column.name, c.rows_read, c.rows_rewritten)),
    )

    assert [b for b in batches if b[0] == "messages.metadata"] == [
        ("messages.metadata", 2, 2),
        ("messages.metadata", 4, 4),
        ("messages.metadata", 6, 6),
        ("messages.metadata", 7, 7),
    ]
    assert sorted(row.key for row in summary.rows) == [f"m-{i}" for i in range(7)]
    second = await repair_json(store, dry_run=False, batch_rows=2)
    assert second.rows_rewritten == 0


async def _execute_async(store: Store, statements: list[tuple[str, dict[str, Any]]]) -> None:
    async with store.uow() as uow:
        for statement, params in statements:
            await uow._execute(sa.text(statement), params)
        await uow.commit()


def test_every_json_column_of_the_schema_is_scanned() -> None:
    assert json_columns() == [
        JsonColumn("messages", "metadata", "id"),
        JsonColumn("reply_requests", "extra", "request_id"),
        JsonColumn("sessions", "extra", "id"),
    ]


@pytest.mark.parametrize(
    ("text", "repaired"),
    [
        ('{"f": 100000000000000000000}', None),  # jsonb's 1e20: a float, as the API reads it
        ('{"i": 18446744073709551616}', None),
        ('{"i": 9223372036854775807, "n": -9223372036854775808}', None),
        (
            '{"huge": 1' + "0" * 400 + "}",  # beyond any float: exact, kept as text
            {"huge": {KEPT_AS_TEXT: "1" + "0" * 400}},
        ),
        (f'{{"d": {nested_text(70)}}}', "deep"),
    ],
)
def test_postgres_numbers_beyond_64_bits_are_floats_and_not_repaired(
    text: str, repaired: Any
) -> None:
    fixed = repaired_value(text, "extra", numeric_numbers=True)
    if repaired is None:
        assert fixed is None
    elif repaired == "deep":
        assert fixed is not None
        assert find_problem(fixed[0], "extra") is None
        assert same(json_values.restored(fixed[0]), json.loads(text))
    else:
        assert fixed is not None and fixed[0] == repaired


def test_stored_text_that_is_not_json_or_too_deep_is_kept_whole() -> None:
    deep = arrays_text(5000)

    assert repaired_value(deep, "metadata") == (
        {KEPT_AS_TEXT: deep},
        [("metadata", TOO_DEEP_TO_READ)],
    )
    not_json = repaired_value("{oops", "metadata")
    assert not_json is not None
    assert not_json[0] == {KEPT_AS_TEXT: "{oops"}
    assert not_json[1][0][1].startswith(NOT_JSON.split("(")[0])
    assert repaired_value('{"ok": 1}', "metadata") is None
    assert repaired_value(5, "metadata") is None  # a bare number SQLite's affinity made


def test_the_help_says_what_it_rewrites_and_gives_an_example() -> None:
    result = CliRunner().invoke(app, ["repair-json", "--help"], env={"COLUMNS": "200"})

    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "Example: ccweb-store repair-json --dry-run && ccweb-store repair-json" in text
    assert '{"$ccwebJsonText":' in text
    assert "[env: CCWEB_DATABASE_URL; default: ccweb.db in CCWEB_DATA_DIR]" in text
