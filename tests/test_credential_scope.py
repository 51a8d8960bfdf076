"""A credential stays in its box: a conversation it creates gets its creator's agent and its
creator's folder (or one inside it), over HTTP against the real app on both backends."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ccweb_store.domain import errors
from ccweb_store.domain.rows import Conversation
from ccweb_store.store.uow import Store
from tests.credential_support import mint, tool, tool_payload
from tests.http_client import app_client, rpc_result
from tests.lifecycle_support import row_counts


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """alice's project folder, a folder inside it, a sibling project and a link out of it."""
    home = tmp_path / "alice"
    (home / "frontend").mkdir(parents=True)
    (tmp_path / "other").mkdir()
    os.symlink(tmp_path / "other", home / "escape")
    return home


@pytest.fixture
async def alice(store: Store, project: Path) -> Store:
    async with store.uow() as uow:
        await uow.sessions.create("alice", title="Alice", agent="claude", cwd=str(project))
        await uow.commit()
    return store


async def created(store: Store, conversation_id: str) -> Conversation:
    async with store.read_uow() as uow:
        return await uow.sessions.require(conversation_id)


async def create_as_alice(store: Store, arguments: dict[str, Any]) -> Any:
    async with app_client(store) as client:
        token = await mint(client, "alice")
        return await tool(
            client, "ccweb_create_conversation", arguments, query=f"?credential={token}"
        )


async def test_a_created_conversation_gets_its_creators_agent_and_folder(
    alice: Store, project: Path
) -> None:
    response = await create_as_alice(alice, {"title": "Helper", "content": "go"})

    row = await created(alice, tool_payload(response)["conversationId"])
    assert (row.agent, row.cwd) == ("claude", str(project))


async def test_a_folder_inside_the_creators_is_allowed(alice: Store, project: Path) -> None:
    inside = str(project / "frontend")
    for cwd in (inside, "frontend", str(project / "frontend" / ".." / "frontend")):
        response = await create_as_alice(alice, {"cwd": cwd, "agent": "claude"})
        row = await created(alice, tool_payload(response)["conversationId"])
        assert (row.agent, row.cwd) == ("claude", inside)


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"agent": "admin"}, "of its own agent only: 'admin' is not 'claude'"),
        ({"cwd": "/other/project"}, "'/other/project' resolves to '/other/project', outside"),
        ({"cwd": ".."}, "outside it"),
        ({"cwd": "frontend/../.."}, "outside it"),
        ({"cwd": "escape"}, "outside it"),  # a symlink out of the folder
        ({"agent": "admin", "cwd": "/other/project", "content": "go", "requestReply": True}, ""),
    ],
)
async def test_another_agent_or_a_folder_outside_is_refused_and_nothing_is_written(
    alice: Store, arguments: dict[str, Any], says: str
) -> None:
    before = await row_counts(alice)

    response = await create_as_alice(alice, arguments)

    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result["isError"] is True
    error = result["structuredContent"]["error"]
    assert error["code"] == errors.OUTSIDE_CREDENTIAL_SCOPE
    assert says in error["message"]
    assert await row_counts(alice) == before


async def test_a_creator_without_a_folder_cannot_choose_one(store: Store) -> None:
    async with store.uow() as uow:
        await uow.sessions.create("bare", title="Bare", agent="claude")
        await uow.commit()
    async with app_client(store) as client:
        token = await mint(client, "bare")
        refused = await tool(
            client, "ccweb_create_conversation", {"cwd": "/tmp"}, query=f"?credential={token}"
        )
        allowed = await tool(client, "ccweb_create_conversation", {}, query=f"?credential={token}")
    assert refused.json()["result"]["structuredContent"]["error"]["code"] == (
        errors.OUTSIDE_CREDENTIAL_SCOPE
    )
    row = await created(store, tool_payload(allowed)["conversationId"])
    assert (row.agent, row.cwd) == ("claude", None)


async def test_the_operator_still_creates_anything(alice: Store) -> None:
    async with app_client(alice) as client:
        made = await rpc_result(
            client, "session.create", {"agent": "admin", "cwd": "/other/project"}
        )
        called = await rpc_result(
            client,
            "tools.call",
            {
                "tool": "ccweb_create_conversation",
                "args": {"agent": "admin", "cwd": "/other/project"},
                "sourceSessionId": "alice",
            },
        )
    assert (made["agent"], made["cwd"]) == ("admin", "/other/project")
    row = await created(alice, called["conversationId"])
    assert (row.agent, row.cwd) == ("admin", "/other/project")
