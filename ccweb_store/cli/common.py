"""What every ``ccweb-store`` command shares: settings from flags, the common options, failing
clearly, running work on the store, printing JSON."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer

from ccweb_store.cli.logs import setup_logging as setup_logging  # the commands import it here
from ccweb_store.domain.durations import parse_duration

_Call = TypeVar("_Call")

if TYPE_CHECKING:
    from ccweb_store.config import Settings
    from ccweb_store.store.uow import Store

T = TypeVar("T")

DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="sqlite+aiosqlite:///PATH or postgresql+asyncpg://USER@HOST/DB "
        "\\[env: CCWEB_DATABASE_URL; default: ccweb.db in CCWEB_DATA_DIR]",
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
    from pydantic import ValidationError

    from ccweb_store.config import Settings

    given = {key: value for key, value in overrides.items() if value is not None}
    try:
        return Settings(**given)  # type: ignore[arg-type]
    except ValidationError as exc:
        fail("invalid settings: " + "; ".join(settings_problems(exc)))
    except ValueError as exc:
        fail(f"invalid settings: {exc}")


def settings_problems(error: Any) -> list[str]:
    """Each problem of a settings ``ValidationError`` as one phrase naming its variable (the
    checks that name it themselves are kept as they are), without pydantic's links."""
    problems = []
    for problem in error.errors(include_url=False):
        message = str(problem["msg"]).removeprefix("Value error, ")
        if not problem["loc"]:
            problems.append(message)
            continue
        variable = f"CCWEB_{str(problem['loc'][0]).upper()}"
        problems.append(message if variable in message else f"{variable}: {message}")
    return problems


#: Where a command's database URL comes from, as its messages name it.
DATABASE_SETTING = "--database-url (or CCWEB_DATABASE_URL)"


def require_usable_url(settings: Settings) -> Settings:
    """``settings``, or exit 2 with one line naming the database URL (password masked) when
    ccweb-store cannot use it (``mobility.locations.checked_url``): a SQLite file named by
    the user must be in a folder that exists (only the data directory is made when new)."""
    from ccweb_store.mobility.locations import BadDatabaseUrl, checked_url, usable_url

    try:
        if settings.database_in_data_dir:
            usable_url(settings.database_url, DATABASE_SETTING)
        else:
            checked_url(settings.database_url, DATABASE_SETTING, must_exist=False)
    except BadDatabaseUrl as exc:
        fail(exc.reason, 2)
    return settings


@contextmanager
def database_failures(url: str, setting: str = DATABASE_SETTING) -> Iterator[None]:
    """Run the block; a database that cannot be used (unreachable, missing, refusing the
    login, failing) exits 1 in one line naming it and what to check, never a traceback."""
    from ccweb_store.domain.errors import DatabaseUnavailable
    from ccweb_store.store.db import shown_url
    from ccweb_store.store.failures import DatabaseError, connection_problem, driver_words

    try:
        yield
    except (DatabaseUnavailable, DatabaseError, OSError) as exc:
        problem = connection_problem(exc, url, setting)
        if problem is None:
            said = exc.message if isinstance(exc, DatabaseUnavailable) else driver_words(exc)
            problem = (
                f"{said}. Check that it is reachable and migrated to head (ccweb-store migrate)"
            )
        fail(f"cannot use the database {shown_url(url)}: {problem}", 1)


def database_settings(
    database_url: str | None, *, create: bool = False, required: bool = True
) -> Settings:
    """Settings for a command that opens the database: says on stderr which one it opens,
    and unless ``create`` (``serve``, ``migrate``, ``import-json``) refuses to go on when the
    SQLite file is not there, rather than create an empty one where the user did not mean
    (``required=False``: the command copes with no database without creating one)."""
    from ccweb_store.store.db import missing_database, prepare_database_home, shown_url

    settings = require_usable_url(load_settings(database_url=database_url))
    where = " (the data directory, CCWEB_DATA_DIR)" if settings.database_in_data_dir else ""
    typer.echo(f"ccweb-store: database {shown_url(settings.database_url)}{where}", err=True)
    if create:
        prepare_database_home(settings.database_url)
        return settings
    missing = missing_database(settings.database_url)
    if missing is not None and required:
        if settings.database_in_data_dir:
            looked = (
                f"looked in the data directory {settings.data_dir} "
                "(CCWEB_DATA_DIR, default the user data directory)"
            )
        else:
            looked = "named by --database-url or CCWEB_DATABASE_URL"
        fail(
            f"no database at {missing} ({looked}). Create it with `ccweb-store migrate` "
            "(or start the server: `ccweb-store serve`), or name an existing one with "
            "--database-url / CCWEB_DATABASE_URL.",
            1,
        )
    return settings


def server_url(settings: Settings) -> str:
    """Where this machine reaches the configured server: ``http://CCWEB_HOST:CCWEB_PORT``, with
    a wildcard bind address read as loopback."""
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    return f"http://{host}:{settings.port}"


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``message`` to stderr and exit with ``code``."""
    typer.echo(f"ccweb-store: {message}", err=True)
    raise typer.Exit(code)


def model_call(model: type[_Call], **fields: Any) -> _Call:
    """A command's call as its model (``contract/``); a value the model refuses is
    one line and exit 2, in the words the host API answers it with."""
    from ccweb_store.domain.errors import DomainError
    from ccweb_store.protocol.argument_errors import built

    try:
        return built(model, **fields)
    except DomainError as exc:
        fail(exc.message)


def duration_option(value: str | None, flag: str) -> int | None:
    """Seconds in the DURATION given to ``flag`` (None when not given); a malformed one exits
    2 naming the flag."""
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        fail(f"{flag}: {exc}")


#: The codes of the things a command names whose absence exits 3.
NOT_FOUND_CODES = frozenset({"request_not_found", "run_not_found", "credential_not_found"})


def with_store(
    database_url: str | None,
    work: Callable[[Store], Awaitable[T]],
    *,
    not_found: frozenset[str] = NOT_FOUND_CODES,
) -> T:
    """Run ``work`` on a store for ``--database-url``, turning failures into exit codes.

    Exit 2: bad arguments; 3: no such request, run or credential (the codes in
    ``not_found``); 1: the state forbids it (including a conversation it needs that is gone)
    or the database cannot be used.
    """
    import asyncio

    from ccweb_store.domain.errors import DatabaseUnavailable, DomainError, InvalidInput
    from ccweb_store.store.uow import Store

    settings = database_settings(database_url)

    async def run() -> T:
        store = Store.from_settings(settings)
        try:
            return await work(store)
        finally:
            await store.dispose()

    with database_failures(settings.database_url):
        try:
            return asyncio.run(run())
        except DatabaseUnavailable:
            raise
        except DomainError as exc:
            if exc.code in not_found:
                fail(exc.message, 3)
            fail(exc.message, 2 if isinstance(exc, InvalidInput) else 1)


def print_json(payload: Any) -> None:
    """``payload`` as indented JSON on stdout, non-ASCII text as it is."""
    typer.echo(json.dumps(payload, indent=2, ensure_ascii=False))
