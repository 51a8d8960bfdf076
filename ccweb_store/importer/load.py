"""``import-json``: bring a cc-web JSON state into the database, idempotently.

``legacy_sessions`` and ``legacy_replies`` read and normalise the files; ``session_sync`` and
``reply_sync`` compare them with what the database holds and write the difference. Each
session file is one transaction, so a killed import leaves whole sessions only and running it
again completes the job. The reply file comes last: a reply state may recover its original
request from a session the same import brought in.

A value no column can hold as it is (a JSON value that breaks the stored-value rule, text
holding U+0000 or a lone surrogate) is kept as text (see ``legacy_json``); the summary lists
each (``KeptValue``), the same in a dry run.

Files are read one by one, each whole, so memory is bounded by the largest file; a file too
large for that is read a message at a time (``large_sessions``). The cyclic garbage collector
waits while a file is imported whole (``_cyclic_gc_paused``).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ccweb_store.importer.large_sessions import import_large_session_file, is_large
from ccweb_store.importer.legacy_replies import REPLIES_FILE
from ccweb_store.importer.legacy_sessions import session_files
from ccweb_store.importer.reply_sync import import_replies_file
from ccweb_store.importer.session_sync import import_session_file
from ccweb_store.importer.summary import (
    DRY_RUN_WORDS,
    ImportSummary,
    MessagesCallback,
    ProgressCallback,
    said_of_file,
)
from ccweb_store.store.uow import Store


def import_files_total(directory: Path) -> int:
    """How many files an import of ``directory`` reads (for a progress bar)."""
    return len(session_files(directory)) + int((directory / REPLIES_FILE).is_file())


async def import_state(
    store: Store | None,
    directory: Path,
    *,
    dry_run: bool = False,
    on_file: ProgressCallback | None = None,
    on_messages: MessagesCallback | None = None,
) -> ImportSummary:
    """Import ``directory`` (a cc-web state) into ``store``.

    With ``dry_run`` nothing is written: plans are made in read-only transactions, or against
    an empty database when ``store`` is None (the database does not exist or is not migrated).
    """
    summary = ImportSummary(dry_run=dry_run)
    unmarked: set[str] = set()
    carried: dict[tuple[str, str], str] = {}
    titles: dict[str, str] = {}
    for path in session_files(directory):
        outcome = None
        if is_large(path):
            outcome = await import_large_session_file(
                store, path, summary, unmarked, carried, on_messages, titles
            )
        if outcome is None:
            with _cyclic_gc_paused():
                outcome = await import_session_file(store, path, summary, unmarked, carried, titles)
        if on_file is not None:
            on_file(path, said_of_file(outcome, dry_run=dry_run))
    replies_path = directory / REPLIES_FILE
    if replies_path.is_file():
        before = summary.replies.as_dict()
        await import_replies_file(store, replies_path, summary, unmarked, carried, titles)
        if on_file is not None:
            on_file(replies_path, said_of_replies(before, summary))
    if store is not None and not dry_run:
        await store.refresh_statistics()  # the planner's view of the tables just filled
    return summary


def said_of_replies(before: dict[str, int], summary: ImportSummary) -> str:
    """The progress line's words for the reply file: what became of its entries, counted as
    the summary counts them (``2 imported, 1 unchanged``; in a dry run ``2 would be
    imported, 1 unchanged``; a file that cannot be read: ``1 skipped``)."""
    after = summary.replies.as_dict()
    parts = []
    for kind in ("imported", "updated", "unchanged", "skipped"):
        count = after[kind] - before[kind]
        if count:
            verb = f"would be {kind}" if summary.dry_run and kind in DRY_RUN_WORDS else kind
            parts.append(f"{count} {verb}")
    return ", ".join(parts) or "no reply states"


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while one file is read, planned and written.

    A session file parses into tens of thousands of dicts and lists, all alive until its
    rows are written. Left on, the collector counts them as new objects, runs again and
    again over them (none of which can be in a cycle: JSON values never are) and every few
    files over the whole heap (SQLAlchemy, the migrations), a large share of an import's time.
    Between
    files it is on again, so anything cyclic a file left behind is collected then, with the
    file's objects already freed. The CLI's process only imports; a caller that runs other
    work on the same event loop sees the collector paused while a file is imported.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
