"""The JSON-RPC core, seen through ``POST /rpc`` on the real app (and its pure dispatch)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import pytest

from ccweb_store.contract.base import NoParams
from ccweb_store.domain import errors
from ccweb_store.domain.errors import DomainError
from ccweb_store.protocol import jsonrpc
from ccweb_store.protocol import registry as rpc
from ccweb_store.store.uow import Store
from tests.http_client import JSON, app_client, rpc_result


async def _echo(method: str, params: Mapping[str, Any]) -> Any:
    if method == "echo":
        return dict(params)
    raise jsonrpc.RpcError(jsonrpc.METHOD_NOT_FOUND, f"method not found: {method!r}")


async def test_a_request_gets_its_result_under_its_own_id() -> None:
    answer = await jsonrpc.handle_payload(
        {"jsonrpc": "2.0", "id": "abc", "method": "echo", "params": {"x": 1}}, _echo
    )
    assert answer == {"jsonrpc": "2.0", "id": "abc", "result": {"x": 1}}


async def test_a_notification_gets_no_response_even_when_it_fails() -> None:
    assert await jsonrpc.handle_payload({"jsonrpc": "2.0", "method": "echo"}, _echo) is None
    assert await jsonrpc.handle_payload({"jsonrpc": "2.0", "method": "nope"}, _echo) is None


async def test_a_batch_gets_an_array_without_the_notifications() -> None:
    answer = await jsonrpc.handle_payload(
        [
            {"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"n": 1}},
            {"jsonrpc": "2.0", "method": "echo"},
            {"jsonrpc": "2.0", "id": 2, "method": "nope"},
        ],
        _echo,
    )
    assert [item["id"] for item in answer] == [1, 2]
    assert answer[0]["result"] == {"n": 1}
    assert answer[1]["error"]["code"] == jsonrpc.METHOD_NOT_FOUND


async def test_a_batch_of_only_notifications_gets_no_response() -> None:
    assert await jsonrpc.handle_payload([{"jsonrpc": "2.0", "method": "echo"}], _echo) is None


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ([], jsonrpc.INVALID_REQUEST),
        ("just a string", jsonrpc.INVALID_REQUEST),
        ({"jsonrpc": "1.0", "id": 1, "method": "echo"}, jsonrpc.INVALID_REQUEST),
        ({"jsonrpc": "2.0", "id": 1}, jsonrpc.INVALID_REQUEST),
        ({"jsonrpc": "2.0", "id": 1, "method": 7}, jsonrpc.INVALID_REQUEST),
        ({"jsonrpc": "2.0", "id": {"x": 1}, "method": "echo"}, jsonrpc.INVALID_REQUEST),
        ({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": [1, 2]}, jsonrpc.INVALID_PARAMS),
    ],
)
async def test_malformed_messages_get_the_documented_error(message: Any, code: int) -> None:
    answer = await jsonrpc.handle_payload(message, _echo)
    assert answer["error"]["code"] == code
    assert answer["jsonrpc"] == "2.0"


async def test_an_invalid_message_without_an_id_is_still_answered() -> None:
    answer = await jsonrpc.handle_payload({"jsonrpc": "2.0"}, _echo)
    assert answer == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": jsonrpc.INVALID_REQUEST, "message": answer["error"]["message"]},
    }


async def test_client_responses_are_accepted_silently() -> None:
    assert await jsonrpc.handle_payload({"jsonrpc": "2.0", "id": 9, "result": {}}, _echo) is None


# Over HTTP, on the real app.


async def test_rpc_answers_malformed_json_with_a_parse_error(store: Store) -> None:
    async with app_client(store) as client:
        response = await client.post("/rpc", content=b"{not json", headers=JSON)
        assert response.json()["error"]["code"] == jsonrpc.PARSE_ERROR
        assert response.json()["id"] is None
        assert await rpc_result(client, "tools.list")  # still serving


async def test_rpc_answers_an_empty_batch_with_invalid_request(store: Store) -> None:
    async with app_client(store) as client:
        response = await client.post("/rpc", json=[])
        assert response.json()["error"]["code"] == jsonrpc.INVALID_REQUEST


async def test_rpc_answers_a_batch_with_an_array(store: Store) -> None:
    async with app_client(store) as client:
        response = await client.post(
            "/rpc",
            json=[
                {"jsonrpc": "2.0", "id": 1, "method": "tools.list"},
                {"jsonrpc": "2.0", "id": 2, "method": "no.such"},
                {"jsonrpc": "2.0", "method": "tools.list"},
            ],
        )
        body = response.json()
        assert isinstance(body, list)
        assert [item["id"] for item in body] == [1, 2]
        assert body[1]["error"]["code"] == jsonrpc.METHOD_NOT_FOUND


async def test_rpc_answers_a_lone_notification_with_no_content(store: Store) -> None:
    async with app_client(store) as client:
        response = await client.post("/rpc", json={"jsonrpc": "2.0", "method": "tools.list"})
        assert response.status_code == 204
        assert response.content == b""


async def test_an_unknown_method_is_method_not_found(store: Store) -> None:
    async with app_client(store) as client:
        response = await client.post(
            "/rpc", json={"jsonrpc": "2.0", "id": 5, "method": "session.explode"}
        )
        assert response.json()["error"]["code"] == jsonrpc.METHOD_NOT_FOUND
        assert response.json()["id"] == 5


async def test_a_domain_error_carries_its_snake_case_code(store: Store) -> None:
    async with app_client(store) as client:
        response = await client.post(
            "/rpc", json={"jsonrpc": "2.0", "id": 1, "method": "session.get", "params": {"id": "x"}}
        )
        error = response.json()["error"]
        assert error["code"] == jsonrpc.DOMAIN_ERROR
        assert error["data"] == {"code": errors.CONVERSATION_NOT_FOUND}
        assert "'x'" in error["message"]


async def test_an_internal_error_leaks_no_traceback_but_logs_it(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(store: Store, call: NoParams) -> Any:
        raise RuntimeError("secret detail from deep inside")

    monkeypatch.setitem(
        rpc.METHODS, "test.broken", rpc.method("test.broken", NoParams, Any, broken)
    )
    async with app_client(store) as client:
        with caplog.at_level(logging.ERROR, logger="ccweb_store.protocol.jsonrpc"):
            response = await client.post(
                "/rpc", json={"jsonrpc": "2.0", "id": 1, "method": "test.broken"}
            )
        assert response.status_code == 200
        error = response.json()["error"]
        assert error["code"] == jsonrpc.INTERNAL_ERROR
        assert "secret" not in response.text
        assert "Traceback" not in response.text
        assert "secret detail" in caplog.text
        assert "Traceback" in caplog.text
        assert await rpc_result(client, "tools.list")  # still serving


async def test_a_domain_error_from_a_method_keeps_its_message(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refuses(store: Store, call: NoParams) -> Any:
        raise DomainError("the target is busy; try later", code=errors.TARGET_BUSY)

    refusing = rpc.method("test.refuses", NoParams, Any, refuses)
    monkeypatch.setitem(rpc.METHODS, "test.refuses", refusing)
    async with app_client(store) as client:
        response = await client.post(
            "/rpc", json={"jsonrpc": "2.0", "id": 1, "method": "test.refuses"}
        )
        assert response.json()["error"] == {
            "code": -32000,
            "message": "the target is busy; try later",
            "data": {"code": "target_busy"},
        }


async def test_an_oversized_body_is_refused_with_413_and_the_server_keeps_serving(
    store: Store,
) -> None:
    async with app_client(store, max_body_bytes=2048) as client:
        big = {"jsonrpc": "2.0", "id": 1, "method": "tools.list", "params": {"x": "a" * 4096}}
        response = await client.post("/rpc", json=big)
        assert response.status_code == 413
        assert "2048" in response.json()["error"]["message"]
        assert await rpc_result(client, "tools.list")


async def test_a_streamed_body_without_length_is_cut_at_the_limit(store: Store) -> None:
    async def chunks() -> Any:
        for _ in range(10):
            yield b" " * 1024

    async with app_client(store, max_body_bytes=4096) as client:
        response = await client.post("/rpc", content=chunks(), headers=JSON)
        assert response.status_code == 413


ENDPOINTS = ["/rpc", "/mcp"]
PING = {"/rpc": b'{"jsonrpc":"2.0","id":1,"method":"tools.list"}'}
PING["/mcp"] = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize("method", ["GET", "PUT", "PATCH", "DELETE", "OPTIONS", "PROPFIND"])
async def test_every_method_but_post_is_a_405_with_a_json_rpc_error_body(
    store: Store, path: str, method: str
) -> None:
    async with app_client(store) as client:
        response = await client.request(method, path)
        assert response.status_code == 405
        assert response.headers["allow"] == "POST"
        error = response.json()["error"]
        assert error["code"] == jsonrpc.INVALID_REQUEST
        assert f"{method} {path} is not supported" in error["message"]


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "",
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; b=x",
        "text/xml",
        "application/json-rpc",
        "application/vnd.x+json",
    ],
)
async def test_a_body_without_content_type_application_json_is_a_415_saying_what_to_send(
    store: Store, path: str, content_type: str | None
) -> None:
    headers = {"content-type": content_type} if content_type is not None else {}
    async with app_client(store) as client:
        response = await client.post(path, content=PING[path], headers=headers)
        assert response.status_code == 415
        error = response.json()["error"]
        assert error["code"] == jsonrpc.INVALID_REQUEST
        assert "Content-Type: application/json" in error["message"]


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/json; charset=utf-8", "APPLICATION/JSON"],
)
async def test_application_json_with_or_without_parameters_is_read_as_json(
    store: Store, path: str, content_type: str
) -> None:
    async with app_client(store) as client:
        response = await client.post(
            path, content=PING[path], headers={"content-type": content_type}
        )
        assert response.status_code == 200
        assert "result" in response.json()


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize("chunked", [False, True])
async def test_a_body_over_the_limit_is_a_413_on_both_endpoints_with_or_without_a_length(
    store: Store, path: str, chunked: bool
) -> None:
    body = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"' + b"x" * 8000 + b'"}}'

    async def chunks() -> Any:
        for start in range(0, len(body), 1000):
            yield body[start : start + 1000]

    async with app_client(store, max_body_bytes=4096) as client:
        response = await client.post(path, content=chunks() if chunked else body, headers=JSON)
        assert response.status_code == 413
        error = response.json()["error"]
        assert error["code"] == jsonrpc.INVALID_REQUEST
        assert "4096 bytes (CCWEB_MAX_BODY_BYTES)" in error["message"]


def test_dumps_writes_compact_json_as_starlette_does_non_string_keys_included() -> None:
    value = {"text": 'é "quoted"', 3: [1.5, None, True], "nested": {7: "seven"}}
    assert (
        jsonrpc.dumps(value)
        == json.dumps(
            value, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
        ).encode()
    )
    with pytest.raises(TypeError):
        jsonrpc.dumps({"not json": object()})


@pytest.mark.parametrize("path", ENDPOINTS)
async def test_a_batch_over_the_cap_is_refused_whole_and_writes_nothing(
    store: Store, path: str
) -> None:
    def create(index: int) -> dict[str, Any]:
        params = {"id": f"batched-{index}"}
        if path == "/rpc":
            return {"jsonrpc": "2.0", "id": index, "method": "session.create", "params": params}
        arguments = {"title": f"batched-{index}"}
        return {
            "jsonrpc": "2.0",
            "id": index,
            "method": "tools/call",
            "params": {"name": "ccweb_create_conversation", "arguments": arguments},
        }

    batch = [create(index) for index in range(jsonrpc.MAX_BATCH_CALLS + 1)]
    target = path if path == "/rpc" else f"{path}?sourceSessionId=caller"
    async with app_client(store) as client:
        refused = await client.post(target, json=batch)
        listed = await rpc_result(client, "session.list", {"limit": 5})
        at_cap = await client.post("/rpc", json=batch[: jsonrpc.MAX_BATCH_CALLS])

    error = refused.json()["error"]
    assert error["code"] == jsonrpc.INVALID_REQUEST
    assert error["message"] == (
        "invalid request: a batch of 101 calls is over the limit of 100: "
        "send them in batches of at most 100"
    )
    assert error["data"] == {"limit": 100}
    assert listed["sessions"] == []
    assert len(at_cap.json()) == jsonrpc.MAX_BATCH_CALLS
