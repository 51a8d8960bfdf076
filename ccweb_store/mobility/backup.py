"""A backup that is complete or absent, and a restore that swaps a checked copy in.

**Backup** (SQLite): the online backup is written to a staging file beside the destination
(``store.sqlite.files.staging_beside``), checked, and only then linked to the destination's
name, so a backup killed at any moment leaves nothing there (the next run removes its staging
file) and never overwrites a file, even one that appeared meanwhile. PostgreSQL is backed up
by ``pg_dump``: its command is what comes back.

**Restore** (SQLite): while holding the database's lock exclusively (so no server has it
open, and none opens it until the restore is done), the backup is copied to a staging file
beside the database and checked (integrity, schema revision). The current database has its
``-wal`` folded in, is kept as ``NAME.before-restore-<time>``, and the copy is renamed over
it: the database's name always names the old file or the new one, with no ``-wal`` or
``-shm`` of the old one beside the new.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccweb_store.store.db import database_file, known_revisions
from ccweb_store.store.sqlite.files import (
    COMPANION_SUFFIXES,
    InUse,
    NotRestorable,
    before_restore_name,
    check_restorable,
    claiming_unused,
    is_own_file,
    publish_new,
    resolved,
    settle,
    staging_beside,
    sync_directory,
)
from ccweb_store.store.uow import Store
from ccweb_store.store.whole_tables import schema_tables


class BackupRefused(Exception):
    """A backup or restore that is not done; ``reason`` says why and what to do instead."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def refuse_sqlite_destination(database: Path, destination: Path) -> None:
    """``BackupRefused`` for a destination that is the database or one of its own files
    (through symlinks), exists, or has no directory."""
    if is_own_file(destination, database):
        raise BackupRefused(
            f"{destination} is the database itself or one of the files SQLite keeps beside it "
            "(-wal, -shm, -journal, .lock): name a file elsewhere"
        )
    if os.path.lexists(destination):
        raise BackupRefused(
            f"{destination} exists: name a new file (a backup never overwrites one)"
        )
    if not destination.parent.is_dir():
        raise BackupRefused(f"{destination.parent} is not a directory: create it first")


async def backup_database(store: Store, database_url: str, destination: Path) -> dict[str, Any]:
    """Back the database of ``database_url`` up to ``destination`` (see the module docstring).
    SQLite: ``{"revision", "rows"}`` of the checked copy; ``ValueError`` when it does not
    check out, and then nothing is at ``destination``. PostgreSQL: ``{"command": [...]}``."""
    database = database_file(database_url)
    if database is None:
        return await store.backup(destination, schema_tables())
    refuse_sqlite_destination(database, destination)
    with staging_beside(destination, "backup") as staged:
        outcome = await store.backup(staged, schema_tables())
        try:
            publish_new(staged, destination)
        except FileExistsError:
            raise BackupRefused(
                f"{destination} appeared during the backup: name a new file "
                "(a backup never overwrites one)"
            ) from None
    return outcome


@dataclass(frozen=True)
class RestoreOutcome:
    """What a restore did: the database replaced, where its former file is kept (None when
    there was none), the revision restored and this ccweb-store's."""

    database: Path
    kept: Path | None
    revision: str
    head: str | None

    @property
    def older(self) -> bool:
        return self.revision != self.head

    def as_json(self) -> dict[str, object]:
        return {
            "database": str(self.database),
            "kept": None if self.kept is None else str(self.kept),
            "revision": self.revision,
            "head": self.head,
            "needsMigration": self.older,
        }


def restore_sqlite(database: Path, backup: Path, head: str | None) -> RestoreOutcome:
    """Put the backup file ``backup`` in place of the SQLite ``database`` (see the module
    docstring); ``BackupRefused``, the database untouched, when it may not or must not.
    A database path that is a symlink stays one: the file it names is replaced."""
    database = resolved(database)
    if is_own_file(backup, database):
        raise BackupRefused(
            f"{backup} is the database itself or one of the files SQLite keeps beside it: "
            "name a backup file"
        )
    if not backup.is_file():
        raise BackupRefused(f"no backup file at {backup}: name the file `ccweb-store backup` wrote")
    if not database.parent.is_dir():
        raise BackupRefused(f"{database.parent} is not a directory: create it first")
    try:
        with claiming_unused(database):
            return _swap_in(database, backup, head)
    except InUse as exc:
        raise BackupRefused(
            f"{database} is open in a ccweb-store server ({exc} is locked: every `ccweb-store "
            "serve` and `mcp-stdio` holds it while running): stop it, then restore"
        ) from None


def _swap_in(database: Path, backup: Path, head: str | None) -> RestoreOutcome:
    with staging_beside(database, "restore") as staged:
        shutil.copyfile(backup, staged)
        try:
            revision = check_restorable(staged)
        except NotRestorable as exc:
            raise BackupRefused(
                f"{backup} cannot be restored: {exc}; the database was not changed"
            ) from None
        if revision not in known_revisions():
            raise BackupRefused(
                f"{backup} is at schema revision {revision}, which this ccweb-store does not "
                f"know (its newest is {head}): it was written by a newer ccweb-store; upgrade "
                "ccweb-store, then restore; the database was not changed"
            )
        kept = None
        if database.exists():
            try:
                settle(database)
            except InUse as exc:
                raise BackupRefused(
                    f"{database} is open in another process ({exc}): close it (a sqlite3 "
                    "shell, an older ccweb-store), then restore; the database was not changed"
                ) from None
            # The restored file gets the permissions the database had.
            os.chmod(staged, stat.S_IMODE(database.stat().st_mode))
            kept = before_restore_name(database)
            _keep(database, kept)
        # Whatever SQLite left beside the old file must not be read as the new one's.
        for suffix in COMPANION_SUFFIXES:
            companion = database.with_name(database.name + suffix)
            if companion.exists():
                aside = kept or before_restore_name(database)
                os.replace(companion, aside.with_name(aside.name + suffix))
        os.replace(staged, database)
        sync_directory(database.parent)
    return RestoreOutcome(database, kept, revision, head)


def _keep(database: Path, kept: Path) -> None:
    """Give the current database the name ``kept`` too, leaving it in place meanwhile."""
    try:
        os.link(database, kept)
    except OSError:  # a file system without hard links
        with staging_beside(kept, "keep") as staged:
            shutil.copyfile(database, staged)
            os.replace(staged, kept)
    sync_directory(database.parent)
