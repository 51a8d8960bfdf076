"""``ccweb-store restore``: put a backup in place of the database. The work is
``ccweb_store.mobility.backup``'s; this module reads the options and reports."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ccweb_store.cli.common import (
    AsJson,
    DatabaseUrl,
    fail,
    load_settings,
    print_json,
    require_usable_url,
)


def restore(
    backup: Annotated[
        Path,
        typer.Argument(help="The file `ccweb-store backup` wrote", show_default=False),
    ],
    as_json: AsJson = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Replace a SQLite database with a backup, keeping the current file beside it.

    Refused (exit 2, nothing changed) while a ccweb-store server has the database open
    (every `serve` and `mcp-stdio` holds a lock on NAME.lock beside it), when the backup
    fails SQLite's integrity check or holds no ccweb-store schema, and when its schema is
    newer than this ccweb-store (upgrade first). The current file, its -wal folded in, is
    kept as NAME.before-restore-<UTC time>; the backup file itself stays where it is. A
    backup of an older schema is restored as it is: the server migrates it when it starts.
    On PostgreSQL this prints the pg_restore command to run instead, and exits 2.

    Example: ccweb-store restore /backups/ccweb-2025-01-31.db
    """
    import asyncio

    from ccweb_store.mobility.backup import BackupRefused, restore_sqlite
    from ccweb_store.store.db import database_file, head_revision, shown_url
    from ccweb_store.store.postgres.bulk import pg_restore_command, shell_line

    settings = require_usable_url(load_settings(database_url=database_url))
    shown = shown_url(settings.database_url)
    if settings.database_kind != "sqlite":
        typer.echo(
            "ccweb-store restores SQLite files; restore PostgreSQL with its own pg_restore "
            "(stop the server first; it replaces the database's contents in one transaction). "
            "Run:",
            err=True,
        )
        typer.echo(shell_line(pg_restore_command(settings.database_url, backup)))
        raise typer.Exit(2)
    database = database_file(settings.database_url)
    if database is None:
        fail(f"{shown} names no file: restore needs a SQLite database file's path", 2)
    head = asyncio.run(head_revision())
    try:
        outcome = restore_sqlite(database, backup, head)
    except BackupRefused as exc:
        fail(exc.reason, 2)
    except OSError as exc:
        fail(
            f"cannot restore into {database}: {exc}. Check that you may write its directory; "
            "the database is the old file or the restored one, never a mix.",
            1,
        )
    if as_json:
        print_json({"backup": str(backup), **outcome.as_json()})
        return
    kept = f"; the former file is kept as {outcome.kept}" if outcome.kept else ""
    typer.echo(f"restored {backup} to {database} (revision {outcome.revision}){kept}")
    if outcome.older:
        typer.echo(
            f"its schema revision {outcome.revision} is older than this ccweb-store's "
            f"{outcome.head}: the server migrates it when it starts (or run ccweb-store migrate)"
        )
