"""What every ``ccweb-store`` command shares: settings from flags, the common options, failing
clearly, running work on the store, printing JSON."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer

from ccweb_store.cli.logs import setup_logging as setup_logging  # the commands import it here
from ccweb_store.config import Settings
from ccweb_store.domain.durations import parse_duration

if TYPE_CHECKING:
    from ccweb_store.store.uow import Store

T = TypeVar("T")

DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="sqlite+aiosqlite:///PATH or postgresql+asyncpg://USER@HOST/DB "
        "\\[env: CCWEB_DATABASE_URL; default: sqlite+aiosqlite:///./ccweb.db]",
        show_default=False,
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON (for scripts)")]
OlderThan = Annotated[
    str | None,
    typer.Option(
        "--older-than",
        metavar="DURATION",
        help="Only those created at least this long ago: 90s, 10m, 2h, 1d, 1h30m",
    ),
]
Conversation = Annotated[
    str | None,
    typer.Option("--conversation", metavar="ID", help="Only those of this conversation"),
]
Limit = Annotated[int, typer.Option(min=1, help="Print at most this many")]


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


def duration_option(value: str | None, flag: str) -> int | None:
    """Seconds in the DURATION given to ``flag`` (None when not given); a malformed one exits
    2 naming the flag."""
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        fail(f"{flag}: {exc}")


def with_store(database_url: str | None, work: Callable[[Store], Awaitable[T]]) -> T:
    """Run ``work`` on a store for ``--database-url``, turning failures into exit codes.

    Exit 2: bad arguments; 3: no such request, run or credential; 1: the state forbids it
    (including a conversation it needs that is gone) or the database cannot be used.
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    from ccweb_store.domain import errors
    from ccweb_store.domain.errors import DomainError, InvalidInput
    from ccweb_store.store.uow import Store

    settings = load_settings(database_url=database_url)

    async def run() -> T:
        store = Store.from_settings(settings)
        try:
            return await work(store)
        finally:
            await store.dispose()

    try:
        return asyncio.run(run())
    except DomainError as exc:
        if exc.code in (
            errors.REQUEST_NOT_FOUND,
            errors.RUN_NOT_FOUND,
            errors.CREDENTIAL_NOT_FOUND,
        ):
            fail(exc.message, 3)
        fail(exc.message, 2 if isinstance(exc, InvalidInput) else 1)
    except (SQLAlchemyError, OSError) as exc:
        shown = make_url(settings.database_url).render_as_string(hide_password=True)
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        fail(
            f"cannot use the database {shown}: {reason}. Check that it is reachable and "
            "migrated to head (ccweb-store migrate).",
            1,
        )


def print_json(payload: Any) -> None:
    """``payload`` as indented JSON on stdout, non-ASCII text as it is."""
    typer.echo(json.dumps(payload, indent=2, ensure_ascii=False))
