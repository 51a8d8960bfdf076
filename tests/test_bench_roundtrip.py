"""``python bench/roundtrip.py --processes``: the round trip through several server processes on
one database, per count of processes. Short windows: these tests keep the script working and
its table whole, never a timing."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import postgres_server_url
from tests.servers import ROOT


def test_server_processes_on_one_postgresql_database_get_a_scale_out_row() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CCWEB_BENCH_POSTGRES_URL": postgres_server_url()}
    result = subprocess.run(
        [
            sys.executable,
            "bench/roundtrip.py",
            "--backend",
            "postgres",
            "--seconds",
            "0.4",
            "--clients",
            "2",
            "--processes",
            "2",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    start = lines.index("scale-out (2 client loops shared among the processes):")
    row = lines[start + 1]
    assert re.match(
        r"  PostgreSQL, 2 processes: [\d,]+ round trips/s \(1\.00× the first count; \d+ refused;"
        r" server CPU [\d.]+ ms/round trip",
        row,
    ), row


@pytest.mark.parametrize(
    ("given", "why"),
    [("0", "every count must be at least 1"), ("1,two", "give counts like 1,2,4")],
)
def test_a_count_of_processes_that_is_not_one_or_more_is_refused(given: str, why: str) -> None:
    result = subprocess.run(
        [sys.executable, "bench/roundtrip.py", "--processes", given],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert f"argument --processes: {given!r}: {why}" in result.stderr
