"""``python bench/event_writers.py``: event-writing commits from writer processes behind a
delaying forwarder, this checkout against another. Short windows: these tests keep the
script working and its lines whole, never a timing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import postgres_server_url
from tests.servers import ROOT


def run_bench(*args: str) -> subprocess.CompletedProcess[str]:
    server = postgres_server_url() or ""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CCWEB_BENCH_POSTGRES_URL": server}
    return subprocess.run(
        [sys.executable, "bench/event_writers.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_writers_behind_the_forwarder_get_a_row_per_count_of_processes_with_the_ratio() -> None:
    result = run_bench(
        "--processes", "2", "--writers", "2", "--seconds", "0.3", "--rounds", "1",
        "--delay-ms", "1", "--vs", str(ROOT),
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    heading, row = result.stdout.splitlines()
    assert heading.startswith("2 writers per process, 0.3 s each, 1 ms added each way")
    assert re.fullmatch(
        r"2 process\(es\): this checkout: [\d,]+ commits/s, --vs \S+: [\d,]+ "
        r"commits/s; ratio [\d.]+ \([\d.]+–[\d.]+\)",
        row,
    ), row


def test_a_baseline_that_is_not_a_checkout_is_refused(tmp_path: Path) -> None:
    result = run_bench("--vs", str(tmp_path))

    assert result.returncode == 2
    assert f"--vs {tmp_path}: no ccweb_store package there" in result.stderr
