"""``python bench/team_year.py --quick``: every row of the team's-year table on both engines.

The figures of ``--quick`` mean nothing (a few hundred conversations): the test only keeps the
benchmark from rotting, so it checks the table, never a timing.
"""

from __future__ import annotations

import pytest

from tests.bench_support import quick_table

READS = [
    "console overview `/`",
    "console filtered list `/?state=ready`",
    "console filtered list `/?conversation=ID`",
    "console conversation page (10,000 messages)",
    "`conversation_activity`, 20 most recently active",
    "`pending_replies` of one conversation",
    "`operator.conversations` (100, with their activity)",
    "`session.list` page from the middle",
    "`run.claim`",
    "8 concurrent runs of 0.1 s, with an open console tab vs without (team's year)",
]


@pytest.mark.slow
def test_the_quick_team_year_run_prints_every_row_with_its_goal() -> None:
    lines = quick_table("team_year.py")
    for engine in ("SQLite", "PostgreSQL"):
        for row in READS:
            assert any(line.startswith(f"| {row}, {engine} |") for line in lines), (row, engine)
    assert any(line.startswith("| idle server CPU") for line in lines)
    assert sum(line.endswith(("| met |", "| **not met** |")) for line in lines) == 21
