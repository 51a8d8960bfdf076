"""Conversation credentials on the command line: ``conversation-url`` mints one and prints its
MCP URL; ``credentials list|revoke`` inspect and withdraw them.

They work on the database directly (``--database-url``), through the same service functions
as the host API's ``credential.*``; the signing key comes from ``CCWEB_CREDENTIAL_SECRET`` when
the server uses one, so set it here too. The key itself is never printed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ccweb_store.cli.common import (
    AsJson,
    Conversation,
    DatabaseUrl,
    Limit,
    duration_option,
    fail,
    load_settings,
    model_call,
    print_json,
    server_url,
    with_store,
)
from ccweb_store.cli.remote import ServerUrl
from ccweb_store.cli.tables import new_table, print_table

if TYPE_CHECKING:
    from rich.table import Table

credentials_app = typer.Typer(
    rich_markup_mode="markdown",
    help="List and revoke conversation credentials (mint one with conversation-url).",
    no_args_is_help=True,
)


def mcp_url(base_url: str, token: str) -> str:
    """The MCP URL that carries ``token``: ``<base>/mcp?credential=<token>``."""
    return f"{server_base(base_url)}/mcp?credential={token}"


def server_base(url: str) -> str:
    """A server's base URL, given with or without ``/mcp`` or ``/rpc``."""
    base = url.rstrip("/")
    for suffix in ("/mcp", "/rpc"):
        base = base.removesuffix(suffix)
    return base


def answers_there(base: str) -> bool:
    """Whether a ccweb-store server answers ``GET <base>/healthz``."""
    import httpx

    try:
        response = httpx.get(f"{base}/healthz", timeout=3.0)
        return response.status_code == 200 and "status" in response.json()
    except (httpx.HTTPError, ValueError):
        return False


def conversation_url(
    conversation_id: Annotated[
        str, typer.Argument(help="The conversation the credential speaks for", show_default=False)
    ],
    expires_in: Annotated[
        str | None,
        typer.Option(
            "--expires-in", metavar="DURATION", help="Lifetime: 90s, 10m, 2h, 1d (default: none)"
        ),
    ] = None,
    label: Annotated[
        str | None,
        typer.Option(
            help="A note shown by `credentials list` (with --client, the client's name by default)",
            show_default=False,
        ),
    ] = None,
    hop_count: Annotated[
        int, typer.Option("--hop-count", min=0, help="Least hop count of the sends made with it")
    ] = 0,
    server: ServerUrl = None,
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url",
            help="The server as the agent reaches it, when not as --server "
            "\\[default: --server, else CCWEB_URL, else http://CCWEB_HOST:CCWEB_PORT]",
            show_default=False,
        ),
    ] = None,
    client: Annotated[
        str | None,
        typer.Option(
            "--client",
            metavar="CLIENT",
            help="Print a ready setup for claude (a `claude mcp add-json` command) or codex "
            "(`codex mcp add`), with the credential in a header or an environment variable",
            show_default=False,
        ),
    ] = None,
    stdio: Annotated[
        bool,
        typer.Option(
            "--stdio",
            help="With --client: the client starts `ccweb-store mcp-stdio` bridged to the "
            "server, instead of speaking HTTP to it",
        ),
    ] = False,
    as_json: AsJson = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Mint a credential bound to one conversation and print its MCP URL (or, with
    --client, the client setup that uses it).

    An agent configured with it acts as that conversation only; give agents this,
    never CCWEB_TOKEN. The credential is printed once: keep it like a password.
    Revoke it with `ccweb-store credentials revoke ID`.

    The URL names the server given with --server (which also mints the credential,
    with the operator token in CCWEB_TOKEN), else CCWEB_URL, else CCWEB_HOST and
    CCWEB_PORT; a line on stderr warns when nothing answers there.

    With --client, the credential is labelled with the client's name (or --label), and the
    conversation's earlier live credentials of that label are revoked: running it again for
    the same client replaces its credential instead of adding one.

    Example: ccweb-store conversation-url conv_0123 --client claude --server http://127.0.0.1:8787
    """
    import os

    from ccweb_store.cli.client_setups import CLIENTS, setup_lines
    from ccweb_store.cli.remote import operator_call
    from ccweb_store.contract.credentials import MintCredential

    if client == "stdio":
        fail("--client stdio: use --client claude --stdio or --client codex --stdio")
    if client is not None and client not in CLIENTS:
        fail(f"--client {client!r}: use one of {', '.join(CLIENTS)}")
    if stdio and client is None:
        fail("--stdio goes with --client claude or --client codex")
    if client is not None and label is None:
        label = client  # the client's credential: minting its setup again replaces it
    expires_in_seconds = duration_option(expires_in, "--expires-in")
    if expires_in_seconds is not None and expires_in_seconds < 1:
        fail("--expires-in: use at least 1s, or leave it out for a credential that never expires")
    call = model_call(
        MintCredential,
        session_id=conversation_id,
        hop_count=hop_count,
        label=label,
        expires_in_seconds=expires_in_seconds,
        replace_label=client is not None,
    )
    reached = server_base(
        base_url or server or os.environ.get("CCWEB_URL") or server_url(load_settings())
    )
    minted = operator_call(
        "credential.mint",
        call,
        server=server,
        database_url=database_url,
    )
    if not answers_there(reached):
        typer.echo(
            f"ccweb-store: warning: no ccweb-store server answers at {reached} (GET /healthz); "
            "name the one your agents reach with --server URL (or CCWEB_URL, or --base-url)",
            err=True,
        )
    url = mcp_url(reached, minted["token"])
    credential = minted["credential"]
    lines = (
        setup_lines(client, server=reached, token=minted["token"], stdio=stdio)
        if client is not None
        else [url]
    )
    if as_json:
        setup = {"client": client, "stdio": stdio, "setup": "\n".join(lines)} if client else {}
        print_json({**minted, "url": url, **setup})
        return
    for line in lines:
        typer.echo(line)
    expiry = f"expires {credential['expiresAt']}" if credential["expiresAt"] else "never expires"
    typer.echo(
        f"credential {credential['id']} for conversation {conversation_id} ({expiry}); "
        f"revoke it with: ccweb-store credentials revoke {credential['id']}",
        err=True,
    )
    if revoked := minted.get("revoked"):
        ids = ", ".join(earlier["id"] for earlier in revoked)
        plural = "credential" if len(revoked) == 1 else "credentials"
        typer.echo(f"revoked {len(revoked)} earlier {plural} for this client: {ids}", err=True)


def _credentials_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    table = new_table("Conversation credentials")
    table.add_column("Credential", no_wrap=True)
    table.add_column("Conversation", no_wrap=True)
    table.add_column("Status", no_wrap=True)
    table.add_column("Hops", justify="right", no_wrap=True)
    table.add_column("Created", no_wrap=True)
    table.add_column("Expires", no_wrap=True)
    table.add_column("Label", overflow="fold")
    for row in rows:
        status = "active" if row["active"] else "revoked" if row["revokedAt"] else "expired"
        table.add_row(
            row["id"],
            row["sessionId"],
            status,
            str(row["hopCount"]),
            row["createdAt"],
            row["expiresAt"] or "never",
            row["label"] or "",
            style=None if row["active"] else "dim",
        )
    return table


@credentials_app.command("list")
def credentials_list(
    conversation: Conversation = None,
    include_inactive: Annotated[
        bool, typer.Option("--all", help="Also the revoked and expired ones")
    ] = False,
    limit: Limit = 100,
    as_json: AsJson = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Credentials, newest first (active ones only unless --all). Tokens are never shown.

    Example: ccweb-store credentials list --conversation conv_0123 --all
    """
    from ccweb_store.contract.credentials import ListCredentials
    from ccweb_store.domain.ids import MAX_PAGE
    from ccweb_store.services.credentials import list_credentials

    query = model_call(
        ListCredentials,
        include_inactive=include_inactive,
        limit=min(limit, MAX_PAGE),
        session_id=conversation,
    )
    listed = with_store(database_url, lambda store: list_credentials(store, query)).model_dump()
    rows = listed["credentials"]
    if as_json:
        print_json({"credentials": rows, "count": len(rows)})
    elif not rows:
        typer.echo("No credentials match.")
    else:
        print_table(_credentials_table(rows))


@credentials_app.command("revoke")
def credentials_revoke(
    credential_id: Annotated[str, typer.Argument(help="The credential id (cred_…)")],
    as_json: AsJson = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Withdraw a credential: the next request that presents it is refused (exit 3: unknown).

    Example: ccweb-store credentials revoke cred_0123
    """
    from ccweb_store.contract.credentials import RevokeCredential
    from ccweb_store.services.credentials import revoke_credential

    call = model_call(RevokeCredential, credential_id=credential_id)
    revoked = with_store(database_url, lambda store: revoke_credential(store, call)).model_dump()
    if as_json:
        print_json(revoked)
    else:
        typer.echo(
            f"credential {revoked['id']} of conversation {revoked['sessionId']}: "
            f"revoked at {revoked['revokedAt']}"
        )
