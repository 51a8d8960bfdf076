"""``ccweb-store repair-json``: rewrite stored JSON values that break the stored-value rule
(``services.json_repair``), losslessly, and give imported reply requests the conversation
titles their entries lacked (``importer.reply_titles``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from ccweb_store.cli.common import AsJson, DatabaseUrl, with_store

if TYPE_CHECKING:
    from ccweb_store.importer.reply_titles import TitleRepair
    from ccweb_store.services.json_repair import ColumnCounts, RepairedRow, RepairSummary
    from ccweb_store.store.uow import Store


def repair_json(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only list the rows it would rewrite; write nothing")
    ] = False,
    as_json: AsJson = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Rewrite stored JSON values that break the stored-value rule, losslessly.

    Scans every JSON column (messages.metadata, sessions.extra,
    reply_requests.extra) by primary key, a transaction per batch of rows, and
    replaces each part nested deeper than 64 levels, each integer beyond 64
    bits, NaN, Infinity and lone surrogate by {"$ccwebJsonText": "<its exact
    JSON text>"}. Then gives each reply request without sourceTitle or
    targetTitle the title its conversation has (as import-json does for such
    entries). Prints each row it rewrites (table, id, paths) and a progress
    line per batch on stderr. A second run rewrites nothing.

    Example: ccweb-store repair-json --dry-run && ccweb-store repair-json
    """
    from ccweb_store.importer.reply_titles import repair_reply_titles
    from ccweb_store.services.json_repair import repair_json as repair

    def progress(counts: ColumnCounts) -> None:
        typer.echo(
            f"repair-json: {counts.column.name}: {counts.rows_read} rows read, "
            f"{counts.rows_rewritten} {'to rewrite' if dry_run else 'rewritten'}",
            err=True,
        )

    def show(row: RepairedRow) -> None:
        for line in row.lines():
            typer.echo(line)

    async def work(store: Store) -> tuple[RepairSummary, TitleRepair]:
        summary = await repair(
            store,
            dry_run=dry_run,
            on_row=None if as_json else show,
            on_batch=None if as_json else progress,
        )
        return summary, await repair_reply_titles(store, dry_run=dry_run)

    summary, titles = with_store(database_url, work)
    if as_json:
        typer.echo(json.dumps({**summary.as_dict(), "titles": titles.as_dict()}, indent=2))
        return
    typer.echo(
        f"repair-json: reply_requests titles: {titles.rows_read} rows read, {len(titles.filled)} "
        f"{'to fill' if dry_run else 'filled'}",
        err=True,
    )
    for filled in titles.filled:
        typer.echo(filled.line())
    filled_rows = len(titles.filled)
    typer.echo(
        f"{filled_rows} reply request(s) {'to give' if dry_run else 'given'} their "
        "conversations' titles"
    )
    rows = summary.rows_rewritten
    if dry_run:
        typer.echo(f"dry run (nothing written): {rows} row(s) to rewrite")
    else:
        typer.echo(f"{rows} row(s) rewritten")
