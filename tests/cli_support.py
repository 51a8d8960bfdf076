"""Running the ``ccweb-store`` command in tests: in-process through typer's runner, or as
``python -m ccweb_store`` in a subprocess that imports this worktree's package."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from typer.testing import CliRunner, Result

from ccweb_store.cli import app
from tests import forked
from tests.forked import COMMAND
from tests.servers import ROOT, server_env

#: The terminal size pytest-xdist's workers set, unset as in a user's pipe (``server_env``).
NO_TERMINAL_SIZE: dict[str, str | None] = {"COLUMNS": None, "LINES": None}


def ccweb_store(database_url: str, *args: str) -> Result:
    """The command run in-process on ``database_url``, its output piped."""
    return CliRunner().invoke(app, [*args, "--database-url", database_url], env=NO_TERMINAL_SIZE)


def as_json(result: Result) -> Any:
    """What a command that must succeed printed as JSON."""
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def run_cli(
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: Path = ROOT,
    input: str | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """``python -m ccweb_store ARGS`` run to its end in a process of its own, its output
    captured as text (as ``subprocess.run`` gives it).

    ``env`` defaults to ``server_env()``: this environment importing this checkout, no token.
    The process is forked from one that has the package imported (``tests/forked.py``).
    """
    environment = dict(env) if env is not None else server_env()
    command = [*COMMAND, *args]
    if forked.forkable(environment):
        return forked.run(command, env=environment, cwd=cwd, input=input, timeout=timeout)
    return subprocess.run(
        command,
        input=input,
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
