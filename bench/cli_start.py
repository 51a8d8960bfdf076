"""How long a ``ccweb-store`` command takes from start to exit, against ``python -c pass`` in
the same run.

    python bench/cli_start.py [--rounds 7] [--vs ../before]

Each command runs in a fresh interpreter (``python -m ccweb_store …``) ``--rounds`` times, its
rounds interleaved with the others' so that a change in the machine's load falls on all of
them; the table gives each command's median wall time and CPU time (its process's user and
system time), the ratio of its wall time to ``python -c pass``'s, and the goal. The read
commands run on a small database: ``examples/cc-web-state`` imported into a fresh SQLite file.
Two more peers: the libraries a read command cannot do without (SQLAlchemy's ORM and asyncio
extension, pydantic-settings) imported alone, the floor of every command that opens the
database; and with ``--vs PATH``, each command again with another checkout's package (the
baseline), in the same rounds.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_STATE = ROOT / "examples" / "cc-web-state"

#: Each command measured, what it is, and its goal in seconds of wall time (None: the peer).
COMMANDS: tuple[tuple[str, tuple[str, ...], float | None], ...] = (
    ("python -c pass", ("-c", "pass"), None),
    (
        "import sqlalchemy.orm, sqlalchemy.ext.asyncio, pydantic_settings",
        ("-c", "import sqlalchemy.orm, sqlalchemy.ext.asyncio, pydantic_settings"),
        None,
    ),
    ("--version", ("-m", "ccweb_store", "--version"), 0.3),
    ("--help", ("-m", "ccweb_store", "--help"), 0.3),
    ("replies list", ("-m", "ccweb_store", "replies", "list"), 0.5),
    ("conversations list", ("-m", "ccweb_store", "conversations", "list"), 0.5),
    ("messages planner", ("-m", "ccweb_store", "messages", "planner"), 0.5),
    ("runs list", ("-m", "ccweb_store", "runs", "list"), 0.5),
)


@dataclass
class Timings:
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(args: tuple[str, ...], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``python ARGS``, which must succeed; in the folder
    of the checkout ``env`` imports (``-m`` puts the working folder first on the path)."""
    cpu, began = children_cpu(), time.perf_counter()
    result = subprocess.run(
        [sys.executable, *args],
        env=env,
        cwd=env["PYTHONPATH"],
        capture_output=True,
        text=True,
    )
    wall, cpu = time.perf_counter() - began, children_cpu() - cpu
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(args)} exited {result.returncode}: {result.stderr}")
    return wall, cpu


def small_database(env: dict[str, str]) -> None:
    """The example cc-web state imported into ``env``'s database (a fresh SQLite file)."""
    run_once(("-m", "ccweb_store", "import-json", str(EXAMPLE_STATE)), env)


def environment(checkout: Path, database: Path) -> dict[str, str]:
    """This environment importing ``checkout``'s package, on ``database``, no other
    ``CCWEB_*`` setting and no terminal width."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CCWEB_")}
    env.pop("COLUMNS", None)
    return {
        **env,
        "PYTHONPATH": str(checkout),
        "CCWEB_DATABASE_URL": f"sqlite+aiosqlite:///{database}",
    }


def measure(rounds: int, baseline: Path | None) -> dict[str, Timings]:
    """Each command's timings (``… (baseline)`` for the baseline checkout's)."""
    with tempfile.TemporaryDirectory() as folder:
        env = environment(ROOT, Path(folder) / "small.db")
        small_database(env)
        runs = [(name, args, env) for name, args, _ in COMMANDS]
        if baseline is not None:
            base = environment(baseline, Path(folder) / "small.db")
            runs += [
                (f"{name} (baseline)", args, base)
                for name, args, _ in COMMANDS
                if args[:2] == ("-m", "ccweb_store")
            ]
        timings = {name: Timings() for name, _, _ in runs}
        for _, args, run_env in runs:  # once each first: the files in the page cache
            run_once(args, run_env)
        for _ in range(rounds):
            for name, args, run_env in runs:
                wall, cpu = run_once(args, run_env)
                timings[name].wall.append(wall)
                timings[name].cpu.append(cpu)
        return timings


def table(timings: dict[str, Timings]) -> list[str]:
    peer = statistics.median(timings[COMMANDS[0][0]].wall)
    goals = {name: goal for name, _, goal in COMMANDS}
    lines = [
        "| command | wall (median) | CPU (median) | ratio to `python -c pass` | goal | |",
        "|---|---|---|---|---|---|",
    ]
    for name, measured in timings.items():
        wall = statistics.median(measured.wall)
        cpu = statistics.median(measured.cpu)
        goal = goals.get(name)
        verdict = "" if goal is None else ("met" if wall <= goal else "not met")
        lines.append(
            f"| `{name}` | {wall * 1000:.0f} ms | {cpu * 1000:.0f} ms | {wall / peer:.1f} | "
            f"{'—' if goal is None else f'< {goal:g} s'} | {verdict} |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="runs of each command")
    parser.add_argument("--vs", type=Path, help="a checkout whose ccweb_store is the baseline")
    options = parser.parse_args()
    if options.vs is not None and not (options.vs / "ccweb_store" / "__init__.py").is_file():
        parser.error(f"--vs {options.vs}: no ccweb_store package there")
    load = os.getloadavg()[0]
    timings = measure(max(options.rounds, 1), options.vs)
    print(f"ccweb-store start-up, {options.rounds} rounds, Python {sys.version.split()[0]}")
    print(f"load average {load:.1f} before, {os.getloadavg()[0]:.1f} after")
    print("\n".join(table(timings)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
