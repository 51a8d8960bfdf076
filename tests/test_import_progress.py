"""``import-json``'s progress lines (one per file, on stderr without a terminal) say what the
summary counts: ``would import`` in a dry run, ``unchanged`` for a file with nothing new."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from tests.cli_support import run_cli
from tests.test_importer import write_state

LINE = re.compile(r"^\[(\d+)/(\d+)\] (.+): (.+)$")
#: A progress line's words → the summary's count they stand for.
WORDS = {
    "imported": "imported",
    "would import": "imported",
    "would be imported": "imported",
    "updated": "updated",
    "would update": "updated",
    "would be updated": "updated",
    "unchanged": "unchanged",
    "skipped": "skipped",
}


def import_json(state: Path, database_url: str, *flags: str) -> tuple[dict[str, Any], list[str]]:
    """The summary (``--json``) and the progress lines of an import run as a subprocess."""
    result = run_cli("import-json", str(state), "--json", "--database-url", database_url, *flags)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if LINE.match(line)]
    return json.loads(result.stdout), lines


def counted(lines: list[str]) -> tuple[Counter[str], Counter[str]]:
    """What the lines say of the session files and of the reply states, as counts."""
    sessions: Counter[str] = Counter()
    replies: Counter[str] = Counter()
    for line in lines:
        match = LINE.match(line)
        assert match is not None
        path, said = match.group(3), match.group(4)
        if path.endswith("cross-conversation-replies.json"):
            for part in said.split(", "):
                count, words = part.split(" ", 1)
                replies[WORDS[words]] += int(count)
        else:
            sessions[WORDS[said]] += 1
    return sessions, replies


def summary_counts(summary: dict[str, Any], kind: str) -> Counter[str]:
    counts = summary[kind]
    return Counter(
        {key: counts[key] for key in ("imported", "updated", "unchanged", "skipped") if counts[key]}
    )


def test_progress_lines_agree_with_the_summary_in_a_dry_run_a_first_run_and_a_second_run(
    database_url: str, tmp_path: Path
) -> None:
    state = write_state(tmp_path / "state")

    dry, dry_lines = import_json(state, database_url, "--dry-run")
    first, first_lines = import_json(state, database_url)
    second, second_lines = import_json(state, database_url)

    for summary, lines in ((dry, dry_lines), (first, first_lines), (second, second_lines)):
        assert len(lines) == 3, lines
        sessions, replies = counted(lines)
        assert sessions == summary_counts(summary, "sessions"), (lines, summary)
        assert replies == summary_counts(summary, "replies"), (lines, summary)
    sessions_dir = state / "sessions"
    replies_file = state / "config" / "cross-conversation-replies.json"
    assert dry_lines == [
        f"[1/3] {sessions_dir / 'alpha.json'}: would import",
        f"[2/3] {sessions_dir / 'beta.json'}: would import",
        f"[3/3] {replies_file}: 3 would be imported",
    ]
    assert first_lines[0].endswith("alpha.json: imported")
    assert first_lines[2].endswith("replies.json: 3 imported")
    assert second_lines == [
        f"[1/3] {sessions_dir / 'alpha.json'}: unchanged",
        f"[2/3] {sessions_dir / 'beta.json'}: unchanged",
        f"[3/3] {replies_file}: 3 unchanged",
    ]


def test_a_dry_run_after_a_change_says_would_update_for_the_changed_file_only(
    database_url: str, tmp_path: Path
) -> None:
    state = write_state(tmp_path / "state")
    import_json(state, database_url)
    beta = json.loads((state / "sessions" / "beta.json").read_text(encoding="utf-8"))
    beta["messages"].append({"id": "b-3", "role": "user", "content": "more"})
    (state / "sessions" / "beta.json").write_text(json.dumps(beta), encoding="utf-8")

    summary, lines = import_json(state, database_url, "--dry-run")

    assert [line.rsplit(": ", 1)[1] for line in lines] == [
        "unchanged",
        "would update",
        "3 unchanged",
    ]
    sessions, replies = counted(lines)
    assert sessions == summary_counts(summary, "sessions")
    assert replies == summary_counts(summary, "replies")
