"""``ccweb-store replies``: list, show, retry, fail and expire cross-conversation reply requests.

Reads go through ``services.debugging``; every change goes through the same service functions
as the host API, so a transition behaves the same wherever it starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

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
from ccweb_store.cli.reply_views import (
    activity_line,
    expirable_table,
    pending_table,
    print_reply_change,
    print_story,
)
from ccweb_store.cli.tables import (
    print_table,
)

if TYPE_CHECKING:
    pass

replies_app = typer.Typer(
    rich_markup_mode="markdown",
    help="Debug and repair cross-conversation reply requests.",
    no_args_is_help=True,
)


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
    from ccweb_store.contract.operator import OperatorPendingReplies
    from ccweb_store.domain.ids import MAX_PAGE

    query = model_call(
        OperatorPendingReplies,
        limit=min(limit, MAX_PAGE),
        status=status or None,
        session_id=conversation,
        older_than_seconds=duration_option(older_than, "--older-than"),
    )
    result = operator_call(
        "operator.pendingReplies",
        query,
        server=server,
        database_url=database_url,
    )
    if as_json:
        print_json(result)
        return
    activity = result.get("conversation")
    if activity is not None:
        typer.echo(activity_line(activity))
    if not result["replies"]:
        typer.echo("No open reply requests match.")
    else:
        print_table(pending_table(result["replies"], limit, "Pending replies"))


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
    from ccweb_store.contract.operator import OperatorReplyStory

    story = operator_call(
        "operator.replyStory",
        model_call(OperatorReplyStory, request_id=request_id),
        server=server,
        database_url=database_url,
    )
    if as_json:
        print_json(story)
    else:
        print_story(story)


@replies_app.command("retry")
def replies_retry(
    request_id: Annotated[str, typer.Argument(help="The request id")],
    message: Annotated[
        str | None,
        typer.Option(
            "--message",
            metavar="TEXT",
            help="The question to ask the target, for a request that stores none "
            "(replies show and doctor say which)",
            show_default=False,
        ),
    ] = None,
    as_json: AsJson = False,
    server: ServerUrl = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Try a request again (the host API's reply.retry).

    ready: deliver it now. failed with reply text: ready again, then delivered. failed without
    reply text, or waiting with no run left: queue a new run on the target, asking the
    request's question (or, for one that stores none, the --message TEXT). returned, or a
    target run for it still queued or running (target_busy): exit 1, nothing changed.
    --message for a request that has its question, or whose retry asks nothing: exit 2.

    Example: ccweb-store replies retry req_0123   or   replies retry req_0123 --message "…"
    """
    from ccweb_store.contract.replies import RetryReply

    reply = operator_call(
        "reply.retry",
        model_call(RetryReply, request_id=request_id, message=message),
        server=server,
        database_url=database_url,
    )
    print_reply_change(reply, as_json)


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
    from ccweb_store.contract.replies import FailReply

    reply = operator_call(
        "reply.fail",
        model_call(FailReply, request_id=request_id, reason=reason),
        server=server,
        database_url=database_url,
    )
    print_reply_change(reply, as_json)


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
    from ccweb_store.contract.objects import Reply
    from ccweb_store.contract.replies import ExpireReplies
    from ccweb_store.services.replies import expirable_replies

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
                    "replies": [Reply.model_validate(row).model_dump() for row in requests],
                }
            )
        elif not requests:
            typer.echo(f"No waiting request is older than {older_than}; nothing would expire.")
        else:
            print_table(expirable_table(requests, older_than))
        return
    result = operator_call(
        "reply.expire",
        params,
        server=server,
        database_url=database_url,
    )
    if as_json:
        print_json(result)
    else:
        typer.echo(f"expired {result['expired']} waiting reply request(s) older than {older_than}")
