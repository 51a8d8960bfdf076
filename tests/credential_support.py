"""Calling the app as a conversation credential: minting one, calling a tool with it, and
reading the answer."""

from __future__ import annotations

from typing import Any

import httpx

from tests.http_client import mcp

OPERATOR = "operator-token-for-tests"


def send_args(target: str = "conv-b", mode: str = "one_way") -> dict[str, Any]:
    return {"targetConversationId": target, "content": "hello", "replyMode": mode}


async def mint(client: httpx.AsyncClient, session_id: str = "conv-a", **params: Any) -> str:
    headers = {"Authorization": f"Bearer {OPERATOR}"}
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "credential.mint",
        "params": {"sessionId": session_id, **params},
    }
    response = await client.post("/rpc", json=message, headers=headers)
    token: str = response.json()["result"]["token"]
    return token


async def tool(
    client: httpx.AsyncClient,
    name: str,
    arguments: dict[str, Any],
    *,
    query: str = "",
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    return await mcp(
        client, "tools/call", {"name": name, "arguments": arguments}, query=query, headers=headers
    )


def tool_payload(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    payload: dict[str, Any] = response.json()["result"]["structuredContent"]
    return payload


def refusal(response: httpx.Response, status: int, code: str) -> str:
    """The message of an HTTP refusal carrying a JSON-RPC error with ``data.code``."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["data"]["code"] == code
    message: str = error["message"]
    return message
