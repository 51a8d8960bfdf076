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
from ccweb_store.cli.tables import print_table

if TYPE_CHECKING:
    from rich.table import Table

credentials_app = typer.Typer(
    rich_markup_mode="markdown",
    help="List and revoke conversation credentials (mint one with conversation-url).",
    no_args_is_help=True,
)


def mcp_url(base_url: str, token: str) -> str:
    """The MCP URL that carries ``token``: ``<base>/mcp?credential=<token>``."""
    base = base_url.rstrip("/")
    if base.endswith("/mcp"):
        base = base[: -len("/mcp")]
    return f"{base}/mcp?credential={token}"


#: The MCP clients ``conversation-url --client`` writes a setup for.
CLIENTS = ("claude", "codex", "stdio")


def client_setup(client: str, base_url: str, url: str, token: str) -> str:
    """What configures ``client`` to speak MCP as the credential's conversation: a command
    line, or TOML lines for Codex's ``config.toml``."""
    import shlex

    if client == "claude":
        return f"claude mcp add --transport http ccweb {shlex.quote(url)}"
    if client == "codex":
        return f'[mcp_servers.ccweb]\nurl = "{url}"'
    server = base_url.rstrip("/").removesuffix("/mcp")
    return (
        f"CCWEB_CREDENTIAL={shlex.quote(token)} {shlex.join(ccweb_store_command())} "
        f"mcp-stdio --url {shlex.quote(server)}"
    )


def ccweb_store_command() -> list[str]:
    """How to run this ccweb-store from anywhere: its script's absolute path, else
    ``python -m ccweb_store`` with this interpreter."""
    import shutil
    import sys
    from pathlib import Path

    script = Path(sys.argv[0])
    if script.name == "ccweb-store" and script.exists():
        return [str(script.absolute())]
    found = shutil.which("ccweb-store")
    return [found] if found else [sys.executable, "-m", "ccweb_store"]


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
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url",
            help="The server as the agent reaches it \\[default: http://CCWEB_HOST:CCWEB_PORT]",
            show_default=False,
        ),
    ] = None,
    client: Annotated[
        str | None,
        typer.Option(
            "--client",
            metavar="CLIENT",
            help="Print a ready client setup instead of the bare URL: claude (a `claude mcp "
            "add` command), codex (~/.codex/config.toml lines) or stdio (an mcp-stdio bridge "
            "command)",
            show_default=False,
        ),
    ] = None,
    as_json: AsJson = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Mint a credential bound to one conversation and print its MCP URL (or, with
    --client, the client setup that uses it).

    An agent configured with this URL acts as that conversation only; give agents this,
    never CCWEB_TOKEN. The URL is printed once: keep it like a password. Revoke it with
    `ccweb-store credentials revoke ID`.

    With --client, the credential is labelled with the client's name (or --label), and the
    conversation's earlier live credentials of that label are revoked: running it again for
    the same client replaces its credential instead of adding one.

    Example: ccweb-store conversation-url conv_0123 --client claude --expires-in 30d
    """
    from ccweb_store.domain.host_calls import MintCredential
    from ccweb_store.protocol.shapes import minted_out
    from ccweb_store.services.credentials import mint_credential

    if client is not None and client not in CLIENTS:
        fail(f"--client {client!r}: use one of {', '.join(CLIENTS)}")
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
    )
    if base_url is None:
        base_url = server_url(load_settings())
    minted = minted_out(
        with_store(
            database_url,
            lambda store: mint_credential(store, call, replace_label=client is not None),
        )
    )
    url = mcp_url(base_url, minted["token"])
    credential = minted["credential"]
    setup = client_setup(client, base_url, url, minted["token"]) if client else None
    if as_json:
        print_json({**minted, "url": url, **({"client": client, "setup": setup} if client else {})})
        return
    typer.echo(setup if setup is not None else url)
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
    from rich import box
    from rich.table import Table

    table = Table(title="Conversation credentials", box=box.SIMPLE_HEAD)
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
    from ccweb_store.domain.host_calls import ListCredentials
    from ccweb_store.domain.ids import MAX_PAGE
    from ccweb_store.protocol.shapes import credentials_out
    from ccweb_store.services.credentials import list_credentials

    query = model_call(
        ListCredentials,
        include_inactive=include_inactive,
        limit=min(limit, MAX_PAGE),
        session_id=conversation,
    )
    listed = credentials_out(with_store(database_url, lambda store: list_credentials(store, query)))
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
    from ccweb_store.domain.host_calls import RevokeCredential
    from ccweb_store.protocol.shapes import credential_out
    from ccweb_store.services.credentials import revoke_credential

    call = model_call(RevokeCredential, credential_id=credential_id)
    revoked = credential_out(with_store(database_url, lambda store: revoke_credential(store, call)))
    if as_json:
        print_json(revoked)
    else:
        typer.echo(
            f"credential {revoked['id']} of conversation {revoked['sessionId']}: "
            f"revoked at {revoked['revokedAt']}"
        )
