"""`ccweb-store replies list/show` and `runs list`, on both engines, as an operator runs them."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ccweb_store.cli import app
from tests import debugging_data as data
from tests.cli_support import as_json, ccweb_store, run_cli
from tests.servers import server_env


def seeded(database_url: str) -> dict[str, str]:
    return asyncio.run(data.seed(database_url))


def test_replies_list_json_shows_each_open_request_with_its_target_run(
    database_url: str,
) -> None:
    runs = seeded(database_url)

    payload = as_json(ccweb_store(database_url, "replies", "list", "--json"))

    assert payload["count"] == 4
    replies = {reply["requestId"]: reply for reply in payload["replies"]}
    assert [reply["requestId"] for reply in payload["replies"]] == list(data.OPEN_REQUESTS)
    waiting = replies[data.WAITING]
    assert (waiting["status"], waiting["sourceConversationId"], waiting["targetTitle"]) == (
        "waiting",
        "alpha",
        "Beta",
    )
    assert waiting["originalRequest"] == "Please do the work"
    assert waiting["originalRequestKnown"] is True
    assert waiting["ageSeconds"] >= 7200
    assert waiting["targetRun"] == {
        "id": runs["waiting_target"],
        "status": "queued",
        "workerId": None,
        "leaseExpiresAt": None,
        "attempts": 1,
    }
    assert replies[data.READY]["sourceRunning"] is True
    assert replies[data.FAILED]["lastError"] == "target run failed: boom"
    legacy = replies[data.LEGACY]
    assert legacy["originalRequest"] is None and legacy["originalRequestKnown"] is False
    assert legacy["targetRun"]["workerId"] == "w-delta"
    assert legacy["targetRun"]["leaseExpiresAt"].endswith("Z")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--status", "ready"], [data.READY]),
        (["--status", "waiting", "--status", "failed"], [data.LEGACY, data.FAILED, data.WAITING]),
        (["--conversation", "alpha"], [data.FAILED, data.WAITING]),
        (["--older-than", "150m"], [data.LEGACY, data.FAILED]),
        (["--older-than", "1d", "--conversation", "delta"], [data.LEGACY]),
        (["--limit", "1"], [data.LEGACY]),
    ],
)
def test_replies_list_filters_by_status_conversation_and_age(
    database_url: str, args: list[str], expected: list[str]
) -> None:
    seeded(database_url)

    payload = as_json(ccweb_store(database_url, "replies", "list", "--json", *args))

    assert [reply["requestId"] for reply in payload["replies"]] == expected


def test_replies_list_prints_a_readable_table(database_url: str) -> None:
    seeded(database_url)

    result = ccweb_store(database_url, "replies", "list")

    assert result.exit_code == 0, result.output
    assert "Pending replies" in result.stdout
    assert "4 open request(s), oldest first" in result.stdout
    lines = {line.split()[0]: line for line in result.stdout.splitlines() if "req_" in line}
    assert set(lines) == set(data.OPEN_REQUESTS)
    assert (
        "Alpha (alpha) → Beta (beta)" in lines[data.WAITING]
        and "queued, attempts 1" in lines[data.WAITING]
    )
    assert "target run failed: boom" in lines[data.FAILED]
    assert "w-delta (lease" in lines[data.LEGACY]


def test_replies_list_for_a_conversation_says_what_it_is_doing(database_url: str) -> None:
    runs = seeded(database_url)

    payload = as_json(
        ccweb_store(database_url, "replies", "list", "--conversation", "delta", "--json")
    )
    table = ccweb_store(database_url, "replies", "list", "--conversation", "delta")

    assert payload["conversation"] == {
        "conversationId": "delta",
        "title": "Delta",
        "messageCount": 2,
        "lastMessageAt": payload["conversation"]["lastMessageAt"],
        "activeRun": {
            "id": runs["legacy_target"],
            "kind": "cross_conversation",
            "status": "running",
        },
        "openAsSource": {"waiting": 0, "ready": 0, "failed": 0},
        "openAsTarget": {"waiting": 1, "ready": 1, "failed": 0},
    }
    assert payload["conversation"]["lastMessageAt"].endswith("Z")
    summary = table.stdout.splitlines()[0]
    assert summary.startswith("Delta (delta): 2 messages, last ")
    assert summary.endswith(
        f"ago; active run: running cross_conversation {runs['legacy_target']}; "
        "open requests it made: none; it must answer: 1 waiting, 1 ready"
    )


def test_replies_list_says_so_when_nothing_is_open(database_url: str) -> None:
    result = ccweb_store(database_url, "replies", "list")

    assert result.exit_code == 0
    assert "No open reply requests match." in result.stdout


@pytest.mark.parametrize("duration", ["ten minutes", "5y", "1.5h", ""])
def test_a_malformed_duration_exits_2_with_an_example(database_url: str, duration: str) -> None:
    result = ccweb_store(database_url, "replies", "list", "--older-than", duration)

    assert result.exit_code == 2
    assert "--older-than: invalid duration" in result.stderr
    assert "e.g. 90s, 10m, 2h, 1d" in result.stderr


def test_a_status_that_is_not_open_exits_2(database_url: str) -> None:
    result = ccweb_store(database_url, "replies", "list", "--status", "returned")

    assert result.exit_code == 2
    assert "expected one of waiting, ready, failed" in result.stderr


def test_replies_show_json_tells_the_whole_story(database_url: str) -> None:
    runs = seeded(database_url)

    story = as_json(ccweb_store(database_url, "replies", "show", data.RETURNED, "--json"))

    assert story["reply"]["status"] == "returned"
    assert story["reply"]["replyText"] == "All reviewed"
    assert [(run["id"], run["kind"]) for run in story["runs"]] == [
        (runs["returned_target"], "cross_conversation"),
        (runs["returned_follow_up"], "reply_auto_run"),
    ]
    request_message, reply_message = story["requestMessage"], story["replyMessage"]
    assert (request_message["id"], request_message["sessionId"], request_message["role"]) == (
        "msg_ret",
        "alpha",
        "user",
    )
    assert reply_message["sessionId"] == "delta"
    assert reply_message["metadata"]["replyToRequestId"] == data.RETURNED


def test_replies_show_prints_the_request_its_runs_and_both_messages(database_url: str) -> None:
    runs = seeded(database_url)

    result = ccweb_store(database_url, "replies", "show", data.FAILED)

    assert result.exit_code == 0, result.output
    assert f"Reply request {data.FAILED}" in result.stdout
    assert "target run failed: boom" in result.stdout
    assert runs["failed_target"] in result.stdout
    assert "Request message (target): msg_f in eps" in result.stdout
    assert "Reply message (source): not delivered" in result.stdout


def test_replies_show_of_an_unknown_request_exits_3(database_url: str) -> None:
    result = ccweb_store(database_url, "replies", "show", "req_nope")

    assert result.exit_code == 3
    assert "reply request 'req_nope' does not exist" in result.stderr


def test_runs_list_json_is_newest_first_and_filters(database_url: str) -> None:
    runs = seeded(database_url)

    everything = as_json(ccweb_store(database_url, "runs", "list", "--json"))
    running = as_json(ccweb_store(database_url, "runs", "list", "--status", "running", "--json"))
    beta = as_json(ccweb_store(database_url, "runs", "list", "--conversation", "beta", "--json"))
    old = as_json(ccweb_store(database_url, "runs", "list", "--older-than", "1h", "--json"))

    assert everything["count"] == len(runs)
    assert everything["runs"][0]["id"] == runs["legacy_target"]
    assert {run["id"] for run in running["runs"]} == {
        runs["gamma_running"],
        runs["legacy_target"],
    }
    assert [run["id"] for run in beta["runs"]] == [
        runs["waiting_target"],
        runs["waiting_cancelled"],
    ]
    assert beta["runs"][0]["replyRequestId"] == data.WAITING
    assert old == {"runs": [], "count": 0}


def test_runs_list_prints_a_table(database_url: str) -> None:
    runs = seeded(database_url)

    result = ccweb_store(database_url, "runs", "list", "--status", "running")

    assert result.exit_code == 0, result.output
    assert "2 run(s), newest first" in result.stdout
    assert runs["gamma_running"] in result.stdout and "w-gamma" in result.stdout


def test_runs_list_refuses_an_unknown_status_with_exit_2(database_url: str) -> None:
    result = ccweb_store(database_url, "runs", "list", "--status", "stuck")

    assert result.exit_code == 2
    assert "invalid run status 'stuck'" in result.stderr


def test_a_database_without_the_views_is_reported_with_a_hint(tmp_path: Path) -> None:
    (tmp_path / "never-migrated.db").touch()
    url = f"sqlite+aiosqlite:///{tmp_path / 'never-migrated.db'}"

    result = ccweb_store(url, "replies", "list")

    assert result.exit_code == 1
    assert "migrated to head (ccweb-store migrate)" in result.stderr


def test_python_m_ccweb_store_lists_replies_from_ccweb_database_url(database_url: str) -> None:
    seeded(database_url)
    env = server_env(CCWEB_DATABASE_URL=database_url)

    listed = run_cli("replies", "list", "--json", "--status", "failed", env=env)
    missing = run_cli("replies", "show", "req_nope", env=env)

    assert listed.returncode == 0, listed.stderr
    assert [reply["requestId"] for reply in json.loads(listed.stdout)["replies"]] == [data.FAILED]
    assert missing.returncode == 3
    assert "does not exist" in missing.stderr


def test_on_a_narrow_terminal_each_run_and_request_is_a_block_with_whole_ids(
    database_url: str,
) -> None:
    runs = seeded(database_url)
    terminal = {"TTY_COMPATIBLE": "1", "COLUMNS": "80", "NO_COLOR": "1"}

    listed = [
        CliRunner().invoke(app, [*args, "--database-url", database_url], env=terminal)
        for args in (["runs", "list"], ["replies", "list"])
    ]

    runs_text, replies_text = (strip_ansi(result.stdout) for result in listed)
    assert all(result.exit_code == 0 for result in listed), [r.output for r in listed]
    assert f"\n{runs['legacy_target']}  running\n" in runs_text
    assert "Conversation: delta · Kind: cross_conversation" in runs_text
    assert runs_text.rstrip().endswith(f"{len(runs)} run(s), newest first")
    assert f"\n{data.FAILED}  failed\n" in replies_text
    # Wrapped where the age's width puts it ("2d" or, a second later, "2d 1s").
    assert "Last error: target run failed: boom" in " ".join(replies_text.split())
    assert all(len(line) <= 80 for line in (runs_text + replies_text).splitlines())


def strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


@pytest.mark.parametrize("command", [["replies", "list"], ["runs", "list"]])
def test_a_malformed_conversation_id_exits_2_and_says_what_an_id_looks_like(
    database_url: str, command: list[str]
) -> None:
    result = ccweb_store(database_url, *command, "--conversation", "bad id!")

    assert result.exit_code == 2
    assert "invalid conversation id 'bad id!'" in result.stderr
