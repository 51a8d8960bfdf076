"""Operator commands: ``replies`` (list, show, retry, fail, expire) and ``runs`` (list, requeue).

Reads go through ``debugging.py``; every change goes through the same service functions as the
host API, so a transition behaves the same wherever it starts.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from ccweb_store.cli.common import DatabaseUrl, fail, load_settings

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from ccweb_store.services.debugging import ConversationActivity, PendingReply, ReplyStory
    from ccweb_store.store.models import ReplyRequest, Run
    from ccweb_store.store.uow import Store

replies_app = typer.Typer(
    help="Debug and repair cross-conversation reply requests.", no_args_is_help=True
)
runs_app = typer.Typer(help="Inspect the run queue and recover runs.", no_args_is_help=True)

T = TypeVar("T")

AsJson = Annotated[bool, typer.Option("--json", help="Print JSON (for scripts)")]
OlderThan = Annotated[
    str | None,
    typer.Option(
        "--older-than",
        metavar="DURATION",
        help="Only those created at least this long ago: 90s, 10m, 2h, 1d, 1h30m",
    ),
]
Conversation = Annotated[
    str | None,
    typer.Option("--conversation", metavar="ID", help="Only those of this conversation"),
]
Limit = Annotated[int, typer.Option(min=1, help="Print at most this many")]


def _seconds(duration: str | None) -> int | None:
    """Parse ``--older-than``; a malformed duration exits 2."""
    if duration is None:
        return None
    from ccweb_store.services.debugging import parse_duration

    try:
        return parse_duration(duration)
    except ValueError as exc:
        fail(f"--older-than: {exc}")


def _with_store(database_url: str | None, work: Callable[[Store], Awaitable[T]]) -> T:
    """Run ``work`` on a store for ``--database-url``, turning failures into exit codes.

    Exit 2: bad arguments; 3: no such request, run or credential; 1: the state forbids it
    (including a conversation it needs that is gone) or the database cannot be used.
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    from ccweb_store.domain import errors
    from ccweb_store.domain.errors import DomainError, InvalidInput
    from ccweb_store.store.uow import Store

    settings = load_settings(database_url=database_url)

    async def run() -> T:
        store = Store.from_settings(settings)
        try:
            return await work(store)
        finally:
            await store.dispose()

    try:
        return asyncio.run(run())
    except DomainError as exc:
        if exc.code in (
            errors.REQUEST_NOT_FOUND,
            errors.RUN_NOT_FOUND,
            errors.CREDENTIAL_NOT_FOUND,
        ):
            fail(exc.message, 3)
        fail(exc.message, 2 if isinstance(exc, InvalidInput) else 1)
    except (SQLAlchemyError, OSError) as exc:
        shown = make_url(settings.database_url).render_as_string(hide_password=True)
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        fail(
            f"cannot use the database {shown}: {reason}. Check that it is reachable and "
            "migrated to head (ccweb-store migrate).",
            1,
        )


def _print_json(payload: Any) -> None:
    typer.echo(json.dumps(payload, indent=2, ensure_ascii=False))


def _console() -> Console:
    """A rich console on stdout; piped output is wide enough that ids are never cut."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 200)
    return console


def _fits(table: Table, width: int) -> bool:
    """Whether the no-wrap columns (ids, kinds, statuses) fit whole, leaving room for the rest."""
    from rich.cells import cell_len

    needed = 0
    for column in table.columns:
        if column.no_wrap:
            needed += max(cell_len(str(cell)) for cell in [column.header, *column.cells])
        else:
            needed += 10
        needed += 2  # padding
    return needed <= width


def _print_table(table: Table) -> None:
    """Print ``table``; on a terminal too narrow to show its ids whole, one block per row.

    A block is the row's first cell and its status on one line, then ``Column: value`` pairs.
    """
    from rich.padding import Padding
    from rich.text import Text

    console = _console()
    if _fits(table, console.width):
        console.print(table)
        return
    headers = [str(column.header) for column in table.columns]
    columns = [[str(cell) for cell in column.cells] for column in table.columns]
    if table.title:
        console.print(Text(str(table.title), style="bold"))
    for index, row in enumerate(table.rows):
        cells = dict(zip(headers, (column[index] for column in columns), strict=True))
        first = cells.pop(headers[0])
        status = cells.pop("Status", "")
        console.print(Text(f"{first}  {status}".rstrip(), style=row.style or ""))
        details = " · ".join(
            f"{name}: {value}" for name, value in cells.items() if value not in ("", "-")
        )
        console.print(Padding(details, (0, 0, 0, 2)))
    if table.caption:
        console.print(Text(str(table.caption), style="dim"))


def _lease(worker_id: str | None, lease_expires_at: datetime | None, now: datetime) -> str:
    from ccweb_store.services.debugging import format_duration

    if worker_id is None:
        return "-"
    if lease_expires_at is None:
        return worker_id
    left = (lease_expires_at - now).total_seconds()
    if left < 0:
        return f"{worker_id} (lease expired {format_duration(-left)} ago)"
    return f"{worker_id} (lease {format_duration(left)} left)"


def _pending_table(pending: list[PendingReply], limit: int) -> Table:
    from rich import box
    from rich.table import Table

    from ccweb_store.services.debugging import format_duration
    from ccweb_store.store.models import utcnow

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
                worker = _lease(item.target_run_worker_id, item.target_run_lease_expires_at, now)
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


def _runs_table(runs: list[Run], title: str, caption: str | None = None) -> Table:
    from rich import box
    from rich.table import Table

    from ccweb_store.services.debugging import format_duration
    from ccweb_store.store.models import utcnow

    now = utcnow()
    table = Table(title=title, caption=caption, box=box.SIMPLE_HEAD)
    # Ids, kinds and statuses stay whole on a narrow terminal; the free text wraps instead.
    table.add_column("Run", no_wrap=True)
    table.add_column("Conversation", no_wrap=True)
    table.add_column("Kind", no_wrap=True)
    table.add_column("Status", no_wrap=True)
    table.add_column("Age", justify="right", no_wrap=True)
    table.add_column("Worker", overflow="fold")
    table.add_column("Tries", justify="right", no_wrap=True)
    table.add_column("Request", no_wrap=True)
    table.add_column("Error", overflow="fold")
    styles = {"running": "green", "failed": "red", "cancelled": "dim"}
    for run in runs:
        table.add_row(
            run.id,
            run.session_id,
            run.kind,
            run.status,
            format_duration((now - run.created_at).total_seconds()),
            _lease(run.worker_id, run.lease_expires_at, now),
            str(run.attempts),
            run.reply_request_id or "",
            run.error or "",
            style=styles.get(run.status),
        )
    return table


def _print_story(story: ReplyStory) -> None:
    from rich.panel import Panel
    from rich.table import Table

    from ccweb_store.services.schemas import reply_out
    from ccweb_store.store.models import Message

    console = _console()
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
        _print_table(_runs_table(story.runs, "Runs for this request"))
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

    seconds = _seconds(older_than)

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

    pending, activity = _with_store(database_url, read)
    if as_json:
        payload: dict[str, Any] = {
            "replies": [item.to_json() for item in pending],
            "count": len(pending),
        }
        if conversation:
            payload["conversation"] = activity.to_json() if activity else None
        _print_json(payload)
        return
    if activity is not None:
        typer.echo(_activity_line(activity))
    if not pending:
        typer.echo("No open reply requests match.")
    else:
        _print_table(_pending_table(pending, limit))


def _activity_line(activity: ConversationActivity) -> str:
    """One line saying what a conversation is doing, above the table of its requests."""
    from ccweb_store.services.debugging import format_duration
    from ccweb_store.store.models import utcnow

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

    story = _with_store(database_url, lambda store: reply_story(store, request_id))
    if as_json:
        _print_json(story.to_json())
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
        _print_json(reply)
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

    reply = _with_store(database_url, lambda store: retry_reply(store, {"requestId": request_id}))
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

    reply = _with_store(
        database_url,
        lambda store: fail_reply(store, {"requestId": request_id, "reason": reason}),
    )
    _print_reply_change(reply, as_json)


def _expirable_table(requests: list[ReplyRequest], older_than: str) -> Table:
    from rich import box
    from rich.table import Table

    from ccweb_store.services.debugging import format_duration
    from ccweb_store.store.models import utcnow

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

    params = {"olderThanSeconds": _seconds(older_than)}
    if dry_run:
        requests = _with_store(database_url, lambda store: expirable_replies(store, params))
        if as_json:
            _print_json(
                {
                    "dryRun": True,
                    "wouldExpire": len(requests),
                    "replies": [reply_out(request) for request in requests],
                }
            )
        elif not requests:
            typer.echo(f"No waiting request is older than {older_than}; nothing would expire.")
        else:
            _print_table(_expirable_table(requests, older_than))
        return
    result = _with_store(database_url, lambda store: expire_replies(store, params))
    if as_json:
        _print_json(result)
    else:
        typer.echo(f"expired {result['expired']} waiting reply request(s) older than {older_than}")


@runs_app.command("list")
def runs_list(
    status: Annotated[
        list[str] | None,
        typer.Option(
            "--status", help="queued, running, completed, failed, cancelled (repeat for several)"
        ),
    ] = None,
    conversation: Conversation = None,
    older_than: OlderThan = None,
    limit: Limit = 100,
    as_json: AsJson = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Runs, newest first."""
    from ccweb_store.services.debugging import list_runs
    from ccweb_store.services.schemas import run_out

    seconds = _seconds(older_than)
    runs = _with_store(
        database_url,
        lambda store: list_runs(
            store,
            statuses=status,
            conversation_id=conversation,
            older_than_seconds=seconds,
            limit=limit,
        ),
    )
    if as_json:
        _print_json({"runs": [run_out(run) for run in runs], "count": len(runs)})
    elif not runs:
        typer.echo("No runs match.")
    else:
        caption = f"{len(runs)} run(s), newest first"
        if len(runs) == limit:
            caption += f"; showing the first {limit} (use --limit for more)"
        _print_table(_runs_table(runs, "Runs", caption))


@runs_app.command("requeue")
def runs_requeue(
    run_id: Annotated[str, typer.Argument(help="The run id")],
    as_json: AsJson = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Put a running run whose worker died back in the queue (attempts + 1).

    Any worker can then claim it. A run that is not running exits 1.
    """
    from ccweb_store.services.runs import requeue_run

    run = _with_store(database_url, lambda store: requeue_run(store, {"runId": run_id}))
    if as_json:
        _print_json(run)
    else:
        typer.echo(f"run {run['id']}: {run['status']} again (attempts {run['attempts']})")
