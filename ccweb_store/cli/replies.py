"""``ccweb-store replies``: list, show, retry, fail and expire cross-conversation reply requests.

Reads go through ``services.debugging``; every change goes through the same service functions
as the host API, so a transition behaves the same wherever it starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from ccweb_store.cli.common import (
    AsJson,
    Conversation,
    DatabaseUrl,
    Limit,
    OlderThan,
    duration_option,
    print_json,
    with_store,
)
from ccweb_store.cli.tables import lease_text, print_table, runs_table, stdout_console
from ccweb_store.domain.durations import format_duration

if TYPE_CHECKING:
    from rich.table import Table

    from ccweb_store.services.debugging import ConversationActivity, PendingReply, ReplyStory
    from ccweb_store.store.models import ReplyRequest
    from ccweb_store.store.uow import Store

replies_app = typer.Typer(
    help="Debug and repair cross-conversation reply requests.", no_args_is_help=True
)


def _pending_table(pending: list[PendingReply], limit: int) -> Table:
    from rich import box
    from rich.table import Table

    from ccweb_store.domain.timestamps import utcnow

    now = utcnow()
    caption = f"{len(pending)} open request(s), oldest first"
    if len(pending) == limit:
        caption += f"; showing the first {limit} (use --limit for more)"
    table = Table(title="Pending replies", caption=caption, box=box.SIMPLE_HEAD)
    table.add_column("Request", no_wrap=True)
    table.add_column("Status")
    table.add_column("Age", justify="right")
    table.add_column("Hops", justify="right")
    table.add_column("Source → target")
    table.add_column("Target run")
    table.add_column("Source running")
    table.add_column("Last error")
    styles = {"ready": "yellow", "failed": "red"}
    for item in pending:
        reply = item.reply
        run = "none"
        if item.target_run_status is not None:
            run = f"{item.target_run_status}, attempts {item.target_run_attempts}"
            if item.target_run_worker_id is not None:
                worker = lease_text(
                    item.target_run_worker_id, item.target_run_lease_expires_at, now
                )
                run += f", {worker}"
        table.add_row(
            reply.request_id,
            reply.status,
            format_duration(item.age_seconds),
            str(reply.hop_count),
            f"{reply.source_title or reply.source_conversation_id} → "
            f"{reply.target_title or reply.target_conversation_id}",
            run,
            "yes" if item.source_running else "no",
            reply.last_error or "",
            style=styles.get(reply.status),
        )
    return table


def _print_story(story: ReplyStory) -> None:
    from rich.panel import Panel
    from rich.table import Table

    from ccweb_store.services.schemas import reply_out
    from ccweb_store.store.models import Message

    console = stdout_console()
    fields = Table.grid(padding=(0, 2))
    fields.add_column(style="bold")
    fields.add_column()
    for key, value in reply_out(story.reply).items():
        if key not in ("originalRequest", "replyText"):
            fields.add_row(key, "-" if value is None else str(value))
    console.print(Panel(fields, title=f"Reply request {story.reply.request_id}"))
    for label, text in (
        ("Original request", story.reply.original_request or "(unknown: a legacy request)"),
        ("Reply text", story.reply.reply_text or "(none yet)"),
    ):
        console.print(Panel(text, title=label))
    if story.runs:
        print_table(runs_table(story.runs, "Runs for this request"))
    else:
        console.print("No run has worked on this request.")

    def show(message: Message | None, label: str, missing: str) -> None:
        if message is None:
            console.print(f"{label}: {missing}")
            return
        title = f"{label}: {message.id} in {message.session_id} (seq {message.seq})"
        console.print(Panel(message.content, title=title))

    show(story.request_message, "Request message (target)", "not stored")
    if not story.source_messages:
        show(None, "Reply message (source)", "not delivered")
    for message in story.source_messages:
        failed = (message.metadata_ or {}).get("replyFailed")
        show(message, "Failure notice (source)" if failed else "Reply message (source)", "")


@replies_app.command("list")
def replies_list(
    status: Annotated[
        list[str] | None,
        typer.Option("--status", help="waiting, ready or failed (repeat for several)"),
    ] = None,
    conversation: Conversation = None,
    older_than: OlderThan = None,
    limit: Limit = 100,
    as_json: AsJson = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Open requests (waiting, ready, failed), oldest first, from the pending_replies view."""
    from ccweb_store.services.debugging import activity_of, list_pending_replies

    seconds = duration_option(older_than, "--older-than")

    async def read(store: Store) -> tuple[list[PendingReply], ConversationActivity | None]:
        pending = await list_pending_replies(
            store,
            statuses=status,
            conversation_id=conversation,
            older_than_seconds=seconds,
            limit=limit,
        )
        activity = await activity_of(store, conversation) if conversation else None
        return pending, activity

    pending, activity = with_store(database_url, read)
    if as_json:
        payload: dict[str, Any] = {
            "replies": [item.to_json() for item in pending],
            "count": len(pending),
        }
        if conversation:
            payload["conversation"] = activity.to_json() if activity else None
        print_json(payload)
        return
    if activity is not None:
        typer.echo(_activity_line(activity))
    if not pending:
        typer.echo("No open reply requests match.")
    else:
        print_table(_pending_table(pending, limit))


def _activity_line(activity: ConversationActivity) -> str:
    """One line saying what a conversation is doing, above the table of its requests."""
    from ccweb_store.domain.timestamps import utcnow

    def counts(open_requests: dict[str, int]) -> str:
        return ", ".join(f"{n} {status}" for status, n in open_requests.items() if n) or "none"

    last = "never"
    if activity.last_message_at is not None:
        last = format_duration((utcnow() - activity.last_message_at).total_seconds()) + " ago"
    run = "none"
    if activity.active_run_id is not None:
        run = f"{activity.active_run_status} {activity.active_run_kind} {activity.active_run_id}"
    return (
        f"{activity.title or activity.session_id} ({activity.session_id}): "
        f"{activity.message_count} messages, last {last}; active run: {run}; "
        f"open requests it made: {counts(activity.open_as_source)}; "
        f"it must answer: {counts(activity.open_as_target)}"
    )


@replies_app.command("show")
def replies_show(
    request_id: Annotated[str, typer.Argument(help="The request id")],
    as_json: AsJson = False,
    database_url: DatabaseUrl = None,
) -> None:
    """One request: its state, every run that worked on it, and the messages on both sides."""
    from ccweb_store.services.debugging import reply_story

    story = with_store(database_url, lambda store: reply_story(store, request_id))
    if as_json:
        print_json(story.to_json())
    else:
        _print_story(story)


def _reply_outcome(reply: dict[str, Any]) -> str:
    """One line saying where a request stands after a change, and what happens next."""
    source = reply["sourceConversationId"]
    target = reply["targetConversationId"]
    head = f"reply request {reply['requestId']}: {reply['status']}"
    if reply["status"] == "returned":
        return f"{head}, delivered to {source} as message {reply['replyMessageId']}"
    if reply["status"] == "ready":
        return f"{head}, held until the running run of {source} ends, then delivered"
    if reply["status"] == "waiting":
        return f"{head} on a queued or running run of {target}"
    if reply["replyMessageId"] is not None:
        notice = f"notice {reply['replyMessageId']} delivered to {source}"
    else:
        notice = f"notice not delivered yet ({source} is running or gone)"
    return f"{head} ({reply['lastError']}); {notice}"


def _print_reply_change(reply: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(reply)
    else:
        typer.echo(_reply_outcome(reply))


@replies_app.command("retry")
def replies_retry(
    request_id: Annotated[str, typer.Argument(help="The request id")],
    as_json: AsJson = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Try a request again (the host API's reply.retry).

    ready: deliver it now. failed with reply text: ready again, then delivered. failed without
    reply text, or waiting with no run left: queue a new run on the target. returned, or a
    target run for it still queued or running (target_busy): exit 1, nothing changed.
    """
    from ccweb_store.services.replies import retry_reply

    reply = with_store(database_url, lambda store: retry_reply(store, {"requestId": request_id}))
    _print_reply_change(reply, as_json)


@replies_app.command("fail")
def replies_fail(
    request_id: Annotated[str, typer.Argument(help="The request id")],
    reason: Annotated[
        str, typer.Option("--reason", help="Why, as the source will read it (required)")
    ],
    as_json: AsJson = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Give up on a waiting or ready request; its source gets a failure notice (reply.fail).

    An already failed request is left as it is; a returned one exits 1.
    """
    from ccweb_store.services.replies import fail_reply

    reply = with_store(
        database_url,
        lambda store: fail_reply(store, {"requestId": request_id, "reason": reason}),
    )
    _print_reply_change(reply, as_json)


def _expirable_table(requests: list[ReplyRequest], older_than: str) -> Table:
    from rich import box
    from rich.table import Table

    from ccweb_store.domain.timestamps import utcnow

    now = utcnow()
    table = Table(
        title=f"Would expire (waiting, older than {older_than})",
        caption=f"{len(requests)} request(s), oldest first; nothing was changed",
        box=box.SIMPLE_HEAD,
    )
    table.add_column("Request", no_wrap=True)
    table.add_column("Age", justify="right")
    table.add_column("Source → target")
    for request in requests:
        table.add_row(
            request.request_id,
            format_duration((now - request.created_at).total_seconds()),
            f"{request.source_title or request.source_conversation_id} → "
            f"{request.target_title or request.target_conversation_id}",
        )
    return table


@replies_app.command("expire")
def replies_expire(
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            metavar="DURATION",
            help="Fail waiting requests made at least this long ago: 1d, 12h",
        ),
    ],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only list what would expire; change nothing")
    ] = False,
    as_json: AsJson = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Fail every waiting request older than DURATION with "expired" (the host API's reply.expire).

    Each source gets a failure notice. ready, failed and returned requests are not touched.
    """
    from ccweb_store.services.replies import expirable_replies, expire_replies
    from ccweb_store.services.schemas import reply_out

    params = {"olderThanSeconds": duration_option(older_than, "--older-than")}
    if dry_run:
        requests = with_store(database_url, lambda store: expirable_replies(store, params))
        if as_json:
            print_json(
                {
                    "dryRun": True,
                    "wouldExpire": len(requests),
                    "replies": [reply_out(request) for request in requests],
                }
            )
        elif not requests:
            typer.echo(f"No waiting request is older than {older_than}; nothing would expire.")
        else:
            print_table(_expirable_table(requests, older_than))
        return
    result = with_store(database_url, lambda store: expire_replies(store, params))
    if as_json:
        print_json(result)
    else:
        typer.echo(f"expired {result['expired']} waiting reply request(s) older than {older_than}")
