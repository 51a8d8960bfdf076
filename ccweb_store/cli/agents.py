"""The commands that run on the agents' side: ``mcp-stdio`` (the ccweb tools for a client
that speaks stdio) and ``worker`` (claims runs and starts the agent command for each)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ccweb_store.cli.common import (
    DatabaseUrl,
    database_failures,
    database_settings,
    duration_option,
    fail,
    load_settings,
    server_url,
    setup_logging,
)


def known_level(value: str) -> str:
    """``--log-level`` as a level; any other word is one line and exit 2, as a setting's is."""
    from ccweb_store.config import LOG_LEVELS

    if value.lower() not in LOG_LEVELS:
        fail(f"--log-level {value!r} is not a log level: use {', '.join(LOG_LEVELS)}")
    return value.lower()


#: ``--log-level``, whose default each command chooses.
LogLevel = Annotated[str, typer.Option(help="debug, info, warning, error", callback=known_level)]


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
    log_level: LogLevel = "warning",
) -> None:
    """Serve the ccweb MCP tools on stdin/stdout (logs go to stderr).

    On the database (which must exist: it is migrated, never created) or bridged to a running
    server with --url.

    Example: ccweb-store mcp-stdio --url http://127.0.0.1:8787 --credential ccw1.…
    """
    import asyncio

    from ccweb_store.domain.context import Source

    setup_logging(log_level)
    if credential and not url:
        fail("--credential needs --url: a credential is checked by the server it was minted on")
    if not credential and not source_session:
        fail("name the conversation: --source-session ID, or --url with --credential")
    source = Source(source_session, hop_count)
    if url:
        from ccweb_store.protocol.stdio_bridge import serve_bridge

        settings = load_settings(token=token)
        asyncio.run(serve_bridge(url, settings.token, source, credential=credential))
    else:
        from ccweb_store.protocol import stdio
        from ccweb_store.store.db import serving_lock

        # Started by an agent's client, whose settings may name the wrong place: an empty
        # database made there would answer as if every conversation were gone.
        settings = database_settings(database_url)
        with serving_lock(settings.database_url), database_failures(settings.database_url):
            asyncio.run(stdio.serve_database(settings, source))


def worker(
    command: Annotated[
        str | None,
        typer.Option(
            "--command",
            help="A shell command per run instead of the built-in agents, e.g. 'my-agent "
            "{prompt}'. Placeholders (quoted for you): {prompt}, {conversation_id}, {run_id}, "
            "{hop_count}; without {prompt} the prompt goes on stdin",
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
    show_commands: Annotated[
        bool,
        typer.Option(
            "--show-commands",
            help="Print the command each agent's runs would get, then exit",
        ),
    ] = False,
    log_level: LogLevel = "info",
) -> None:
    """Claim queued runs and run the conversation's agent for each, until Ctrl-C.

    Conversations whose agent is claude run Claude Code, those of codex run
    Codex (each found on PATH), with the ccweb tools of this run's
    conversation allowed; the agent's final answer becomes the assistant
    message, and the conversation's next run resumes the agent's session.
    --command or --config replace them, per agent or conversation. It waits
    for runs by long-poll, so a run starts as soon as it is queued;
    --concurrency N runs up to N at once, each of another conversation.
    Ctrl-C once: claim no more and let running commands finish within
    --grace, then kill them and requeue their runs; twice: do that now.

    Example: ccweb-store worker --concurrency 4   (or --show-commands to see them)
    """
    import asyncio
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
    base_url = (url or server_url(settings)).rstrip("/")
    if show_commands:
        for line in commands.describe(worker_config, f"{base_url}/mcp"):
            typer.echo(line)
        return
    code = asyncio.run(
        runner.serve(
            worker_config,
            base_url=base_url,
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
