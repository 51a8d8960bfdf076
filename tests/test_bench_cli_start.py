"""``bench/cli_start.py``'s table: each command's median against ``python -c pass`` of the same
run, and whether it meets its goal."""

from __future__ import annotations

from bench.cli_start import COMMANDS, Timings, table


def test_the_table_gives_each_command_its_ratio_to_python_and_its_verdict() -> None:
    timings = {name: Timings(wall=[0.02, 0.03, 0.04], cpu=[0.02] * 3) for name, _, _ in COMMANDS}
    timings["--version"] = Timings(wall=[0.15, 0.12, 0.9], cpu=[0.1] * 3)
    timings["replies list"] = Timings(wall=[0.6, 0.7, 0.65], cpu=[0.5] * 3)

    rows = {line.split(" | ")[0].strip("| `"): line for line in table(timings)[2:]}

    assert rows["--version"] == "| `--version` | 150 ms | 100 ms | 5.0 | < 0.3 s | met |"
    assert rows["replies list"].endswith("| 21.7 | < 0.5 s | not met |")
    assert rows["python -c pass"].endswith("| 1.0 | — |  |")
