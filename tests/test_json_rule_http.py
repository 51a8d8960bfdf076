"""The JSON value rule at the edge, over HTTP on both backends: a value that breaks it is
refused before anything is written, deep nesting never reaches an internal error, every id
comes back exactly, and a row stored before the rule still reads."""

from __future__ import annotations

import logging

import httpx
import orjson
import pytest
import sqlalchemy as sa

from ccweb_store.domain.json_values import KEPT_AS_TEXT, MAX_DEPTH
from ccweb_store.protocol import jsonrpc
from ccweb_store.store.uow import Store
from tests.http_client import app_client, rpc_result
from tests.json_support import depth
from tests.lifecycle_support import make_conversation, table_row_counts


def nested_text(levels: int, leaf: str = "1") -> str:
    return '{"a":' * levels + leaf + "}" * levels


async def post(client: httpx.AsyncClient, path: str, body: str) -> httpx.Response:
    return await client.post(path, content=body, headers={"content-type": "application/json"})


def append_body(metadata: str, request_id: str = "1") -> str:
    return (
        f'{{"jsonrpc":"2.0","id":{request_id},"method":"message.append","params":'
        f'{{"sessionId":"conv-a","role":"user","content":"hi","metadata":{metadata}}}}}'
    )


@pytest.mark.parametrize(
    ("metadata", "path", "limit"),
    [
        ('{"x":18446744073709551616}', "params.metadata.x", f"{-(2**63)}..{2**63 - 1}"),
        ('{"x":-9223372036854775809}', "params.metadata.x", f"{-(2**63)}..{2**63 - 1}"),
        ('{"x":[1,100000000000000000000000000000]}', "params.metadata.x[1]", None),
        (nested_text(MAX_DEPTH + 1), "metadata" + ".a" * MAX_DEPTH, f"{MAX_DEPTH} levels"),
        (nested_text(300), None, None),
    ],
)
async def test_metadata_that_breaks_the_rule_is_refused_with_its_path_and_nothing_is_written(
    store: Store, metadata: str, path: str | None, limit: str | None
) -> None:
    await make_conversation(store, "conv-a")
    before = await table_row_counts(store)
    async with app_client(store) as client:
        response = await post(client, "/rpc", append_body(metadata))
        assert response.status_code == 200
        error = response.json()["error"]
        assert error["code"] == jsonrpc.INVALID_PARAMS, error
        assert error["data"]["code"] == "invalid_json_value"
        if path is not None:
            assert error["data"]["path"] == path
        if limit is not None:
            assert error["data"]["limit"] == limit
        assert error["data"]["limit"] in error["message"]
        assert await table_row_counts(store) == before
        listed = await rpc_result(client, "message.list", {"sessionId": "conv-a"})
        assert listed["messages"] == []


async def test_metadata_as_deep_as_the_limit_is_stored_and_read_back(store: Store) -> None:
    await make_conversation(store, "conv-a")
    metadata = nested_text(MAX_DEPTH)
    async with app_client(store) as client:
        response = await post(client, "/rpc", append_body(metadata))
        assert "result" in response.json(), response.text
        listed = await rpc_result(client, "message.list", {"sessionId": "conv-a"})
    assert listed["messages"][0]["metadata"] == orjson.loads(metadata)


@pytest.mark.parametrize(
    ("number", "expected"),
    [("1e20", 1e20), ("-1e300", -1e300), ("5e-324", 5e-324), ("9223372036854775807", 2**63 - 1)],
)
async def test_numbers_within_the_rule_come_back_as_they_were_sent(
    store: Store, number: str, expected: float
) -> None:
    await make_conversation(store, "conv-a")
    async with app_client(store) as client:
        response = await post(client, "/rpc", append_body(f'{{"x":{number}}}'))
        assert "result" in response.json(), response.text
        listed = await rpc_result(client, "message.list", {"sessionId": "conv-a"})
    value = listed["messages"][0]["metadata"]["x"]
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize(
    "request_id",
    [
        "-9223372036854775809",
        "18446744073709551616",
        "100000000000000000000000000000",
        "9223372036854775807",
        "1e-400",
        "123456789012345678901234567890.5",
        "1.5",
        '"abc"',
        "7",
    ],
)
@pytest.mark.parametrize("path", ["/rpc", "/mcp?sourceSessionId=conv-a"])
async def test_every_id_that_parses_is_echoed_exactly(
    store: Store, request_id: str, path: str
) -> None:
    await make_conversation(store, "conv-a")
    method = "session.list" if path == "/rpc" else "ping"
    async with app_client(store) as client:
        response = await post(
            client, path, f'{{"jsonrpc":"2.0","id":{request_id},"method":"{method}"}}'
        )
        refused = await post(client, path, append_body(nested_text(200), request_id))
    assert response.status_code == 200
    assert f'"id":{request_id}'.encode() in response.content
    assert "result" in response.json()
    assert f'"id":{request_id}'.encode() in refused.content


@pytest.mark.parametrize(
    "params",
    [
        '{"name":' + "[" * 990 + "]" * 990 + "}",
        '{"name":"ccweb_list_user_inputs","arguments":{"limit":' + "[" * 990 + "]" * 990 + "}}",
        '{"name":"ccweb_send_message","arguments":' + nested_text(70, '"x"') + "}",
    ],
)
async def test_a_deeply_nested_tool_call_is_invalid_params_never_an_internal_error(
    store: Store, params: str
) -> None:
    await make_conversation(store, "conv-a")
    body = f'{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{params}}}'
    async with app_client(store) as client:
        response = await post(client, "/mcp?sourceSessionId=conv-a", body)
    error = response.json()["error"]
    assert error["code"] == jsonrpc.INVALID_PARAMS
    assert error["data"]["code"] == "invalid_json_value"
    assert error["data"]["path"].startswith("params.")


async def test_a_deeply_nested_cursor_is_invalid_params_never_an_internal_error(
    store: Store,
) -> None:
    body = (
        '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":'
        + "[" * 990
        + "]" * 990
        + "}}"
    )
    async with app_client(store) as client:
        response = await post(client, "/mcp", body)
        listed = await post(
            client,
            "/rpc",
            '{"jsonrpc":"2.0","id":1,"method":"session.list","params":{"cursor":'
            '"W1tbW1tbW1tbW1tbW1tbW1tbW1tbW1tbW1tbW1tbW1tb"}}',
        )
    assert response.json()["error"]["code"] == jsonrpc.INVALID_PARAMS
    assert listed.json()["error"]["data"]["code"] == "invalid_cursor"


@pytest.mark.parametrize("path", ["/rpc", "/mcp"])
async def test_a_body_nested_beyond_what_can_be_read_is_an_invalid_request(
    store: Store, path: str
) -> None:
    async with app_client(store) as client:
        response = await post(client, path, "[" * 5000 + "]" * 5000)
    error = response.json()["error"]
    assert error["code"] == jsonrpc.INVALID_REQUEST
    assert "nests deeper than" in error["message"]


async def test_a_batch_refuses_only_the_message_that_breaks_the_rule(store: Store) -> None:
    await make_conversation(store, "conv-a")
    body = (
        "["
        + append_body('{"x":18446744073709551616}', "1")
        + ","
        + append_body('{"x":1}', "2")
        + "]"
    )
    async with app_client(store) as client:
        response = await post(client, "/rpc", body)
        listed = await rpc_result(client, "message.list", {"sessionId": "conv-a"})
    first, second = response.json()
    assert first["id"] == 1 and first["error"]["code"] == jsonrpc.INVALID_PARAMS
    assert second["id"] == 2 and "result" in second
    assert [m["metadata"] for m in listed["messages"]] == [{"x": 1}]


async def _store_raw_metadata(store: Store, backend: str, values: list[str]) -> None:
    """Messages whose metadata was written before the rule, straight into the table."""
    cast = "CAST(:metadata AS jsonb)" if backend == "postgres" else ":metadata"
    async with store.engine.begin() as connection:
        for seq, value in enumerate(values, start=1):
            await connection.execute(
                sa.text(
                    "INSERT INTO messages (id, session_id, seq, role, content, metadata) "
                    f"VALUES (:id, 'conv-a', :seq, 'user', 'old', {cast})"
                ),
                {"id": f"old-{seq}", "seq": seq, "metadata": value},
            )


async def test_rows_stored_before_the_rule_still_read_with_the_value_kept_as_text(
    store: Store, backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    await make_conversation(store, "conv-a")
    values = ['{"x": 18446744073709551616}', nested_text(300), '{"x": -9223372036854775809}']
    if backend == "sqlite":  # what json.dumps could write, which PostgreSQL's jsonb refuses
        values += ['{"x": "\\ud800"}', "[" * 999 + "]" * 999]
    await _store_raw_metadata(store, backend, values)
    caplog.set_level(logging.WARNING, "ccweb_store")
    async with app_client(store) as client:
        listed = await rpc_result(client, "message.list", {"sessionId": "conv-a"})
        for limit in (1, 2):
            page = await rpc_result(client, "message.list", {"sessionId": "conv-a", "limit": limit})
            assert len(page["messages"]) == limit
    metadata = {m["id"]: m["metadata"] for m in listed["messages"]}
    assert len(metadata) == len(values)
    if backend == "sqlite":
        assert metadata["old-1"] == {"x": {KEPT_AS_TEXT: "18446744073709551616"}}
        assert metadata["old-4"] == {"x": {KEPT_AS_TEXT: '"\\ud800"'}}
        kept = metadata["old-5"]  # past Python's recursion limit, or past orjson's 255 levels
        assert kept == {KEPT_AS_TEXT: "[" * 999 + "]" * 999} or depth(kept) <= MAX_DEPTH
    else:  # jsonb keeps numbers as numeric: those beyond 64 bits read as the floats they are
        assert metadata["old-1"] == {"x": float(2**64)}
    assert "old-2" in caplog.text or "$ccwebJsonText" in str(metadata["old-2"])
    assert "repair-json" in caplog.text
    assert any("'old-" in record.getMessage() for record in caplog.records)
