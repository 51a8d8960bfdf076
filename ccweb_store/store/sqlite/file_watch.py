"""Whether the path of a SQLite file still names the file the server opened.

A connection keeps the file it opened, whatever happens to its path: deleted, renamed away,
or replaced by another file moved there, the old file still takes every write, and each
looks committed. At the next start the server opens whatever the path names then, and
those writes are gone. ``SQLiteFileWatch`` notes the file's device and inode when the engine
first opens it and compares them with the path's (one ``os.stat``): before the writer's
every COMMIT and before a read at most once a second (``store.sqlite.driver``),
before a new connection opens the path (so SQLite neither creates an empty file where the old
one was nor reads another file with the old one's WAL), and in ``/healthz``.
"""

from __future__ import annotations

import logging
import os
import time

from ccweb_store.domain.errors import DatabaseFileMissing

log = logging.getLogger("ccweb_store.sqlite")

#: Seconds between two checks made for reads (writes check at every COMMIT).
READ_CHECK_INTERVAL_S = 1.0


class SQLiteFileWatch:
    """The file at ``path`` that an engine opened first, and whether the path still names it.

    Once a check finds the path naming another file (or nothing), every check repeats the
    ``stat`` until the path names the very file again (moved back): then the store serves
    as before. A copy restored from a backup is another file, which only a restart opens.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        #: ``(st_dev, st_ino)`` of the file the engine's first connection opened.
        self.identity: tuple[int, int] | None = None
        #: Whether the last check found the path naming another file or none.
        self.lost = False
        self._next_read_check = 0.0

    def opened(self) -> None:
        """Note the file a new connection opened: the first one's is the store's file; a
        later one must be that file too (``check``)."""
        if self.identity is None:
            stat = os.stat(self.path)
            self.identity = (stat.st_dev, stat.st_ino)
        else:
            self.check()

    def check(self) -> None:
        """Raise ``DatabaseFileMissing`` unless the path names the file the store opened."""
        if self.identity is None:
            return  # nothing opened yet: whatever the path names will be the store's file
        try:
            stat = os.stat(self.path)
        except OSError:
            found = None
        else:
            found = (stat.st_dev, stat.st_ino)
        if found != self.identity:
            if not self.lost:
                self.lost = True
                log.error(
                    "the database file %s was %s while the server ran: writes are refused "
                    "until the file the server opened is back at that path or the server "
                    "restarts",
                    self.path,
                    "removed or moved away" if found is None else "replaced by another file",
                )
            raise DatabaseFileMissing(self.path)
        if self.lost:
            self.lost = False
            log.warning("the database file %s is back at its path: serving again", self.path)

    def check_for_read(self) -> None:
        """``check``, at most once every ``READ_CHECK_INTERVAL_S`` while the file is in place
        (every time once it is not)."""
        if self.lost:
            self.check()
            return
        now = time.monotonic()
        if now >= self._next_read_check:
            self._next_read_check = now + READ_CHECK_INTERVAL_S
            self.check()
