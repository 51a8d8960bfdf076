"""The host API's methods called as ``/rpc`` calls them: wire params validated into the
method's model at the edge (``http/rpc.py``'s table), so a test pins what a host sees."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter

from ccweb_store.contract.replies import ExpireReplies
from ccweb_store.contract.runs import ClaimRun
from ccweb_store.protocol import registry
from ccweb_store.protocol.argument_errors import parsed
from ccweb_store.protocol.operation import dumped
from ccweb_store.services import replies, runs
from ccweb_store.store.uow import Store

_CLAIM = TypeAdapter(ClaimRun)
_EXPIRE = TypeAdapter(ExpireReplies)


async def call(store: Store, method: str, params: Mapping[str, Any]) -> Any:
    operation = registry.get_method(method)
    assert operation is not None, method
    return await registry.call_method(store, operation, params)


def _method(method: str) -> Callable[[Store, Mapping[str, Any]], Awaitable[Any]]:
    """The host method ``method`` as a test calls it: ``await it(store, params)``."""

    async def call_method(store: Store, params: Mapping[str, Any]) -> Any:
        return await call(store, method, params)

    return call_method


start_run = _method("run.start")
enqueue_run = _method("run.enqueue")
heartbeat_run = _method("run.heartbeat")
complete_run = _method("run.complete")
list_runs = _method("run.list")
requeue_run = _method("run.requeue")
cancel_run = _method("run.cancel")
list_replies = _method("reply.list")
get_reply = _method("reply.get")
retry_reply = _method("reply.retry")
fail_reply = _method("reply.fail")
append_message = _method("message.append")
mint_credential = _method("credential.mint")
revoke_credential = _method("credential.revoke")
list_events = _method("events.list")
respond = _method("prompt.respond")


async def claim_run(store: Store, params: Mapping[str, Any], *, now: datetime | None = None) -> Any:
    """``run.claim``, at ``now`` when a test sets the clock."""
    return dumped(await runs.claim_run(store, parsed(_CLAIM, params), now=now))


async def expire_replies(
    store: Store, params: Mapping[str, Any], *, now: datetime | None = None
) -> Any:
    """``reply.expire``, at ``now`` when a test sets the clock."""
    return dumped(await replies.expire_replies(store, parsed(_EXPIRE, params), now=now))


async def expirable_replies(
    store: Store, params: Mapping[str, Any], *, now: datetime | None = None
) -> Any:
    """What ``reply.expire`` would fail (the CLI's dry run), at ``now``."""
    return await replies.expirable_replies(store, parsed(_EXPIRE, params), now=now)
