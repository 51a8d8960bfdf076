"""The operator commands' two ways to their data: the database directly, or a running
server's ``/rpc`` (``--server URL``, the operator token from ``CCWEB_TOKEN``).

Each command names the host API method and the service function behind it; both give the
same JSON result, so the command prints the same either way. Over HTTP the exit codes are
the same as on the database: 2 bad input, 3 not found, 1 anything else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from ccweb_store.cli.common import NOT_FOUND_CODES, fail, load_settings, with_store

if TYPE_CHECKING:
    from pydantic import BaseModel


ServerUrl = Annotated[
    str | None,
    typer.Option(
        "--server",
        metavar="URL",
        help="Ask a running server (its /rpc, e.g. http://127.0.0.1:8787) instead of opening "
        "the database; the token comes from CCWEB_TOKEN",
        show_default=False,
    ),
]
#: Seconds an operator call may take before the command gives up.
TIMEOUT_SECONDS = 60.0
#: The JSON-RPC error code of invalid parameters.
INVALID_PARAMS = -32602

_Call = TypeVar("_Call", bound="BaseModel")
_Result = TypeVar("_Result")


def operator_call(
    method: str,
    call: BaseModel,
    *,
    server: str | None,
    database_url: str | None,
    not_found: frozenset[str] = NOT_FOUND_CODES,
) -> Any:
    """``method``'s service on the database (its row of the registry), or ``method`` on the
    server's ``/rpc`` with ``call`` (its input model) as the wire params when ``server`` is
    given: the same JSON either way. Failures exit as ``with_store``'s do."""
    if server is None:
        from ccweb_store.protocol.registry import get_method

        operation = get_method(method)
        assert operation is not None, method
        result = with_store(
            database_url, lambda store: operation.handler(store, call), not_found=not_found
        )
        return operation.dump(result)
    if database_url is not None:
        fail("--server and --database-url name two places: give one")
    params = call.model_dump(mode="json", by_alias=True, exclude_none=True)
    return rpc_call(server, method, params, not_found=not_found)


def rpc_endpoint(server: str) -> str:
    """``<server>/rpc`` for a server's base URL (given with or without ``/rpc``)."""
    base = server.rstrip("/")
    if not base.startswith(("http://", "https://")):
        fail(f"--server {server!r}: give the server's URL, e.g. http://127.0.0.1:8787")
    return base if base.endswith("/rpc") else f"{base}/rpc"


def rpc_call(
    server: str,
    method: str,
    params: Mapping[str, Any],
    *,
    not_found: frozenset[str] = NOT_FOUND_CODES,
) -> Any:
    """Call ``method`` on the server's host API and return its result, or exit saying what
    went wrong and what to do."""
    import httpx

    url = rpc_endpoint(server)
    token = load_settings().token
    typer.echo(f"ccweb-store: server {url}", err=True)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = {"jsonrpc": "2.0", "id": 1, "method": method, "params": dict(params)}
    try:
        response = httpx.post(url, json=request, headers=headers, timeout=TIMEOUT_SECONDS)
    except httpx.HTTPError as exc:
        fail(
            f"cannot reach the server at {url}: {exc or type(exc).__name__}. Is it running "
            "(ccweb-store serve)? Or leave out --server to open the database directly.",
            1,
        )
    if response.status_code == 401:
        fail(
            f"the server at {url} refused the request: set CCWEB_TOKEN to the server's "
            "operator token (the operator's, never an agent's: docs/credentials.md)",
            1,
        )
    try:
        answer = response.json()
    except ValueError:
        fail(f"the server at {url} answered HTTP {response.status_code} without JSON", 1)
    if not isinstance(answer, dict):
        fail(f"the server at {url} answered HTTP {response.status_code}: {answer!r}", 1)
    error = answer.get("error")
    if isinstance(error, dict):
        data = error.get("data")
        code = str(data.get("code", "")) if isinstance(data, dict) else ""
        message = str(error.get("message", "the server refused the call"))
        if error.get("code") == -32601:
            fail(f"the server at {url} does not know {method}: upgrade it ({message})", 1)
        if code in not_found:
            fail(message, 3)
        fail(
            message, 2 if code.startswith("invalid_") or error.get("code") == INVALID_PARAMS else 1
        )
    if "result" not in answer:
        fail(f"the server at {url} answered HTTP {response.status_code} without a result", 1)
    return answer["result"]
