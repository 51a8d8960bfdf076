"""``GET /events`` with a conversation credential, over real server processes: a stream ends
with its credential (revoked or expired: no event written after that goes out, and the
server closes the stream within one heartbeat), and one credential holds at most
``CCWEB_MAX_STREAMS_PER_CREDENTIAL`` open streams (the operator's are not counted)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import datetime
from typing import Any

import httpx

from ccweb_store.config import Settings
from ccweb_store.domain import events as types
from tests.http_client import rpc_result
from tests.servers import serving

call = rpc_result
HEARTBEAT_S = 1.0
#: What a server may take beyond one heartbeat to close a stream (a loaded 2-core machine).
SLACK_S = 1.5


class Frames:
    """An open ``GET /events`` response read as (event type, data) pairs."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.lines = response.aiter_lines()
        self.ended_at: float | None = None

    async def _next(self) -> tuple[str, dict[str, Any]] | None:
        kind, data = "message", []
        async for line in self.lines:
            if line == "":
                if data:
                    return kind, json.loads("\n".join(data))
                continue
            if line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                kind = value
            elif field == "data":
                data.append(value)
        self.ended_at = time.monotonic()
        return None

    async def take(self) -> tuple[str, dict[str, Any]]:
        frame = await asyncio.wait_for(self._next(), 20)
        assert frame is not None, "the stream ended"
        return frame

    async def rest(self, seconds: float) -> list[tuple[str, dict[str, Any]]]:
        """Every frame until the server closes the stream, which must happen within
        ``seconds``."""
        frames = []
        async with asyncio.timeout(seconds):
            while (frame := await self._next()) is not None:
                frames.append(frame)
        return frames


@asynccontextmanager
async def events(url: str, token: str | None = None) -> AsyncIterator[Frames]:
    params = {"credential": token} if token else {}
    async with (
        httpx.AsyncClient(base_url=url, timeout=30) as client,
        client.stream("GET", "/events", params=params) as response,
    ):
        assert response.status_code == 200, await response.aread()
        yield Frames(response)


async def append(client: httpx.AsyncClient, conversation: str, text: str) -> None:
    message = {"sessionId": conversation, "role": "user", "content": text}
    await call(client, "message.append", message)


async def conversations(client: httpx.AsyncClient) -> None:
    await call(client, "session.create", {"id": "conv-a", "title": "Planner"})
    await call(client, "session.create", {"id": "conv-b", "title": "Tester"})


def kinds_of(frames: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [kind for kind, _ in frames]


# --- a stream ends with its credential ----------------------------------------------------


async def test_a_revoked_credentials_stream_gets_nothing_written_after_and_ends(
    database_url: str,
) -> None:
    with serving(database_url, CCWEB_EVENTS_HEARTBEAT_SECONDS=str(HEARTBEAT_S)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            await conversations(client)
            minted = await call(client, "credential.mint", {"sessionId": "conv-b"})
            async with events(server.url, minted["token"]) as stream:
                await append(client, "conv-b", "before the revocation")
                before = await stream.take()
                await call(
                    client, "credential.revoke", {"credentialId": minted["credential"]["id"]}
                )
                await append(client, "conv-b", "after the revocation")
                rest = await stream.rest(HEARTBEAT_S + SLACK_S)
            late = await client.get("/events", params={"credential": minted["token"]})
    assert before[0] == types.MESSAGE_APPENDED
    assert kinds_of(rest) == ["error"], rest
    assert rest[0][1]["code"] == "credential_revoked"
    assert "revoked" in rest[0][1]["message"]
    assert late.status_code == 401
    assert late.json()["error"]["code"] == "credential_revoked"


async def test_an_idle_stream_of_a_revoked_credential_closes_within_one_heartbeat(
    database_url: str,
) -> None:
    with serving(database_url, CCWEB_EVENTS_HEARTBEAT_SECONDS=str(HEARTBEAT_S)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            await conversations(client)
            minted = await call(client, "credential.mint", {"sessionId": "conv-b"})
            async with events(server.url, minted["token"]) as stream:
                await append(client, "conv-b", "seen")
                await stream.take()
                await call(
                    client, "credential.revoke", {"credentialId": minted["credential"]["id"]}
                )
                revoked_at = time.monotonic()
                rest = await stream.rest(HEARTBEAT_S + SLACK_S)
    assert [data["code"] for _, data in rest] == ["credential_revoked"]
    assert stream.ended_at is not None
    assert stream.ended_at - revoked_at <= HEARTBEAT_S + SLACK_S


async def test_an_expired_credentials_stream_closes_and_gets_nothing_written_after(
    database_url: str,
) -> None:
    with serving(database_url, CCWEB_EVENTS_HEARTBEAT_SECONDS=str(HEARTBEAT_S)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            await conversations(client)
            minted = await call(
                client, "credential.mint", {"sessionId": "conv-b", "expiresInSeconds": 2}
            )
            expires_at = datetime.fromisoformat(minted["credential"]["expiresAt"]).timestamp()
            async with events(server.url, minted["token"]) as stream:
                await append(client, "conv-b", "before the expiry")
                before = await stream.take()
                await asyncio.sleep(max(0.0, expires_at - time.time()) + 0.05)
                await append(client, "conv-b", "after the expiry")
                expired_at = time.monotonic()
                rest = await stream.rest(HEARTBEAT_S + SLACK_S)
    assert before[0] == types.MESSAGE_APPENDED
    assert [data["code"] for _, data in rest] == ["credential_expired"], rest
    assert stream.ended_at is not None
    assert stream.ended_at - expired_at <= HEARTBEAT_S + SLACK_S


async def test_a_live_credentials_stream_stays_open_past_its_heartbeats(
    database_url: str,
) -> None:
    with serving(database_url, CCWEB_EVENTS_HEARTBEAT_SECONDS=str(HEARTBEAT_S)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            await conversations(client)
            minted = await call(client, "credential.mint", {"sessionId": "conv-b"})
            async with events(server.url, minted["token"]) as stream:
                await asyncio.sleep(3 * HEARTBEAT_S)
                await append(client, "conv-b", "still listening")
                kind, data = await stream.take()
    assert kind == types.MESSAGE_APPENDED
    assert data["conversationId"] == "conv-b"


# --- streams per credential ---------------------------------------------------------------


def test_the_streams_per_credential_setting_defaults_to_eight() -> None:
    assert Settings(token=None).max_streams_per_credential == 8


async def test_a_credential_holds_at_most_its_limit_of_streams_and_the_operator_is_not_counted(
    database_url: str,
) -> None:
    with serving(database_url, CCWEB_MAX_STREAMS_PER_CREDENTIAL="2") as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            await conversations(client)
            minted = await call(client, "credential.mint", {"sessionId": "conv-b"})
            other = await call(client, "credential.mint", {"sessionId": "conv-b"})
            token = minted["token"]
            # A HEAD never streams; it must not keep a slot either.
            heads = [await client.head("/events", params={"credential": token}) for _ in range(3)]
            async with AsyncExitStack() as open_streams:
                for _ in range(2):
                    await open_streams.enter_async_context(events(server.url, token))
                refused = await answer_to_one_more(server.url, token)
                # The operator's streams and another credential's are counted apart.
                for _ in range(3):
                    await open_streams.enter_async_context(events(server.url))
                await open_streams.enter_async_context(events(server.url, other["token"]))
            # The closed streams gave their slots back.
            async with AsyncExitStack() as reopened:
                for _ in range(2):
                    await open_when_free(reopened, server.url, token)
    assert [head.status_code for head in heads] == [200, 200, 200]
    status, body = refused
    assert status == 429
    error = body["error"]
    assert error["code"] == "too_many_streams"
    assert error["limit"] == 2
    assert "CCWEB_MAX_STREAMS_PER_CREDENTIAL" in error["message"]
    assert error["setting"] == "CCWEB_MAX_STREAMS_PER_CREDENTIAL"


async def open_when_free(stack: AsyncExitStack, url: str, token: str) -> Frames:
    """A stream of ``token`` as soon as the server has a slot for it (within 10 s): a closed
    stream's slot is given back once the server notices the close."""
    deadline = time.monotonic() + 10
    while True:
        attempt = AsyncExitStack()
        client = await attempt.enter_async_context(httpx.AsyncClient(base_url=url, timeout=30))
        response = await attempt.enter_async_context(
            client.stream("GET", "/events", params={"credential": token})
        )
        if response.status_code == 200:
            await stack.enter_async_context(attempt)
            return Frames(response)
        await attempt.aclose()
        assert response.status_code == 429 and time.monotonic() < deadline
        await asyncio.sleep(0.1)


async def answer_to_one_more(url: str, token: str) -> tuple[int, Any]:
    """The status and JSON body of the answer to one more stream of ``token`` (None for a
    stream, which is closed at once)."""
    async with (
        httpx.AsyncClient(base_url=url, timeout=30) as client,
        client.stream("GET", "/events", params={"credential": token}) as response,
    ):
        if response.headers["content-type"].startswith("text/event-stream"):
            return response.status_code, None
        return response.status_code, json.loads(await response.aread())
