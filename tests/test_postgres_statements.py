"""The hot read of ``ccweb_list_user_inputs`` on PostgreSQL: planned once per connection,
not at every call, and its blank test keeps exactly the rows Python's trimming keeps."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from ccweb_store.domain.context import Source
from ccweb_store.store.repositories.messages import LATEST_NONBLANK_BY_ROLE, NO_SEQ_ABOVE
from ccweb_store.store.uow import Store
from tests.tool_calls import list_user_inputs

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
    sql = str(LATEST_NONBLANK_BY_ROLE.compile(dialect=store.engine.dialect))
    async with store.read_uow() as uow:  # the connection the calls ran on, kept
        generic, custom = (
            await uow._execute(
                sa.text(
                    "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                    " WHERE statement = :sql"
                ),
                {"sql": sql},
            )
        ).one()
    # PostgreSQL tries five custom plans before it settles on the generic one.
    assert (generic, custom) == (CALLS - 5, 5)


async def test_the_postgresql_blank_test_keeps_exactly_what_trimming_keeps(store: Store) -> None:
    """``LATEST_NONBLANK_BY_ROLE``'s ``trim(content, …) != ''`` keeps the rows whose content
    is not blank once the ASCII blanks are trimmed, on every edge."""
    contents = ["", " ", "\t\n", "\v\f\r", " x", "x ", "x", "\u00a0", "é", "\t\u2003y", "  \n"]
    async with store.uow() as uow:
        await uow.sessions.create("conv")
        for content in contents:
            await uow.messages.append("conv", "user", content)
        await uow.commit()
    params = {"session_id": "conv", "role": "user", "before_seq": NO_SEQ_ABOVE, "limit": 50}
    async with store.read_uow() as uow:
        kept = [row[2] for row in await uow._execute(LATEST_NONBLANK_BY_ROLE, params)]
    expected = [c for c in reversed(contents) if c.strip(" \t\n\r\f\v")]
    assert kept == expected
