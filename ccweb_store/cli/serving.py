"""``ccweb-store serve``: the checks before the server starts, its logs, and uvicorn.

uvicorn is given no logging configuration of its own (``log_config=None``): its records go
to the handler ``logs.setup_logging`` puts on the root logger, as text or JSON lines on
stderr. Its access log is made only with ``--access-log``; otherwise uvicorn does not even
format the line.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
from pathlib import Path
from typing import NoReturn

import typer
import uvicorn

from ccweb_store import __version__
from ccweb_store.cli.common import DATABASE_SETTING, fail
from ccweb_store.cli.logs import setup_logging
from ccweb_store.config import Settings, misspelt_variables
from ccweb_store.store.db import shown_url, unreachable

log = logging.getLogger("ccweb_store")

#: The variable of ``prometheus-client``'s multi-process mode (``http/metrics.py``).
MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"


def refusal(settings: Settings) -> str | None:
    """Why these settings must not serve, or None."""
    if not settings.host_is_loopback and not settings.token:
        return (
            f"refusing to listen on non-loopback host {settings.host!r} without a token: "
            "set CCWEB_TOKEN (or --token) so other machines must authenticate, "
            "or bind to 127.0.0.1"
        )
    if settings.metrics_public and not settings.host_is_loopback:
        return (
            f"CCWEB_METRICS_PUBLIC=1 serves /metrics without a token, which is allowed on a "
            f"loopback bind only, not on {settings.host!r}: unset it and scrape with the "
            "operator token (Authorization: Bearer <CCWEB_TOKEN>)"
        )
    directory = os.environ.get(MULTIPROC_DIR_ENV)
    if directory and not (Path(directory).is_dir() and os.access(directory, os.W_OK | os.X_OK)):
        return (
            f"{MULTIPROC_DIR_ENV}={directory!r} is not a writable directory: create it (the "
            "same one for every server process on this host, emptied before the first starts) "
            f"or unset {MULTIPROC_DIR_ENV} to count per process"
        )
    return None


def refuse(settings: Settings, problem: str, code: int = 2) -> NoReturn:
    """Stop before serving: one line on stderr, as a JSON log record with ``--log-format
    json`` (a log collector reads it like any other), else as the commands' plain line."""
    if settings.log_format == "json":
        log.error("%s", problem)
        raise typer.Exit(code)
    fail(problem, code)


def port_taken(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on (in use, or an address this machine does not
    have), or None: checked before the app starts, so the mistake is one line."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host.strip("[]"), port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return (
                    f"port {port} on {host} is in use (another ccweb-store, or another "
                    "program): stop it, or pick another port with --port or CCWEB_PORT"
                )
            return (
                f"cannot listen on {host}:{port}: {error.strerror or error}. Bind to an "
                "address of this machine (--host or CCWEB_HOST; default 127.0.0.1)"
            )
    return None


def startup_line(settings: Settings) -> tuple[str, dict[str, object]]:
    """The one line the server logs once it listens, and its parts (for JSON logs)."""
    database = shown_url(settings.database_url)
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    address = f"http://{host}:{settings.port}"
    fields: dict[str, object] = {
        "version": __version__,
        "database": database,
        "listen": address,
        "accessLog": settings.access_log,
        "forwardedAllowIps": list(settings.forwarded_allow_ips),
        "metricsNeedToken": bool(settings.token) and not settings.metrics_public,
    }
    access = "access log on" if settings.access_log else "access log off (--access-log)"
    message = f"ccweb-store {__version__} listening on {address}, database {database}; {access}"
    return message, fields


def serve(settings: Settings) -> None:
    """Check ``settings``, set up the logs and run the server until it is stopped."""
    from ccweb_store.http.app import create_app
    from ccweb_store.services.credentials import RedactCredentials
    from ccweb_store.store.db import serving_lock

    setup_logging(settings.log_level, settings.log_format)
    for line in misspelt_variables(os.environ):
        log.warning("%s", line)
    # Each mistake before the server starts is one line on stderr and exit 2 (1: the
    # database server is not answering), never a traceback.
    problem = refusal(settings) or port_taken(settings.host, settings.port)
    if problem is not None:
        refuse(settings, problem)
    reason = asyncio.run(unreachable(settings.database_url, DATABASE_SETTING))
    if reason is not None:
        shown = shown_url(settings.database_url)
        refuse(settings, f"cannot open the database {shown}: {reason}", 1)
    config = uvicorn.Config(
        create_app(settings, freeze_gc_after_startup=True),
        host=settings.host,
        port=settings.port,
        log_config=None,
        log_level=None,
        access_log=settings.access_log,
        # X-Forwarded-Proto and X-Forwarded-For are believed from the listed proxies only:
        # the scheme then makes the console cookie Secure and is the console's own origin,
        # and the address is the client's in the access log. No proxy listed, none is.
        proxy_headers=bool(settings.forwarded_allow_ips),
        forwarded_allow_ips=list(settings.forwarded_allow_ips) or None,
        server_header=False,
    )
    # The access log would show the token of a request to /mcp?credential=….
    logging.getLogger("uvicorn.access").addFilter(RedactCredentials())
    # Held until the process ends: `ccweb-store restore` refuses while it is.
    with serving_lock(settings.database_url) as shared:
        if shared:
            log.warning(
                "another ccweb-store process (serve, or mcp-stdio on the database) has %s "
                "open: the two take turns on SQLite's one write lock, so each is slower. Run "
                "one server per SQLite file, or use PostgreSQL for several",
                shown_url(settings.database_url),
            )
        AnnouncingServer(config, *startup_line(settings)).run()


class AnnouncingServer(uvicorn.Server):
    """uvicorn's server, logging ``startup_line`` once it listens and a line once it has
    stopped: in place of uvicorn's own lines, which ``logs.setup_logging`` keeps for
    ``--log-level debug``. (A failed start exits 3 with uvicorn's error; after a signal,
    uvicorn raises the signal again once shut down, so nothing may follow ``run``.)"""

    def __init__(self, config: uvicorn.Config, line: str, fields: dict[str, object]) -> None:
        super().__init__(config)
        self.line = line
        self.fields = fields

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            log.info("%s", self.line, extra={"fields": self.fields})

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)
        log.info("ccweb-store stopped")
