"""``python bench/compare.py``: every row of the side-by-side table, each with its goal.

The figures of ``--quick`` mean nothing (tiny sizes, fractions of a second): these tests only
keep the benchmark from rotting, so they check the table, never a timing.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import postgres_server_url
from tests.servers import ROOT

POSTGRES_ENV = "CCWEB_BENCH_POSTGRES_URL"
VERDICT = r"(met|NOT met)"

#: (how a row begins, its goal) for every row measured on SQLite.
SQLITE_ROWS = [
    (r"send_message \(return_and_continue\) over /mcp vs bare Starlette", "≥ 0.3"),
    (r"send vs aiosqlite floor", "≥ 0.8"),
    (r"list_user_inputs over /mcp vs bare Starlette", "≥ 0.5"),
    (r"list vs aiosqlite floor", "≥ 0.8"),
    (r"trivial tool call over /mcp vs MCP SDK stateless server", "≥ 2×"),
    (r"list_user_inputs latency, [\d,]+ vs [\d,]+ msgs, SQLite", "≤ 1.3×"),
    (r"list_user_inputs at [\d,]+ msgs vs JSON file, SQLite", "≥ 1000× faster"),
    (r"import-json \([\d,]+ rows\) vs sqlite3.executemany", "≥ 0.5"),
    (r"round trip on SQLite vs bare Starlette / 3", "≥ 0.13"),
    (r"round trip on SQLite vs aiosqlite floor", "≥ 0.8"),
]
POSTGRES_ROWS = [
    r"list_user_inputs latency, [\d,]+ vs [\d,]+ msgs, PostgreSQL",
    r"list_user_inputs at [\d,]+ msgs vs JSON file, PostgreSQL",
    r"round trip on PostgreSQL vs bare Starlette / 3",
]


def compare(*args: str, postgres: str | None = None) -> list[str]:
    """Run ``bench/compare.py --quick`` with ``args``; the lines it printed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(POSTGRES_ENV, None)
    if postgres is not None:
        env[POSTGRES_ENV] = postgres
    result = subprocess.run(
        [sys.executable, "bench/compare.py", "--quick", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def driver_call_cells(lines: list[str]) -> dict[str, list[str]]:
    """The cells of the table of driver calls per step that every run prints, by step."""
    steps = ("send", "claim", "complete", "round trip")
    cells = {}
    for line in lines:
        for step in steps:
            if line.startswith(f"{step}  "):
                cells[step] = line[len(step) :].split()
    assert list(cells) == list(steps), lines
    return cells


def row(lines: list[str], begins: str) -> str:
    found = [line for line in lines if re.match(begins, line)]
    assert len(found) == 1, (begins, lines)
    return found[0]


@pytest.mark.slow
def test_the_table_has_every_row_with_a_figure_its_goal_and_whether_it_is_met() -> None:
    lines = compare()

    for begins, goal in SQLITE_ROWS:
        line = row(lines, begins)
        # A bare-endpoint goal the floor itself stays below shows the floor's share, no verdict.
        out_of_reach = rf"{re.escape(goal)} \(floor: \d\.\d\d\)\s+—$"
        assert re.search(rf"\d.*  ({re.escape(goal)}\s+{VERDICT}|{out_of_reach})$", line), line
    for begins in POSTGRES_ROWS:
        assert row(lines, begins).endswith(f"skipped: set {POSTGRES_ENV}")
    assert any(line.startswith("HTTP windows") for line in lines)
    for window in (
        "the floor's send (aiosqlite): ",
        "the floor's list (aiosqlite): ",
        "the floor's round trip (aiosqlite, per round trip): ",
    ):
        assert re.search(r"\d/s; server CPU", row(lines, rf"  {re.escape(window)}")), lines
    assert any(line.startswith("import: 3 sessions x 20 messages") for line in lines)
    for cells in driver_call_cells(lines).values():
        assert cells[0].isdigit() and cells[1:] == ["skipped:", "set", POSTGRES_ENV], cells


def test_the_postgresql_rows_are_measured_when_a_server_is_named() -> None:
    server = postgres_server_url()
    lines = compare("--backend", "postgres", "--only", "latency,roundtrip", postgres=server)

    for begins in POSTGRES_ROWS[:2]:
        assert re.search(rf"\d ms .*{VERDICT}$", row(lines, begins))
    # PostgreSQL's round trip has no floor: its goal always gets a verdict.
    assert re.search(rf"round trips/s .* ≥ 0.08\s+{VERDICT}$", row(lines, POSTGRES_ROWS[2]))
    assert not any("SQLite" in line or "floor" in line for line in lines)
    assert all(cells[0].isdigit() for cells in driver_call_cells(lines).values())


def test_the_floor_rows_come_with_the_row_they_measure_and_only_with_it() -> None:
    lines = compare("--only", "list")

    assert row(lines, r"list vs aiosqlite floor")
    assert not any(re.match(r"send\w* (over|vs|\()", line) for line in lines)
    # The driver calls are counted in every run, whatever rows it measures.
    assert all(cells[0].isdigit() for cells in driver_call_cells(lines).values())


def test_the_sqlite_round_trip_comes_with_its_floor_and_the_floor_rule() -> None:
    lines = compare("--backend", "sqlite", "--only", "roundtrip")

    bare = row(lines, r"round trip on SQLite vs bare Starlette / 3")
    floor = row(lines, r"round trip on SQLite vs aiosqlite floor")
    assert re.search(rf"round trips/s .* ≥ 0.8\s+{VERDICT}$", floor), floor
    # The bare goal gets a verdict only when 0.8 of the floor's round trips reach it;
    # otherwise the row shows the floor's share of bare / 3, and no verdict.
    reached = re.search(rf"≥ 0.13\s+{VERDICT}$", bare)
    out_of_reach = re.search(r"≥ 0.13 \(floor: (\d\.\d\d)\)\s+—$", bare)
    assert reached or (out_of_reach and 0.8 * float(out_of_reach[1]) < 0.13 + 0.005), bare
    assert not any(re.match(r"(send|list)\w* (over|vs|\()", line) for line in lines)


@pytest.mark.parametrize(
    ("floor_rate", "goal"),
    [
        (90, r"≥ 0.13 \(floor: 0.09\)\s+—"),
        (150, r"≥ 0.13 \(floor: 0.15\)\s+—"),
        (180, r"≥ 0.13\s+NOT met"),
    ],
    ids=["floor below the bare goal", "0.8 of the floor below it", "0.8 of the floor above it"],
)
def test_the_sqlite_round_trip_is_held_to_its_bare_goal_only_where_the_floor_reaches_it(
    monkeypatch: pytest.MonkeyPatch, floor_rate: int, goal: str
) -> None:
    """Bare endpoint 3,000 req/s (1,000 round trips/s), ours 60 round trips/s, the floor 90,
    150 or 180: the goal applies only where 0.8 of the floor reaches it (0.8 × 0.18 ≥ 0.13);
    otherwise the row shows the floor's share and no verdict. PostgreSQL (60) has no floor:
    its goal always applies."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    compare_http = importlib.import_module("compare_http")
    harness = importlib.import_module("harness")

    def windows(rate: float) -> list[object]:
        return [compare_http.Window(int(rate), harness.Usage(1.0, 0.1, None))] * 3

    measured = {
        "bare": windows(3_000),
        "roundtrip SQLite": windows(60),
        "roundtrip floor": windows(floor_rate),
        "roundtrip PostgreSQL": windows(60),
    }
    options = argparse.Namespace(backends=["SQLite", "PostgreSQL"])
    rows = {r.label: r for r in compare_http.roundtrip_rows(options, measured)}

    def line(label: str) -> str:
        found = rows[label]
        return f"{found.ratio_text()}  {found.goal}  {found.verdict()}"

    assert re.fullmatch(
        rf"0.06 \(0.06–0.06\)  {goal}", line("round trip on SQLite vs bare Starlette / 3")
    )
    floor_ratio = f"{60 / floor_rate:.2f}"
    assert line("round trip on SQLite vs aiosqlite floor") == (
        f"{floor_ratio} ({floor_ratio}–{floor_ratio})  ≥ 0.8  NOT met"
    )
    assert (
        line("round trip on PostgreSQL vs bare Starlette / 3")
        == "0.06 (0.06–0.06)  ≥ 0.08  NOT met"
    )


def test_a_row_that_does_not_exist_is_refused_with_the_ones_that_do() -> None:
    result = subprocess.run(
        [sys.executable, "bench/compare.py", "--only", "sends"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "unknown rows ['sends']; choose among send, list, sdk" in result.stderr
