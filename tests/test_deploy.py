"""``deploy/``: the systemd units pass ``systemd-analyze verify`` with their sandboxing in
place, the alert rules pass ``promtool check rules`` and name only metrics ``/metrics``
serves, and the environment file example sets only settings that exist.

``systemd-analyze verify`` checks that each ``ExecStart`` binary exists. The units name the
installed one, ``/opt/ccweb-store/.venv/bin/ccweb-store``; the test verifies copies in which
that venv is this checkout's (``sys.prefix``), whose ``bin/ccweb-store`` the install made, so
everything else is verified as shipped. CI installs both tools (.ci/run: Debian's
``systemd`` and ``prometheus`` packages); elsewhere a test skips when its tool is missing.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ccweb_store import metrics
from ccweb_store.config import Settings
from ccweb_store.store.uow import Store
from tests.http_client import app_client
from tests.servers import ROOT

DEPLOY = ROOT / "deploy"
UNITS = ("ccweb-store@.service", "ccweb-store-worker@.service")
RULES = DEPLOY / "ccweb-store.rules.yml"
ENV_EXAMPLE = DEPLOY / "ccweb-store.env.example"
INSTALLED_VENV = "/opt/ccweb-store/.venv"
#: The sandboxing every unit keeps.
HARDENING = (
    "DynamicUser=yes",
    "ProtectSystem=strict",
    "ProtectHome=yes",
    "PrivateTmp=yes",
    "NoNewPrivileges=yes",
    "CapabilityBoundingSet=",
    "SystemCallFilter=@system-service",
)


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (CI installs it: see .ci/run)")
    return path


@pytest.mark.parametrize("unit", UNITS)
def test_the_unit_passes_systemd_analyze_verify(unit: str, tmp_path: Path) -> None:
    analyze = tool("systemd-analyze")
    text = (DEPLOY / unit).read_text(encoding="utf-8")
    assert f"ExecStart={INSTALLED_VENV}/bin/ccweb-store " in text
    here = Path(sys.prefix)
    assert (here / "bin" / "ccweb-store").is_file()
    copy = tmp_path / unit
    copy.write_text(text.replace(INSTALLED_VENV, str(here)), encoding="utf-8")
    result = subprocess.run(
        [analyze, "verify", str(copy)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and result.stderr == ""  # not even a warning


@pytest.mark.parametrize("unit", UNITS)
def test_the_unit_keeps_its_sandbox(unit: str) -> None:
    lines = (DEPLOY / unit).read_text(encoding="utf-8").splitlines()
    for setting in HARDENING:
        assert setting in lines, setting
    assert any(line.startswith("StateDirectory=") for line in lines)
    assert "EnvironmentFile=/etc/ccweb-store/ccweb-store.env" in lines


def test_the_alert_rules_pass_promtool(tmp_path: Path) -> None:
    promtool = tool("promtool")
    result = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


async def test_the_alert_rules_name_only_metrics_the_server_serves(store: Store) -> None:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    alerts = {rule["alert"]: rule for group in rules["groups"] for rule in group["rules"]}
    waited = alerts["CcwebReplyWaitingOverAnHour"]
    assert "ccweb_oldest_waiting_reply_age_seconds" in waited["expr"]
    assert "> 3600" in waited["expr"]
    for rule in alerts.values():
        assert rule["annotations"]["summary"] and rule["labels"]["severity"]
    used = {name for rule in alerts.values() for name in re.findall(r"ccweb_\w+", rule["expr"])}
    async with app_client(store) as client:
        await client.get("/healthz")  # so that the request series exist
        scraped = (await client.get("/metrics")).text
    served = set(re.findall(r"^(ccweb_\w+?)(?:\{| )", scraped, re.MULTILINE))
    # A labelled counter shows no sample before its first count (no lease expired here).
    counters = {
        f"{family.name}_total"
        for metric in (metrics.LEASE_EXPIRIES, metrics.DATABASE_ERRORS, metrics.REQUESTS)
        for family in metric.describe()
    }
    assert used and used <= served | counters, used - served - counters


def test_the_environment_example_sets_only_real_settings() -> None:
    names = [
        line.lstrip("#").split("=", 1)[0]
        for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines()
        if re.match(r"#?CCWEB_\w+=", line)
    ]
    settings = {f"CCWEB_{field.upper()}" for field in Settings.model_fields}
    worker = {"CCWEB_URL"}  # read by `ccweb-store worker`
    assert names and set(names) <= settings | worker, set(names) - settings - worker
    # The unit sets the port from its instance name; the file must not override it.
    assert "CCWEB_PORT" not in names
