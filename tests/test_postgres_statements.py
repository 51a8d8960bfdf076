"""Prebuilt statements on PostgreSQL: the hot read of ``ccweb_list_user_inputs`` is planned
once per connection, not at every call."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from ccweb_store.context import Source
from ccweb_store.repositories.messages import latest_nonblank_by_role_statement
from ccweb_store.uow import Store
from ccweb_store.user_inputs import list_user_inputs

pytestmark = pytest.mark.parametrize("backend", ["postgres"], indirect=True)

CALLS = 20
MESSAGES = 10_000
#: Some 300 characters per message, as conversations hold: a table of many pages.
WORDS = " ".join(["every", "input", "of", "the", "user"] * 12)


async def test_list_user_inputs_runs_on_a_plan_made_once_per_connection(store: Store) -> None:
    async with store.uow() as uow:
        await uow.sessions.create("conv")
        await uow.messages.insert_many(
            [
                {
                    "id": f"m{seq}",
                    "session_id": "conv",
                    "seq": seq,
                    "role": "user" if seq % 2 else "assistant",
                    "content": f"text {seq} {WORDS}",
                }
                for seq in range(1, MESSAGES + 1)
            ]
        )
        await uow.commit()
    async with store.engine.begin() as connection:  # statistics, as a real database has
        await connection.execute(sa.text("ANALYZE messages"))
    for _ in range(CALLS):
        payload = await list_user_inputs(store, Source("conv"), {})
        assert payload["inputs"][-1]["messageId"] == f"m{MESSAGES - 1}"
    sql = str(latest_nonblank_by_role_statement("postgresql").compile(dialect=store.engine.dialect))
    async with store.read_uow() as uow:  # the connection the calls ran on, kept
        generic, custom = (
            await uow.connection.execute(
                sa.text(
                    "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                    " WHERE statement = :sql"
                ),
                {"sql": sql},
            )
        ).one()
    # PostgreSQL tries five custom plans before it settles on the generic one.
    assert (generic, custom) == (CALLS - 5, 5)
