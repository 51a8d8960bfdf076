"""How the operator commands print tables: whole on a wide terminal, one block per row on a
narrow one, and the tables more than one command shows (runs, leases)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ccweb_store.domain.durations import format_duration
from ccweb_store.domain.kinds import RunStatus

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from ccweb_store.store.rows import Run


def stdout_console() -> Console:
    """A rich console on stdout; piped output is wide enough that ids are never cut."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 200)
    return console


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


def runs_table(runs: list[Run], title: str, caption: str | None = None) -> Table:
    from ccweb_store.protocol.shapes import run_out

    return runs_json_table([run_out(run) for run in runs], title, caption)


def runs_json_table(
    runs: Sequence[Mapping[str, Any]], title: str, caption: str | None = None
) -> Table:
    """Runs as the host API writes them (``run_out``), one row each."""
    from rich import box
    from rich.table import Table

    from ccweb_store.domain.timestamps import utcnow

    now = utcnow()
    table = Table(title=title, caption=caption, box=box.SIMPLE_HEAD)
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
