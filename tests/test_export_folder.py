"""``export-json`` into a folder: a cc-web state already there is refused unless ``--merge``,
``--merge`` keeps the reply entries the export does not cover, and a killed export leaves
every file whole (each is written to a temporary name and renamed into place)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ccweb_store.mobility.export import PAUSE_ENV
from tests import forked
from tests.cli_support import COMMAND, run_cli
from tests.servers import ROOT, server_env
from tests.test_importer import write_json, write_state

REPLIES = Path("config") / "cross-conversation-replies.json"


def export(database_url: str, directory: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return run_cli("export-json", str(directory), "--database-url", database_url, *flags)


def imported(database_url: str, state: Path) -> None:
    result = run_cli("import-json", str(state), "--json", "--database-url", database_url)
    assert result.returncode == 0, result.stderr


def files(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` (temporary ones too) by its relative path."""
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture
def exported(database_url: str, tmp_path: Path) -> Path:
    """A folder holding the export of the importer tests' state."""
    imported(database_url, write_state(tmp_path / "state"))
    out = tmp_path / "out"
    result = export(database_url, out)
    assert result.returncode == 0, result.stderr
    return out


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["whole", "sessions only", "reply file only"])
def test_a_folder_holding_a_cc_web_state_is_refused_and_left_byte_identical(
    database_url: str, exported: Path, layout: str
) -> None:
    if layout == "sessions only":
        (exported / REPLIES).unlink()
    elif layout == "reply file only":
        shutil.rmtree(exported / "sessions")
    before = files(exported)

    for flags in ((), ("--conversation", "beta")):
        result = export(database_url, exported, *flags)

        assert result.returncode == 2
        assert result.stderr.count("\n") == 1 and "--merge" in result.stderr, result.stderr
        assert "already holds a cc-web state" in result.stderr
        assert files(exported) == before


def test_merge_replaces_the_conversations_files_and_entries_and_keeps_the_others(
    database_url: str, exported: Path
) -> None:
    entries = read(exported / REPLIES)
    stale = {entry["requestId"]: entry for entry in entries}
    stale["req-ready"]["replyText"] = "stale"  # alpha → beta: the database's comes back
    foreign = {
        "requestId": "req-foreign",
        "sourceConversationId": "gamma",
        "targetConversationId": "delta",
        "status": "pending",
    }
    gone = {  # beta's, but the database does not hold it: no longer beta's state
        "requestId": "req-beta-gone",
        "sourceConversationId": "beta",
        "targetConversationId": "gamma",
        "status": "pending",
    }
    write_json(exported / REPLIES, [foreign, *stale.values(), gone])
    alpha = (exported / "sessions" / "alpha.json").read_bytes() + b"\n"
    (exported / "sessions" / "alpha.json").write_bytes(alpha)
    beta = read(exported / "sessions" / "beta.json")
    (exported / "sessions" / "beta.json").write_text("{not json", encoding="utf-8")

    result = export(database_url, exported, "--conversation", "beta", "--merge", "--json")

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["replies"] == 2
    assert read(exported / "sessions" / "beta.json") == beta
    assert (exported / "sessions" / "alpha.json").read_bytes() == alpha  # not this export's
    merged = read(exported / REPLIES)
    assert [entry["requestId"] for entry in merged] == [
        "req-foreign",
        "req-orphan",
        "req-recover",
        "req-ready",
    ]
    by_id = {entry["requestId"]: entry for entry in merged}
    assert by_id["req-foreign"] == foreign
    assert by_id["req-orphan"] == stale["req-orphan"]
    assert by_id["req-ready"]["replyText"] == "done"
    assert "req-beta-gone" not in by_id
    assert sorted(p.name for p in exported.rglob("*.tmp")) == []


def test_merge_into_a_reply_file_keyed_by_request_id_keeps_its_entries(
    database_url: str, exported: Path
) -> None:
    foreign = {"sourceConversationId": "gamma", "targetConversationId": "delta", "status": "ready"}
    write_json(exported / REPLIES, {"req-foreign": foreign})

    result = export(database_url, exported, "--conversation", "alpha", "--merge")

    assert result.returncode == 0, result.stderr
    merged = read(exported / REPLIES)
    assert merged[0] == {"requestId": "req-foreign", **foreign}
    assert {entry["requestId"] for entry in merged[1:]} == {"req-recover", "req-ready"}


def test_merge_refuses_a_reply_file_it_cannot_read_and_changes_nothing(
    database_url: str, exported: Path
) -> None:
    (exported / REPLIES).write_text('[{"requestId": ', encoding="utf-8")
    before = files(exported)

    result = export(database_url, exported, "--merge")

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "cannot merge into" in result.stderr
    assert files(exported) == before


def killed_at(database_url: str, directory: Path, point: int) -> None:
    """Run ``export-json DIR --merge`` and SIGKILL it at the export's ``point``-th point (the
    test hook counts each part of a file written and each rename, and pauses at that one)."""
    env = server_env(**{PAUSE_ENV: str(point)})
    process = forked.spawn(
        [*COMMAND, "export-json", str(directory), "--merge", "--database-url", database_url],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    try:
        while True:
            line = process.stderr.readline()
            assert line, "the export ended before the point to kill it at"
            if line.startswith(f"export paused at point {point}:"):
                break
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        process.stderr.close()


@pytest.mark.slow
def test_an_export_killed_part_way_leaves_every_file_old_or_new_and_valid_json(
    database_url: str, exported: Path, tmp_path: Path
) -> None:
    old = {name: data for name, data in files(exported).items()}
    changed = write_state(tmp_path / "changed")
    beta = read(changed / "sessions" / "beta.json")
    beta["title"] = "Beta, renamed"
    beta["messages"].append({"id": "b-3", "role": "user", "content": "one more"})
    write_json(changed / "sessions" / "beta.json", beta)
    alpha = read(changed / "sessions" / "alpha.json")
    alpha["title"] = "Alpha, renamed"
    write_json(changed / "sessions" / "alpha.json", alpha)
    replies = read(changed / REPLIES)
    replies[0].update(status="ready", replyText="answered")
    write_json(changed / REPLIES, replies)
    imported(database_url, changed)
    assert export(database_url, tmp_path / "new").returncode == 0
    new = files(tmp_path / "new")
    assert all(new[name] != old[name] for name in old)

    # Points: 1-3 alpha.json's parts written to its temporary file (keys, messages, end),
    # 4 it is renamed, 5-7 beta.json's parts, 8 renamed, 9 the reply file written, 10 renamed.
    for point in (1, 2, 4, 6, 9):
        target = tmp_path / f"killed-{point}"
        shutil.copytree(exported, target)

        killed_at(database_url, target, point)

        for path in [*target.glob("sessions/*.json"), target / REPLIES]:
            name = str(path.relative_to(target))
            json.loads(path.read_bytes())
            assert path.read_bytes() in (old[name], new[name]), (point, name)
        assert sorted(p.name for p in target.glob("sessions/*.json")) == ["alpha.json", "beta.json"]
    # Killed while alpha.json was half written: the half is in a temporary file beside it.
    half_written = tmp_path / "killed-2" / "sessions"
    assert (half_written / "alpha.json").read_bytes() == old["sessions/alpha.json"]
    assert [p.name.startswith(".alpha.json.") for p in half_written.glob("*.tmp")] == [True]
    assert (tmp_path / "killed-4" / "sessions" / "alpha.json").read_bytes() == new[
        "sessions/alpha.json"
    ]
    assert (tmp_path / "killed-9" / REPLIES).read_bytes() == old[str(REPLIES)]
