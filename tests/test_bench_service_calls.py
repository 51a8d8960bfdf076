"""``python bench/service_calls.py --sends``: the send alone, in process, from concurrent loops.

Only keeps the benchmark from rotting: it must make every send it times (each to a fresh
target, each checked ``waiting`` by the script) and print its figures; no timing is checked.
"""

from __future__ import annotations

import sqlalchemy as sa

from bench import service_calls
from ccweb_store.store.db import create_engine
from ccweb_store.store.models import ReplyRequestRow, RunRow


async def test_the_sends_mode_sends_each_fresh_target_one_request(empty_database_url: str) -> None:
    sends, clients = 24, 3
    figures = await service_calls.measure_sends(empty_database_url, sends, clients)

    assert figures["cpu"] > 0 and figures["wall"] > 0
    made = sends + service_calls.WARM_UP * clients
    engine = create_engine(empty_database_url)
    try:
        async with engine.connect() as connection:
            runs = await connection.execute(
                sa.select(sa.func.count(sa.distinct(RunRow.session_id)), sa.func.count())
                .select_from(RunRow)
                .where(RunRow.status == "queued", RunRow.kind == "cross_conversation")
            )
            assert runs.one() == (made, made)
            waiting = await connection.execute(
                sa.select(sa.func.count())
                .select_from(ReplyRequestRow)
                .where(
                    ReplyRequestRow.status == "waiting",
                    ReplyRequestRow.source_conversation_id == "src",
                )
            )
            assert waiting.scalar() == made
    finally:
        await engine.dispose()
