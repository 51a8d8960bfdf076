"""The tools called as an agent calls them: wire arguments through ``registry.call_tool``, the
edge that validates them into the tool's model, so a test pins what an agent sees."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ccweb_store.domain.context import Source
from ccweb_store.protocol import registry
from ccweb_store.store.uow import Store


async def call(store: Store, source: Source, name: str, args: object) -> dict[str, Any]:
    result: dict[str, Any] = await registry.call_tool(store, source, name, args)
    return result


async def send_message(
    store: Store, source: Source, args: object, *, reply_mode: str | None = None
) -> dict[str, Any]:
    if reply_mode is not None:
        assert isinstance(args, Mapping)
        args = {**args, "replyMode": reply_mode}
    return await call(store, source, "ccweb_send_message", args)


async def create_conversation(store: Store, source: Source, args: object) -> dict[str, Any]:
    return await call(store, source, "ccweb_create_conversation", args)


async def get_pending_reply(store: Store, source: Source, args: object) -> dict[str, Any]:
    return await call(store, source, "ccweb_get_pending_reply", args)


async def list_conversations(store: Store, source: Source, args: object) -> dict[str, Any]:
    return await call(store, source, "ccweb_list_conversations", args)


async def list_user_inputs(store: Store, source: Source, args: object) -> dict[str, Any]:
    return await call(store, source, "ccweb_list_user_inputs", args)


async def prompt_user(store: Store, source: Source, args: object) -> dict[str, Any]:
    return await call(store, source, "ccweb_prompt_user", args)
