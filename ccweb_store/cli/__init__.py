"""The ``ccweb-store`` command: serve, migrate, import-json, mcp-stdio, worker,
conversation-url, and the operator tools (repair-json among them)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from ccweb_store import __version__
from ccweb_store.cli.common import (
    DatabaseUrl,
    database_settings,
    duration_option,
    fail,
    load_settings,
    require_usable_url,
    server_url,
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


app.add_typer(replies_app, name="replies")
app.add_typer(runs_app, name="runs")
app.add_typer(credentials_app, name="credentials")
app.add_typer(conversations_app, name="conversations")
app.command()(doctor)
app.command()(messages)
app.command("conversation-url")(conversation_url)
app.command("repair-json")(repair_json)
app.command()(restore)
for _name, _command in MOBILITY_COMMANDS.items():
    app.command(_name)(_command)


@app.command()
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


@app.command()
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

    current = asyncio.run(run())
    typer.echo(f"database at revision {current or 'base'} ({settings.database_kind})")


@app.command("import-json")
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
    summary = asyncio.run(run_import(settings, directory, dry_run=dry_run, as_json=as_json))
    raise typer.Exit(0 if summary.ok else 1)


@app.command("mcp-stdio")
def mcp_stdio(
    source_session: Annotated[
        str | None,
        typer.Option(
            "--source-session",
            help="Id of the conversation whose agent uses these tools",
            show_default=False,
        ),
    ] = None,
    hop_count: Annotated[
        int, typer.Option("--hop-count", min=0, help="Hops that led to the current run")
    ] = 0,
    url: Annotated[
        str | None,
        typer.Option(help="Forward to a running server (e.g. http://127.0.0.1:8787)"),
    ] = None,
    token: Annotated[
        str | None, typer.Option(help="Bearer token of that server \\[env: CCWEB_TOKEN]")
    ] = None,
    credential: Annotated[
        str | None,
        typer.Option(
            help="With --url: a conversation credential (ccw1.…) instead of --source-session "
            "and the operator token",
            envvar="CCWEB_CREDENTIAL",
            show_default=False,
        ),
    ] = None,
    database_url: DatabaseUrl = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning, error")] = "warning",
) -> None:
    """Serve the ccweb MCP tools on stdin/stdout (logs go to stderr).

    On the database (which must exist: it is migrated, never created) or bridged to a running
    server with --url.

    Example: ccweb-store mcp-stdio --url http://127.0.0.1:8787 --credential ccw1.…
    """
    from ccweb_store.domain.context import Source
    from ccweb_store.protocol import stdio
    from ccweb_store.store.db import serving_lock

    setup_logging(log_level)
    if credential and not url:
        fail("--credential needs --url: a credential is checked by the server it was minted on")
    if not credential and not source_session:
        fail("name the conversation: --source-session ID, or --url with --credential")
    source = Source(source_session, hop_count)
    if url:
        settings = load_settings(token=token)
        asyncio.run(stdio.serve_bridge(url, settings.token, source, credential=credential))
    else:
        # Started by an agent's client, whose settings may name the wrong place: an empty
        # database made there would answer as if every conversation were gone.
        settings = database_settings(database_url)
        with serving_lock(settings.database_url):
            asyncio.run(stdio.serve_database(settings, source))


@app.command()
def worker(
    command: Annotated[
        str | None,
        typer.Option(
            "--command",
            help="Shell command per run, e.g. 'claude -p {prompt}'. Placeholders (quoted for "
            "you): {prompt}, {conversation_id}, {run_id}, {hop_count}; without {prompt} the "
            "prompt goes on stdin",
            show_default=False,
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="TOML: command, timeout, \\[agents.<agent>] and \\[conversations.<id>] overrides",
            show_default=False,
        ),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(
            help="The server \\[default: http://CCWEB_HOST:CCWEB_PORT]",
            envvar="CCWEB_URL",
            show_default=False,
        ),
    ] = None,
    token: Annotated[
        str | None, typer.Option(help="The server's operator token \\[env: CCWEB_TOKEN]")
    ] = None,
    worker_id: Annotated[
        str | None,
        typer.Option(
            "--worker-id", help="Name in run leases \\[default: HOST-PID]", show_default=False
        ),
    ] = None,
    lease_seconds: Annotated[
        int, typer.Option("--lease-seconds", min=1, help="Lease per run, renewed every third")
    ] = 300,
    timeout: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION",
            help="Kill a command and fail its run after this long: 90s, 30m, 2h \\[default: 1h]",
            show_default=False,
        ),
    ] = None,
    concurrency: Annotated[
        int,
        typer.Option(
            "--concurrency", min=1, max=64, help="Runs at once, each of another conversation"
        ),
    ] = 1,
    grace: Annotated[
        float,
        typer.Option(
            "--grace",
            min=0,
            metavar="SECONDS",
            help="After Ctrl-C/SIGTERM, how long running commands may go on before they are "
            "killed and their runs requeued",
        ),
    ] = 30.0,
    poll_interval: Annotated[
        float | None, typer.Option("--poll-interval", hidden=True, help="No longer used")
    ] = None,
    once: Annotated[
        bool,
        typer.Option(
            "--once",
            help="Work on at most one run, then exit: 0 if none or it succeeded, 1 if it failed",
        ),
    ] = False,
    kind: Annotated[
        list[str] | None,
        typer.Option(
            "--kind",
            help="Only runs of this kind: user_turn, cross_conversation, reply_auto_run (repeat)",
            show_default=False,
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning, error")] = "info",
) -> None:
    """Claim queued runs and run an agent command for each, until Ctrl-C.

    It waits for runs by long-poll, so a run starts as soon as it is queued;
    --concurrency N runs up to N at once, each of another conversation. The
    command gets CCWEB_MCP_URL, an MCP URL bound to the run's conversation
    (and CCWEB_CONVERSATION_ID, CCWEB_RUN_ID, CCWEB_HOP_COUNT); its stdout
    becomes the assistant message. Ctrl-C once: claim no more and let running
    commands finish within --grace, then kill them and requeue their runs;
    twice: do that now.

    Example: ccweb-store worker --command 'claude -p {prompt}' --concurrency 4
    """
    import logging
    import os
    import socket

    from ccweb_store.worker import config as commands
    from ccweb_store.worker import runner

    setup_logging(log_level)
    if log_level.lower() != "debug":  # a line per HTTP call would drown the one per run
        logging.getLogger("httpx").setLevel(logging.WARNING)
    if poll_interval is not None:
        logging.getLogger("ccweb_store.worker").warning(
            "--poll-interval is no longer used (the worker waits for runs by long-poll): drop it"
        )
    seconds = duration_option(timeout, "--timeout")
    try:
        worker_config = commands.load_config(
            config, command=command, timeout=None if seconds is None else float(seconds)
        )
    except commands.ConfigError as exc:
        fail(str(exc))
    settings = load_settings(token=token)
    code = asyncio.run(
        runner.serve(
            worker_config,
            base_url=url or server_url(settings),
            token=settings.token,
            worker_id=worker_id or f"{socket.gethostname()}-{os.getpid()}",
            lease_seconds=lease_seconds,
            concurrency=concurrency,
            grace_seconds=grace,
            once=once,
            kinds=kind,
        )
    )
    raise typer.Exit(code)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``ccweb-store`` console script."""
    app(args=argv, prog_name="ccweb-store")
