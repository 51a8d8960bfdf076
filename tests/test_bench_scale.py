"""``python bench/scale.py --quick``: every row of the scale table on both engines.

The figures of ``--quick`` mean nothing (a few thousand messages): the test only keeps the
benchmark from rotting, so it checks the table, never a timing.
"""

from __future__ import annotations

import pytest

from tests.bench_support import quick_table

ROWS = [
    "`copy` SQLite → PostgreSQL",
    "the same, its verification pass included",
    "ccweb_list_user_inputs, 5,000 vs 1,000 messages, SQLite",
    "message.list page, 5,000 vs 1,000 messages, SQLite",
    "database bytes per message, SQLite",
    "ccweb_list_user_inputs, 5,000 vs 1,000 messages, PostgreSQL",
    "message.list page, 5,000 vs 1,000 messages, PostgreSQL",
    "database bytes per message, PostgreSQL",
    "`export-json` (11,000 messages)",
    "`import-json` of 2,000 messages (5 files): peak RSS",
    "`import-json` of 2,000 messages (1 file, one conversation): peak RSS",
]


@pytest.mark.slow
def test_the_quick_scale_run_prints_every_row_with_its_goal() -> None:
    lines = quick_table("scale.py")
    for row in ROWS:
        assert any(line.startswith(f"| {row}") for line in lines), row
    assert sum(line.endswith(("| met |", "| NOT met |")) for line in lines) == 7
