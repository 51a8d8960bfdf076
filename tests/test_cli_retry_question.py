"""Retrying a request that stores no question (an imported one without its original text whose
message is gone): ``doctor`` and ``replies show`` say a retry cannot carry it and offer what
can, and ``replies retry --message`` carries the question to the target."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from ccweb_store.importer.load import import_state
from ccweb_store.store.uow import Store
from tests.cli_support import run_cli
from tests.lifecycle_support import runs_of
from tests.servers import server_env
from tests.test_imported_failures import write_state

#: Imported as cc-web wrote it long before the original request was kept: no
#: ``originalRequest`` and no ``messageId``, so nothing holds what was asked.
NO_QUESTION = {
    "requestId": "req-no-question",
    "sourceConversationId": "planner",
    "targetConversationId": "tester",
    "status": "pending",
    "createdAt": "2024-03-03T10:00:00.000Z",
}
WITH_QUESTION = {**NO_QUESTION, "requestId": "req-asked", "originalRequest": "run the suite"}


async def imported(store: Store, tmp_path: Path) -> None:
    summary = await import_state(
        store, write_state(tmp_path / "state", [NO_QUESTION, WITH_QUESTION])
    )
    assert summary.ok, summary.skipped


def cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, env=server_env(CCWEB_DATABASE_URL=database_url))


async def test_doctor_says_which_waiting_request_a_retry_cannot_ask_and_what_can(
    store: Store, database_url: str, tmp_path: Path
) -> None:
    await imported(store, tmp_path)

    result = cli(database_url, "doctor", "--json")

    checks = {check["name"]: check for check in json.loads(result.stdout)["checks"]}
    waiting = checks["waiting requests"]
    items = {item.split(":")[0]: item for item in waiting["items"]}
    assert "no question stored" in items["req-no-question"]
    assert "--message" in items["req-no-question"]
    assert "no question stored" not in items["req-asked"]
    assert "Planner (planner) → Tester (tester)" in items["req-asked"]
    assert 'replies retry REQUEST_ID --message "the question"' in waiting["fix"]
    assert "replies fail REQUEST_ID --reason" in waiting["fix"]


async def test_replies_show_says_a_retry_cannot_carry_the_question_and_offers_what_can(
    store: Store, database_url: str, tmp_path: Path
) -> None:
    await imported(store, tmp_path)

    lost = cli(database_url, "replies", "show", "req-no-question")
    kept = cli(database_url, "replies", "show", "req-asked")

    text = " ".join(lost.stdout.split())
    assert "A retry cannot carry the question" in text
    assert 'ccweb-store replies retry req-no-question --message "…"' in text
    assert 'ccweb-store replies fail req-no-question --reason "…"' in text
    assert "cannot carry the question" not in kept.stdout


async def test_retry_with_a_message_asks_the_target_that_question(
    store: Store, database_url: str, tmp_path: Path
) -> None:
    await imported(store, tmp_path)

    result = cli(
        database_url, "replies", "retry", "req-no-question", "--message", "did the suite pass?"
    )

    assert result.returncode == 0, result.stderr
    [asked] = [run for run in await runs_of(store, "tester") if run.reply_request_id]
    assert asked.reply_request_id == "req-no-question"
    assert "did the suite pass?" in (asked.runtime_text or "")
    assert "unavailable" not in (asked.runtime_text or "")


async def test_a_message_for_a_request_that_has_its_question_is_refused_and_changes_nothing(
    store: Store, database_url: str, tmp_path: Path
) -> None:
    await imported(store, tmp_path)

    result = cli(database_url, "replies", "retry", "req-asked", "--message", "something else")

    assert result.returncode == 2
    assert "has its question stored" in result.stderr
    assert "Traceback" not in result.stderr
    assert [run for run in await runs_of(store, "tester") if run.reply_request_id] == []
