"""The table of ``compare.py``: its rows, their goals, and where each row's database is."""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from harness import postgres_database

POSTGRES_ENV = "CCWEB_BENCH_POSTGRES_URL"
SKIPPED_POSTGRES = f"skipped: set {POSTGRES_ENV}"


@dataclass
class Row:
    """One line of the table."""

    label: str
    ours: str = ""
    peer: str = ""
    ratios: list[float] = field(default_factory=list)
    goal: str = ""
    #: Whether the goal is met; None when there is no goal, or the row was skipped.
    met: bool | None = None
    skipped: str = ""

    def ratio_text(self) -> str:
        if not self.ratios:
            return ""
        median = statistics.median(self.ratios)
        text = f"{median:.2f}" if median < 10 else f"{median:,.0f}"
        if len(self.ratios) > 1:
            low, high = min(self.ratios), max(self.ratios)
            text += f" ({low:.2f}–{high:.2f})" if high < 10 else f" ({low:,.0f}–{high:,.0f})"
        return text

    def verdict(self) -> str:
        if self.skipped:
            return self.skipped
        if self.met is None:
            return "—"
        return "met" if self.met else "NOT met"


def at_least(row: Row, goal: float, unit: str = "") -> Row:
    """Set the row's goal: the median ratio at least ``goal``."""
    row.goal = f"≥ {goal:g}{unit}"
    row.met = bool(row.ratios) and statistics.median(row.ratios) >= goal
    return row


def print_table(rows: list[Row]) -> None:
    header = ("row", "ours", "peer", "ratio (spread)", "goal", "")
    lines = [(r.label, r.ours, r.peer, r.ratio_text(), r.goal, r.verdict()) for r in rows]
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]
    for line in [header, tuple("-" * w for w in widths), *lines]:
        cells = (cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        print("  ".join(cells).rstrip())


def database_url(backend: str, options: argparse.Namespace, tmp: Path, name: str) -> str:
    """A fresh database for one use: a SQLite file in ``tmp``, or a scratch PostgreSQL
    database that ``options.cleanup`` drops at the end."""
    if backend == "SQLite":
        return f"sqlite+aiosqlite:///{tmp / name}.db"
    url, drop = postgres_database(options.postgres)
    options.cleanup.callback(drop)
    return url
