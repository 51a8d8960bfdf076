"""The worker's one way to the server: JSON-RPC calls to ``/rpc`` with the operator token."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import httpx

#: How long one call may take before the transport gives up on it.
CALL_TIMEOUT_SECONDS = 60.0


class HostError(Exception):
    """A JSON-RPC error from the server (``code`` is its ``data.code``, e.g. ``lease_lost``)."""

    def __init__(self, method: str, message: str, code: str | None) -> None:
        super().__init__(f"{method}: {message}")
        self.code = code


class Unusable(Exception):
    """The server cannot be used at all (refused the token, is not a ccweb-store server)."""


class HostClient:
    """JSON-RPC calls to the server's ``/rpc`` with the operator token."""

    def __init__(self, base_url: str, token: str | None) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=httpx.Timeout(CALL_TIMEOUT_SECONDS)
        )
        self._ids = itertools.count(1)

    async def close(self) -> None:
        await self._http.aclose()

    async def call(self, method: str, params: Mapping[str, Any], *, waits: float = 0.0) -> Any:
        """The result of ``method``; ``HostError`` for a JSON-RPC error, ``Unusable`` when
        the server refuses us; transport errors (``httpx.TransportError``) pass through.
        ``waits``: how long the server may hold the call on purpose (a long-poll), on top of
        the usual time a call may take."""
        message = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}
        response = await self._http.post(
            "/rpc", json=message, timeout=httpx.Timeout(CALL_TIMEOUT_SECONDS + waits)
        )
        if response.status_code == 401:
            given = "a wrong operator token" if self.token else "no operator token"
            raise Unusable(
                f"{self.base_url} refused this worker: it sent {given}. Start the worker with "
                "the server's CCWEB_TOKEN (the CCWEB_TOKEN variable, or --token)"
            )
        try:
            body = response.json()
        except ValueError:
            raise Unusable(
                f"{self.base_url}/rpc answered HTTP {response.status_code} without JSON: "
                "is --url a ccweb-store server?"
            ) from None
        if not isinstance(body, dict) or ("result" not in body and "error" not in body):
            raise Unusable(f"{self.base_url}/rpc answered something that is not JSON-RPC")
        if "error" in body:
            error = body["error"] or {}
            data = error.get("data")
            code = data.get("code") if isinstance(data, dict) else None
            raise HostError(method, str(error.get("message")), code)
        return body["result"]


def _error_message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}"


def describe(exc: BaseException) -> str:
    """An exception in one phrase for a log line: its type, and its text when it has one."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
