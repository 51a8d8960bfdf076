"""WAL checkpoints on a thread of their own, so that requests do not wait for them.

In WAL mode every commit appends the pages it changed to the ``-wal`` file, and a checkpoint
copies them back into the database file and syncs it. Left to SQLite, the commit that takes
the WAL past ``wal_autocheckpoint`` pages runs the whole checkpoint itself, while the writer
holds its turn, so every write queued behind it waits. ``WalCheckpointer`` runs
``PRAGMA wal_checkpoint(PASSIVE)`` on its own connection in a daemon thread instead;
``sqlite3`` releases the GIL while SQLite works, so the copying and syncing overlap with the
writes. A passive
checkpoint never waits for readers or writers, nor they for it.

SQLite's own automatic checkpoint (``WAL_AUTOCHECKPOINT_PAGES``) stays, for two reasons.
It bounds the WAL if this thread falls behind or fails. And the WAL starts again from its
beginning only when a write transaction begins while every frame in it has been copied:
when the writer pauses, that follows this thread's checkpoints, but under a steady stream of
writes each checkpoint ends with newer commits already in the WAL, which then grows until the
automatic checkpoint. That one finds only the last few commits' pages left to copy: past half
the limit, this thread checkpoints every few commits (``CHECKPOINT_EVERY_COMMITS_NEAR_LIMIT``).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path
from urllib.parse import quote

from ccweb_store.store.sqlite.file_watch import SQLiteFileWatch

log = logging.getLogger(__name__)

#: Pages of WAL after which a commit checkpoints it into the database file (SQLite's default:
#: 1000). ``WalCheckpointer`` does most of that work before then; this limit bounds the WAL
#: if it falls behind, and lets the writer start the WAL over.
WAL_AUTOCHECKPOINT_PAGES = 10_000

#: Commits between two checkpoints while the WAL is less than half of SQLite's limit. Every
#: checkpoint syncs both files and copies each page changed since the last one, so frequent
#: ones cost more I/O in all.
CHECKPOINT_EVERY_COMMITS = 128
#: Commits between two checkpoints once the WAL is past half of SQLite's limit, so that its
#: automatic checkpoint finds only a few commits' pages left to copy.
CHECKPOINT_EVERY_COMMITS_NEAR_LIMIT = 16
#: Seconds after which the thread checkpoints whatever was committed since its last run.
CHECKPOINT_IDLE_SECONDS = 1.0
#: How long the thread's connection waits for a lock another connection holds.
BUSY_TIMEOUT_SECONDS = 1.0


class WalCheckpointer:
    """A daemon thread that checkpoints the WAL of the SQLite file at ``path``.

    The writer calls ``note_commit`` after each commit, on the event loop: an
    increment and a comparison, no lock. Every ``every`` commits (``every_near_limit`` once
    the WAL is past half of ``wal_limit_pages``) it wakes the thread, which also wakes every
    ``idle_seconds`` and then checkpoints if anything was committed since its last run. The
    thread starts with the first commit (a store that only reads never has one) and ends
    with ``stop``. A failed checkpoint is logged and retried on the next
    wake; it never ends the thread.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        every: int = CHECKPOINT_EVERY_COMMITS,
        every_near_limit: int = CHECKPOINT_EVERY_COMMITS_NEAR_LIMIT,
        wal_limit_pages: int = WAL_AUTOCHECKPOINT_PAGES,
        idle_seconds: float = CHECKPOINT_IDLE_SECONDS,
        busy_timeout: float = BUSY_TIMEOUT_SECONDS,
        file_watch: SQLiteFileWatch | None = None,
    ) -> None:
        self.path = Path(path)
        #: Checked before the thread opens the path: another file moved there would be
        #: checkpointed with the WAL of the file the store opened.
        self.file_watch = file_watch
        self.every = every
        self.every_near_limit = every_near_limit
        self.wal_limit_pages = wal_limit_pages
        self.idle_seconds = idle_seconds
        self.busy_timeout = busy_timeout
        #: Commits noted so far (written by the writer's thread only).
        self.commits = 0
        #: Checkpoints that ran to the end, and those that failed or found SQLite busy.
        self.runs = 0
        self.failures = 0
        self._next_wake = 1  # the first commit starts the thread
        self._interval = every  # set by the thread from the WAL's size
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def note_commit(self) -> None:
        """Count a commit; every ``every`` commits, wake the thread (or start it)."""
        self.commits += 1
        if self.commits >= self._next_wake:
            self._next_wake = self.commits + self._interval
            if self._thread is None:
                self._start()
            else:
                self._wake.set()

    def stop(self) -> None:
        """End the thread, once the checkpoint it may be running is done, and close its
        connection. A later commit starts a new thread."""
        thread = self._thread
        if thread is None:
            return
        self._stopping = True
        self._wake.set()
        thread.join()
        self._thread = None
        self._stopping = False
        self._wake.clear()
        self._next_wake = self.commits + 1

    def _start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"wal-checkpoint {self.path.name}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        connection: sqlite3.Connection | None = None
        done = 0  # self.commits when the last successful checkpoint began
        failing = False
        try:
            while True:
                self._wake.wait(self.idle_seconds)
                self._wake.clear()
                if self._stopping:
                    return
                seen = self.commits
                if seen == done:
                    continue
                try:
                    if connection is None:
                        connection = self._connect()
                    finished = self._checkpoint(connection)
                except Exception as exc:
                    # Locked, unreadable, gone: the commits stay pending; the next wake retries.
                    self.failures += 1
                    level = logging.DEBUG if failing else logging.WARNING
                    log.log(level, "WAL checkpoint of %s failed (will retry): %s", self.path, exc)
                    failing = True
                    if connection is not None:
                        connection.close()
                        connection = None
                    continue
                if not finished:
                    self.failures += 1
                    continue
                if failing:
                    log.info("WAL checkpoint of %s succeeded again", self.path)
                    failing = False
                done = seen
                self.runs += 1
        finally:
            if connection is not None:
                connection.close()

    def _checkpoint(self, connection: sqlite3.Connection) -> bool:
        """One passive checkpoint; False if SQLite was busy (another checkpoint was running)."""
        began = time.perf_counter()
        busy, wal_pages, copied = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if not busy:
            near_limit = wal_pages >= self.wal_limit_pages // 2
            self._interval = self.every_near_limit if near_limit else self.every
        log.debug(
            "WAL checkpoint of %s in %.1f ms: busy=%s, %s pages in the WAL, %s copied",
            self.path,
            (time.perf_counter() - began) * 1000,
            busy,
            wal_pages,
            copied,
        )
        return not busy

    def _connect(self) -> sqlite3.Connection:
        if self.file_watch is not None:
            self.file_watch.check()
        # mode=rw: never create the file (the engine does); autocommit, so that the pragma
        # runs outside any transaction.
        uri = f"file:{quote(str(self.path.absolute()))}?mode=rw"
        return sqlite3.connect(uri, uri=True, isolation_level=None, timeout=self.busy_timeout)
