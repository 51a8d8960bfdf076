"""The Host check: a page that rebinds its DNS name to this server reads nothing, on every
route, with and without the operator token; the names a deployment uses still work."""

from __future__ import annotations

import httpx
import pytest

from ccweb_store.config import Settings
from ccweb_store.http.hosts import allowed_hosts, host_name
from ccweb_store.store.uow import Store
from tests.http_client import app_client

TOKEN = "operator-token-for-hosts"
EVIL = "rebind.evil.example:8787"
ROUTES = [
    ("GET", "/"),
    ("GET", "/console/conversations/conv-a"),
    ("GET", "/events?after=0"),
    ("GET", "/healthz"),
    ("GET", "/metrics"),
    ("POST", "/rpc"),
    ("POST", "/mcp"),
]


async def call(client: httpx.AsyncClient, method: str, path: str, host: str) -> httpx.Response:
    headers = {"Host": host, "Accept": "text/html, application/json, text/event-stream"}
    if method == "POST":
        body = {"jsonrpc": "2.0", "id": 1, "method": "session.list"}
        return await client.post(path, json=body, headers=headers)
    return await client.get(path, headers=headers)


@pytest.mark.parametrize("token", [None, TOKEN], ids=["no-token", "token"])
@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_a_rebound_host_is_refused_on_every_route(
    pair: Store, token: str | None, method: str, path: str
) -> None:
    async with app_client(pair, token=token) as client:
        response = await call(client, method, path, EVIL)

    assert response.status_code == 421
    error = response.json()["error"]
    assert error["data"]["code"] == "host_not_allowed"
    assert "'rebind.evil.example:8787' is not served here" in error["message"]
    assert "CCWEB_ALLOWED_HOSTS" in error["message"]
    assert "conv-a" not in response.text


@pytest.mark.parametrize(
    "host", ["127.0.0.1:8787", "localhost:9999", "[::1]:8787", "127.0.0.2", "LOCALHOST"]
)
async def test_loopback_names_on_any_port_are_served(pair: Store, host: str) -> None:
    async with app_client(pair) as client:
        response = await call(client, "GET", "/healthz", host)
    assert response.status_code == 200, response.text


async def test_the_configured_names_are_served(pair: Store) -> None:
    overrides = {
        "allowed_hosts": ("ccweb.internal",),
        "allowed_origins": ("https://ccweb.example.org",),
        "host": "10.1.2.3",
        "token": TOKEN,
    }
    async with app_client(pair, **overrides) as client:
        for host in ("ccweb.internal", "ccweb.example.org:443", "10.1.2.3:8787"):
            assert (await call(client, "GET", "/healthz", host)).status_code == 200, host
        assert (await call(client, "GET", "/healthz", "other.example.org")).status_code == 421


async def test_a_star_allows_every_host(pair: Store) -> None:
    async with app_client(pair, allowed_hosts=("*",)) as client:
        assert (await call(client, "GET", "/healthz", EVIL)).status_code == 200


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("Example.ORG:8787", "example.org"),
        ("[::1]:80", "::1"),
        ("127.0.0.1", "127.0.0.1"),
        ("evil.example:notaport", None),
        ("user@localhost", None),
        ("localhost/path", None),
        ("", None),
    ],
)
def test_host_name_reads_a_host_header(header: str, name: str | None) -> None:
    assert host_name(header) == name


def test_the_allowed_hosts_come_from_three_settings() -> None:
    settings = Settings(
        host="0.0.0.0",
        allowed_origins="http://localhost,https://ccweb.example.org:8443,*",
        allowed_hosts="Proxy.Internal , [fd00::1]",
    )
    assert allowed_hosts(settings) == {
        "localhost",
        "ccweb.example.org",
        "proxy.internal",
        "fd00::1",
    }
