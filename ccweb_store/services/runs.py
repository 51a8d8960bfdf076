"""The run queue's host API (SPEC §3 ``run.*``): start, enqueue, claim, heartbeat, complete,
list, requeue, cancel. What a run's end sets off, and the lease sweeper, are
``run_endings``'.

``complete_run`` is where the reply lifecycle turns: closing a ``cross_conversation`` run
moves its reply request to ``ready`` (or ``failed``) and delivers it, and closing any run
delivers the replies that waited for its conversation to become idle (``replies.py``).
A run whose lease expires goes back to the queue; its ``max_attempts``-th expiry fails it
exactly like a failed run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ccweb_store.contract import objects
from ccweb_store.contract.runs import (
    MIN_LEASE_SECONDS,
    CancelRun,
    Claim,
    ClaimRun,
    CompleteRun,
    Completion,
    EnqueueRun,
    HeartbeatRun,
    ListRuns,
    RequeueRun,
    RunList,
    StartRun,
)
from ccweb_store.domain import errors
from ccweb_store.domain.errors import Conflict
from ccweb_store.domain.events import CLAIMABLE_AFTER
from ccweb_store.domain.ids import (
    ACTIVE_RUN_STATUSES,
    FINISHED_RUN_STATUSES,
)
from ccweb_store.domain.kinds import RunStatus
from ccweb_store.domain.rows import Run
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.services import credentials
from ccweb_store.services.run_endings import (
    after_close,
    completion_result,
    lease_lost,
    requeue_expired,
)
from ccweb_store.store.repositories.run_leases import ClaimRace
from ccweb_store.store.uow import Store, UnitOfWork

log = logging.getLogger(__name__)

#: How many times ``run.claim`` claims again after losing a race (``ClaimRace``).
CLAIM_ATTEMPTS = 5
#: A long-polling claim tries again at least this often with no event: a lease that expired
#: makes its run claimable without one when no sweeper runs.
RECLAIM_EVERY_S = 5.0


async def start_run(store: Store, call: StartRun) -> objects.Run:
    """``run.start``: a run the host drives itself, already ``running`` (``conversation_busy``)."""
    async with store.uow() as uow:
        await uow.sessions.require(call.session_id)
        run = await uow.runs.start(
            call.session_id, call.kind, runtime_text=call.runtime_text, worker_id=call.worker_id
        )
        await uow.commit()
    return objects.Run.model_validate(run)


async def enqueue_run(store: Store, call: EnqueueRun) -> objects.Run:
    """``run.enqueue``: a ``queued`` run for a worker to claim (what a host does when a person
    writes in a conversation that a worker drives, ``ccweb-store worker``)."""
    async with store.uow() as uow:
        await uow.sessions.require(call.session_id)
        run = await uow.runs.enqueue(call.session_id, call.kind, runtime_text=call.runtime_text)
        await uow.commit()
    return objects.Run.model_validate(run)


NOTHING_CLAIMED = Claim(run=None)


async def claim_run(store: Store, call: ClaimRun, *, now: datetime | None = None) -> Claim:
    """``run.claim``: lease the oldest queued run of an idle conversation, or no run.

    Expired leases are requeued (or failed) first, so a dead worker's run is claimable again.
    ``waitSeconds`` (up to ``MAX_WAIT_SECONDS``) makes it a long poll: with nothing to claim,
    the answer waits until a run may have become claimable (an event of ``CLAIMABLE_AFTER``
    from any process) and claims then, or answers no run at the deadline. Each run goes to
    one claimer; the others wait on.

    What a worker needs before it starts a run comes in the same answer, made in the claim's
    own unit of work, so the run's command starts without another round trip:
    ``withConversation`` adds the conversation (as ``session.get``), and
    ``mintCredential: {expiresInSeconds?, label?}`` a credential (as ``credential.mint``: the
    run's conversation, at the run's hop count).
    """
    wanted = _Wanted(
        worker_id=call.worker_id,
        lease=call.lease_seconds or store.settings.lease_seconds,
        kinds=list(call.kinds) if call.kinds is not None else None,
        now=now,
        extras=await _claim_extras(store, call),
    )
    wait = call.wait_seconds
    if not wait:
        return await _claim_now(store, wanted)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    # Subscribed before the first claim: a run queued while a claim runs still wakes the wait.
    async with store.feed.subscribe(_claimable, limit=1) as waiter:
        while True:
            claimed = await _claim_now(store, wanted)
            left = deadline - loop.time()
            if claimed.run is not None or left <= 0:
                return claimed
            await waiter.next_batch(min(left, RECLAIM_EVERY_S))
            waiter.rearm()


def _claimable(event: dict[str, Any]) -> bool:
    return event["type"] in CLAIMABLE_AFTER


#: What a claim adds to the run it took, in its own unit of work: ``(uow, run) -> result``.
ClaimExtras = Callable[[UnitOfWork, Run], Awaitable[Claim]]


@dataclass(frozen=True, slots=True)
class _Wanted:
    """One worker's claim: its id, the lease it takes, the run kinds it takes (None: any),
    the time it claims at (None: the clock's; tests set it) and what it adds to the run."""

    worker_id: str
    lease: int
    kinds: list[str] | None
    now: datetime | None
    extras: ClaimExtras | None


async def _claim_extras(store: Store, call: ClaimRun) -> ClaimExtras | None:
    """What ``withConversation`` and ``mintCredential`` ask the claim to add (checked before
    anything is claimed; None: nothing)."""
    with_conversation = call.with_conversation
    minting = call.mint_credential
    if not with_conversation and minting is None:
        return None
    mint = None
    if minting is not None:
        mint = credentials.mint_options(minting)
        key = await credentials.signing_key(store)

    async def extras(uow: UnitOfWork, run: Run) -> Claim:
        added: dict[str, Any] = {}
        if with_conversation:
            added["conversation"] = objects.Session.of(await uow.sessions.require(run.session_id))
        if mint is not None:
            added["credential"] = await credentials.mint_in(uow, key, run, mint)
        return Claim(run=objects.Run.model_validate(run), **added)

    return extras


async def _claim_now(store: Store, wanted: _Wanted) -> Claim:
    """A claim, taken again (up to ``CLAIM_ATTEMPTS`` times) when it loses a race."""
    for _ in range(CLAIM_ATTEMPTS):
        try:
            claimed = await _claim(store, wanted)
        except ClaimRace:
            continue  # another worker started a run of that conversation: claim another run
        return NOTHING_CLAIMED if claimed is None else claimed
    return NOTHING_CLAIMED  # lost every race: the runs there were went to other workers


async def _claim(store: Store, wanted: _Wanted) -> Claim | None:
    """One claim (None: no run to claim), in the unit of work it needs:

    - nothing to add and no lease to probe for: ``_claim_alone``, one statement;
    - otherwise, in a transaction, a probe for an expired lease first, then the claim and
      its extras (``_claim_in``);
    - and when the probe finds one: the expired leases requeued (or failed), each in a unit
      of work of its own, then the claim in a fresh transaction (``_claim_in_transaction``).
    """
    if wanted.extras is None and not _lease_probe_due(store, wanted.now):
        return await _claim_alone(store, wanted)
    async with store.uow() as uow:
        # A probe inside the claim's own transaction instead of a separate pass: expired
        # leases are rare. When it finds one, this transaction ends unused (rolled back).
        if not await _lease_expired(store, uow, wanted.now):
            return await _claim_in(uow, wanted)
    await requeue_expired(store, now=wanted.now)
    return await _claim_in_transaction(store, wanted)


async def _claim_alone(store: Store, wanted: _Wanted) -> Claim | None:
    """The claim by itself, outside a transaction: ``RunLeases.claim`` is one statement that
    writes the run's event too where the database can, so on PostgreSQL it commits by
    itself, without ``BEGIN`` and ``COMMIT`` (``Store.uow(autocommit=True)``); on SQLite it
    takes the writer's turn as every write does. Only for a claim with no ``extras``."""
    async with store.uow(autocommit=True) as uow:
        return await _claim_in(uow, wanted)


async def _claim_in_transaction(store: Store, wanted: _Wanted) -> Claim | None:
    """The claim and its ``extras`` in one transaction: they commit together, or not at all."""
    async with store.uow() as uow:
        return await _claim_in(uow, wanted)


async def _claim_in(uow: UnitOfWork, wanted: _Wanted) -> Claim | None:
    """Claim in ``uow``, add the ``extras`` to a run it took, and commit."""
    run = await uow.runs.claim(
        wanted.worker_id, lease_seconds=wanted.lease, kinds=wanted.kinds, now=wanted.now
    )
    claimed = None
    if run is not None:
        claimed = (
            await wanted.extras(uow, run)
            if wanted.extras is not None
            else Claim(run=objects.Run.model_validate(run))
        )
    await uow.commit()
    return claimed


async def _lease_expired(store: Store, uow: UnitOfWork, now: datetime | None) -> bool:
    """Whether a running run's lease has passed, asking the database at most once a second.

    No lease is shorter than ``MIN_LEASE_SECONDS``, so when the earliest lease found at ``t``
    is still running, none can pass before ``min(earliest, t + MIN_LEASE_SECONDS)``: claims
    until then skip the query (``Store.no_lease_expires_before``). A caller that passes its
    own ``now`` (tests, replays) always asks, and forgets what was known.
    """
    if not _lease_probe_due(store, now):
        return False
    if now is not None:
        store.no_lease_expires_before = None  # leases set by that clock may be anywhere
    current = now or utcnow()
    earliest = await uow.runs.earliest_lease_expiry()
    if earliest is not None and earliest < current:
        return True
    if now is None:
        horizon = current + timedelta(seconds=MIN_LEASE_SECONDS)
        store.no_lease_expires_before = horizon if earliest is None else min(earliest, horizon)
    return False


def _lease_probe_due(store: Store, now: datetime | None) -> bool:
    """Whether ``_lease_expired`` asks the database: a caller's own ``now``, or the time
    past ``Store.no_lease_expires_before``."""
    if now is not None:
        return True
    horizon = store.no_lease_expires_before
    return horizon is None or utcnow() >= horizon


async def heartbeat_run(store: Store, call: HeartbeatRun) -> objects.Run:
    """``run.heartbeat``: extend the lease of a run this worker holds (``lease_lost`` otherwise)."""
    run_id, worker_id = call.run_id, call.worker_id
    lease = call.lease_seconds or store.settings.lease_seconds
    async with store.uow() as uow:
        run = await uow.runs.require(run_id)
        beat = await uow.runs.heartbeat(run_id, worker_id, lease_seconds=lease)
        if beat is None:
            raise lease_lost(run, worker_id)
        await uow.commit()
    return objects.Run.model_validate(beat)


async def complete_run(store: Store, call: CompleteRun) -> Completion:
    """``run.complete``: close the run, append its output, answer and deliver replies.

    One transaction. Only the run's lease holder closes it: ``workerId`` must name the worker
    that holds it, and be left out for a run no worker holds (``run.start`` without one, a
    queued run); anyone else gets ``lease_lost`` and nothing changes, so a worker whose run
    was requeued and claimed again cannot drop the new holder's output. Calling it again for
    a finished run, as its holder, changes nothing and returns the same run, message and
    replies (in their current state).
    """
    run_id, status, worker_id = call.run_id, call.status, call.worker_id
    output, error = call.output, call.error
    async with store.uow() as uow:
        # The conditional UPDATE locks and closes the run in one statement, if this caller
        # holds it; only a run it could not close (finished, held by another, unknown) needs
        # reading.
        run = await uow.runs.finish(run_id, status, worker_id=worker_id, output=output, error=error)
        if run is None:
            current = await uow.runs.require(run_id)
            if current.status in FINISHED_RUN_STATUSES and current.worker_id == worker_id:
                return await completion_result(uow, current)
            raise lease_lost(current, worker_id)
        message, replies = await after_close(uow, run, status, output=output, error=error)
        if call.agent_session_id is not None:
            await uow.sessions.set_agent_session(run.session_id, call.agent_session_id)
        await uow.commit()
    return Completion.of(run, message, replies)


async def list_runs(store: Store, query: ListRuns, *, now: datetime | None = None) -> RunList:
    """``run.list`` (and the operator's listings): runs newest first, by conversation, status
    and age."""
    cutoff = None
    if query.older_than_seconds is not None:
        cutoff = (now or utcnow()) - timedelta(seconds=query.older_than_seconds)
    async with store.read_uow() as uow:
        rows = await uow.runs.list_recent(
            session_id=query.session_id,
            statuses=query.status,
            created_before=cutoff,
            limit=query.limit,
        )
    return RunList(runs=[objects.Run.model_validate(row) for row in rows])


async def requeue_run(store: Store, call: RequeueRun) -> objects.Run:
    """Put a running run back in the queue (its worker died); counts as an attempt.

    With ``workerId`` (a worker giving back a run it cannot finish), only while that worker
    holds the run: ``lease_lost`` when the lease moved, so it never takes a run from its new
    holder."""
    run_id, worker_id = call.run_id, call.worker_id
    async with store.uow() as uow:
        run = await uow.runs.require(run_id, for_update=True)
        if worker_id is not None and run.status == RunStatus.RUNNING and run.worker_id != worker_id:
            raise lease_lost(run, worker_id)
        requeued = await uow.runs.requeue(run_id)
        if requeued is None:
            raise Conflict(
                f"run {run_id!r} is {run.status}, not running; only a running run can be requeued",
                code=errors.INVALID_STATE,
            )
        await uow.commit()
    return objects.Run.model_validate(requeued)


async def cancel_run(store: Store, call: CancelRun) -> Completion:
    """``run.cancel``: end a queued run (or, with ``force``, a running one) as ``cancelled``.

    The reply requests the run carried move as ``run.complete`` with ``status: failed`` moves
    them (the source is told its request failed, with ``reason``), so nobody waits for a run
    that will never end. A worker still holding a forced run loses its lease at its next
    heartbeat and stops. Returns what ``run.complete`` returns."""
    run_id, force = call.run_id, call.force
    reason = call.reason or "cancelled by the operator"
    async with store.uow() as uow:
        current = await uow.runs.require(run_id, for_update=True)
        if current.status == RunStatus.RUNNING and not force:
            raise Conflict(
                f"run {run_id!r} is running (worker {current.worker_id!r}); cancel it with "
                "force to stop it, or wait for it to end",
                code=errors.INVALID_STATE,
                data={"runId": run_id, "runStatus": current.status},
            )
        if current.status not in ACTIVE_RUN_STATUSES:
            raise Conflict(
                f"run {run_id!r} already ended ({current.status}); nothing to cancel",
                code=errors.INVALID_STATE,
                data={"runId": run_id, "runStatus": current.status},
            )
        run = await uow.runs.finish(
            run_id, RunStatus.CANCELLED, worker_id=current.worker_id, error=reason
        )
        if run is None:  # the row is locked above, so it is still open and held as read
            raise Conflict(f"run {run_id!r} changed while cancelling it; try again")
        message, replies = await after_close(uow, run, RunStatus.FAILED, output=None, error=reason)
        await uow.commit()
    return Completion.of(run, message, replies)
