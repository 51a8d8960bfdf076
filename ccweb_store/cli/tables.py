"""How the commands print to a terminal, the one place that builds what rich renders.

Text is data: every string these helpers are given (agent output, titles, errors, ids) is
printed as it is, never read as rich markup or emoji codes, so ``[red]``, ``- [x] lint ok`` or
``[/tmp/report.txt]`` come out as written. The commands build their views from these helpers
(``stdout_console``, ``new_table``, ``fields_table``, ``print_panel``, ``styled``) and never
from rich itself (tests/test_cli_text.py checks both). Tables print whole on a wide terminal
and one block per row on a narrow one; panels take the terminal's width (``COLUMNS``, else
the terminal's, else 80). The tables more than one command shows (runs, leases) are here too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ccweb_store.domain.durations import format_duration
from ccweb_store.domain.kinds import RunStatus

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.progress import Progress
    from rich.table import Table
    from rich.text import Text


#: A width no table reaches, to measure one at its natural width.
UNBOUNDED = 100_000


def stdout_console() -> Console:
    """A rich console on stdout that prints every string as text: no markup, no emoji codes,
    no highlighting. Its width is ``COLUMNS``, else the terminal's, else 80."""
    from rich.console import Console

    return Console(markup=False, emoji=False, highlight=False)


def new_table(title: str, caption: str | None = None) -> Table:
    """A table with a title and a caption, its header ruled off (``print_table`` prints it)."""
    from rich import box
    from rich.table import Table

    return Table(title=title, caption=caption, box=box.SIMPLE_HEAD)


def fields_table() -> Table:
    """Two columns without borders: a field's name in bold, then its value."""
    from rich.table import Table

    fields = Table.grid(padding=(0, 2))
    fields.add_column(style="bold")
    fields.add_column()
    return fields


def print_panel(content: RenderableType, title: str, console: Console | None = None) -> None:
    """``content`` in a box titled ``title``, both printed as text (rich would read a string
    title as markup), as wide as the console."""
    from rich.panel import Panel
    from rich.text import Text

    (console or stdout_console()).print(Panel(content, title=Text(title)))


def progress_bars(label: str) -> Progress:
    """Progress bars on stderr, each ``label``, its task's description (as text), the bar and
    how many of how many; they vanish once done."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    return Progress(
        TextColumn(f"{label} {{task.description}}", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        console=Console(stderr=True, markup=False, emoji=False, highlight=False),
        transient=True,
    )


def styled(*parts: str | tuple[str, str]) -> Text:
    """One line of text from ``parts``: a string as it is, ``(text, style)`` in that style
    (``"bold"``, ``"red"``)."""
    from rich.text import Text

    return Text.assemble(*parts)


def _fits(table: Table, width: int) -> bool:
    """Whether the no-wrap columns (ids, kinds, statuses) fit whole, leaving room for the rest."""
    from rich.cells import cell_len

    needed = 0
    for column in table.columns:
        if column.no_wrap:
            needed += max(cell_len(str(cell)) for cell in [column.header, *column.cells])
        else:
            needed += 10
        needed += 2  # padding
    return needed <= width


def print_table(table: Table) -> None:
    """Print ``table``; on a terminal too narrow to show its ids whole, one block per row.

    A block is the row's first cell and its status on one line, then ``Column: value`` pairs.
    """
    from rich.padding import Padding
    from rich.text import Text

    console = stdout_console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        # Piped with no width asked for: as wide as the rows' lines, nothing cut or wrapped.
        shown = console.width
        console.width = UNBOUNDED
        console.width = max(shown, console.measure(table).maximum)
        console.print(table)
        return
    if _fits(table, console.width):
        console.print(table)
        return
    headers = [str(column.header) for column in table.columns]
    columns = [[str(cell) for cell in column.cells] for column in table.columns]
    if table.title:
        console.print(Text(str(table.title), style="bold"))
    for index, row in enumerate(table.rows):
        cells = dict(zip(headers, (column[index] for column in columns), strict=True))
        first = cells.pop(headers[0])
        status = cells.pop("Status", "")
        console.print(Text(f"{first}  {status}".rstrip(), style=row.style or ""))
        details = " · ".join(
            f"{name}: {value}" for name, value in cells.items() if value not in ("", "-")
        )
        console.print(Padding(details, (0, 0, 0, 2)))
    if table.caption:
        console.print(Text(str(table.caption), style="dim"))


def lease_text(worker_id: str | None, lease_expires_at: datetime | None, now: datetime) -> str:
    """Who holds a run and how long its lease has left (or since when it has expired)."""
    if worker_id is None:
        return "-"
    if lease_expires_at is None:
        return worker_id
    left = (lease_expires_at - now).total_seconds()
    if left < 0:
        return f"{worker_id} (lease expired {format_duration(-left)} ago)"
    return f"{worker_id} (lease {format_duration(left)} left)"


def parse_iso(text: str) -> datetime:
    """A timestamp of the API's JSON (ISO 8601, ``Z``) as an aware datetime."""
    return datetime.fromisoformat(text)


def runs_json_table(
    runs: Sequence[Mapping[str, Any]], title: str, caption: str | None = None
) -> Table:
    """Runs as the host API writes them (``Run``), one row each."""
    from ccweb_store.domain.timestamps import utcnow

    now = utcnow()
    table = new_table(title, caption)
    # Ids, kinds and statuses stay whole on a narrow terminal; the free text wraps instead.
    table.add_column("Run", no_wrap=True)
    table.add_column("Conversation", no_wrap=True)
    table.add_column("Kind", no_wrap=True)
    table.add_column("Status", no_wrap=True)
    table.add_column("Age", justify="right", no_wrap=True)
    table.add_column("Worker", overflow="fold")
    table.add_column("Attempts", justify="right", no_wrap=True)
    table.add_column("Request", no_wrap=True)
    table.add_column("Error", overflow="fold")
    styles = {RunStatus.RUNNING: "green", RunStatus.FAILED: "red", RunStatus.CANCELLED: "dim"}
    for run in runs:
        expires = run["leaseExpiresAt"]
        table.add_row(
            run["id"],
            run["sessionId"],
            run["kind"],
            run["status"],
            format_duration((now - parse_iso(run["createdAt"])).total_seconds()),
            lease_text(run["workerId"], parse_iso(expires) if expires else None, now),
            str(run["attempts"]),
            run["replyRequestId"] or "",
            run["error"] or "",
            style=styles.get(run["status"]),
        )
    return table
