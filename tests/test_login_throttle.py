"""Login throttling (``http/throttle.py``): past 10 wrong operator tokens a minute from one
address, every token from it is a 429 with ``Retry-After`` until the window has passed; then
the right token works. It counts on ``Authorization: Bearer`` and on the console's login
form alike, and only wrong tokens count."""

from __future__ import annotations

import httpx

from ccweb_store.config import Settings
from ccweb_store.http.app import create_app
from ccweb_store.http.throttle import LoginThrottle
from ccweb_store.store.uow import Store
from tests.http_client import BASE_URL

TOKEN = "throttle-test-operator-token-0123456789"
ORIGIN = {"Origin": BASE_URL}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _client(store: Store, throttle: LoginThrottle, client: tuple[str, int]) -> httpx.AsyncClient:
    settings = Settings(**{**store.settings.model_dump(), "token": TOKEN})
    app = create_app(settings, store=store, migrate_on_start=False, login_throttle=throttle)
    transport = httpx.ASGITransport(app=app, client=client)
    return httpx.AsyncClient(transport=transport, base_url=BASE_URL)


def test_the_throttle_counts_failures_in_a_sliding_window() -> None:
    clock = Clock()
    throttle = LoginThrottle(3, 60, clock=clock)
    for _ in range(2):
        throttle.failed("10.0.0.1")
    assert throttle.retry_after("10.0.0.1") is None
    clock.now += 30
    throttle.failed("10.0.0.1")
    assert throttle.retry_after("10.0.0.1") == 30
    assert throttle.retry_after("10.0.0.2") is None
    clock.now += 30.5  # the first two failures left the window
    assert throttle.retry_after("10.0.0.1") is None


async def test_wrong_bearer_tokens_end_in_a_429_and_the_right_one_works_after_the_wait(
    store: Store,
) -> None:
    clock = Clock()
    throttle = LoginThrottle(clock=clock)
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "session.list"}
    async with (
        _client(store, throttle, ("203.0.113.9", 5000)) as guesser,
        _client(store, throttle, ("198.51.100.4", 5000)) as operator,
    ):
        for _ in range(3):  # no token at all is not a guess
            assert (await guesser.post("/rpc", json=rpc)).status_code == 401
        for n in range(10):
            wrong = {"Authorization": f"Bearer wrong-token-{n:02d}"}
            assert (await guesser.post("/rpc", json=rpc, headers=wrong)).status_code == 401
        right = {"Authorization": f"Bearer {TOKEN}"}
        refused = await guesser.post("/rpc", json=rpc, headers=right)
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "60"
        assert "wait 60 s" in refused.json()["error"]["message"]
        assert (await guesser.get("/", headers=right)).status_code == 429
        # Another address is not held back.
        assert (await operator.post("/rpc", json=rpc, headers=right)).status_code == 200
        clock.now += 61
        assert (await guesser.post("/rpc", json=rpc, headers=right)).status_code == 200


async def test_wrong_tokens_in_the_console_login_form_end_in_a_429_then_the_login_works(
    store: Store,
) -> None:
    clock = Clock()
    throttle = LoginThrottle(clock=clock)
    async with _client(store, throttle, ("203.0.113.9", 5000)) as client:
        for n in range(9):
            form = {"token": f"wrong-token-{n:02d}"}
            answer = await client.post("/console/login", data=form, headers=ORIGIN)
            assert answer.status_code == 401
        # Bearer tokens and the form count together.
        wrong = {"Authorization": "Bearer wrong-token-99"}
        assert (await client.get("/", headers=wrong)).status_code == 401
        for accept in ("application/json", "text/html"):
            refused = await client.post(
                "/console/login", data={"token": TOKEN}, headers={**ORIGIN, "Accept": accept}
            )
            assert refused.status_code == 429
            assert refused.headers["retry-after"] == "60"
            assert "content-security-policy" in refused.headers
        assert refused.headers["content-type"].startswith("text/html")
        assert "too many wrong tokens" in refused.text
        clock.now += 61
        login = await client.post("/console/login", data={"token": TOKEN}, headers=ORIGIN)
        assert login.status_code == 303 and "ccweb_console=" in login.headers["set-cookie"]
