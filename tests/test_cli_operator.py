"""`ccweb-store conversations`, `doctor` and `--server`, run as an operator runs them: as
subprocesses on a real database, and against a real server process."""

from __future__ import annotations

import asyncio
import json
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from ccweb_store import __version__
from ccweb_store.config import Settings
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.services.doctor import QUICK_JSON_ROWS
from ccweb_store.store.db import create_engine
from ccweb_store.store.models import RunRow
from ccweb_store.store.uow import Store
from tests import debugging_data as data
from tests.cli_support import as_json, ccweb_store, run_cli
from tests.servers import server_env, serving

TOKEN = "operator-token-0123456789-abcdefghijklmnop"


def on_db(database_url: str, *args: str) -> dict:
    result = run_cli(*args, "--json", env=server_env(CCWEB_DATABASE_URL=database_url))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


async def orphaned_request(database_url: str) -> None:
    """A waiting request with no run naming it, as an import leaves one; and a run whose
    lease has expired."""
    store = Store.from_settings(Settings(database_url=database_url))
    try:
        async with store.uow() as uow:
            await uow.sessions.create("src", title="Source")
            await uow.sessions.create("dst", title="Target now")
            await uow.replies.create(
                dict(
                    request_id="req_orphan",
                    source_conversation_id="src",
                    target_conversation_id="dst",
                    status="waiting",
                    hop_count=1,
                    source_auto_run=True,
                    created_at=utcnow() - timedelta(hours=1),
                )
            )
            run = await uow.runs.start("src", "user_turn", worker_id="w-gone")
            await uow._execute(
                sa.update(RunRow)
                .where(RunRow.id == run.id)
                .values(lease_expires_at=utcnow() - timedelta(minutes=5))
            )
            await uow.commit()
    finally:
        await store.dispose()


def test_conversations_create_list_show_and_archive(database_url: str) -> None:
    created = on_db(database_url, "conversations", "create", "--title", "Planner", "--id", "plan")
    on_db(database_url, "conversations", "create", "--title", "Tester", "--agent", "codex")

    listed = on_db(database_url, "conversations", "list")
    archived = on_db(database_url, "conversations", "archive", "plan")
    after = on_db(database_url, "conversations", "list")
    with_archived = on_db(database_url, "conversations", "list", "--all")
    shown = on_db(database_url, "conversations", "show", "plan")
    restored = on_db(database_url, "conversations", "archive", "plan", "--restore")

    assert (created["id"], created["title"], created["archived"]) == ("plan", "Planner", False)
    assert {row["title"] for row in listed["conversations"]} == {"Planner", "Tester"}
    assert archived["archived"] is True
    assert [row["title"] for row in after["conversations"]] == ["Tester"]
    assert {row["id"] for row in with_archived["conversations"]} >= {"plan"}
    assert shown["conversation"]["archived"] and shown["conversation"]["archivedAt"]
    assert (shown["openRequests"], shown["runs"]) == ([], [])
    assert restored["archived"] is False


def test_conversations_list_shows_running_state_and_replies_in_and_out(database_url: str) -> None:
    asyncio.run(data.seed(database_url))

    result = run_cli("conversations", "list", env=server_env(CCWEB_DATABASE_URL=database_url))
    payload = on_db(database_url, "conversations", "list")

    rows = {row["id"]: row for row in payload["conversations"]}
    assert rows["gamma"]["running"] is True and rows["gamma"]["activeRun"]["status"] == "running"
    assert rows["alpha"]["openAsSource"] == {"waiting": 1, "ready": 0, "failed": 1}
    assert rows["beta"]["openAsTarget"]["waiting"] == 1
    assert result.returncode == 0, result.stderr
    gamma = next(line for line in result.stdout.splitlines() if line.split()[:1] == ["gamma"])
    assert "running" in gamma and "Gamma" in gamma and "1 ready" in gamma


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["conversations", "show", "nope"], 3, "conversation 'nope' does not exist"),
        (["conversations", "archive", "nope"], 3, "conversation 'nope' does not exist"),
        (["conversations", "show", "bad id!"], 2, "invalid conversation id"),
        (["conversations", "create", "--id", "plan"], 1, "already exists"),
    ],
)
def test_conversations_errors_say_what_is_wrong(
    database_url: str, args: list[str], code: int, message: str
) -> None:
    assert ccweb_store(database_url, "conversations", "create", "--id", "plan").exit_code == 0

    result = ccweb_store(database_url, *args)

    assert result.exit_code == code, result.output
    assert message in result.stderr


def test_doctor_on_a_healthy_database_exits_0(database_url: str) -> None:
    result = ccweb_store(database_url, "doctor", "--json")

    payload = as_json(result)
    assert payload["ok"] is True
    assert payload["version"] == __version__
    assert f"ccweb-store {__version__}" in ccweb_store(database_url, "doctor").stdout
    statuses = {check["name"]: check["status"] for check in payload["checks"]}
    assert statuses == {
        "database": "ok",
        "token": "warning",
        "variables": "ok",
        "files": "ok",
        "leases": "ok",
        "waiting requests": "ok",
        "stored JSON": "ok",
        "agent CLIs": statuses["agent CLIs"],  # what this machine's PATH holds
    }


def test_doctor_finds_unanswerable_requests_and_expired_leases_with_their_fixes(
    database_url: str,
) -> None:
    asyncio.run(orphaned_request(database_url))

    result = run_cli("doctor", "--json", env=server_env(CCWEB_DATABASE_URL=database_url))
    text = run_cli("doctor", env=server_env(CCWEB_DATABASE_URL=database_url))

    assert result.returncode == 1, result.stderr
    checks = {check["name"]: check for check in json.loads(result.stdout)["checks"]}
    waiting = checks["waiting requests"]
    assert waiting["status"] == "action" and "req_orphan" in waiting["items"][0]
    assert "ccweb-store replies retry REQUEST_ID" in waiting["fix"]
    assert checks["leases"]["status"] == "action"
    assert "ccweb-store runs requeue RUN_ID" in checks["leases"]["fix"]
    assert text.returncode == 1
    assert "fix: ccweb-store replies retry" in text.stdout
    assert "2 check(s) need action" in text.stdout


async def many_extras_and_a_broken_last_one(database_url: str) -> None:
    """More conversations than the quick check reads, each with a fine ``extra``, and one
    more, last by key, whose ``extra`` breaks the stored-value rule (as an older version could
    write it)."""
    engine = create_engine(database_url)
    value = "CAST(:extra AS JSONB)" if engine.dialect.name == "postgresql" else ":extra"
    insert = sa.text(f"INSERT INTO sessions (id, extra) VALUES (:id, {value})")
    fine = [{"id": f"c-{n:05d}", "extra": '{"ok": 1}'} for n in range(QUICK_JSON_ROWS + 5)]
    broken = {"id": "zz-broken", "extra": '{"deep": ' + '{"a": ' * 300 + "1" + "}" * 301}
    try:
        async with engine.begin() as connection:
            await connection.execute(insert, [*fine, broken])
    finally:
        await engine.dispose()


def test_doctor_reads_a_sample_of_stored_json_and_every_value_with_full(
    database_url: str,
) -> None:
    asyncio.run(many_extras_and_a_broken_last_one(database_url))
    env = server_env(CCWEB_DATABASE_URL=database_url)

    quick = run_cli("doctor", "--json", env=env)
    full = run_cli("doctor", "--json", "--full", env=env)

    assert quick.returncode == 0, quick.stderr
    stored = next(c for c in json.loads(quick.stdout)["checks"] if c["name"] == "stored JSON")
    assert stored["status"] == "ok"
    assert f"the first {QUICK_JSON_ROWS} values" in stored["summary"]
    assert "sessions.extra hold more: `ccweb-store doctor --full`" in stored["summary"]
    assert full.returncode == 1, full.stderr
    stored = next(c for c in json.loads(full.stdout)["checks"] if c["name"] == "stored JSON")
    assert stored["status"] == "action"
    assert any(item.startswith("sessions.extra zz-broken:") for item in stored["items"])


def test_doctor_without_a_database_says_how_to_make_one(tmp_path: Path) -> None:
    env = server_env(CCWEB_DATA_DIR=str(tmp_path / "home"))
    env.pop("CCWEB_DATABASE_URL", None)

    result = run_cli("doctor", env=env)

    assert result.returncode == 1
    assert f"no database at {tmp_path / 'home' / 'ccweb.db'}" in result.stdout
    assert "ccweb-store migrate" in result.stdout
    assert not (tmp_path / "home").exists()


def test_doctor_refuses_a_public_bind_without_a_token(database_url: str) -> None:
    result = ccweb_store(database_url, "doctor", "--json")
    env = server_env(CCWEB_DATABASE_URL=database_url, CCWEB_HOST="0.0.0.0")

    public = run_cli("doctor", "--json", env=env)

    assert as_json(result)["ok"] is True
    assert public.returncode == 1
    [token] = [c for c in json.loads(public.stdout)["checks"] if c["name"] == "token"]
    assert token["status"] == "action" and "export CCWEB_TOKEN=" in token["fix"]


@pytest.mark.slow
def test_operator_commands_over_http_match_the_database(database_url: str) -> None:
    asyncio.run(data.seed(database_url))
    asyncio.run(orphaned_request(database_url))
    direct = {
        "replies": on_db(database_url, "replies", "list"),
        "conversations": on_db(database_url, "conversations", "list", "--all"),
    }
    with serving(database_url, CCWEB_TOKEN=TOKEN) as server:
        env = server_env(CCWEB_TOKEN=TOKEN)
        env.pop("CCWEB_DATABASE_URL", None)

        def remote(*args: str) -> dict:
            result = run_cli(*args, "--json", "--server", server.url, env=env)
            assert result.returncode in (0, 1), result.stderr
            assert f"ccweb-store: server {server.url}/rpc" in result.stderr
            return json.loads(result.stdout)

        replies = remote("replies", "list")
        conversations = remote("conversations", "list", "--all")
        story = remote("replies", "show", data.WAITING)
        created = remote("conversations", "create", "--title", "Remote")
        report = remote("doctor")
        missing = run_cli("replies", "show", "req_nope", "--server", server.url, env=env)
        no_token = run_cli(
            "replies", "list", "--server", server.url, env=server_env(CCWEB_DATA_DIR="/nowhere")
        )

    assert [r["requestId"] for r in replies["replies"]] == [
        r["requestId"] for r in direct["replies"]["replies"]
    ]
    assert {c["id"] for c in conversations["conversations"]} == {
        c["id"] for c in direct["conversations"]["conversations"]
    }
    assert story["reply"]["requestId"] == data.WAITING
    assert created["title"] == "Remote"
    assert report["ok"] is False
    assert {c["name"]: c["status"] for c in report["checks"]}["token"] == "ok"
    assert missing.returncode == 3 and "does not exist" in missing.stderr
    assert no_token.returncode == 1 and "set CCWEB_TOKEN" in no_token.stderr


def test_a_server_that_is_not_there_is_named_with_what_to_do(tmp_path: Path) -> None:
    result = run_cli("doctor", "--server", "http://127.0.0.1:9", env=server_env(), cwd=tmp_path)

    assert result.returncode == 1
    assert "cannot reach the server at http://127.0.0.1:9/rpc" in result.stderr
    assert "ccweb-store serve" in result.stderr


def test_replies_list_shows_the_current_titles_of_requests_stored_without_them(
    database_url: str,
) -> None:
    asyncio.run(orphaned_request(database_url))

    payload = on_db(database_url, "replies", "list")
    table = ccweb_store(database_url, "replies", "list")

    [reply] = payload["replies"]
    assert (reply["sourceTitle"], reply["targetTitle"]) == ("Source", "Target now")
    assert "Source (src) → Target now (dst)" in table.stdout


@pytest.mark.parametrize(
    "command", [["conversations", "list"], ["conversations", "archive"], ["doctor"]]
)
def test_help_has_an_example(command: list[str]) -> None:
    result = run_cli(*command, "--help", env={**server_env(), "COLUMNS": "200"})

    assert result.returncode == 0
    assert "Example: ccweb-store" in result.stdout


def test_agent_session_shows_sets_and_clears_what_the_next_run_resumes(database_url: str) -> None:
    env = server_env(CCWEB_DATABASE_URL=database_url)
    assert (
        run_cli("conversations", "create", "--id", "plan", "--agent", "codex", env=env).returncode
        == 0
    )

    def said(*args: str) -> subprocess.CompletedProcess[str]:
        return run_cli("conversations", "agent-session", "plan", *args, env=env)

    assert said().stdout.strip() == "conversation plan: no agent session; its next run starts one"
    assert said("thread-42").stdout.strip() == (
        "conversation plan: agent session thread-42; its next run resumes it"
    )
    shown = run_cli("conversations", "show", "plan", "--json", env=env)
    assert json.loads(shown.stdout)["conversation"]["agentSessionId"] == "thread-42"
    assert "agent session" in run_cli("conversations", "show", "plan", env=env).stdout
    assert json.loads(said("--clear", "--json").stdout)["agentSessionId"] is None
    both = said("thread-43", "--clear")
    assert both.returncode == 2 and "not both" in both.stderr
    unknown = run_cli("conversations", "agent-session", "nobody", env=env)
    assert unknown.returncode == 3 and "conversation 'nobody' does not exist" in unknown.stderr
