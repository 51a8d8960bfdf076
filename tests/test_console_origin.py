"""A console action is taken only from the console's own origin (the scheme, host and port the
request came to) or an allowed origin with its exact port: a page on another localhost port,
or one whose origin is ``null``, is refused and changes nothing. Over HTTP against the real
app on both backends; ``same_origin`` is pinned on its own below."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from ccweb_store.config import DEFAULT_ALLOWED_ORIGINS
from ccweb_store.http.console import session
from ccweb_store.http.origins import same_origin
from ccweb_store.store.uow import Store
from tests.http_client import BASE_URL, app_client
from tests.lifecycle_support import ask, reply_row

TOKEN = "operator-token-for-origins"


async def open_request(store: Store) -> str:
    sent = await ask(store, "conv-a", "conv-b", "Review it")
    request_id: str = sent["requestId"]
    return request_id


@pytest.mark.parametrize("token", [None, TOKEN], ids=["no-token", "token"])
@pytest.mark.parametrize(
    "origin",
    [
        "http://localhost:31337",
        "http://127.0.0.1:31337",
        "http://127.0.0.1",
        "https://127.0.0.1:8787",
        "http://localhost",
        "null",
    ],
)
async def test_a_console_action_from_another_origin_is_refused_and_changes_nothing(
    pair: Store, token: str | None, origin: str
) -> None:
    request_id = await open_request(pair)
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    async with app_client(pair, token=token) as client:
        response = await client.post(
            f"/console/replies/{request_id}/fail",
            data={"reason": "forged"},
            headers={"Origin": origin, **auth},
        )

    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert error["code"] == "origin_not_allowed"
    assert f"is not this console ({BASE_URL})" in error["message"]
    assert "CCWEB_ALLOWED_ORIGINS" in error["message"]
    assert (await reply_row(pair, request_id)).status == "waiting"


async def test_a_console_action_from_its_own_origin_is_done(pair: Store) -> None:
    request_id = await open_request(pair)
    async with app_client(pair) as client:
        response = await client.post(
            f"/console/replies/{request_id}/fail",
            data={"reason": "not needed"},
            headers={"Origin": BASE_URL},
        )

    assert response.status_code == 303, response.text
    assert (await reply_row(pair, request_id)).status == "failed"


async def test_the_console_at_another_name_takes_actions_from_that_name_only(
    pair: Store,
) -> None:
    request_id = await open_request(pair)
    async with app_client(pair) as client:
        refused = await client.post(
            f"/console/replies/{request_id}/fail",
            data={"reason": "x"},
            headers={"Host": "localhost:8787", "Origin": BASE_URL},
        )
        done = await client.post(
            f"/console/replies/{request_id}/fail",
            data={"reason": "x"},
            headers={"Host": "localhost:8787", "Origin": "http://localhost:8787"},
        )

    assert refused.status_code == 403
    assert done.status_code == 303, done.text


async def test_an_allowed_origin_with_its_port_takes_console_actions_and_logs_in(
    pair: Store,
) -> None:
    request_id = await open_request(pair)
    overrides = {"token": TOKEN, "allowed_origins": ("https://console.example.org:8443",)}
    async with app_client(pair, **overrides) as client:
        other_port = await client.post(
            "/console/login",
            data={"token": TOKEN},
            headers={"Origin": "https://console.example.org:9443"},
        )
        login = await client.post(
            "/console/login",
            data={"token": TOKEN},
            headers={"Origin": "https://console.example.org:8443"},
        )
        key = parse_qs(urlsplit(login.headers["location"]).fragment)[session.KEY_FRAGMENT][0]
        without_key = await client.post(
            f"/console/replies/{request_id}/fail",
            data={"reason": "x"},
            headers={"Origin": "https://console.example.org:8443"},
        )
        action = await client.post(
            f"/console/replies/{request_id}/fail",
            data={"reason": "x", session.KEY_FIELD: key},
            headers={"Origin": "https://console.example.org:8443"},
        )

    assert other_port.status_code == 403
    assert "set-cookie" not in other_port.headers
    assert login.status_code == 303, login.text
    assert "ccweb_console=" in login.headers["set-cookie"]
    assert key not in login.headers["set-cookie"]
    assert without_key.status_code == 401
    assert action.status_code == 303, action.text
    assert (await reply_row(pair, request_id)).status == "failed"


@pytest.mark.parametrize(
    ("origin", "own", "allowed", "expected"),
    [
        ("http://127.0.0.1:8787", "http://127.0.0.1:8787", (), True),
        ("HTTP://LOCALHOST:8787", "http://localhost:8787", (), True),
        ("https://ccweb.example.org", "https://ccweb.example.org", (), True),
        ("https://ccweb.example.org", "https://ccweb.example.org:443", (), True),
        ("http://[::1]:8787", "http://[::1]:8787", (), True),
        ("http://localhost:31337", "http://localhost:8787", DEFAULT_ALLOWED_ORIGINS, False),
        ("http://localhost:8787", "http://127.0.0.1:8787", DEFAULT_ALLOWED_ORIGINS, False),
        ("http://localhost", "http://127.0.0.1:8787", DEFAULT_ALLOWED_ORIGINS, False),
        ("http://localhost:80", "http://127.0.0.1:8787", DEFAULT_ALLOWED_ORIGINS, False),
        ("http://localhost", "http://127.0.0.1:8787", ("http://localhost:80",), True),
        ("https://a.example", "http://127.0.0.1:8787", ("https://a.example",), True),
        ("https://a.example:8443", "http://127.0.0.1:8787", ("https://a.example:8443",), True),
        ("https://a.example", "http://127.0.0.1:8787", ("https://a.example:8443",), False),
        ("https://a.example", "http://127.0.0.1:8787", ("*",), False),
        ("http://127.0.0.1:8787", "https://127.0.0.1:8787", (), False),
        ("null", "http://127.0.0.1:8787", ("*",), False),
        ("http://evil.example@127.0.0.1:8787", "http://127.0.0.1:8787", (), False),
        ("http://127.0.0.1:8787/page", "http://127.0.0.1:8787", (), False),
        ("ftp://127.0.0.1:8787", "ftp://127.0.0.1:8787", (), False),
    ],
)
def test_same_origin_is_exact(
    origin: str, own: str, allowed: tuple[str, ...], expected: bool
) -> None:
    assert same_origin(origin, own, allowed) is expected
