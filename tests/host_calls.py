"""The host API's methods called as ``/rpc`` calls them: wire params validated into the
method's model at the edge (``http/rpc.py``'s table), so a test pins what a host sees."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter

from ccweb_store.domain.host_calls import ClaimRun, ExpireReplies
from ccweb_store.http.rpc import METHODS
from ccweb_store.protocol import shapes
from ccweb_store.protocol.argument_errors import parsed
from ccweb_store.services import replies, runs
from ccweb_store.store.uow import Store

_CLAIM = TypeAdapter(ClaimRun)
_EXPIRE = TypeAdapter(ExpireReplies)


async def call(store: Store, method: str, params: Mapping[str, Any]) -> Any:
    return await METHODS[method](store, params)


async def start_run(store: Store, params: Mapping[str, Any]) -> Any:
    return await call(store, "run.start", params)


async def enqueue_run(store: Store, params: Mapping[str, Any]) -> Any:
    return await call(store, "run.enqueue", params)


async def claim_run(store: Store, params: Mapping[str, Any], *, now: datetime | None = None) -> Any:
    """``run.claim``, at ``now`` when a test sets the clock."""
    return shapes.claim_out(await runs.claim_run(store, parsed(_CLAIM, params), now=now))


async def heartbeat_run(store: Store, params: Mapping[str, Any]) -> Any:
    return await call(store, "run.heartbeat", params)


async def complete_run(store: Store, params: Mapping[str, Any]) -> Any:
    return await call(store, "run.complete", params)


async def list_runs(store: Store, params: Mapping[str, Any]) -> Any:
    return await call(store, "run.list", params)


async def requeue_run(store: Store, params: Mapping[str, Any]) -> Any:
    return await call(store, "run.requeue", params)


async def cancel_run(store: Store, params: Mapping[str, Any]) -> Any:
    return await call(store, "run.cancel", params)


async def list_replies(store: Store, params: Mapping[str, Any]) -> Any:
    return await call(store, "reply.list", params)


async def get_reply(store: Store, params: Mapping[str, Any]) -> Any:
    return await call(store, "reply.get", params)


async def retry_reply(store: Store, params: Mapping[str, Any]) -> Any:
    return await call(store, "reply.retry", params)


async def fail_reply(store: Store, params: Mapping[str, Any]) -> Any:
    return await call(store, "reply.fail", params)


async def expire_replies(
    store: Store, params: Mapping[str, Any], *, now: datetime | None = None
) -> Any:
    """``reply.expire``, at ``now`` when a test sets the clock."""
    return shapes.expired_out(await replies.expire_replies(store, parsed(_EXPIRE, params), now=now))


async def expirable_replies(
    store: Store, params: Mapping[str, Any], *, now: datetime | None = None
) -> Any:
    """What ``reply.expire`` would fail (the CLI's dry run), at ``now``."""
    return await replies.expirable_replies(store, parsed(_EXPIRE, params), now=now)


async def append_message(store: Store, params: Mapping[str, Any]) -> Any:
    return await call(store, "message.append", params)


async def mint_credential(store: Store, params: Mapping[str, Any]) -> Any:
    return await call(store, "credential.mint", params)


async def revoke_credential(store: Store, params: Mapping[str, Any]) -> Any:
    return await call(store, "credential.revoke", params)


async def list_events(store: Store, params: Mapping[str, Any]) -> Any:
    return await call(store, "events.list", params)


async def respond(store: Store, params: Mapping[str, Any]) -> Any:
    return await call(store, "prompt.respond", params)
