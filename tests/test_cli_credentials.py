"""``ccweb-store conversation-url`` and ``credentials list|revoke``, and the signing key that no
output or log ever shows, against real databases and a real server process."""

from __future__ import annotations

import asyncio
import json
import shlex
import tomllib

import httpx
import sqlalchemy as sa

from ccweb_store.config import Settings
from ccweb_store.domain import errors
from ccweb_store.services import credentials
from ccweb_store.store.models import ServerSecretRow
from ccweb_store.store.uow import Store
from tests.cli_support import as_json, ccweb_store, run_cli
from tests.servers import server_env, serving


async def stored_key(database_url: str) -> str:
    store = Store.from_settings(Settings(database_url=database_url))
    try:
        async with store.read_uow() as uow:
            value = (await uow._execute(sa.select(ServerSecretRow.value))).scalar_one()
        return str(value)
    finally:
        await store.dispose()


def make_conversations(database_url: str, *ids: str) -> None:
    async def create() -> None:
        store = Store.from_settings(Settings(database_url=database_url))
        try:
            async with store.uow() as uow:
                for conversation_id in ids:
                    await uow.sessions.create(conversation_id)
                await uow.commit()
        finally:
            await store.dispose()

    asyncio.run(create())


def test_conversation_url_prints_the_url_alone_and_says_how_to_revoke_it(
    database_url: str,
) -> None:
    make_conversations(database_url, "conv-a")
    result = ccweb_store(
        database_url, "conversation-url", "conv-a", "--base-url", "http://10.0.0.5:9000/mcp"
    )
    assert result.exit_code == 0, result.output
    (url,) = result.stdout.splitlines()
    assert url.startswith("http://10.0.0.5:9000/mcp?credential=ccw1.conv-a.cred_")
    token = url.split("credential=", 1)[1]
    credential_id = token.split(".")[2]
    assert f"credential {credential_id} for conversation conv-a (never expires)" in result.stderr
    assert f"ccweb-store credentials revoke {credential_id}" in result.stderr
    key = asyncio.run(stored_key(database_url))
    assert key not in result.output and key not in result.stderr

    async def check() -> str:
        store = Store.from_settings(Settings(database_url=database_url))
        try:
            return (await credentials.authenticate(store, token)).conversation_id
        finally:
            await store.dispose()

    assert asyncio.run(check()) == "conv-a"


def test_conversation_url_json_lists_and_revokes(database_url: str) -> None:
    make_conversations(database_url, "conv-a", "conv-b")
    minted = as_json(
        ccweb_store(
            database_url, "conversation-url", "conv-b", "--expires-in", "2h",
            "--label", "codex on laptop", "--hop-count", "1", "--json",
        )
    )  # fmt: skip
    credential = minted["credential"]
    assert minted["url"] == f"http://127.0.0.1:8787/mcp?credential={minted['token']}"
    assert (credential["sessionId"], credential["label"], credential["hopCount"]) == (
        "conv-b", "codex on laptop", 1,
    )  # fmt: skip
    assert credential["expiresAt"] is not None and credential["active"] is True
    listed = as_json(ccweb_store(database_url, "credentials", "list", "--json"))
    assert [c["id"] for c in listed["credentials"]] == [credential["id"]]
    assert minted["token"] not in json.dumps(listed)
    table = ccweb_store(database_url, "credentials", "list", "--conversation", "conv-b")
    assert credential["id"] in table.stdout and "codex on laptop" in table.stdout
    revoked = ccweb_store(database_url, "credentials", "revoke", credential["id"])
    assert revoked.exit_code == 0, revoked.output
    assert f"credential {credential['id']} of conversation conv-b: revoked at " in revoked.stdout
    assert ccweb_store(database_url, "credentials", "list").stdout.strip() == (
        "No credentials match."
    )
    everything = as_json(ccweb_store(database_url, "credentials", "list", "--all", "--json"))
    assert everything["credentials"][0]["revokedAt"] is not None


def test_credential_commands_fail_with_clear_exit_codes(database_url: str) -> None:
    make_conversations(database_url, "conv-a")
    missing = ccweb_store(database_url, "conversation-url", "nobody")
    assert missing.exit_code == 1
    assert "conversation 'nobody' does not exist" in missing.stderr
    bad = ccweb_store(database_url, "conversation-url", "conv-a", "--expires-in", "soon")
    assert bad.exit_code == 2 and "--expires-in: invalid duration 'soon'" in bad.stderr
    unknown = ccweb_store(database_url, "credentials", "revoke", "cred_nope")
    assert unknown.exit_code == 3
    assert "conversation credential 'cred_nope' does not exist" in unknown.stderr
    assert errors.CREDENTIAL_NOT_FOUND == "credential_not_found"


def test_a_real_server_never_logs_the_key_or_a_token(database_url: str) -> None:
    make_conversations(database_url, "conv-a", "conv-b")
    with serving(database_url, CCWEB_LOG_LEVEL="debug", CCWEB_ACCESS_LOG="1") as server:
        minted = run_cli(
            "conversation-url", "conv-a", "--base-url", server.url,
            env=server_env(CCWEB_DATABASE_URL=database_url),
        )  # fmt: skip
        assert minted.returncode == 0, minted.stderr
        url = minted.stdout.strip()
        token = url.split("credential=", 1)[1]
        call = {
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {
                "name": "ccweb_send_message",
                "arguments": {
                    "targetConversationId": "conv-b", "content": "hi", "replyMode": "one_way"
                },
            },
        }  # fmt: skip
        answer = httpx.post(url, json=call, timeout=30).json()
        assert answer["result"]["isError"] is False, answer
        refused = httpx.post(f"{url}&sourceSessionId=conv-b", json=call, timeout=30)
        assert refused.status_code == 403
        log = server.stop()
    key = asyncio.run(stored_key(database_url))
    signature = token.rsplit(".", 1)[1]
    for text in (log, minted.stdout, minted.stderr):
        assert key not in text
    assert signature not in log
    assert "/mcp?credential=REDACTED" in log  # the access log ran, with the token blanked


def test_conversation_url_prints_a_ready_setup_for_each_client_with_the_credential_out_of_the_url(
    database_url: str,
) -> None:
    make_conversations(database_url, "planner")
    env = server_env(CCWEB_DATABASE_URL=database_url)
    base = ["conversation-url", "planner", "--base-url", "http://127.0.0.1:8787"]

    setups = {
        (client, stdio): run_cli(
            *base, "--client", client, *(["--stdio"] if stdio else []), env=env
        )
        for client in ("claude", "codex")
        for stdio in (False, True)
    }
    assert all(r.returncode == 0 for r in setups.values()), [r.stderr for r in setups.values()]
    *claude, config = shlex.split(setups["claude", False].stdout)
    assert claude == ["claude", "mcp", "add-json", "ccweb"]
    http = json.loads(config)
    assert http["type"] == "http" and http["url"] == "http://127.0.0.1:8787/mcp"
    assert http["headers"]["Authorization"].startswith("Bearer ccw1.planner.")
    assert http["alwaysLoad"] is True
    export, add = setups["codex", False].stdout.splitlines()
    assert export.startswith("export CCWEB_CREDENTIAL=ccw1.planner.")
    assert shlex.split(add) == ["codex", "mcp", "add", "ccweb", "--url",
                                "http://127.0.0.1:8787/mcp", "--bearer-token-env-var",
                                "CCWEB_CREDENTIAL"]  # fmt: skip
    *claude, config = shlex.split(setups["claude", True].stdout)
    assert claude == ["claude", "mcp", "add-json", "ccweb"]
    stdio = json.loads(config)
    assert stdio["type"] == "stdio" and stdio["alwaysLoad"] is True
    assert stdio["args"][-3:] == ["mcp-stdio", "--url", "http://127.0.0.1:8787"]
    assert stdio["env"]["CCWEB_CREDENTIAL"].startswith("ccw1.planner.")
    table = tomllib.loads(setups["codex", True].stdout)["mcp_servers"]["ccweb"]
    assert table["args"][-3:] == ["mcp-stdio", "--url", "http://127.0.0.1:8787"]
    assert table["env"]["CCWEB_CREDENTIAL"].startswith("ccw1.planner.")
    assert table["required"] is True
    printed = "".join(r.stdout for r in setups.values())
    assert "credential=" not in printed and "CCWEB_TOKEN" not in printed
    listed = as_json(ccweb_store(database_url, "credentials", "list", "--json"))
    assert listed["count"] == 2  # one per client: the second setup of each replaced the first
    bad = run_cli(*base, "--client", "vim", env=env)
    assert bad.returncode == 2 and "use one of claude, codex" in bad.stderr
    old = run_cli(*base, "--client", "stdio", env=env)
    assert old.returncode == 2 and "use --client claude --stdio or --client codex --stdio" in (
        old.stderr
    )
    alone = run_cli(*base, "--stdio", env=env)
    assert alone.returncode == 2 and "--stdio goes with --client" in alone.stderr


def test_conversation_url_for_the_same_client_again_revokes_the_earlier_credential(
    database_url: str,
) -> None:
    make_conversations(database_url, "planner", "tester")
    env = server_env(CCWEB_DATABASE_URL=database_url)
    base = ["conversation-url", "planner", "--base-url", "http://127.0.0.1:8787"]
    first = run_cli(*base, "--client", "claude", env=env)
    plain = run_cli(*base, env=env)
    codex = run_cli(*base, "--client", "codex", env=env)
    other = run_cli("conversation-url", "tester", "--client", "claude", env=env)
    assert all(r.returncode == 0 for r in (first, plain, codex, other))
    assert "earlier" not in first.stderr + plain.stderr + codex.stderr + other.stderr
    first_token = json.loads(shlex.split(first.stdout)[-1])["headers"]["Authorization"][7:]
    first_id = first_token.split(".")[2]

    again = run_cli(*base, "--client", "claude", "--json", env=env)
    assert again.returncode == 0, again.stderr
    answer = json.loads(again.stdout)
    assert [c["id"] for c in answer["revoked"]] == [first_id]
    assert answer["revoked"][0]["revokedAt"] is not None
    third = run_cli(*base, "--client", "claude", env=env)
    assert third.returncode == 0, third.stderr
    assert (
        f"revoked 1 earlier credential for this client: {answer['credential']['id']}"
        in third.stderr
    )

    async def refusal() -> str:
        store = Store.from_settings(Settings(database_url=database_url))
        try:
            await credentials.authenticate(store, first_token)
        except credentials.CredentialRefused as refused:
            return refused.code
        finally:
            await store.dispose()
        return "accepted"

    assert asyncio.run(refusal()) == errors.CREDENTIAL_REVOKED
    live = as_json(ccweb_store(database_url, "credentials", "list", "--json"))["credentials"]
    assert sorted((c["sessionId"], c["label"] or "") for c in live) == [
        ("planner", ""), ("planner", "claude"), ("planner", "codex"), ("tester", "claude"),
    ]  # fmt: skip
