"""Conversation credentials: a conversation cannot speak as another, over HTTP against the
real app on both backends; the token format and the signing key as pure logic."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from pydantic import SecretStr

from ccweb_store.config import Settings
from ccweb_store.domain import errors
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.protocol import jsonrpc
from ccweb_store.services import credentials
from ccweb_store.services.credentials import Claims, CredentialRefused, read_token, sign
from ccweb_store.store.models import ServerSecretRow
from ccweb_store.store.uow import Store
from tests.credential_support import OPERATOR, mint, refusal, send_args, tool, tool_payload
from tests.http_client import app_client, mcp, rpc, rpc_result
from tests.lifecycle_support import messages_of, row_counts, runs_of, table_row_counts

KEY = b"k" * 32
CLAIMS = Claims("conv-a", "cred_1", 0, 0)
# --- the token, as pure logic ---------------------------------------------------------------


def test_a_signed_token_reads_back_its_claims() -> None:
    claims = Claims("conv-a", "cred_18ec99b37dad6189", 1_900_000_000, 2)
    token = sign(KEY, claims)
    assert token.startswith("ccw1.conv-a.cred_18ec99b37dad6189.1900000000.2.")
    assert read_token(KEY, token) == claims


@pytest.mark.parametrize(
    "tamper",
    [
        lambda t: t.replace("conv-a", "conv-b", 1),
        lambda t: t.replace(".0.0.", ".0.3.", 1),  # raise the hop floor
        lambda t: t.replace(".0.0.", ".9.0.", 1),  # give it an expiry
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),
    ],
)
def test_a_tampered_token_is_refused(tamper: Any) -> None:
    with pytest.raises(CredentialRefused) as caught:
        read_token(KEY, tamper(sign(KEY, CLAIMS)))
    assert caught.value.code == errors.INVALID_CREDENTIAL
    assert "signature does not match" in caught.value.message


def test_a_token_signed_with_another_key_is_refused() -> None:
    with pytest.raises(CredentialRefused, match="CCWEB_CREDENTIAL_SECRET"):
        read_token(b"x" * 32, sign(KEY, CLAIMS))


@pytest.mark.parametrize(
    "token",
    ["", "ccw1", "ccw1.conv-a.cred.0.0", "ccw2.conv-a.cred.0.0.sig", "ccw1.a b.cred.0.0.s",
     "ccw1.conv-a.cred.-1.0.s", "ccw1.conv-a.cred.0.x.s", "ccw1.conv-a.cred.0.0.s.extra"],
)  # fmt: skip
def test_a_malformed_token_says_what_shape_it_should_have(token: str) -> None:
    with pytest.raises(CredentialRefused, match="malformed conversation credential"):
        read_token(KEY, token)


def test_log_records_never_show_a_token() -> None:
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, "", 0, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "POST", "/mcp?credential=ccw1.conv-a.c.0.0.SIG&x=1", "1.1", 200), None,
    )  # fmt: skip
    credentials.RedactCredentials().filter(record)
    assert "SIG" not in record.getMessage()
    assert "/mcp?credential=REDACTED&x=1" in record.getMessage()
    url = httpx.URL("http://127.0.0.1/mcp?credential=ccw1.a.b.0.0.SIG")
    record = logging.LogRecord(
        "httpx", logging.INFO, "", 0, "HTTP Request: %s %s", ("POST", url), None
    )
    credentials.RedactCredentials().filter(record)
    assert "SIG" not in record.getMessage()


def test_a_short_configured_secret_is_refused_without_being_echoed() -> None:
    with pytest.raises(ValueError) as caught:
        Settings(credential_secret="too-short-but-secret")
    assert "at least 32 characters" in str(caught.value)
    assert "too-short-but-secret" not in str(caught.value)


# --- a bound credential speaks for its conversation only -------------------------------------


@pytest.fixture
async def trio(pair: Store) -> Store:
    """``conv-a`` (Planner), ``conv-b`` (Tester) and ``conv-c`` (Writer)."""
    async with pair.uow() as uow:
        await uow.sessions.create("conv-c", title="Writer")
        await uow.commit()
    return pair


async def test_concurrent_first_mints_in_one_process_share_one_signing_key(trio: Store) -> None:
    """The first mints of a fresh server, at once (two workers starting together): every one
    succeeds and their tokens verify with the one key kept in the database."""
    async with app_client(trio, token=OPERATOR) as client:
        tokens = await asyncio.gather(*(mint(client, f"conv-{c}") for c in "abcabcab"))
    async with trio.read_uow() as uow:
        stored = await uow.secrets.get(credentials.SIGNING_KEY_NAME)
    assert stored is not None
    key = bytes.fromhex(stored)
    assert {read_token(key, token).conversation_id for token in tokens} == {
        "conv-a",
        "conv-b",
        "conv-c",
    }


@pytest.mark.parametrize("carried_in", ["query", "header"])
async def test_the_credential_names_the_source_conversation(trio: Store, carried_in: str) -> None:
    async with app_client(trio, token=OPERATOR) as client:
        token = await mint(client)
        if carried_in == "query":
            response = await tool(
                client, "ccweb_send_message", send_args(), query=f"?credential={token}"
            )
        else:
            headers = {"Authorization": f"Bearer {token}"}
            response = await tool(client, "ccweb_send_message", send_args(), headers=headers)
        assert tool_payload(response)["ok"] is True
    (delivered,) = await messages_of(trio, "conv-b")
    assert delivered.metadata_["crossConversation"]["sourceConversationId"] == "conv-a"


@pytest.mark.parametrize("parameter", ["sourceSessionId", "sourceConversationId"])
async def test_a_credential_with_another_conversations_id_is_refused_and_writes_nothing(
    trio: Store, parameter: str
) -> None:
    async with app_client(trio) as client:
        token = await mint(client)
        before = await row_counts(trio)
        response = await tool(
            client, "ccweb_send_message", send_args(target="conv-c"),
            query=f"?credential={token}&{parameter}=conv-b",
        )  # fmt: skip
        message = refusal(response, 403, errors.CREDENTIAL_CONVERSATION_MISMATCH)
        assert response.json()["error"]["code"] == jsonrpc.FORBIDDEN
        assert "bound to conversation 'conv-a'" in message
        assert f"{parameter}='conv-b'" in message
        assert f"Leave {parameter} out" in message
        assert await row_counts(trio) == before
        # The same id as the credential's is no disagreement.
        agreeing = await tool(
            client, "ccweb_send_message", send_args(),
            query=f"?credential={token}&{parameter}=conv-a",
        )  # fmt: skip
        assert tool_payload(agreeing)["ok"] is True


async def test_two_different_credentials_in_one_request_are_refused(trio: Store) -> None:
    async with app_client(trio) as client:
        mine, theirs = await mint(client, "conv-a"), await mint(client, "conv-b")
        response = await tool(
            client, "ccweb_list_conversations", {},
            query=f"?credential={mine}", headers={"Authorization": f"Bearer {theirs}"},
        )  # fmt: skip
        assert response.status_code == 400
        assert "two different conversation credentials" in response.json()["error"]["message"]


async def test_a_bound_caller_cannot_read_another_conversations_user_inputs(trio: Store) -> None:
    async with app_client(trio) as client:
        for session_id in ("conv-a", "conv-b"):
            await rpc_result(
                client, "message.append",
                {"sessionId": session_id, "role": "user", "content": f"secret of {session_id}"},
            )  # fmt: skip
        query = f"?credential={await mint(client)}"
        refused = tool_payload(
            await tool(client, "ccweb_list_user_inputs", {"conversationId": "conv-b"}, query=query)
        )
        assert refused["error"]["code"] == errors.CONVERSATION_FORBIDDEN
        assert "secret of conv-b" not in str(refused)
        own = tool_payload(await tool(client, "ccweb_list_user_inputs", {}, query=query))
        assert [i["content"] for i in own["inputs"]] == ["secret of conv-a"]
        named = {"conversationId": "conv-a"}
        own = tool_payload(await tool(client, "ccweb_list_user_inputs", named, query=query))
        assert own["conversationId"] == "conv-a"
        # Without a credential (cc-web's unbound URL) any conversation stays readable.
        unbound = tool_payload(
            await tool(
                client, "ccweb_list_user_inputs", {"conversationId": "conv-b"},
                query="?sourceSessionId=conv-a",
            )
        )  # fmt: skip
        assert [i["content"] for i in unbound["inputs"]] == ["secret of conv-b"]


async def test_a_bound_caller_sees_only_its_own_reply_requests(trio: Store) -> None:
    async with app_client(trio) as client:
        # conv-c asks conv-a; conv-a asks conv-b.
        c_query = f"?credential={await mint(client, 'conv-c')}"
        c_asked = tool_payload(
            await tool(
                client,
                "ccweb_send_message",
                send_args("conv-a", "return_and_continue"),
                query=c_query,
            )
        )
        await rpc_result(client, "run.complete", {"runId": c_asked["runId"], "status": "completed"})
        b_query = f"?credential={await mint(client, 'conv-b')}"
        a_query = f"?credential={await mint(client, 'conv-a')}"
        a_asked = tool_payload(
            await tool(
                client,
                "ccweb_send_message",
                send_args("conv-b", "return_and_continue"),
                query=a_query,
            )
        )
        # conv-b sees the request it must answer, not conv-c's.
        seen = tool_payload(
            await tool(
                client,
                "ccweb_get_pending_reply",
                {"requestId": a_asked["requestId"]},
                query=b_query,
            )
        )
        assert seen["requestId"] == a_asked["requestId"]
        hidden = tool_payload(
            await tool(
                client,
                "ccweb_get_pending_reply",
                {"requestId": c_asked["requestId"]},
                query=b_query,
            )
        )
        assert hidden["error"]["code"] == errors.REQUEST_NOT_FOUND
        other = tool_payload(
            await tool(
                client, "ccweb_get_pending_reply", {"conversationId": "conv-c"}, query=b_query
            )
        )
        assert other["error"]["code"] == errors.CONVERSATION_FORBIDDEN
        mine = tool_payload(await tool(client, "ccweb_get_pending_reply", {}, query=a_query))
        assert [r["requestId"] for r in mine["replies"]] == [a_asked["requestId"]]


async def test_listing_conversations_with_a_credential_shows_metadata_and_marks_the_caller(
    trio: Store,
) -> None:
    async with app_client(trio) as client:
        query = f"?credential={await mint(client, 'conv-b')}"
        listed = tool_payload(await tool(client, "ccweb_list_conversations", {}, query=query))
        assert {c["conversationId"]: c["isSource"] for c in listed["conversations"]} == {
            "conv-a": False, "conv-b": True, "conv-c": False,
        }  # fmt: skip


async def test_the_credentials_hop_count_is_a_floor_the_query_cannot_lower(trio: Store) -> None:
    async with app_client(trio) as client:
        token = await mint(client, hopCount=2)
        query = f"?credential={token}&sourceHopCount=0"
        sent = tool_payload(await tool(client, "ccweb_send_message", send_args(), query=query))
        (run,) = await runs_of(trio, "conv-b")
        assert (run.id, run.hop_count) == (sent["runId"], 3)
        await rpc_result(client, "run.complete", {"runId": run.id, "status": "completed"})
        higher = f"?credential={token}&sourceHopCount=3"
        sent = tool_payload(await tool(client, "ccweb_send_message", send_args(), query=higher))
        assert [r.hop_count for r in await runs_of(trio, "conv-b")] == [3, 4]
        at_limit = f"?credential={await mint(client, hopCount=4)}"
        refused = tool_payload(
            await tool(client, "ccweb_send_message", send_args("conv-c"), query=at_limit)
        )
        assert refused["error"]["code"] == errors.HOP_LIMIT_EXCEEDED


# --- credentials that do not hold ------------------------------------------------------------


async def test_a_revoked_credential_is_refused_from_the_next_request_on(trio: Store) -> None:
    async with app_client(trio) as client:
        token = await mint(client, label="laptop")
        query = f"?credential={token}"
        assert (await mcp(client, "ping", query=query)).status_code == 200
        credential_id = token.split(".")[2]
        revoked = await rpc_result(client, "credential.revoke", {"credentialId": credential_id})
        assert (revoked["active"], revoked["label"]) == (False, "laptop")
        assert revoked["revokedAt"] is not None
        response = await tool(client, "ccweb_send_message", send_args(), query=query)
        message = refusal(response, 401, errors.CREDENTIAL_REVOKED)
        assert f"{credential_id} was revoked" in message
        assert response.headers["www-authenticate"] == 'Bearer error="invalid_token"'
        assert await messages_of(trio, "conv-b") == []
        again = await rpc_result(client, "credential.revoke", {"credentialId": credential_id})
        assert again == revoked


async def test_an_expired_credential_is_refused_with_when_it_expired(trio: Store) -> None:
    key = await credentials.signing_key(trio)
    async with trio.uow() as uow:
        row = await uow.credentials.add(
            "conv-a", label=None, hop_count=0,
            expires_at=(utcnow() - timedelta(minutes=5)).replace(microsecond=0),
        )  # fmt: skip
        await uow.commit()
    token = credentials.token_of(key, row)
    async with app_client(trio) as client:
        response = await mcp(client, "tools/list", query=f"?credential={token}")
        message = refusal(response, 401, errors.CREDENTIAL_EXPIRED)
        assert f"{row.id} expired at " in message
        assert "ccweb-store conversation-url conv-a" in message


async def test_a_credential_expires_when_its_lifetime_ends(trio: Store) -> None:
    async with app_client(trio) as client:
        token = await mint(client, expiresInSeconds=60)
    binding = await credentials.authenticate(trio, token)
    assert binding.conversation_id == "conv-a"
    with pytest.raises(CredentialRefused) as caught:
        await credentials.authenticate(trio, token, now=time.time() + 61)
    assert caught.value.code == errors.CREDENTIAL_EXPIRED


async def test_a_tampered_or_unknown_credential_is_refused(trio: Store) -> None:
    async with app_client(trio) as client:
        token = await mint(client)
        forged = token.replace("conv-a", "conv-b", 1)
        response = await tool(
            client, "ccweb_send_message", send_args("conv-c"), query=f"?credential={forged}"
        )
        assert "signature does not match" in refusal(response, 401, errors.INVALID_CREDENTIAL)
        unknown = sign(await credentials.signing_key(trio), Claims("conv-a", "cred_gone", 0, 0))
        response = await mcp(client, "ping", query=f"?credential={unknown}")
        assert "unknown conversation credential cred_gone" in refusal(
            response, 401, errors.INVALID_CREDENTIAL
        )
        empty = await mcp(client, "ping", query="?credential=")
        assert "malformed" in refusal(empty, 401, errors.INVALID_CREDENTIAL)
    assert await messages_of(trio, "conv-c") == []


async def test_a_credential_goes_with_its_conversation(trio: Store) -> None:
    async with app_client(trio) as client:
        token = await mint(client, "conv-c")
        async with trio.uow() as uow:
            await uow._execute(sa.text("DELETE FROM sessions WHERE id = 'conv-c'"))
            await uow.commit()
        response = await mcp(client, "ping", query=f"?credential={token}")
        refusal(response, 401, errors.INVALID_CREDENTIAL)


# --- the operator token and the credential's reach -------------------------------------------


async def test_with_an_operator_token_a_credential_opens_mcp_but_never_rpc(trio: Store) -> None:
    async with app_client(trio, token=OPERATOR) as client:
        token = await mint(client)
        query = f"?credential={token}"
        assert tool_payload(await tool(client, "ccweb_send_message", send_args(), query=query))[
            "ok"
        ]
        for headers, params in (({"Authorization": f"Bearer {token}"}, ""), ({}, query)):
            response = await client.post(
                f"/rpc{params}",
                json={"jsonrpc": "2.0", "id": 1, "method": "session.list"},
                headers=headers,
            )
            assert response.status_code == 401
            assert (
                "a conversation credential opens /mcp and /events only"
                in response.json()["error"]["message"]
            )
        # A credential-shaped bearer that is not a credential is still refused, by /mcp.
        fake = {"Authorization": "Bearer ccw1.conv-a.cred_x.0.0.nope"}
        assert (await mcp(client, "ping", headers=fake)).status_code == 401


async def test_the_operator_token_keeps_full_access(trio: Store) -> None:
    async with app_client(trio, token=OPERATOR, require_conversation_credentials=True) as client:
        operator = {"Authorization": f"Bearer {OPERATOR}"}
        response = await tool(
            client, "ccweb_send_message", send_args("conv-c"), query="?sourceSessionId=conv-b",
            headers=operator,
        )  # fmt: skip
        assert tool_payload(response)["ok"] is True
        inputs = await tool(
            client, "ccweb_list_user_inputs", {"conversationId": "conv-a"},
            query="?sourceSessionId=conv-b", headers=operator,
        )  # fmt: skip
        assert tool_payload(inputs)["conversationId"] == "conv-a"
        answer = await rpc(
            client, "tools.call",
            {"tool": "ccweb_send_message", "args": send_args(), "sourceSessionId": "conv-a"},
            headers=operator,
        )  # fmt: skip
        assert answer["result"]["ok"] is True


async def test_requiring_credentials_refuses_unbound_mcp_calls(trio: Store) -> None:
    async with app_client(trio, require_conversation_credentials=True) as client:
        response = await tool(
            client, "ccweb_send_message", send_args(), query="?sourceSessionId=conv-a"
        )
        message = refusal(response, 401, errors.CREDENTIAL_REQUIRED)
        assert "CCWEB_REQUIRE_CONVERSATION_CREDENTIALS" in message
        assert await messages_of(trio, "conv-b") == []
        query = f"?credential={await mint(client)}"
        assert tool_payload(await tool(client, "ccweb_send_message", send_args(), query=query))[
            "ok"
        ]


# --- the host methods and the signing key ----------------------------------------------------


async def test_credential_list_shows_active_ones_and_never_a_token(trio: Store) -> None:
    async with app_client(trio) as client:
        kept = await mint(client, label="kept")
        gone = await mint(client, "conv-b", label="gone")
        await rpc_result(client, "credential.revoke", {"credentialId": gone.split(".")[2]})
        active = (await rpc_result(client, "credential.list", {}))["credentials"]
        assert [(c["id"], c["sessionId"], c["label"]) for c in active] == [
            (kept.split(".")[2], "conv-a", "kept")
        ]
        everything = await rpc_result(client, "credential.list", {"includeInactive": True})
        assert [c["label"] for c in everything["credentials"]] == ["gone", "kept"]
        assert kept not in str(everything) and gone not in str(everything)
        only_b = await rpc_result(
            client, "credential.list", {"sessionId": "conv-b", "includeInactive": True}
        )
        assert [c["label"] for c in only_b["credentials"]] == ["gone"]


@pytest.mark.parametrize(
    ("method", "params", "code"),
    [
        ("credential.mint", {"sessionId": "nobody"}, errors.CONVERSATION_NOT_FOUND),
        ("credential.mint", {"sessionId": "bad id"}, errors.INVALID_CONVERSATION_ID),
        (
            "credential.mint",
            {"sessionId": "conv-a", "expiresInSeconds": 0},
            errors.INVALID_ARGUMENTS,
        ),
        ("credential.mint", {"sessionId": "conv-a", "hopCount": -1}, errors.INVALID_ARGUMENTS),
        ("credential.revoke", {"credentialId": "cred_nope"}, errors.CREDENTIAL_NOT_FOUND),
        ("credential.list", {"sessionId": "bad id"}, errors.INVALID_CONVERSATION_ID),
    ],
)
async def test_credential_methods_refuse_bad_params(
    trio: Store, method: str, params: dict[str, Any], code: str
) -> None:
    async with app_client(trio) as client:
        answer = await rpc(client, method, params)
        assert answer["error"]["data"]["code"] == code


async def test_the_signing_key_is_made_once_and_shared_by_every_process(
    trio: Store, settings: Settings
) -> None:
    first = await credentials.signing_key(trio)
    other = Store.from_settings(settings)
    try:
        assert await credentials.signing_key(other) == first
    finally:
        await other.dispose()
    async with trio.read_uow() as uow:
        stored = (await uow._execute(sa.select(ServerSecretRow.value))).scalars().all()
    assert [bytes.fromhex(value) for value in stored] == [first]


async def test_a_configured_secret_signs_and_nothing_is_stored(
    trio: Store, settings: Settings
) -> None:
    configured = Settings(**{**settings.model_dump(), "credential_secret": SecretStr("s" * 40)})
    store = Store.from_settings(configured)
    try:
        async with app_client(store) as client:
            token = await mint(client)
            assert (await mcp(client, "ping", query=f"?credential={token}")).status_code == 200
        assert await credentials.signing_key(store) == b"s" * 40
        with pytest.raises(CredentialRefused, match="minted no conversation credential"):
            await credentials.authenticate(trio, token)  # the database has no key: none holds
        await credentials.signing_key(trio)  # the database's own key, made on first mint
        with pytest.raises(CredentialRefused, match="signature does not match"):
            await credentials.authenticate(trio, token)  # the database's own key differs
    finally:
        await store.dispose()
    async with trio.read_uow() as uow:
        count = (
            await uow._execute(sa.select(sa.func.count()).select_from(ServerSecretRow))
        ).scalar()
    assert count == 1  # the one made above; the store with the setting stored none


async def test_a_refused_mint_writes_no_row_not_even_the_signing_key(store: Store) -> None:
    before = await table_row_counts(store)
    async with app_client(store) as client:
        answer = await rpc(client, "credential.mint", {"sessionId": "nobody"})
    assert answer["error"]["data"]["code"] == errors.CONVERSATION_NOT_FOUND
    assert await table_row_counts(store) == before


async def test_a_forged_credential_on_a_server_that_minted_none_makes_no_key(pair: Store) -> None:
    forged = sign(b"not this server's key", Claims("conv-a", "cred_forged", 0, 0))
    before = await table_row_counts(pair)
    async with app_client(pair) as client:
        response = await tool(client, "ccweb_list_conversations", {}, query=f"?credential={forged}")
    assert "minted no conversation credential" in refusal(response, 401, errors.INVALID_CREDENTIAL)
    assert await table_row_counts(pair) == before
