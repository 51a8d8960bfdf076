"""``ccweb-store conversations``: create, list, show and archive conversations, on the database
or on a running server (``--server``), through the host API's ``session.create``,
``session.archive`` and ``operator.conversations`` / ``operator.conversation``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from ccweb_store.cli.common import (
    NOT_FOUND_CODES,
    AsJson,
    DatabaseUrl,
    Limit,
    model_call,
    print_json,
)
from ccweb_store.cli.remote import ServerUrl, operator_call
from ccweb_store.cli.reply_views import pending_table
from ccweb_store.cli.tables import (
    fields_table,
    new_table,
    parse_iso,
    print_panel,
    print_table,
    runs_json_table,
)
from ccweb_store.domain.durations import format_duration
from ccweb_store.domain.kinds import RunStatus, conversation_state

if TYPE_CHECKING:
    from rich.table import Table

conversations_app = typer.Typer(
    rich_markup_mode="markdown",
    help="Create, list, show and archive conversations; the agent session each resumes.",
    no_args_is_help=True,
)
#: A conversation the command names that does not exist exits 3.
CONVERSATION_NOT_FOUND = NOT_FOUND_CODES | {"conversation_not_found"}
ConversationId = Annotated[str, typer.Argument(help="The conversation id", show_default=False)]


def _counts(open_requests: dict[str, int]) -> str:
    return ", ".join(f"{n} {status}" for status, n in open_requests.items() if n)


def _state(conversation: dict[str, Any]) -> str:
    run = conversation["activeRun"]
    return conversation_state(
        None if run is None else run["status"], archived=conversation["archived"]
    )


def _ago(timestamp: str | None) -> str:
    from ccweb_store.domain.timestamps import utcnow

    if timestamp is None:
        return "never"
    return format_duration((utcnow() - parse_iso(timestamp)).total_seconds()) + " ago"


def _conversations_table(rows: list[dict[str, Any]], caption: str) -> Table:
    table = new_table("Conversations", caption)
    table.add_column("Conversation", no_wrap=True)
    table.add_column("Status", no_wrap=True)
    table.add_column("Title", overflow="fold")
    table.add_column("Agent")
    table.add_column("Messages", justify="right")
    table.add_column("Last message", justify="right")
    table.add_column("Asked (replies out)")
    table.add_column("Owes (replies in)")
    styles: dict[str, str] = {RunStatus.RUNNING: "green", RunStatus.QUEUED: "yellow"}
    for row in rows:
        run = row["activeRun"]
        table.add_row(
            row["id"],
            _state(row),
            row["title"] or "",
            row["agent"] or "",
            str(row["messageCount"]),
            _ago(row["lastMessageAt"]),
            _counts(row["openAsSource"]),
            _counts(row["openAsTarget"]),
            style="dim" if row["archived"] else styles.get(run["status"] if run else ""),
        )
    return table


@conversations_app.command("create")
def conversations_create(
    title: Annotated[str | None, typer.Option(help="Its title", show_default=False)] = None,
    conversation_id: Annotated[
        str | None,
        typer.Option("--id", help="Its id (default: a new conv_… id)", show_default=False),
    ] = None,
    agent: Annotated[
        str | None, typer.Option(help="The agent it runs: claude, codex, …", show_default=False)
    ] = None,
    cwd: Annotated[
        str | None, typer.Option(help="The agent's working directory", show_default=False)
    ] = None,
    as_json: AsJson = False,
    server: ServerUrl = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Create a conversation (the host API's session.create) and print its id.

    Example: ccweb-store conversations create --title Planner --agent claude
    """
    from ccweb_store.contract.sessions import CreateSession

    created = operator_call(
        "session.create",
        model_call(CreateSession, id=conversation_id, title=title, agent=agent, cwd=cwd),
        server=server,
        database_url=database_url,
    )
    if as_json:
        print_json(created)
        return
    typer.echo(created["id"])
    typer.echo(
        f"created conversation {created['id']}"
        + (f" ({created['title']})" if created["title"] else "")
        + f"; connect its agent with: ccweb-store conversation-url {created['id']} "
        "--client claude|codex|stdio",
        err=True,
    )


@conversations_app.command("list")
def conversations_list(
    query: Annotated[
        str | None,
        typer.Option("--query", help="Only those whose id or title holds this text"),
    ] = None,
    include_archived: Annotated[
        bool, typer.Option("--all", help="Archived conversations too")
    ] = False,
    limit: Limit = 100,
    as_json: AsJson = False,
    server: ServerUrl = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Conversations, newest activity first: title, whether a run is queued or running, and
    the open reply requests each made (out) and must answer (in).

    Example: ccweb-store conversations list --query planner
    """
    from ccweb_store.contract.operator import OperatorConversations
    from ccweb_store.domain.ids import MAX_PAGE

    search = model_call(
        OperatorConversations,
        limit=min(limit, MAX_PAGE),
        include_archived=include_archived,
        query=query,
    )
    result = operator_call(
        "operator.conversations",
        search,
        server=server,
        database_url=database_url,
    )
    if as_json:
        print_json(result)
        return
    rows = result["conversations"]
    if not rows:
        typer.echo(
            "No conversations match." + ("" if include_archived else " (--all: archived too)")
        )
        return
    caption = f"{len(rows)} conversation(s), newest activity first"
    if result["hasMore"]:
        caption += f"; showing the first {limit} (use --limit for more)"
    print_table(_conversations_table(rows, caption))


@conversations_app.command("show")
def conversations_show(
    conversation_id: ConversationId,
    as_json: AsJson = False,
    server: ServerUrl = None,
    database_url: DatabaseUrl = None,
) -> None:
    """One conversation: its state, its open reply requests on both sides and its newest runs
    (exit 3: no such conversation).

    Example: ccweb-store conversations show conv_0123 --json
    """
    from ccweb_store.contract.operator import OperatorConversation

    result = operator_call(
        "operator.conversation",
        model_call(OperatorConversation, id=conversation_id),
        server=server,
        database_url=database_url,
        not_found=CONVERSATION_NOT_FOUND,
    )
    if as_json:
        print_json(result)
        return
    conversation = result["conversation"]
    fields = fields_table()
    run = conversation["activeRun"]
    for key, value in (
        ("title", conversation["title"]),
        ("agent", conversation["agent"]),
        ("agent session", conversation["agentSessionId"]),
        ("cwd", conversation["cwd"]),
        ("state", _state(conversation)),
        ("active run", f"{run['id']} ({run['kind']}, {run['status']})" if run else None),
        ("messages", f"{conversation['messageCount']}, last {_ago(conversation['lastMessageAt'])}"),
        ("asked (replies out)", _counts(conversation["openAsSource"]) or "none"),
        ("owes (replies in)", _counts(conversation["openAsTarget"]) or "none"),
        ("created", conversation["createdAt"]),
        ("archived", conversation["archivedAt"]),
    ):
        fields.add_row(key, "-" if value is None else str(value))
    print_panel(fields, f"Conversation {conversation['id']}")
    if result["openRequests"]:
        print_table(pending_table(result["openRequests"], None, "Open reply requests"))
    else:
        typer.echo("No open reply requests.")
    if result["runs"]:
        print_table(runs_json_table(result["runs"], "Newest runs"))
    else:
        typer.echo("No runs.")


@conversations_app.command("archive")
def conversations_archive(
    conversation_id: ConversationId,
    restore: Annotated[
        bool, typer.Option("--restore", help="Bring an archived conversation back")
    ] = False,
    as_json: AsJson = False,
    server: ServerUrl = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Archive a conversation: hidden from ccweb_list_conversations and from `conversations
    list` (but --all), nothing deleted; it can still be written to and run (session.archive).

    Example: ccweb-store conversations archive conv_0123   (undo: --restore)
    """
    from ccweb_store.contract.sessions import ArchiveSession

    session = operator_call(
        "session.archive",
        model_call(ArchiveSession, id=conversation_id, archived=not restore),
        server=server,
        database_url=database_url,
        not_found=CONVERSATION_NOT_FOUND,
    )
    if as_json:
        print_json(session)
    elif session["archived"]:
        typer.echo(f"conversation {session['id']}: archived (restore: --restore)")
    else:
        typer.echo(f"conversation {session['id']}: not archived")


@conversations_app.command("agent-session")
def conversations_agent_session(
    conversation_id: ConversationId,
    agent_session_id: Annotated[
        str | None,
        typer.Argument(
            help="The agent's session id (a Claude Code session, a Codex thread) that the "
            "conversation's next run resumes",
            show_default=False,
        ),
    ] = None,
    clear: Annotated[
        bool, typer.Option("--clear", help="Forget it: the next run starts a new agent session")
    ] = False,
    as_json: AsJson = False,
    server: ServerUrl = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Show, set or clear the agent session a conversation's next run resumes (session.update);
    the worker records it at the end of each run.

    Example: ccweb-store conversations agent-session conv_0123 --clear
    """
    from ccweb_store.cli.common import fail
    from ccweb_store.contract.sessions import GetSession, UpdateSession

    if clear and agent_session_id is not None:
        fail("give an agent session id to set, or --clear, not both")
    if clear or agent_session_id is not None:
        session = operator_call(
            "session.update",
            model_call(UpdateSession, id=conversation_id, agent_session_id=agent_session_id),
            server=server,
            database_url=database_url,
            not_found=CONVERSATION_NOT_FOUND,
        )
    else:
        session = operator_call(
            "session.get",
            model_call(GetSession, id=conversation_id),
            server=server,
            database_url=database_url,
            not_found=CONVERSATION_NOT_FOUND,
        )
    if as_json:
        print_json(session)
    elif session["agentSessionId"] is None:
        typer.echo(f"conversation {session['id']}: no agent session; its next run starts one")
    else:
        typer.echo(
            f"conversation {session['id']}: agent session {session['agentSessionId']}; "
            "its next run resumes it"
        )
