"""The example cc-web state shipped in examples/ (docs/import.md walks through it): its dry run
counts what its import does, and what the import leaves for the operator shows in doctor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.cli_support import run_cli
from tests.servers import ROOT, server_env

EXAMPLE = ROOT / "examples" / "cc-web-state"


def counts(summary: dict[str, Any]) -> dict[str, Any]:
    return {key: summary[key] for key in ("sessions", "messages", "replies", "skipped")}


def imported(env: dict[str, str], *args: str) -> dict[str, Any]:
    result = run_cli("import-json", str(EXAMPLE), "--json", *args, env=env)
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_the_dry_run_counts_what_the_import_does_on_a_migrated_database(database_url: str) -> None:
    env = server_env(CCWEB_DATABASE_URL=database_url)

    dry = imported(env, "--dry-run")
    real = imported(env)
    again = imported(env, "--dry-run")

    assert counts(dry) == counts(real)
    assert real["replies"]["originalRequestRecovered"] == 1
    assert (real["sessions"]["imported"], real["messages"]["imported"]) == (2, 3)
    assert again["sessions"]["unchanged"] == 2 and again["replies"]["unchanged"] == 1


def test_the_dry_run_counts_what_the_import_does_with_no_database_yet(tmp_path: Path) -> None:
    env = server_env(CCWEB_DATA_DIR=str(tmp_path / "home"))
    env.pop("CCWEB_DATABASE_URL", None)

    dry = imported(env, "--dry-run")
    assert not (tmp_path / "home").exists()
    real = imported(env)

    assert counts(dry) == counts(real)
    assert dry["replies"]["originalRequestRecovered"] == 1


def test_doctor_names_the_imported_request_no_run_will_answer_until_it_is_retried(
    database_url: str,
) -> None:
    env = server_env(CCWEB_DATABASE_URL=database_url)
    imported(env)

    before = run_cli("doctor", "--json", env=env)
    retried = run_cli("replies", "retry", "req-example-1", env=env)
    after = run_cli("doctor", "--json", env=env)

    assert before.returncode == 1
    [waiting] = [c for c in json.loads(before.stdout)["checks"] if c["name"] == "waiting requests"]
    assert waiting["items"][0].startswith("req-example-1: Planner (planner) → Tester (tester)")
    assert retried.returncode == 0, retried.stderr
    assert after.returncode == 0, after.stdout
