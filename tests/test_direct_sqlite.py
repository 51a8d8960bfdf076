"""``repositories.direct`` on a real SQLite file: statements on one plain cursor per
connection."""

from __future__ import annotations

from pathlib import Path

import pytest

from ccweb_store.config import Settings
from ccweb_store.db import migrate
from ccweb_store.errors import Conflict
from ccweb_store.repositories import direct
from ccweb_store.uow import Store


async def test_statements_share_one_plain_cursor_and_go_on_after_an_error(
    tmp_path: Path,
) -> None:
    store = Store.from_settings(
        Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'c.db'}", token=None)
    )
    request = {
        "request_id": "req-1",
        "source_conversation_id": "conv-a",
        "target_conversation_id": "conv-b",
        "status": "waiting",
    }
    try:
        await migrate(store.engine)
        async with store.uow() as uow:
            await uow.sessions.create("conv-a")
            await uow.replies.insert(request)
            driver = uow.sessions.state.driver
            assert driver is not None
            cursor = direct._plain_cursor(driver)
            with pytest.raises(Conflict, match="req-1"):  # an IntegrityError on the cursor
                await uow.replies.insert(request)
            await uow.sessions.create("conv-b")
            assert direct._plain_cursor(driver) is cursor
            await uow.commit()
        async with store.read_uow() as uow:
            assert {row.id for row in (await uow.sessions.list_page())[0]} == {"conv-a", "conv-b"}
            assert (await uow.replies.get("req-1")) is not None
    finally:
        await store.dispose()
