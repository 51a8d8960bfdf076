"""What ``ccweb-store import-json`` shows: a progress bar (or plain lines), then a summary.

The database side lives in ``load``; this module opens the store, migrates it (never in a
dry run) and reports. Progress and skip reports go to stderr; the summary goes to stdout.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ccweb_store.config import Settings
from ccweb_store.importer.load import import_files_total, import_state
from ccweb_store.importer.summary import ImportSummary, MessagesCallback, ProgressCallback
from ccweb_store.store import db
from ccweb_store.store.uow import Store

#: The summary lists this many values kept as text; ``--json`` lists them all.
KEPT_SHOWN = 20
#: Without a terminal, a large file's progress is a line per this many messages.
PLAIN_EVERY = 100_000


async def run_import(
    settings: Settings, directory: Path, *, dry_run: bool, as_json: bool
) -> ImportSummary:
    """Migrate (unless ``dry_run``), import ``directory`` with progress, print the summary."""
    store = await _open_store(settings, dry_run=dry_run)
    try:
        with _progress(import_files_total(directory)) as (on_file, on_messages):
            summary = await import_state(
                store, directory, dry_run=dry_run, on_file=on_file, on_messages=on_messages
            )
    finally:
        if store is not None:
            await store.dispose()
    if store is None:
        summary.warnings.append(
            "the database is missing or not migrated, so the dry run counted against an empty one"
        )
    _report(summary, as_json=as_json)
    return summary


async def _open_store(settings: Settings, *, dry_run: bool) -> Store | None:
    """The store to import into; in a dry run None when the database is not ready to read."""
    if dry_run and db.missing_database(settings.database_url) is not None:
        return None
    store = Store.from_settings(settings)
    if not dry_run:
        await db.migrate(store.engine)
        return store
    async with store.engine.connect() as connection:
        revision = await db.current_revision(connection)
    if revision != await db.head_revision():
        await store.dispose()
        return None
    return store


@contextmanager
def _progress(total: int) -> Iterator[tuple[ProgressCallback, MessagesCallback]]:
    """A rich progress bar on a terminal, otherwise one plain line per file on stderr; a large
    file imported a message at a time shows how far it got (plain: every ``PLAIN_EVERY``)."""
    if sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        columns = (
            TextColumn("importing"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}", markup=False),  # a file's name is text
        )
        with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task("", total=total)

            def advance(path: Path, outcome: str) -> None:
                bar.update(task, advance=1, description=f"{path.name}: {outcome}")

            def messages(path: Path, done: int, of: int) -> None:
                bar.update(task, description=f"{path.name}: {done:,} of {of:,} messages")

            yield advance, messages
        return

    done_files = 0

    def report(path: Path, outcome: str) -> None:
        nonlocal done_files
        done_files += 1
        print(f"[{done_files}/{total}] {path}: {outcome}", file=sys.stderr, flush=True)

    shown: dict[Path, int] = {}

    def report_messages(path: Path, done: int, of: int) -> None:
        if done // PLAIN_EVERY > shown.get(path, 0) // PLAIN_EVERY:
            print(f"  {path}: {done:,} of {of:,} messages", file=sys.stderr, flush=True)
        shown[path] = done

    yield report, report_messages


def _report(summary: ImportSummary, *, as_json: bool) -> None:
    for skipped in summary.skipped:
        print(f"skipped {skipped.path}: {skipped.reason}", file=sys.stderr)
    for warning in summary.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if as_json:
        print(json.dumps(summary.as_dict(), indent=2))
        return
    title = "dry run (nothing written)" if summary.dry_run else "import"
    print(f"{title}:")
    for name, counts in (
        ("sessions", summary.sessions),
        ("messages", summary.messages),
        ("replies", summary.replies),
    ):
        print(
            f"  {name:<9} {counts.imported} imported, {counts.updated} updated, "
            f"{counts.unchanged} unchanged, {counts.skipped} skipped"
        )
    print(f"  original requests recovered: {summary.original_requests_recovered}")
    kept = summary.kept_as_text
    if kept:
        print(f"  values kept as text (or given U+FFFD): {len(kept)}")
        for value in kept[:KEPT_SHOWN]:
            print(f"    {value}")
        if len(kept) > KEPT_SHOWN:
            print(f"    … and {len(kept) - KEPT_SHOWN} more (--json lists every one)")
    if summary.skipped:
        print(f"{len(summary.skipped)} item(s) skipped; fix them and run the import again.")
