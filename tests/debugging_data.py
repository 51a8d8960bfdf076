"""One database holding a request in every state, written through the repositories.

Shared by the view, CLI and ready-to-paste query tests. The returned request's id is the
placeholder the "full story" query of docs/operator.md names, so that query runs verbatim.
"""

from __future__ import annotations

from datetime import timedelta

from ccweb_store.config import Settings
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.store.uow import Store

WAITING = "req_waiting"  # alpha -> beta, queued target run (a cancelled one before it), 2h old
READY = "req_ready"  # gamma -> delta, target run completed, gamma is running now
FAILED = "req_failed"  # alpha -> eps, target run failed, hop 4
RETURNED = "PASTE_REQUEST_ID"  # delta -> alpha, delivered: absent from pending_replies
LEGACY = "req_legacy"  # ghost (no session) -> delta, original_request NULL, running target run
OPEN_REQUESTS = (LEGACY, FAILED, WAITING, READY)  # oldest first

REQUEST_MESSAGE = {WAITING: "msg_w", READY: "msg_r", FAILED: "msg_f", RETURNED: "msg_ret"}
REPLY_MESSAGE = "msg_ret_reply"


async def seed(database_url: str) -> dict[str, str]:
    """Write the fixture; return the ids of the runs it made, by name."""
    store = Store.from_settings(Settings(database_url=database_url))
    now = utcnow()
    runs: dict[str, str] = {}
    try:
        async with store.uow() as uow:
            for session_id, title in (
                ("alpha", "Alpha"),
                ("beta", "Beta"),
                ("gamma", "Gamma"),
                ("delta", "Delta"),
                ("eps", "Eps"),
                ("quiet", "Quiet"),
            ):
                await uow.sessions.create(session_id, title=title)
            await uow.messages.append("alpha", "user", "Ask beta for a review")
            await uow.messages.append("gamma", "user", "Start the release")

            async def request(
                request_id: str,
                source: str,
                target: str,
                status: str,
                *,
                age: timedelta,
                hop_count: int = 1,
                original: str | None = "Please do the work",
                **values: object,
            ) -> None:
                message_id = REQUEST_MESSAGE.get(request_id)
                if message_id is not None:
                    await uow.messages.append(
                        target,
                        "user",
                        original or "",
                        id=message_id,
                        metadata={"crossConversation": {"replyRequestId": request_id}},
                    )
                await uow.replies.create(
                    dict(
                        request_id=request_id,
                        message_id=message_id,
                        source_conversation_id=source,
                        source_title=source.title(),
                        target_conversation_id=target,
                        target_title=target.title(),
                        status=status,
                        hop_count=hop_count,
                        source_auto_run=values.pop("source_auto_run", True),
                        original_request=original,
                        created_at=now - age,
                        **values,
                    )
                )

            await request(WAITING, "alpha", "beta", "waiting", age=timedelta(hours=2), hop_count=3)
            old = await uow.runs.enqueue("beta", "cross_conversation", reply_request_id=WAITING)
            await uow.runs.finish(old.id, "cancelled", worker_id=None)
            retried = await uow.runs.start(
                "beta", "cross_conversation", reply_request_id=WAITING, worker_id="w-dead"
            )
            await uow.runs.requeue(retried.id)
            runs["waiting_cancelled"], runs["waiting_target"] = old.id, retried.id

            await request(READY, "gamma", "delta", "ready", age=timedelta(minutes=30))
            done = await uow.runs.start("delta", "cross_conversation", reply_request_id=READY)
            await uow.runs.finish(
                done.id, "completed", worker_id=None, output="Release notes written"
            )
            queued = await uow.runs.enqueue("gamma", "user_turn")
            running = await uow.runs.start("gamma", "user_turn", worker_id="w-gamma")
            runs["ready_target"], runs["gamma_queued"], runs["gamma_running"] = (
                done.id,
                queued.id,
                running.id,
            )

            await request(
                FAILED,
                "alpha",
                "eps",
                "failed",
                age=timedelta(hours=3),
                hop_count=4,
                last_error="target run failed: boom",
            )
            broken = await uow.runs.start("eps", "cross_conversation", reply_request_id=FAILED)
            await uow.runs.finish(broken.id, "failed", worker_id=None, error="boom")
            runs["failed_target"] = broken.id

            await request(
                RETURNED,
                "delta",
                "alpha",
                "returned",
                age=timedelta(hours=1),
                reply_text="All reviewed",
                reply_message_id=REPLY_MESSAGE,
                returned_at=now,
            )
            answered = await uow.runs.start(
                "alpha", "cross_conversation", reply_request_id=RETURNED
            )
            await uow.runs.finish(answered.id, "completed", worker_id=None, output="All reviewed")
            await uow.messages.append(
                "delta",
                "assistant",
                "All reviewed",
                id=REPLY_MESSAGE,
                metadata={"ccwebDisplayOnly": True, "replyToRequestId": RETURNED},
            )
            follow_up = await uow.runs.start("delta", "reply_auto_run", reply_request_id=RETURNED)
            await uow.runs.finish(follow_up.id, "completed", worker_id=None)
            runs["returned_target"], runs["returned_follow_up"] = answered.id, follow_up.id

            await request(
                LEGACY,
                "ghost",
                "delta",
                "waiting",
                age=timedelta(days=2),
                hop_count=0,
                original=None,
                source_auto_run=False,
            )
            legacy_run = await uow.runs.start(
                "delta", "cross_conversation", reply_request_id=LEGACY, worker_id="w-delta"
            )
            await uow.runs.heartbeat(legacy_run.id, "w-delta", lease_seconds=600)
            runs["legacy_target"] = legacy_run.id
            await uow.commit()
    finally:
        await store.dispose()
    return runs
