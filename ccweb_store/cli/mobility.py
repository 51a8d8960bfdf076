"""Moving a database: ``copy`` (whole, to another engine), ``backup`` (a consistent copy of a
SQLite file in use), ``export-json`` (back to cc-web's JSON layout). The work is
``ccweb_store.mobility``'s; this module reads the options, shows progress and reports."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from ccweb_store.cli.common import AsJson, DatabaseUrl, fail, load_settings, print_json

if TYPE_CHECKING:
    from ccweb_store.config import Settings
    from ccweb_store.mobility.copy import CopyReport, Progress

T = TypeVar("T")

#: Seconds between plain progress lines when stderr is not a terminal.
PLAIN_PROGRESS_EVERY_S = 2.0


def _shown(settings: Settings) -> str:
    from ccweb_store.store.db import shown_url

    return shown_url(settings.database_url)


def _database_url(url: str, flag: str, *, must_exist: bool) -> str:
    """``url`` checked (``mobility.locations.checked_url``); a bad one exits 2 in one line."""
    from ccweb_store.mobility.locations import BadDatabaseUrl, checked_url

    try:
        return checked_url(url, flag, must_exist=must_exist)
    except BadDatabaseUrl as exc:
        fail(exc.reason, 2)


def _missing_sqlite_file(settings: Settings) -> bool:
    """A SQLite file that is not there (connecting would create an empty one); a URL no
    database of ccweb-store's can have exits 2 in one line."""
    from ccweb_store.store.urls import url_parts

    url = _database_url(
        settings.database_url, "--database-url (or CCWEB_DATABASE_URL)", must_exist=False
    )
    parts = url_parts(url)
    if parts.backend != "sqlite":
        return False
    path = parts.database
    return not path or path == ":memory:" or not Path(str(path)).is_file()


def _run(work: Callable[[], Coroutine[Any, Any, T]], *urls: str) -> T:
    """Run ``work`` on the databases of ``urls``; one that cannot be used exits 1 naming it
    (``copy`` names its side before: ``mobility.copy``)."""
    import asyncio

    from ccweb_store.cli.common import DATABASE_SETTING
    from ccweb_store.domain.errors import DatabaseUnavailable
    from ccweb_store.store.db import shown_url
    from ccweb_store.store.failures import DatabaseError, connection_problem, driver_words

    try:
        return asyncio.run(work())
    except (DatabaseUnavailable, DatabaseError, OSError) as exc:
        shown = " or ".join(shown_url(url) for url in urls)
        problem = connection_problem(exc, urls[0], DATABASE_SETTING) if len(urls) == 1 else None
        if problem is None:
            said = exc.message if isinstance(exc, DatabaseUnavailable) else driver_words(exc)
            problem = f"{said}. Check that it is reachable and that you may read (and write) it"
        fail(f"cannot use the database {shown}: {problem}", 1)


@contextmanager
def _copy_progress(verb: str) -> Iterator[Progress]:
    """A rich progress bar per table on a terminal; otherwise a plain line on stderr every
    few seconds and at the end of each table."""
    if sys.stderr.isatty():
        from ccweb_store.cli.tables import progress_bars

        with progress_bars(verb) as bar:
            tasks: dict[str, object] = {}

            def show(table: str, done: int, total: int) -> None:
                if table not in tasks:
                    tasks[table] = bar.add_task(table, total=total)
                bar.update(tasks[table], completed=done)  # type: ignore[arg-type]

            yield show
        return
    last_line = 0.0

    def line(table: str, done: int, total: int) -> None:
        nonlocal last_line
        now = time.monotonic()
        if done >= total or now - last_line >= PLAIN_PROGRESS_EVERY_S:
            last_line = now
            print(f"{verb} {table}: {done}/{total} rows", file=sys.stderr, flush=True)

    yield line


def copy(
    target_url: Annotated[
        str,
        typer.Option(
            "--to",
            metavar="URL",
            help="The database to fill: migrated to head first, and empty unless --resume",
            show_default=False,
        ),
    ],
    source_url: Annotated[
        str | None,
        typer.Option(
            "--from",
            metavar="URL",
            help="The database to copy \\[default: CCWEB_DATABASE_URL, or ccweb.db in the "
            "data directory]",
            show_default=False,
        ),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option("--resume", help="Finish an interrupted copy into this target"),
    ] = False,
    batch_rows: Annotated[
        int, typer.Option("--batch-rows", min=1, help="Rows per read and per target transaction")
    ] = 5000,
    as_json: AsJson = False,
) -> None:
    """Copy a whole database to another, SQLite or PostgreSQL, and verify it.

    Ids, seq numbers, timestamps and id counters are kept exactly, so conversations, replies,
    credentials and cursors mean the same after the move. The source is read on one
    consistent snapshot, so the server may keep writing to it (what it writes after the start
    is not copied). At the end every table's row count and checksum are compared; a
    difference exits 1. An interrupted copy (Ctrl-C, kill) is finished by running the same
    command again with --resume; a target holding any other rows (another database's copy, a
    finished copy), or a SQLite file a server has open, is refused and left as it was.

    Example: ccweb-store copy --to postgresql+asyncpg://ccweb@db.example/ccweb
    (from the database in the data directory)
    """
    from ccweb_store.mobility.copy import CopyRefused, DatabaseUnreachable, copy_database
    from ccweb_store.store.db import DatabaseInUse, unserved
    from ccweb_store.store.uow import Store

    if source_url is None:  # the database every other command opens by default
        source_url = load_settings().database_url
    source = load_settings(database_url=_database_url(source_url, "--from", must_exist=True))
    target = load_settings(database_url=_database_url(target_url, "--to", must_exist=False))

    async def work() -> CopyReport:
        reading, writing = Store.from_settings(source), Store.from_settings(target)
        try:
            with _copy_progress("copying") as on_progress:
                return await copy_database(
                    reading, writing, resume=resume, batch_rows=batch_rows, on_progress=on_progress
                )
        finally:
            await reading.dispose()
            await writing.dispose()

    try:
        with unserved(target.database_url):
            report = _run(work, source.database_url, target.database_url)
    except DatabaseInUse as exc:
        fail(
            f"--to {_shown(target)} is open in a ccweb-store server ({exc} is locked: every "
            "`ccweb-store serve` and `mcp-stdio` holds it while running): stop it, then copy",
            2,
        )
    except CopyRefused as exc:
        fail(exc.reason, 2)
    except DatabaseUnreachable as exc:
        fail(exc.reason, 1)
    if as_json:
        print_json({"from": _shown(source), "to": _shown(target), **report.as_json()})
    else:
        _print_copy_report(report, _shown(source), _shown(target))
    if not report.ok:
        bad = ", ".join(table.table for table in report.tables if not table.ok)
        fail(
            f"verification failed: {bad} differ between the source's snapshot and the target. "
            "Was the target written to during the copy, or the source changed between a copy "
            "and its --resume? Copy again into an empty database.",
            1,
        )


def _print_copy_report(report: CopyReport, source: str, target: str) -> None:
    typer.echo(f"copied {source} -> {target}" + (" (resumed)" if report.resumed else ""))
    for table in report.tables:
        verdict = "ok" if table.ok else f"MISMATCH (target {table.target_rows} rows)"
        typer.echo(
            f"  {table.table:<26} {table.rows:>10} rows  {table.copied:>10} copied  "
            f"checksum {table.checksum[:12]}  {verdict}"
        )
    rate = f", {report.copied / report.copy_seconds:,.0f} rows/s" if report.copy_seconds else ""
    typer.echo(
        f"  {report.copied} rows in {report.copy_seconds:.1f}s{rate}; "
        f"verified in {report.verify_seconds:.1f}s"
    )


def backup(
    path: Annotated[
        Path,
        typer.Argument(help="The file to write (it must not exist)", show_default=False),
    ],
    as_json: AsJson = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Back up a SQLite database while the server keeps writing, and check the copy.

    The copy is SQLite's online backup of one consistent snapshot: every write committed
    before the backup began is in it. It is written under a temporary name beside PATH,
    opened and checked (integrity, schema revision, rows per table), and only then given
    the name PATH: a backup killed midway leaves nothing at PATH, and running it again
    works. PATH may not be the database or a file SQLite keeps beside it (-wal, -shm,
    -journal). Restore with `ccweb-store restore PATH`. On PostgreSQL this prints the
    pg_dump command to run instead, and exits 2.

    Example: ccweb-store backup /backups/ccweb-2025-01-31.db
    """
    from ccweb_store.mobility.backup import BackupRefused, backup_database
    from ccweb_store.store.postgres.bulk import shell_line
    from ccweb_store.store.uow import Store

    settings = load_settings(database_url=database_url)
    if _missing_sqlite_file(settings):
        fail(f"no SQLite database at {_shown(settings)}: name an existing file", 2)

    async def work() -> dict[str, object]:
        store = Store.from_settings(settings)
        try:
            return await backup_database(store, settings.database_url, path)
        finally:
            await store.dispose()

    try:
        outcome = _run(work, settings.database_url)
    except BackupRefused as exc:
        fail(exc.reason, 2)
    except ValueError as exc:
        fail(f"the backup of {_shown(settings)} does not check out, so none was kept: {exc}", 1)
    command = outcome.get("command")
    if isinstance(command, list):
        typer.echo(
            "ccweb-store backs up SQLite files; back PostgreSQL up with its own pg_dump "
            "(consistent while the server writes). Run:",
            err=True,
        )
        typer.echo(shell_line([str(part) for part in command]))
        raise typer.Exit(2)
    if as_json:
        print_json({"path": str(path), "bytes": path.stat().st_size, **outcome})
        return
    rows = outcome["rows"]
    assert isinstance(rows, dict)
    typer.echo(
        f"backed up {_shown(settings)} to {path} ({path.stat().st_size:,} bytes, "
        f"revision {outcome['revision']}); checked: "
        + ", ".join(f"{name} {count}" for name, count in rows.items())
    )


def export_json(
    directory: Annotated[
        Path,
        typer.Argument(
            help="Where to write sessions/*.json and config/ (created; a folder already "
            "holding them is refused unless --merge)",
            show_default=False,
        ),
    ],
    conversation: Annotated[
        str | None,
        typer.Option(
            "--conversation",
            metavar="ID",
            help="Only this conversation, and the replies it sent or received",
        ),
    ] = None,
    merge: Annotated[
        bool,
        typer.Option(
            "--merge",
            help="Update a folder that already holds a cc-web state: replace the files "
            "exported, keep the reply entries this export does not cover",
        ),
    ] = False,
    as_json: AsJson = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Write the database out in cc-web's JSON layout: `sessions/<id>.json` and
    `config/cross-conversation-replies.json`.

    What import-json brought in comes back with every field it had, unknown keys included
    (docs/export.md lists the few differences); importing an export into an empty database
    gives the same conversations, messages and replies. Runs and credentials have no place in
    cc-web's layout and are not written. The database is read on one snapshot, so the server
    may keep running. A folder that already holds sessions/ or the reply file is refused
    unless --merge; every file is written to a temporary name and renamed into place, so a
    killed export leaves each file whole.

    Example: ccweb-store export-json ./cc-web-state --conversation my-chat --merge
    """
    from ccweb_store.mobility.export import (
        ExportRefused,
        ExportSummary,
        export_state,
        holds_ccweb_layout,
    )
    from ccweb_store.store.uow import Store

    settings = load_settings(database_url=database_url)
    if _missing_sqlite_file(settings):
        fail(f"no SQLite database at {_shown(settings)}: name an existing file", 2)
    if directory.exists() and not directory.is_dir():
        fail(f"{directory} is a file: name a directory to write into", 2)
    if conversation is not None:
        from ccweb_store.domain.errors import InvalidInput
        from ccweb_store.domain.ids import validate_session_id

        try:
            validate_session_id(conversation)
        except InvalidInput as exc:
            fail(f"--conversation: {exc.message}", 2)
    if not merge and holds_ccweb_layout(directory):
        fail(
            f"{directory} already holds a cc-web state (sessions/ or "
            "config/cross-conversation-replies.json): export into an empty folder, or add "
            "--merge to update it",
            2,
        )

    async def work() -> ExportSummary:
        store = Store.from_settings(settings)
        try:
            if conversation is not None:
                async with store.read_uow() as uow:
                    if await uow.sessions.get(conversation) is None:
                        fail(f"no conversation {conversation!r} in {_shown(settings)}", 3)
            return await export_state(store, directory, conversation=conversation, merge=merge)
        finally:
            await store.dispose()

    try:
        summary = _run(work, settings.database_url)
    except ExportRefused as exc:
        fail(exc.reason, 2)
    if as_json:
        print_json({"directory": str(directory), **summary.as_json()})
        return
    typer.echo(
        f"exported {summary.sessions} conversation(s), {summary.messages} message(s) and "
        f"{summary.replies} reply state(s) to {directory}"
    )


#: The commands of this module by name (``cli/__init__`` registers them).
COMMANDS: dict[str, Callable[..., None]] = {
    "copy": copy,
    "backup": backup,
    "export-json": export_json,
}
