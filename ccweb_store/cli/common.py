"""What every ``ccweb-store`` command shares: settings from flags, failing clearly, logging."""

from __future__ import annotations

import logging
import sys
from typing import Annotated, NoReturn

import typer

from ccweb_store.config import Settings

DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="sqlite+aiosqlite:///PATH or postgresql+asyncpg://USER@HOST/DB "
        "\\[env: CCWEB_DATABASE_URL; default: sqlite+aiosqlite:///./ccweb.db]",
        show_default=False,
    ),
]


def load_settings(**overrides: object) -> Settings:
    """Environment settings with the CLI flags that were given laid on top."""
    given = {key: value for key, value in overrides.items() if value is not None}
    try:
        return Settings(**given)  # type: ignore[arg-type]
    except ValueError as exc:
        fail(f"invalid settings: {exc}")


def server_url(settings: Settings) -> str:
    """Where this machine reaches the configured server: ``http://CCWEB_HOST:CCWEB_PORT``, with
    a wildcard bind address read as loopback."""
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    return f"http://{host}:{settings.port}"


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``message`` to stderr and exit with ``code``."""
    typer.echo(f"ccweb-store: {message}", err=True)
    raise typer.Exit(code)


def setup_logging(level: str = "info") -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
