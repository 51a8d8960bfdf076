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
    fail,
    model_call,
    print_json,
    with_store,
)
from ccweb_store.cli.remote import ServerUrl, operator_call
from ccweb_store.cli.tables import (
    lease_text,
    parse_iso,
    print_table,
    runs_json_table,
    stdout_console,
)
from ccweb_store.domain.durations import format_duration
from ccweb_store.domain.kinds import ReplyStatus

if TYPE_CHECKING:
    from rich.table import Table

    from ccweb_store.store.rows import ReplyRequest

replies_app = typer.Typer(
    rich_markup_mode="markdown",
    help="Debug and repair cross-conversation reply requests.",
    no_args_is_help=True,
)


def conversation_label(title: str | None, conversation_id: str) -> str:
    """``Title (id)``, or the id alone for a conversation without a title."""
    return f"{title} ({conversation_id})" if title and title != conversation_id else conversation_id


def pending_table(pending: list[dict[str, Any]], limit: int | None, title: str) -> Table:
    """The open requests of ``operator.pendingReplies`` (or a conversation's), oldest first."""
    from rich import box
    from rich.table import Table

    from ccweb_store.domain.timestamps import utcnow

    now = utcnow()
    caption = f"{len(pending)} open request(s), oldest first"
    if limit is not None and len(pending) == limit:
        caption += f"; showing the first {limit} (use --limit for more)"
    table = Table(title=title, caption=caption, box=box.SIMPLE_HEAD)
    table.add_column("Request", no_wrap=True)
    table.add_column("Status")
    table.add_column("Age", justify="right")
    table.add_column("Hops", justify="right")
    table.add_column("Source → target")
    table.add_column("Target run")
    table.add_column("Source running")
    table.add_column("Last error")
    styles = {ReplyStatus.READY: "yellow", ReplyStatus.FAILED: "red"}
    for reply in pending:
        run = "none"
        target_run = reply["targetRun"]
        if target_run is not None:
            run = f"{target_run['status']}, attempts {target_run['attempts']}"
            if target_run["workerId"] is not None:
                expires = target_run["leaseExpiresAt"]
                worker = lease_text(
                    target_run["workerId"], parse_iso(expires) if expires else None, now
                )
                run += f", {worker}"
        source = conversation_label(reply["sourceTitle"], reply["sourceConversationId"])
        target = conversation_label(reply["targetTitle"], reply["targetConversationId"])
        table.add_row(
            reply["requestId"],
            reply["status"],
            format_duration(reply["ageSeconds"]),
            str(reply["hopCount"]),
            f"{source} → {target}",
            run,
            "yes" if reply["sourceRunning"] else "no",
            reply["lastError"] or "",
            style=styles.get(reply["status"]),
        )
    return table


def _print_story(story: dict[str, Any]) -> None:
    from rich.panel import Panel
    from rich.table import Table

    console = stdout_console()
    reply = story["reply"]
    fields = Table.grid(padding=(0, 2))
    fields.add_column(style="bold")
    fields.add_column()
    for key, value in reply.items():
        if key not in ("originalRequest", "replyText"):
            fields.add_row(key, "-" if value is None else str(value))
    console.print(Panel(fields, title=f"Reply request {reply['requestId']}"))
    for label, text in (
        ("Original request", reply["originalRequest"] or "(unknown: a legacy request)"),
        ("Reply text", reply["replyText"] or "(none yet)"),
    ):
        console.print(Panel(text, title=label))
    if story["runs"]:
        print_table(runs_json_table(story["runs"], "Runs for this request"))
    else:
        console.print("No run has worked on this request.")

    def show(message: dict[str, Any] | None, label: str, missing: str) -> None:
        if message is None:
            console.print(f"{label}: {missing}")
            return
        title = f"{label}: {message['id']} in {message['sessionId']} (seq {message['seq']})"
        console.print(Panel(message["content"], title=title))

    show(story["requestMessage"], "Request message (target)", "not stored")
    if not story["sourceMessages"]:
        show(None, "Reply message (source)", "not delivered")
    for message in story["sourceMessages"]:
        failed = (message["metadata"] or {}).get("replyFailed")
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
    server: ServerUrl = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Open requests (waiting, ready, failed), oldest first, from the pending_replies view,
    with the titles of both conversations.

    Example: ccweb-store replies list --status waiting --older-than 1h
    """
    from ccweb_store.domain.host_calls import OperatorPendingReplies
    from ccweb_store.domain.ids import MAX_PAGE
    from ccweb_store.protocol.shapes import pending_replies_out
    from ccweb_store.services.operator import pending_replies

    query = model_call(
        OperatorPendingReplies,
        limit=min(limit, MAX_PAGE),
        status=status or None,
        session_id=conversation,
        older_than_seconds=duration_option(older_than, "--older-than"),
    )
    result = operator_call(
        "operator.pendingReplies",
        pending_replies,
        query,
        shown=pending_replies_out,
        server=server,
        database_url=database_url,
    )
    if as_json:
        print_json(result)
        return
    activity = result.get("conversation")
    if activity is not None:
        typer.echo(_activity_line(activity))
    if not result["replies"]:
        typer.echo("No open reply requests match.")
    else:
        print_table(pending_table(result["replies"], limit, "Pending replies"))


def _activity_line(activity: dict[str, Any]) -> str:
    """One line saying what a conversation is doing, above the table of its requests."""
    from ccweb_store.domain.timestamps import utcnow

    def counts(open_requests: dict[str, int]) -> str:
        return ", ".join(f"{n} {status}" for status, n in open_requests.items() if n) or "none"

    last = "never"
    if activity["lastMessageAt"] is not None:
        ago = (utcnow() - parse_iso(activity["lastMessageAt"])).total_seconds()
        last = format_duration(ago) + " ago"
    run = "none"
    active = activity["activeRun"]
    if active is not None:
        run = f"{active['status']} {active['kind']} {active['id']}"
    return (
        f"{activity['title'] or activity['conversationId']} ({activity['conversationId']}): "
        f"{activity['messageCount']} messages, last {last}; active run: {run}; "
        f"open requests it made: {counts(activity['openAsSource'])}; "
        f"it must answer: {counts(activity['openAsTarget'])}"
    )


@replies_app.command("show")
def replies_show(
    request_id: Annotated[str, typer.Argument(help="The request id")],
    as_json: AsJson = False,
    server: ServerUrl = None,
    database_url: DatabaseUrl = None,
) -> None:
    """One request: its state, every run that worked on it, and the messages on both sides.

    Example: ccweb-store replies show req_0123 --server http://127.0.0.1:8787
    """
    from ccweb_store.domain.host_calls import OperatorReplyStory
    from ccweb_store.protocol.shapes import reply_story_out
    from ccweb_store.services.operator import reply_story

    story = operator_call(
        "operator.replyStory",
        reply_story,
        model_call(OperatorReplyStory, request_id=request_id),
        shown=reply_story_out,
        server=server,
        database_url=database_url,
    )
    if as_json:
        print_json(story)
    else:
        _print_story(story)


def _reply_outcome(reply: dict[str, Any]) -> str:
    """One line saying where a request stands after a change, and what happens next."""
    source = reply["sourceConversationId"]
    target = reply["targetConversationId"]
    head = f"reply request {reply['requestId']}: {reply['status']}"
    if reply["status"] == ReplyStatus.RETURNED:
        return f"{head}, delivered to {source} as message {reply['replyMessageId']}"
    if reply["status"] == ReplyStatus.READY:
        return f"{head}, held until the running run of {source} ends, then delivered"
    if reply["status"] == ReplyStatus.WAITING:
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
    server: ServerUrl = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Try a request again (the host API's reply.retry).

    ready: deliver it now. failed with reply text: ready again, then delivered. failed without
    reply text, or waiting with no run left: queue a new run on the target. returned, or a
    target run for it still queued or running (target_busy): exit 1, nothing changed.

    Example: ccweb-store replies retry req_0123
    """
    from ccweb_store.domain.host_calls import RetryReply
    from ccweb_store.protocol.shapes import reply_out
    from ccweb_store.services.replies import retry_reply

    reply = operator_call(
        "reply.retry",
        retry_reply,
        model_call(RetryReply, request_id=request_id),
        shown=reply_out,
        server=server,
        database_url=database_url,
    )
    _print_reply_change(reply, as_json)


@replies_app.command("fail")
def replies_fail(
    request_id: Annotated[str, typer.Argument(help="The request id")],
    reason: Annotated[
        str, typer.Option("--reason", help="Why, as the source will read it (required)")
    ],
    as_json: AsJson = False,
    server: ServerUrl = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Give up on a waiting or ready request; its source gets a failure notice (reply.fail).

    An already failed request is left as it is; a returned one exits 1.

    Example: ccweb-store replies fail req_0123 --reason "the target was deleted"
    """
    from ccweb_store.domain.host_calls import FailReply
    from ccweb_store.protocol.shapes import reply_out
    from ccweb_store.services.replies import fail_reply

    reply = operator_call(
        "reply.fail",
        fail_reply,
        model_call(FailReply, request_id=request_id, reason=reason),
        shown=reply_out,
        server=server,
        database_url=database_url,
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
    server: ServerUrl = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Fail every waiting request older than DURATION with "expired" (the host API's reply.expire).

    Each source gets a failure notice. ready, failed and returned requests are not touched.

    Example: ccweb-store replies expire --older-than 7d --dry-run
    """
    from ccweb_store.domain.host_calls import ExpireReplies
    from ccweb_store.protocol.shapes import expired_out, reply_out
    from ccweb_store.services.replies import expirable_replies, expire_replies

    params = model_call(
        ExpireReplies, older_than_seconds=float(duration_option(older_than, "--older-than") or 0)
    )
    if dry_run and server is not None:
        fail(
            "--dry-run reads the database; with --server, list them instead: "
            f"ccweb-store replies list --status waiting --older-than {older_than} --server URL"
        )
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
    result = operator_call(
        "reply.expire",
        expire_replies,
        params,
        shown=expired_out,
        server=server,
        database_url=database_url,
    )
    if as_json:
        print_json(result)
    else:
        typer.echo(f"expired {result['expired']} waiting reply request(s) older than {older_than}")
