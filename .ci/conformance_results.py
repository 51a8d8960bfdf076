"""Tally the MCP conformance suite's results: python .ci/conformance_results.py RESULTS_DIR.

RESULTS_DIR holds SUITE/SCENARIO/server-SCENARIO-<time>/checks.json, one per scenario run.
A check that succeeds passes (a warning passes and is shown); a failure fails, unless it is one
of the NOT_APPLICABLE checks below, which docs/mcp.md lists with the same reasons; one of
those that stops failing fails as stale, so the list never outlives what it describes.
Prints a line per scenario and ends with "conformance: N passed, N failed"; exits 1 on any
failure.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any


def needs_diagnostic_tool(tool: str, why: str) -> str:
    return (
        f"needs the suite's diagnostic tool {tool}, which only its reference server has; "
        f"ccweb-store serves the fixed tool set of SPEC §2.1, and {why}"
    )


NO_CAPABILITY_NEEDED = needs_diagnostic_tool(
    "test_missing_capability", "no ccweb tool needs a client capability"
)
NOT_APPLICABLE = {
    ("server-stateless", "sep-2575-server-rejects-undeclared-capability"): NO_CAPABILITY_NEEDED,
    ("server-stateless", "sep-2575-missing-capability-http-400"): NO_CAPABILITY_NEEDED,
    ("server-stateless", "sep-2575-http-server-no-independent-requests-on-stream"): (
        needs_diagnostic_tool(
            "test_streaming_elicitation", "ccweb tools never ask the client for input"
        )
    ),
    ("server-stateless", "sep-2575-server-no-log-without-loglevel"): needs_diagnostic_tool(
        "test_logging_tool", "ccweb-store sends no log notifications (it logs to stderr)"
    ),
    ("caching", "sep-2549-prompts-list-caching-hints"): "ccweb-store offers no prompts",
    ("caching", "sep-2549-resources-list-caching-hints"): "ccweb-store offers no resources",
    ("caching", "sep-2549-resources-templates-list-caching-hints"): (
        "ccweb-store offers no resources"
    ),
}


def tally(results: Path) -> tuple[int, int]:
    """Print every scenario's outcome; return (passed, failed) over all checks."""
    passed = failed = 0
    for scenario_dir in sorted(path for path in results.glob("*/*") if path.is_dir()):
        suite, scenario = scenario_dir.parent.name, scenario_dir.name
        files = sorted(scenario_dir.glob("server-*/checks.json"))
        if not files:
            print(f"  {suite} {scenario}: FAILED, the suite wrote no results")
            failed += 1
            continue
        counts: Counter[str] = Counter()
        notes: list[str] = []
        for check in json.loads(files[-1].read_text()):
            if check["status"] == "INFO":
                continue
            outcome, note = judge(scenario, check)
            counts[outcome] += 1
            if note:
                notes.append(note)
        summary = ", ".join(f"{counts[key]} {key}" for key in sorted(counts, key=_order))
        print(f"  {suite} {scenario}: {summary}")
        for note in notes:
            print(f"      {note}")
        passed += counts["passed"]
        failed += counts["failed"]
    return passed, failed


def judge(scenario: str, check: dict[str, Any]) -> tuple[str, str | None]:
    """One check's outcome (passed, failed, not applicable, skipped by the suite) and the note
    to print with it."""
    status, check_id = check["status"], check["id"]
    reason = NOT_APPLICABLE.get((scenario, check_id))
    if reason is not None and status == "FAILURE":
        return "not applicable", f"not applicable: {check_id} ({reason})"
    if reason is not None:
        return "failed", f"STALE: {check_id} is {status}; drop it from NOT_APPLICABLE"
    if status == "SUCCESS":
        return "passed", None
    message = check.get("errorMessage") or ""
    if status == "WARNING":
        return "passed", f"warning: {check_id}: {message}"
    if status == "SKIPPED":
        return "skipped by the suite", f"skipped by the suite: {check_id}"
    return "failed", f"FAILED: {check_id}: {message}"


def _order(key: str) -> int:
    return ["passed", "failed", "not applicable", "skipped by the suite"].index(key)


def main() -> int:
    passed, failed = tally(Path(sys.argv[1]))
    print(f"conformance: {passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
