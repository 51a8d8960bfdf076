"""Running a benchmark script as the tests run it: ``--quick``, against this machine's
PostgreSQL, its table's lines read back."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import postgres_server_url
from tests.servers import ROOT


def quick_table(script: str) -> list[str]:
    """The table lines (``| …``) ``bench/SCRIPT --quick`` prints, on both engines; it must
    exit 0."""
    server = postgres_server_url()
    assert server is not None
    result = subprocess.run(
        [sys.executable, f"bench/{script}", "--quick"],
        cwd=ROOT,
        env={**os.environ, "CCWEB_BENCH_POSTGRES_URL": server},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    return [line for line in result.stdout.splitlines() if line.startswith("| ")]
