"""Databases for the copy, backup and export tests: one holding every kind of row, and the
API's answers about it."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from ccweb_store.config import Settings
from ccweb_store.store.models import Base
from ccweb_store.store.uow import Store
from tests import debugging_data, host_calls
from tests.http_client import app_client, rpc_result

#: The requests ``debugging_data.seed`` writes, one in each state.
REQUESTS = (*debugging_data.OPEN_REQUESTS, debugging_data.RETURNED)


async def fill_every_kind_of_row(database_url: str) -> None:
    """Sessions, messages with structured content and metadata (JSON null and SQL NULL both),
    replies in every state, runs in every state, active and revoked credentials and the key
    that signs them."""
    await debugging_data.seed(database_url)
    store = Store.from_settings(Settings(database_url=database_url))
    try:
        await host_calls.append_message(
            store,
            {
                "sessionId": "quiet",
                "role": "assistant",
                "content": [{"type": "text", "text": "block one"}, {"type": "tool_use"}],
                "metadata": {"model": "m", "n": [1, 2.5, 1e20, None, True], "ü": {"x": ""}},
            },
        )
        await host_calls.append_message(
            store, {"sessionId": "quiet", "role": "user", "content": "naïve ✓ text"}
        )
        async with store.uow() as uow:
            await uow.messages.insert_many(
                [
                    {
                        "id": "msg_json_null",
                        "session_id": "quiet",
                        "seq": 3,
                        "role": "user",
                        "content": "metadata is JSON null",
                        "created_at": None,
                        "metadata_": None,
                    }
                ]
            )
            await uow.commit()
        await host_calls.mint_credential(store, {"sessionId": "alpha", "label": "kept"})
        revoked = await host_calls.mint_credential(store, {"sessionId": "beta"})
        await host_calls.revoke_credential(store, {"credentialId": revoked["credential"]["id"]})
    finally:
        await store.dispose()


async def api_answers(database_url: str) -> dict[str, Any]:
    """What the host API answers about every conversation, message, reply, run and
    credential of the database."""
    store = Store.from_settings(Settings(database_url=database_url, token=None))
    answers: dict[str, Any] = {}
    try:
        async with app_client(store) as client:
            sessions = await rpc_result(client, "session.list", {"limit": 100})
            answers["session.list"] = sessions
            for session in sessions["sessions"]:
                sid = session["id"]
                answers[f"session.get {sid}"] = await rpc_result(client, "session.get", {"id": sid})
                answers[f"message.list {sid}"] = await rpc_result(
                    client, "message.list", {"sessionId": sid, "limit": 100}
                )
                answers[f"run.list {sid}"] = await rpc_result(
                    client, "run.list", {"sessionId": sid}
                )
            answers["reply.list"] = await rpc_result(client, "reply.list", {"limit": 100})
            for request_id in REQUESTS:
                answers[f"reply.get {request_id}"] = await rpc_result(
                    client, "reply.get", {"requestId": request_id}
                )
            answers["events.list"] = await rpc_result(client, "events.list", {"limit": 500})
            answers["credential.list"] = await rpc_result(
                client, "credential.list", {"includeInactive": True}
            )
    finally:
        await store.dispose()
    return answers


async def issued_event_ids(database_url: str) -> int:
    """The highest event id the database has handed out (its sequence's or
    ``sqlite_sequence``'s, not only the highest row's)."""
    store = Store.from_settings(Settings(database_url=database_url))
    try:
        async with store.snapshot() as connection:
            return await store.issued_ids(connection, Base.metadata.tables["events"])
    finally:
        await store.dispose()


async def raw_rows(database_url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every copied table's rows (all but each database's own identity and copy marker),
    JSON columns as their parsed value or SQL NULL kept apart from JSON null, sorted: equal
    for two databases that hold the same rows."""
    import json

    from ccweb_store.mobility.copy import copied_tables

    store = Store.from_settings(Settings(database_url=database_url))
    tables: dict[str, list[tuple[Any, ...]]] = {}
    try:
        async with store.snapshot() as connection:
            for table in copied_tables():
                columns = [
                    sa.cast(c, sa.Text()) if isinstance(c.type, sa.JSON) else c
                    for c in table.columns
                ]
                rows = (await connection.execute(sa.select(*columns))).all()
                tables[table.name] = sorted(
                    (
                        tuple(
                            ("json", json.loads(v))
                            if isinstance(c.type, sa.JSON) and v is not None
                            else v
                            for c, v in zip(table.columns, row, strict=True)
                        )
                        for row in rows
                    ),
                    key=repr,
                )
    finally:
        await store.dispose()
    return tables
