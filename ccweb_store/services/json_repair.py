"""``repair-json``: rewrite stored JSON values that break the stored-value rule.

A row written before ``json_values``' rule may hold a value that breaks it (metadata nested
300 levels, an integer beyond 64 bits, NaN, a lone surrogate). Reads already answer such a
value kept as text; this rewrites the row itself the same way, losslessly
(``json_values.keep_as_text``: each part that breaks the rule becomes
``{"$ccwebJsonText": <its JSON text>}``), so that every later reader sees what the API sends.

Every JSON column of ``models`` is scanned (``repositories.json_columns.json_columns``) in
batches of ``BATCH_ROWS`` rows by primary key (keyset pagination: memory is bounded by a
batch), each batch in one transaction. The column is read as the text the database holds
(``JsonColumnRepository``), so the value is seen exactly:

- SQLite stores what ``json.dumps`` wrote (NaN, ``\\ud800`` escapes, any integer, any depth):
  ``json.loads`` reads it back as it was.
- PostgreSQL's ``jsonb`` holds neither NaN nor a lone surrogate, and keeps every number as
  ``numeric``: a float such as ``1e20`` comes back written as the integer
  ``100000000000000000000``, which the API reads back as the float it was
  (``store.postgres.driver.loads_postgres_json``). So here an integer beyond 64 bits is read
  as that float and is not a value to repair; deep nesting is.

Text ``json.loads`` cannot read at all (nested beyond Python's recursion limit, not JSON) is
kept whole: ``{"$ccwebJsonText": <the stored text>}``, as reads answer it. A row is written back
only if it still holds the text that was read, so a value the service rewrote meanwhile is left
alone. Running it again finds nothing: a value kept as text keeps the rule.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ccweb_store.domain.json_values import INT_MAX, INT_MIN, KEPT_AS_TEXT
from ccweb_store.domain.storable_json import Place, storable
from ccweb_store.store.repositories.json_columns import JsonColumn, json_columns
from ccweb_store.store.uow import Store

#: Rows read (and rewritten) per transaction.
BATCH_ROWS = 500
TOO_DEEP_TO_READ = "nested too deep to read back; the stored text is kept whole"
NOT_JSON = "not readable as JSON ({}); the stored text is kept whole"


@dataclass
class RepairedRow:
    """A row whose value was (in a dry run: would be) rewritten, and where and why."""

    column: JsonColumn
    key: str
    places: list[Place]

    def lines(self) -> list[str]:
        """``messages.metadata m-12: metadata.x kept as text: the integer … is outside …``."""
        return [
            f"{self.column.name} {self.key}: {path} kept as text: {reason}"
            for path, reason in self.places
        ]


@dataclass
class ColumnCounts:
    """What a scan of one column found."""

    column: JsonColumn
    rows_read: int = 0
    rows_rewritten: int = 0
    #: Rows that changed between the read and the write (left as the service wrote them).
    rows_changed_meanwhile: int = 0
    #: The scan stopped at its limit of rows before the column's end (``max_rows``).
    cut: bool = False


@dataclass
class RepairSummary:
    """What a run found and rewrote (in a dry run: would rewrite)."""

    dry_run: bool
    columns: list[ColumnCounts] = field(default_factory=list)
    rows: list[RepairedRow] = field(default_factory=list)

    @property
    def rows_rewritten(self) -> int:
        return sum(counts.rows_rewritten for counts in self.columns)

    def as_dict(self) -> dict[str, object]:
        """What ``repair-json --json`` prints of it."""
        return {
            "dryRun": self.dry_run,
            "rowsRewritten": self.rows_rewritten,
            "columns": [
                {
                    "table": counts.column.table,
                    "column": counts.column.column,
                    "rowsRead": counts.rows_read,
                    "rowsRewritten": counts.rows_rewritten,
                    "rowsChangedMeanwhile": counts.rows_changed_meanwhile,
                }
                for counts in self.columns
            ],
            "rows": [
                {
                    "table": row.column.table,
                    "column": row.column.column,
                    "id": row.key,
                    "paths": [{"path": path, "reason": reason} for path, reason in row.places],
                }
                for row in self.rows
            ],
        }


async def repair_json(
    store: Store,
    *,
    dry_run: bool,
    batch_rows: int = BATCH_ROWS,
    max_rows: int | None = None,
    on_row: Callable[[RepairedRow], None] | None = None,
    on_batch: Callable[[ColumnCounts], None] | None = None,
) -> RepairSummary:
    """Rewrite (with ``dry_run``: only find) every stored JSON value that breaks the rule,
    or of each column only its first ``max_rows`` rows by key; ``on_row`` hears of each such
    row, ``on_batch`` of each batch read."""
    summary = RepairSummary(dry_run=dry_run)
    for column in json_columns():
        counts = ColumnCounts(column)
        summary.columns.append(counts)
        after: str | None = None
        while True:
            batch = batch_rows
            if max_rows is not None:
                batch = min(batch, max_rows - counts.rows_read)
            rows, after = await _repair_batch(store, column, counts, after, batch, dry_run)
            for row in rows:
                summary.rows.append(row)
                if on_row is not None:
                    on_row(row)
            if on_batch is not None:
                on_batch(counts)
            if after is None:
                break
            if max_rows is not None and counts.rows_read >= max_rows:
                counts.cut = True
                break
    return summary


async def _repair_batch(
    store: Store,
    column: JsonColumn,
    counts: ColumnCounts,
    after: str | None,
    batch_rows: int,
    dry_run: bool,
) -> tuple[list[RepairedRow], str | None]:
    """One batch in one transaction: the rows it rewrote, and the key to read on from (None:
    the column is done)."""
    table, name, key = column.table, column.column, column.key
    repaired: list[RepairedRow] = []
    async with store.read_uow() if dry_run else store.uow() as uow:
        stored = uow.json_columns
        rows = await stored.stored_texts(table, name, key, after=after, limit=batch_rows)
        for row_key, text in rows:
            fixed = repaired_value(text, name, numeric_numbers=stored.numbers_are_numeric)
            if fixed is None:
                continue
            kept, places = fixed
            if not dry_run and not await stored.rewrite(
                table, name, key, row_key, text, json.dumps(kept)
            ):
                counts.rows_changed_meanwhile += 1
                continue
            counts.rows_rewritten += 1
            repaired.append(RepairedRow(column, str(row_key), places))
        if not dry_run:
            await uow.commit()
    counts.rows_read += len(rows)
    return repaired, (rows[-1][0] if len(rows) == batch_rows else None)


def repaired_value(
    text: Any, name: str, *, numeric_numbers: bool = False
) -> tuple[Any, list[Place]] | None:
    """The value to store instead of the stored ``text`` of column ``name``, and where and
    why each part was kept as text; None when the stored value keeps the rule.
    ``numeric_numbers``: the database keeps JSON numbers as decimals (``jsonb``)."""
    if not isinstance(text, str):  # SQLite's NUMERIC affinity made a bare number of it
        value: Any = text
    else:
        try:
            value = json.loads(text, parse_int=_numeric if numeric_numbers else None)
        except RecursionError:
            return {KEPT_AS_TEXT: text}, [(name, TOO_DEEP_TO_READ)]
        except ValueError as exc:  # not JSON, or an integer of more digits than Python reads
            return {KEPT_AS_TEXT: text}, [(name, NOT_JSON.format(str(exc).split(";")[0]))]
    try:
        kept, places = storable(value, name)
    except RecursionError:  # read, but too deep to be written back as text where it sits
        return {KEPT_AS_TEXT: text}, [(name, TOO_DEEP_TO_READ)]
    return (kept, places) if places else None


def _numeric(digits: str) -> int | float:
    """An integer of PostgreSQL's ``jsonb`` text: beyond 64 bits, the float it stands for (a
    ``numeric`` jsonb made of a float such as ``1e20``, as the API reads it back); an integer
    beyond any float stays exact (and breaks the rule)."""
    number = int(digits)
    if INT_MIN <= number <= INT_MAX:
        return number
    as_float = float(digits)
    return as_float if math.isfinite(as_float) else number
