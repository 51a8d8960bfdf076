"""``bench/driver_calls.py``: the driver calls of a send, a claim, a completion and a round trip
on each engine, counted from the driver, pinned here."""

from __future__ import annotations

import re

from bench import driver_calls
from tests.servers import ROOT

#: The driver calls of each step, per engine, as ``bench/driver_calls.py`` counts them (SQLite:
#: every call to aiosqlite's connection, each a hand-off to its thread; PostgreSQL: every query
#: asyncpg sends). A change that adds or removes a call must update this pin deliberately, and
#: docs/benchmarks.md's table of the counts with it: the diff then shows it in review.
PINNED = {
    "sqlite": {"send": 3, "claim": 1, "complete": 9, "round trip": 13},
    "postgres": {"send": 7, "claim": 1, "complete": 12, "round trip": 20},
}


async def test_each_step_makes_exactly_the_pinned_driver_calls(
    database_url: str, backend: str
) -> None:
    steps = await driver_calls.count_steps(database_url)

    named = "\n".join(
        f"{s.step} ({s.count}): {driver_calls.named_calls(s.statements)}" for s in steps
    )
    assert {step.step: step.count for step in steps} == PINNED[backend], named


async def test_a_round_trip_makes_the_calls_of_its_three_steps(
    database_url: str, backend: str
) -> None:
    steps = {step.step: step for step in await driver_calls.count_steps(database_url)}

    parts = [steps["send"], steps["claim"], steps["complete"]]
    assert steps["round trip"].count == sum(part.count for part in parts)
    names = [driver_calls.brief(sql) for part in parts for sql in part.statements]
    assert [driver_calls.brief(sql) for sql in steps["round trip"].statements] == names


def test_the_counts_in_benchmarks_md_are_the_pinned_ones() -> None:
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    section = text[text.index("### Driver calls") :]
    shown = {}
    for step in driver_calls.STEPS:
        begins = "completion" if step == "complete" else step
        found = re.search(rf"^\| {begins}\b.*\| (\d+) \| (\d+) \|$", section, re.M)
        assert found is not None, f"no row for {step} in docs/benchmarks.md#driver-calls"
        shown[step] = (int(found[1]), int(found[2]))

    assert shown == {
        step: (PINNED["sqlite"][step], PINNED["postgres"][step]) for step in driver_calls.STEPS
    }


def test_each_call_is_named_by_its_verb_and_tables() -> None:
    assert driver_calls.named_calls(
        [
            "BEGIN IMMEDIATE",
            "SELECT sessions.id \nFROM sessions \nWHERE sessions.id IN ($1, $2) FOR UPDATE",
            "WITH step_0 AS \n(UPDATE sessions SET updated_at=$1)\n INSERT INTO messages (id)"
            " VALUES ($2)",
            "WITH claimed AS (UPDATE runs SET status=$1 WHERE runs.id = (SELECT id FROM runs"
            " FOR UPDATE SKIP LOCKED)) INSERT INTO events (type) SELECT 'run.claimed'",
            "INSERT INTO events (type) VALUES ('a')",
            "INSERT INTO events (type) VALUES ('b')",
            "PREPARE SELECT 1 AS one FROM runs",
            "COMMIT;",
        ]
    ) == (
        "BEGIN IMMEDIATE, SELECT sessions FOR UPDATE, UPDATE sessions + INSERT messages,"
        " UPDATE runs + INSERT events, INSERT events ×2, PREPARE SELECT runs, COMMIT"
    )
