"""Bearer-token auth on every endpoint but ``/healthz``, and the non-loopback guard."""

from __future__ import annotations

from pathlib import Path

import pytest

from ccweb_store.protocol import jsonrpc
from ccweb_store.store.uow import Store
from tests.cli_support import run_cli
from tests.http_client import app_client
from tests.servers import server_env

TOKEN = "s3cret-token-for-auth-tests"
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools.list"}


@pytest.mark.parametrize(
    "authorization", [None, "Bearer wrong", f"Basic {TOKEN}", TOKEN, f"Bearer {TOKEN}x"]
)
@pytest.mark.parametrize(("path", "body"), [("/mcp", PING), ("/rpc", TOOLS_LIST)])
async def test_a_missing_or_wrong_token_is_401_with_a_json_rpc_error(
    store: Store, authorization: str | None, path: str, body: dict[str, object]
) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    async with app_client(store, token=TOKEN) as client:
        response = await client.post(path, json=body, headers=headers)
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == "Bearer"
        error = response.json()["error"]
        assert error["code"] == jsonrpc.UNAUTHORIZED
        assert "bearer token" in error["message"]
        assert TOKEN not in response.text


async def test_get_on_mcp_also_needs_the_token(store: Store) -> None:
    async with app_client(store, token=TOKEN) as client:
        assert (await client.get("/mcp")).status_code == 401


@pytest.mark.parametrize(("path", "body"), [("/mcp", PING), ("/rpc", TOOLS_LIST)])
async def test_the_right_token_is_let_through(
    store: Store, path: str, body: dict[str, object]
) -> None:
    async with app_client(store, token=TOKEN) as client:
        response = await client.post(path, json=body, headers={"Authorization": f"Bearer {TOKEN}"})
        assert response.status_code == 200
        assert "result" in response.json()


async def test_the_scheme_is_case_insensitive(store: Store) -> None:
    async with app_client(store, token=TOKEN) as client:
        response = await client.post(
            "/mcp", json=PING, headers={"Authorization": f"bearer {TOKEN}"}
        )
        assert response.status_code == 200


async def test_healthz_stays_open_with_a_token(store: Store) -> None:
    async with app_client(store, token=TOKEN) as client:
        response = await client.get("/healthz")
        assert response.status_code == 200
        assert response.json()["status"] == "ok"


async def test_without_a_token_no_header_is_needed(store: Store) -> None:
    async with app_client(store) as client:
        assert (await client.post("/mcp", json=PING)).status_code == 200


def test_serve_on_a_non_loopback_host_without_a_token_refuses_to_start(tmp_path: Path) -> None:
    env = server_env(CCWEB_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'never.db'}")
    completed = run_cli("serve", "--host", "0.0.0.0", "--port", "1", env=env)
    assert completed.returncode == 2
    assert "refusing to listen on non-loopback host '0.0.0.0' without a token" in completed.stderr
    assert "CCWEB_TOKEN" in completed.stderr
    assert not (tmp_path / "never.db").exists()


@pytest.mark.parametrize(
    ("token", "problem"),
    [("   ", "is set but blank"), ("tiny", "is shorter than 16 characters")],
)
@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_serve_refuses_a_blank_or_short_token_on_any_host(
    tmp_path: Path, token: str, problem: str, host: str
) -> None:
    env = server_env(
        CCWEB_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'never.db'}", CCWEB_TOKEN=token
    )
    completed = run_cli("serve", "--host", host, "--port", "1", env=env)
    assert completed.returncode == 2
    assert f"CCWEB_TOKEN (--token) {problem}" in completed.stderr
    assert 'python3 -c "import secrets; print(secrets.token_urlsafe(32))"' in completed.stderr
    assert not (tmp_path / "never.db").exists()
