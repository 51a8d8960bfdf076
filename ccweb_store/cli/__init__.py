"""The ``ccweb-store`` command: serve, migrate and import-json here; every other command from
the module named for it (``agents``: mcp-stdio and worker; the operator's tools beside)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from ccweb_store import __version__
from ccweb_store.cli.agents import mcp_stdio, worker
from ccweb_store.cli.common import (
    DatabaseUrl,
    database_failures,
    database_settings,
    fail,
    load_settings,
    require_usable_url,
    setup_logging,
)
from ccweb_store.cli.conversations import conversations_app
from ccweb_store.cli.credentials import conversation_url, credentials_app
from ccweb_store.cli.doctor import doctor
from ccweb_store.cli.messages import messages
from ccweb_store.cli.mobility import COMMANDS as MOBILITY_COMMANDS
from ccweb_store.cli.repairs import repair_json
from ccweb_store.cli.replies import replies_app
from ccweb_store.cli.restore import restore
from ccweb_store.cli.runs import runs_app
from ccweb_store.cli.schemas import schema

app = typer.Typer(
    rich_markup_mode="markdown",
    name="ccweb-store",
    help="Durable SQL storage and cross-conversation messaging for cc-web.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"ccweb-store {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """The command group; its help is the app's."""


def serve(
    host: Annotated[
        str | None, typer.Option(help="Bind address \\[env: CCWEB_HOST; default: 127.0.0.1]")
    ] = None,
    port: Annotated[
        int | None, typer.Option(help="Port \\[env: CCWEB_PORT; default: 8787]")
    ] = None,
    database_url: DatabaseUrl = None,
    token: Annotated[
        str | None,
        typer.Option(help="Bearer token required on /mcp and /rpc \\[env: CCWEB_TOKEN]"),
    ] = None,
    log_level: Annotated[
        str | None,
        typer.Option(help="debug (adds the libraries' own lines), info, warning, error"),
    ] = None,
    log_format: Annotated[
        str | None,
        typer.Option(
            "--log-format",
            help="text, or json: one JSON object per line \\[env: CCWEB_LOG_FORMAT]",
            show_default=False,
        ),
    ] = None,
    access_log: Annotated[
        bool | None,
        typer.Option(
            "--access-log/--no-access-log",
            help="Log one line per request \\[env: CCWEB_ACCESS_LOG]",
            show_default=False,
        ),
    ] = None,
    forwarded_allow_ips: Annotated[
        str | None,
        typer.Option(
            help="Reverse proxies (comma-separated addresses) whose X-Forwarded-Proto and "
            "X-Forwarded-For are believed \\[env: CCWEB_FORWARDED_ALLOW_IPS]",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve /mcp, /rpc, /events, /healthz and /metrics, migrating the database to head first.

    Logs go to stderr: a startup line (version, database, address), then only warnings and
    errors, unless --access-log adds a line per request.

    Example: ccweb-store serve --port 8787 --access-log --log-format json
    """
    from ccweb_store.cli import serving
    from ccweb_store.store.db import prepare_database_home

    settings = require_usable_url(
        load_settings(
            host=host,
            port=port,
            database_url=database_url,
            token=token,
            log_level=log_level,
            log_format=log_format,
            access_log=access_log,
            forwarded_allow_ips=forwarded_allow_ips,
        )
    )
    # The startup line names the database; here only its directory is made, when it is new.
    try:
        prepare_database_home(settings.database_url)
    except OSError as exc:
        fail(
            f"cannot create the database's folder: {exc.strerror or exc} ({exc.filename}). "
            "Set CCWEB_DATA_DIR (or CCWEB_DATABASE_URL) to a folder you can write"
        )
    serving.serve(settings)


def migrate(
    revision: Annotated[str, typer.Argument(help="Target revision")] = "head",
    downgrade: Annotated[
        bool, typer.Option("--downgrade", help="Downgrade to REVISION instead")
    ] = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Upgrade (or downgrade) the database schema, creating the database if it is not there.

    Example: ccweb-store migrate   or   ccweb-store migrate 0008 --downgrade
    """
    import asyncio

    from ccweb_store.store import db

    settings = database_settings(database_url, create=True)
    setup_logging("warning")

    async def run() -> str | None:
        engine = db.create_engine(
            settings.database_url, busy_timeout_ms=settings.sqlite_busy_timeout_ms
        )
        try:
            if downgrade:
                await db.downgrade(engine, revision)
            else:
                await db.migrate(engine, revision)
            async with engine.connect() as connection:
                return await db.current_revision(connection)
        finally:
            await engine.dispose()

    with database_failures(settings.database_url):
        current = asyncio.run(run())
    typer.echo(f"database at revision {current or 'base'} ({settings.database_kind})")


def import_json(
    directory: Annotated[
        Path,
        typer.Argument(
            help="cc-web's state directory (holding sessions/*.json and config/)",
            show_default=False,
        ),
    ],
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Parse, validate and count; write nothing, not even a migration"
        ),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the summary as JSON on stdout")
    ] = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Import cc-web's JSON state (sessions, messages, replies); safe to run again to sync.

    Creates and migrates the database if it is not there (a dry run never does). Exits 1 when
    any file, message or reply was skipped (each is reported with its reason).

    Example: ccweb-store import-json ~/cc-web/data --dry-run
    """
    import asyncio

    from ccweb_store.importer.console import run_import

    if (
        not (directory / "sessions").is_dir()
        and not directory.joinpath("config", "cross-conversation-replies.json").is_file()
    ):
        fail(
            f"{directory} does not look like a cc-web state directory: "
            "expected sessions/*.json or config/cross-conversation-replies.json in it"
        )
    settings = database_settings(database_url, create=not dry_run, required=not dry_run)
    setup_logging("warning")
    with database_failures(settings.database_url):
        summary = asyncio.run(run_import(settings, directory, dry_run=dry_run, as_json=as_json))
    raise typer.Exit(0 if summary.ok else 1)


#: The groups ``--help`` lists the commands in, in this order.
SETUP = "Serve and set up"
CONVERSATIONS = "Conversations and replies"
RUNS = "Runs and workers"
DATA = "Data tools"
# Registered in the order --help shows them: typer lists a panel where its first command
# falls, and the command groups (credentials, conversations, replies, runs) after the
# commands.
COMMANDS: tuple[tuple[str, Callable[..., None], str], ...] = (
    ("serve", serve, SETUP),
    ("migrate", migrate, SETUP),
    ("doctor", doctor, SETUP),
    ("conversation-url", conversation_url, SETUP),
    ("schema", schema, SETUP),
    ("messages", messages, CONVERSATIONS),
    ("worker", worker, RUNS),
    ("mcp-stdio", mcp_stdio, RUNS),
    ("import-json", import_json, DATA),
    *((name, command, DATA) for name, command in MOBILITY_COMMANDS.items()),
    ("restore", restore, DATA),
    ("repair-json", repair_json, DATA),
)
for _name, _command, _panel in COMMANDS:
    app.command(_name, rich_help_panel=_panel)(_command)
for _name, _group, _panel in (
    ("credentials", credentials_app, SETUP),
    ("conversations", conversations_app, CONVERSATIONS),
    ("replies", replies_app, CONVERSATIONS),
    ("runs", runs_app, RUNS),
):
    app.add_typer(_group, name=_name, rich_help_panel=_panel)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``ccweb-store`` console script."""
    app(args=argv, prog_name="ccweb-store")
