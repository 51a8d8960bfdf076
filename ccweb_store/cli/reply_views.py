"""How ``ccweb-store replies`` shows reply requests in a terminal: the open-request table,
a request's story, the line of a conversation's activity, a changed request, and what
``expire`` would take. The commands (``cli/replies.py``) decide what to read and change."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from ccweb_store.cli.common import print_json
from ccweb_store.cli.tables import (
    fields_table,
    lease_text,
    new_table,
    parse_iso,
    print_panel,
    print_table,
    runs_json_table,
    stdout_console,
)
from ccweb_store.domain.durations import format_duration
from ccweb_store.domain.ids import conversation_label
from ccweb_store.domain.kinds import ReplyStatus
from ccweb_store.domain.prompts import retried_question, retry_asks_again

if TYPE_CHECKING:
    from rich.table import Table

    from ccweb_store.domain.rows import ReplyRequest


def pending_table(pending: list[dict[str, Any]], limit: int | None, title: str) -> Table:
    """The open requests of ``operator.pendingReplies`` (or a conversation's), oldest first."""
    from ccweb_store.domain.timestamps import utcnow

    now = utcnow()
    caption = f"{len(pending)} open request(s), oldest first"
    if limit is not None and len(pending) == limit:
        caption += f"; showing the first {limit} (use --limit for more)"
    table = new_table(title, caption)
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


def print_story(story: dict[str, Any]) -> None:
    console = stdout_console()
    reply = story["reply"]
    fields = fields_table()
    for key, value in reply.items():
        if key not in ("originalRequest", "replyText"):
            fields.add_row(key, "-" if value is None else str(value))
    print_panel(fields, f"Reply request {reply['requestId']}", console)
    for label, text in (
        ("Original request", reply["originalRequest"] or "(not stored: a legacy request)"),
        ("Reply text", reply["replyText"] or "(none yet)"),
    ):
        print_panel(text, label, console)
    note = retry_note(reply, story["requestMessage"])
    if note is not None:
        console.print(note, style="yellow", soft_wrap=True)
    if story["runs"]:
        print_table(runs_json_table(story["runs"], "Runs for this request"))
    else:
        console.print("No run has worked on this request.")

    def show(message: dict[str, Any] | None, label: str, missing: str) -> None:
        if message is None:
            console.print(f"{label}: {missing}")
            return
        title = f"{label}: {message['id']} in {message['sessionId']} (seq {message['seq']})"
        print_panel(message["content"], title, console)

    show(story["requestMessage"], "Request message (target)", "not stored")
    if not story["sourceMessages"]:
        show(None, "Reply message (source)", "not delivered")
    for message in story["sourceMessages"]:
        failed = (message["metadata"] or {}).get("replyFailed")
        show(message, "Failure notice (source)" if failed else "Reply message (source)", "")


def retry_note(reply: dict[str, Any], request_message: dict[str, Any] | None) -> str | None:
    """What a retry of this request would ask its target, when it asks again without the
    request's original text: the message that carried it, or nothing (then how to proceed)."""
    if not retry_asks_again(reply["status"], reply["replyText"]):
        return None
    carried = request_message["content"] if request_message is not None else None
    if retried_question(reply["originalRequest"], carried) is None:
        request_id = reply["requestId"]
        return (
            "A retry cannot carry the question: neither the original request nor the message "
            "that carried it is stored, so the target would be asked nothing. Give it the "
            f'question: ccweb-store replies retry {request_id} --message "…"; or give up: '
            f'ccweb-store replies fail {request_id} --reason "…"'
        )
    if reply["originalRequest"] is None:
        return "A retry asks the target again with the request message below."
    return None


def activity_line(activity: dict[str, Any]) -> str:
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


def reply_outcome(reply: dict[str, Any]) -> str:
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


def print_reply_change(reply: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(reply)
    else:
        typer.echo(reply_outcome(reply))


def expirable_table(requests: list[ReplyRequest], older_than: str) -> Table:
    from ccweb_store.domain.timestamps import utcnow

    now = utcnow()
    table = new_table(
        f"Would expire (waiting, older than {older_than})",
        f"{len(requests)} request(s), oldest first; nothing was changed",
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
