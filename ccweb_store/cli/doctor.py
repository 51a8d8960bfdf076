"""``ccweb-store doctor``: check a setup and say, for each finding, the command that fixes it
(``services.doctor``), on the database or on a running server (``--server``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import typer

from ccweb_store.cli.common import AsJson, DatabaseUrl, database_settings, print_json
from ccweb_store.cli.remote import ServerUrl, operator_call

#: Each status's mark and its colour.
MARKS = {"ok": ("  ok", "green"), "warning": ("warn", "yellow"), "action": (" FIX", "red")}


def doctor(
    as_json: AsJson = False,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="Read every stored JSON value, not the first of each column: slower on a "
            "large database",
        ),
    ] = False,
    server: ServerUrl = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Check the setup; each finding names the command that fixes it.

    The database (reachable, at the newest schema), the operator token for the bind address,
    CCWEB_ variables that are not settings, expired run leases, waiting reply requests no run
    will ever answer, and stored JSON values that cannot be read back (a sample of each
    column; all of them with --full). Last, the agent CLIs on this machine's PATH (Claude
    Code, Codex): found or not, their version, and whether it is the one the tests ran.

    Exit 0 when nothing needs action (warnings allowed), 1 when something does. With
    --server, the checks run in that server, on its settings and database.

    Example: ccweb-store doctor   or   ccweb-store doctor --server http://127.0.0.1:8787 --json
    """
    from ccweb_store.contract.operator import OperatorDoctor
    from ccweb_store.services import doctor as checks
    from ccweb_store.store.db import missing_database

    result: Mapping[str, Any]
    if server is None:
        settings = database_settings(database_url, required=False)
        missing = missing_database(settings.database_url)
        if missing is not None:
            result = checks.missing_database_report(str(missing), settings).model_dump()
        else:
            result = operator_call(
                "operator.doctor",
                OperatorDoctor(full=full),
                server=None,
                database_url=database_url,
            )
    else:
        result = operator_call(
            "operator.doctor",
            OperatorDoctor(full=full),
            server=server,
            database_url=database_url,
        )
    result = {**result, "checks": [*result["checks"], agent_clis_check()]}
    if as_json:
        print_json(result)
    else:
        _print_report(result)
    raise typer.Exit(0 if result["ok"] else 1)


def agent_clis_check() -> dict[str, Any]:
    """The agent CLIs the worker runs, on this machine's PATH: found or not, their version,
    and whether it is the version the tests ran (a warning otherwise, never an action)."""
    from ccweb_store.worker.agents import AGENTS, version_of

    items, untested = [], []
    for agent in AGENTS.values():
        program = agent.find()
        version = version_of(program) if program is not None else None
        if program is None:
            items.append(
                f"{agent.name}: {agent.title} ({agent.program}) is not on PATH; the worker "
                f"fails runs of {agent.name} conversations"
            )
        elif version == agent.tested_version:
            items.append(f"{agent.name}: {agent.title} {version} at {program}, the tested version")
        else:
            items.append(
                f"{agent.name}: {agent.title} {version or '(version unknown)'} at {program}; "
                f"the tests ran {agent.tested_version}"
            )
        if version != agent.tested_version:
            untested.append(agent)
    tested = ", ".join(f"{a.title} {a.tested_version}" for a in AGENTS.values())
    return {
        "name": "agent CLIs",
        "status": "warning" if untested else "ok",
        "summary": f"on this machine's PATH; the tests ran {tested}",
        "fix": "; ".join(agent.install_hint() for agent in untested) or None,
        "items": items,
    }


def _print_report(result: Mapping[str, Any]) -> None:
    from ccweb_store.cli.tables import stdout_console, styled

    console = stdout_console()
    if "version" in result:  # a server older than the field leaves it out
        console.print(f"ccweb-store {result['version']}")
    for check in result["checks"]:
        console.print(
            styled(MARKS[check["status"]], "  ", (check["name"], "bold"), ": ", check["summary"]),
            soft_wrap=True,
        )
        for item in check["items"]:
            console.print(f"        - {item}", soft_wrap=True)
        if check["fix"] and check["status"] != "ok":
            console.print(f"        fix: {check['fix']}", soft_wrap=True)
    needs = sum(check["status"] == "action" for check in result["checks"])
    console.print(
        "nothing needs action" if result["ok"] else f"{needs} check(s) need action",
        style="green" if result["ok"] else "red",
    )
