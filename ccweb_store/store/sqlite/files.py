"""The files of a SQLite database on disk: the names SQLite keeps beside it, the lock that
says a server has it open, a staging name beside a file about to be written, and the
checks a restore makes on a backup and on the database it replaces.

**In use.** A process that serves a database holds a shared ``flock`` on ``NAME.lock``
beside it for as long as it runs (the OS drops it when the process ends, even on
``kill -9``); ``restore`` takes it exclusively, without waiting, so it refuses while any
server holds it, and a server that starts meanwhile waits until the restore is done.

**Staging.** A file is written under ``.NAME.PURPOSE-RANDOM.tmp`` beside its destination,
locked with ``flock`` while it is written, and moved into place once complete: a process
killed midway leaves only such a file, which the next run removes (unless it is still
locked: then its writer still runs).
"""

from __future__ import annotations

import fcntl
import os
import secrets
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

#: The files SQLite keeps beside a database, by suffix.
COMPANION_SUFFIXES = ("-wal", "-shm", "-journal")
#: The suffix of the lock file a serving process holds beside its database.
LOCK_SUFFIX = ".lock"


def resolved(path: Path) -> Path:
    """``path`` made absolute and followed through every symlink (even a dangling one)."""
    return Path(os.path.realpath(path))


def own_files(database: Path) -> list[Path]:
    """The database and the files SQLite (and ccweb-store) keep beside it, resolved."""
    real = resolved(database)
    return [real] + [
        real.with_name(real.name + suffix) for suffix in (*COMPANION_SUFFIXES, LOCK_SUFFIX)
    ]


def is_own_file(path: Path, database: Path) -> bool:
    """Whether ``path`` (through symlinks) is ``database`` or one of the files beside it."""
    return resolved(path) in own_files(database)


def lock_file(database: Path) -> Path:
    """The lock file beside ``database`` that a serving process holds (``holding_in_use``)."""
    real = resolved(database)
    return real.with_name(real.name + LOCK_SUFFIX)


def _open_lock(database: Path) -> int:
    return os.open(lock_file(database), os.O_RDWR | os.O_CREAT, 0o600)


@contextmanager
def holding_in_use(database: Path) -> Iterator[bool]:
    """Hold the shared lock that marks ``database`` as served, while the block runs; the
    block is given whether another process held it already (another server, or
    ``mcp-stdio``). It waits while a restore holds the lock exclusively."""
    descriptor = _open_lock(database)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            shared = False
        except BlockingIOError:
            shared = True
        fcntl.flock(descriptor, fcntl.LOCK_SH)  # converts an exclusive hold, or waits
        yield shared
    finally:
        os.close(descriptor)


class InUse(Exception):
    """A process holds the database open."""


@contextmanager
def claiming_unused(database: Path) -> Iterator[None]:
    """Hold the lock of ``database`` exclusively while the block runs; ``InUse`` at once
    when a serving process holds it."""
    descriptor = _open_lock(database)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InUse(str(lock_file(database))) from None
        yield
    finally:
        os.close(descriptor)


def _staging_pattern(destination: Path, purpose: str) -> str:
    return f".{destination.name}.{purpose}-*.tmp"


def remove_stale_staging(destination: Path, purpose: str) -> list[Path]:
    """Remove what runs killed while writing to ``destination`` left (their staging files and
    SQLite's files beside them), skipping any still locked by a running writer."""
    removed = []
    for staged in sorted(destination.parent.glob(_staging_pattern(destination, purpose))):
        try:
            descriptor = os.open(staged, os.O_RDONLY)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            for path in (staged, *(Path(f"{staged}{s}") for s in COMPANION_SUFFIXES)):
                if path.exists():
                    path.unlink()
                    removed.append(path)
        finally:
            os.close(descriptor)
    return removed


@contextmanager
def staging_beside(destination: Path, purpose: str) -> Iterator[Path]:
    """A new empty file beside ``destination`` (mode 0600), locked while the block runs and
    removed after it unless the block moved it away; stale ones of killed runs go first."""
    remove_stale_staging(destination, purpose)
    staged = destination.with_name(f".{destination.name}.{purpose}-{secrets.token_hex(6)}.tmp")
    descriptor = os.open(staged, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield staged
    finally:
        # SQLite's connections to the file are closed by now: closing this descriptor
        # cannot drop their POSIX locks.
        for path in (staged, *(Path(f"{staged}{s}") for s in COMPANION_SUFFIXES)):
            if path.exists():
                path.unlink()
        os.close(descriptor)


def sync_directory(directory: Path) -> None:
    """Make a rename or link in ``directory`` durable."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def publish_new(staged: Path, destination: Path) -> None:
    """Give ``staged`` the name ``destination``, which must not exist (``FileExistsError``
    otherwise, even when it appeared meanwhile): a hard link, then the staging name goes."""
    with open(staged, "rb") as complete:
        os.fsync(complete.fileno())
    try:
        os.link(staged, destination)
    except FileExistsError:
        raise
    except OSError:  # a file system without hard links
        if os.path.lexists(destination):
            raise FileExistsError(str(destination)) from None
        os.replace(staged, destination)
    else:
        staged.unlink()
    sync_directory(destination.parent)


class NotRestorable(Exception):
    """A backup that cannot be restored; the message says why."""


def check_restorable(path: Path) -> str | None:
    """Check the database file at ``path`` (a private copy: it is opened for writing) as a
    backup to restore: SQLite's integrity check, and the schema revision stamped in it, which
    is returned. Its journal is set to ``DELETE``, so it needs no ``-wal`` beside it.
    ``NotRestorable`` when it is not a sound ccweb-store database."""
    try:
        with closing(sqlite3.connect(path, isolation_level=None)) as connection:
            verdict = connection.execute("PRAGMA integrity_check").fetchall()
            if verdict != [("ok",)]:
                found = "; ".join(str(row[0]) for row in verdict[:3])
                raise NotRestorable(f"it fails SQLite's integrity check ({found})")
            try:
                versions = [
                    row[0] for row in connection.execute("SELECT version_num FROM alembic_version")
                ]
            except sqlite3.OperationalError:
                raise NotRestorable(
                    "it holds no ccweb-store schema (no alembic_version table)"
                ) from None
            if len(versions) != 1:
                raise NotRestorable(f"it is stamped with {len(versions)} schema revisions")
            connection.execute("PRAGMA journal_mode = DELETE").fetchall()
    except sqlite3.DatabaseError as exc:
        raise NotRestorable(f"it is not a SQLite database ({exc})") from None
    return str(versions[0])


def settle(database: Path) -> None:
    """Fold ``database``'s ``-wal`` into the file and leave it in ``DELETE`` journal mode, so
    the file alone holds every committed write; ``InUse`` when another connection (of any
    process) has it open, since SQLite then refuses to leave WAL mode. A file SQLite cannot
    read as a database (damaged: what a restore is for) is left as it is."""
    with closing(sqlite3.connect(database, isolation_level=None, timeout=0)) as connection:
        try:
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            mode = connection.execute("PRAGMA journal_mode = DELETE").fetchone()
        except sqlite3.DatabaseError as exc:
            if exc.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                raise InUse(f"SQLite: {exc}") from None
            return
        if mode is None or str(mode[0]).lower() != "delete":
            raise InUse("SQLite could not take the database out of WAL mode")


def before_restore_name(database: Path) -> Path:
    """Where the current database is kept by a restore: ``NAME.before-restore-<UTC time>``."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    kept = database.with_name(f"{database.name}.before-restore-{stamp}")
    counter = 1
    while os.path.lexists(kept):
        counter += 1
        kept = database.with_name(f"{database.name}.before-restore-{stamp}-{counter}")
    return kept
