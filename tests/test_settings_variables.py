"""A ``CCWEB_*`` variable that is not a setting (a misspelt one) is named, with the closest
real one, at ``serve``'s start and in ``doctor``; the variables ccweb-store reads that are not
settings (the run's, the worker's, the tests') never are; docs/operations.md lists every
setting once."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ccweb_store.config import OTHER_PREFIXES, OTHER_VARIABLES, setting_variables
from tests.cli_support import run_cli
from tests.servers import ROOT, server_env

MISSPELT = {"CCWEB_TOKN": "x" * 20, "CCWEB_DATABSE_URL": "postgresql+asyncpg://u@db/x"}
WARNED = (
    "CCWEB_DATABSE_URL is not a setting; did you mean CCWEB_DATABASE_URL?",
    "CCWEB_TOKN is not a setting; did you mean CCWEB_TOKEN?",
)
#: Where the project names its variables.
SOURCES = ("ccweb_store", "tests", "bench", ".ci", "docs", "deploy", "README.md")


def test_serve_names_each_misspelt_variable_and_the_setting_it_likely_means(
    tmp_path: Path,
) -> None:
    # A public bind without a token stops the start right after the warnings.
    env = server_env(CCWEB_DATA_DIR=str(tmp_path), CCWEB_HOST="0.0.0.0", **MISSPELT)

    result = run_cli("serve", env=env)

    assert result.returncode == 2
    warned = [line for line in result.stderr.splitlines() if "is not a setting" in line]
    assert len(warned) == 2, result.stderr
    for line, expected in zip(warned, WARNED, strict=True):
        assert line.endswith(expected) and "WARNING" in line


def test_doctor_names_each_misspelt_variable_as_a_warning(database_url: str) -> None:
    env = server_env(CCWEB_DATABASE_URL=database_url, **MISSPELT)

    result = run_cli("doctor", "--json", env=env)

    checks = {check["name"]: check for check in json.loads(result.stdout)["checks"]}
    assert checks["variables"]["status"] == "warning"
    assert checks["variables"]["items"] == list(WARNED)
    text = run_cli("doctor", env=env)
    assert all(line in text.stdout for line in WARNED)


def test_the_variables_the_worker_and_the_tests_set_are_never_warned_about(
    database_url: str,
) -> None:
    run = {name: "1" for name in OTHER_VARIABLES}
    env = server_env(CCWEB_DATABASE_URL=database_url, CCWEB_TEST_ANYTHING="1", **run)

    result = run_cli("doctor", "--json", env=env)

    checks = {check["name"]: check for check in json.loads(result.stdout)["checks"]}
    assert checks["variables"]["status"] == "ok", checks["variables"]


def test_every_ccweb_variable_the_project_names_is_a_setting_or_one_it_reads_otherwise() -> None:
    named: set[str] = set()
    for source in SOURCES:
        path = ROOT / source
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        for file in files:
            if {"__pycache__", "node_modules"} & set(file.parts) or file.suffix in (".png", ".pyc"):
                continue
            if file == Path(__file__):  # it names misspelt ones on purpose
                continue
            # The docs show the warning, naming a misspelt variable on purpose.
            text = re.sub(r"CCWEB_\w+ is not a setting", "", file.read_text("utf-8"))
            named |= set(re.findall(r"\bCCWEB_[A-Z][A-Z0-9_]*[A-Z0-9]\b", text))
    unknown = {
        name
        for name in named - setting_variables() - OTHER_VARIABLES
        if not name.startswith(OTHER_PREFIXES)
    }
    assert unknown == set()


def test_the_settings_table_of_operations_md_lists_every_setting_once() -> None:
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    table = text.split("## ", 2)[1]
    rows = [line for line in table.splitlines() if line.startswith("| `CCWEB_")]
    listed = [name for row in rows for name in re.findall(r"`(CCWEB_\w+)`", row.split("|")[1])]
    assert sorted(listed) == sorted(setting_variables())
