"""What the end of a run sets off, however it ends (``run.complete``, ``run.cancel``, a lease
that expired too often): the assistant message, the reply request it answered, the replies
that waited for its conversation; and the sweeper that requeues (or fails) runs whose
worker is gone. ``runs`` speaks the host API around these.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

from ccweb_store.contract.runs import Completion
from ccweb_store.domain import errors
from ccweb_store.domain.errors import Conflict, DatabaseFileMissing, DatabaseUnavailable
from ccweb_store.domain.kinds import Role, RunKind, RunStatus
from ccweb_store.domain.rows import Message, ReplyRequest, Run
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.services.reply_delivery import deliver_ready_replies, record_target_answer
from ccweb_store.store.uow import Store, UnitOfWork

log = logging.getLogger(__name__)


def lease_lost(run: Run, worker_id: str | None) -> Conflict:
    """``lease_lost`` for a caller (``worker_id``, None: it named none) that does not hold
    ``run``: what happened to the run and what to do, with ``runId``, ``runStatus`` and
    ``heldBy`` (the current holder, or None) in the error's data."""
    caller = f"worker {worker_id!r}" if worker_id is not None else "a caller without workerId"
    holder = repr(run.worker_id)
    stop = "stop working on it; nothing was recorded (claim another run)"
    if run.status == RunStatus.QUEUED:
        what = (
            f"run {run.id!r} was requeued (a lease expired or an operator requeued it) and "
            f"waits for a worker, so {caller} no longer holds it"
        )
    elif run.status == RunStatus.RUNNING and run.worker_id is not None and worker_id is not None:
        what = (
            f"the lease of run {run.id!r} moved to worker {holder}: {caller} no longer holds "
            "it (the run was requeued, after its lease expired or by an operator, and claimed "
            "again)"
        )
    elif run.status == RunStatus.RUNNING and run.worker_id is not None:
        what = f"run {run.id!r} is leased to worker {holder} and only its holder completes it"
        stop = (
            f"nothing was recorded: pass workerId {holder}, or requeue the run (run.requeue) "
            "to take it from that worker"
        )
    elif run.status == RunStatus.RUNNING:
        what = f"run {run.id!r} has no lease holder (run.start without workerId)"
        stop = "nothing was recorded: complete it without workerId"
    elif run.worker_id is not None:
        what = f"run {run.id!r} already ended ({run.status}) under worker {holder}, not {caller}"
    else:
        what = (
            f"run {run.id!r} already ended ({run.status}) with no lease holder (requeued, then "
            f"failed after its leases expired or closed by an operator), not under {caller}"
        )
    return Conflict(
        f"{what}; {stop}",
        code=errors.LEASE_LOST,
        data={"runId": run.id, "runStatus": run.status, "heldBy": run.worker_id},
    )


async def _answered_request(uow: UnitOfWork, run: Run) -> ReplyRequest | None:
    """The reply request a ``cross_conversation`` run answers, if it has one."""
    if run.kind != RunKind.CROSS_CONVERSATION or run.reply_request_id is None:
        return None
    return await uow.replies.get(run.reply_request_id)


async def after_close(
    uow: UnitOfWork, run: Run, status: str, *, output: str | None, error: str | None
) -> tuple[Message | None, list[ReplyRequest]]:
    """Everything the end of ``run`` (just finished, so locked) sets off; the caller commits."""
    linked = await _answered_request(uow, run)
    await uow.sessions.lock_many(
        [run.session_id, linked.source_conversation_id if linked is not None else None]
    )
    message = None
    if output and output.strip():
        message = await uow.sends.append_read(
            run.session_id, Role.ASSISTANT, output, metadata={"runId": run.id}
        )
    replies: list[ReplyRequest] = []
    if linked is not None:
        answered = await record_target_answer(
            uow,
            linked,
            completed=status == RunStatus.COMPLETED,
            output=output,
            error=error,
            delivered_by_run_id=run.id,
        )
        if answered is not None:
            replies.append(answered)
    replies.extend(await deliver_ready_replies(uow, run.session_id, delivered_by_run_id=run.id))
    return message, replies


async def completion_result(uow: UnitOfWork, run: Run) -> Completion:
    """The result of ``run.complete`` for a run that is already finished."""
    message = await uow.messages.find_by_metadata(run.session_id, "runId", run.id)
    linked = await _answered_request(uow, run)
    replies = [linked] if linked is not None else []
    for delivered in await uow.messages.list_by_metadata(
        run.session_id, "deliveredByRunId", run.id
    ):
        request_id = (delivered.metadata_ or {}).get("replyToRequestId")
        request = await uow.replies.get(request_id) if isinstance(request_id, str) else None
        if request is not None:
            replies.append(request)
    return Completion.of(run, message, replies)


async def requeue_expired(store: Store, *, now: datetime | None = None) -> dict[str, int]:
    """Requeue running runs whose lease has passed; fail those out of attempts.

    Each run is settled in its own transaction. Usable from a background task; returns
    ``{requeued, failed}``.
    """
    now = now or utcnow()
    async with store.read_uow() as uow:
        expired_ids = [run.id for run in await uow.runs.expired(now=now)]
    requeued = failed = 0
    max_attempts = store.settings.max_attempts
    for run_id in expired_ids:
        async with store.uow() as uow:
            run = await uow.runs.get(run_id, for_update=True)
            if (
                run is None
                or run.status != RunStatus.RUNNING
                or run.lease_expires_at is None
                or run.lease_expires_at >= now
            ):
                continue
            from ccweb_store.metrics import LEASE_EXPIRIES  # the server's, loaded then

            attempts = run.attempts + 1
            queued = await uow.runs.requeue(run_id)
            if queued is None:
                continue
            if attempts >= max_attempts:
                error = f"the run's lease expired {attempts} times; giving up"
                ended = await uow.runs.finish(run_id, RunStatus.FAILED, worker_id=None, error=error)
                await after_close(uow, ended or queued, RunStatus.FAILED, output=None, error=error)
                failed += 1
                LEASE_EXPIRIES.labels(RunStatus.FAILED).inc()
                log.warning("run %s failed after %d expired leases", run_id, attempts)
            else:
                requeued += 1
                LEASE_EXPIRIES.labels("requeued").inc()
                log.info("run %s requeued after an expired lease (attempt %d)", run_id, attempts)
            await uow.commit()
    return {"requeued": requeued, "failed": failed}


async def sweep_expired_leases(store: Store, interval: float) -> None:
    """Requeue (or fail) runs with expired leases every ``interval`` seconds, until cancelled.

    Runs in the server's lifespan, so a dead worker's run goes back to the queue even when
    no other worker calls ``run.claim``. A failing sweep (database down) is logged and retried.
    """
    log.debug("sweeping expired run leases every %gs", interval)
    while True:
        await asyncio.sleep(interval)
        try:
            swept = await requeue_expired(store)
        except (DatabaseUnavailable, DatabaseFileMissing) as exc:  # said once a pass, no trace
            log.warning("sweeping expired run leases failed: %s", exc.message)
            continue
        except Exception:
            log.exception("sweeping expired run leases failed; retrying in %gs", interval)
            continue
        if swept["requeued"] or swept["failed"]:
            log.info(
                "lease sweep: %d run(s) requeued, %d failed after too many expired leases",
                swept["requeued"],
                swept["failed"],
            )
