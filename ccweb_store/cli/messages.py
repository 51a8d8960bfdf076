"""``ccweb-store messages ID``: read a conversation, newest last, on the database or on a
running server (``--server``), through the host API's ``message.recent``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from ccweb_store.cli.common import AsJson, DatabaseUrl, model_call, print_json
from ccweb_store.cli.conversations import CONVERSATION_NOT_FOUND, ConversationId
from ccweb_store.cli.remote import ServerUrl, operator_call
from ccweb_store.cli.tables import new_table, print_table
from ccweb_store.domain.ids import conversation_label

if TYPE_CHECKING:
    from rich.table import Table

#: How many lines of each message the table shows.
SHOWN_LINES = 4
SHOWN_CHARS = 400


def messages(
    conversation_id: ConversationId,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="How many of the newest")] = 20,
    before: Annotated[
        int | None,
        typer.Option(
            "--before",
            metavar="SEQ",
            min=1,
            help="Older messages: those before this seq (the caption names the next one)",
            show_default=False,
        ),
    ] = None,
    role: Annotated[
        str | None,
        typer.Option(help="Only this role: user, assistant, system, tool", show_default=False),
    ] = None,
    as_json: AsJson = False,
    server: ServerUrl = None,
    database_url: DatabaseUrl = None,
) -> None:
    """A conversation's messages, newest last.

    Each with its role, time, the first lines of its text and the reply request it belongs
    to. --json prints the host API's Message shapes (message.recent). Exit 3: no such
    conversation.

    Example: ccweb-store messages conv_0123 --limit 5 --role assistant
    """
    from ccweb_store.contract.messages import RecentMessages

    query = model_call(
        RecentMessages, session_id=conversation_id, limit=limit, before_seq=before, role=role
    )
    result = operator_call(
        "message.recent",
        query,
        server=server,
        database_url=database_url,
        not_found=CONVERSATION_NOT_FOUND,
    )
    if as_json:
        print_json(result)
        return
    rows = result["messages"]
    if not rows:
        typer.echo("No messages" + (f" of role {role}." if role else "."))
        return
    caption = f"{len(rows)} message(s), newest last"
    if result["nextBeforeSeq"] is not None:
        caption += f"; older ones: --before {result['nextBeforeSeq']}"
    # A server older than the field leaves the title out: the id alone then.
    name = conversation_label(result.get("title"), conversation_id)
    print_table(_messages_table(name, rows, caption))


def _messages_table(name: str, rows: list[dict[str, Any]], caption: str) -> Table:
    table = new_table(f"Conversation {name}", caption)
    table.add_column("Seq", justify="right", no_wrap=True)
    table.add_column("Role", no_wrap=True)
    table.add_column("Time", no_wrap=True)
    table.add_column("Text", overflow="fold", ratio=1)
    table.add_column("Reply request", no_wrap=True)
    for row in rows:
        table.add_row(
            str(row["seq"]),
            row["role"],
            row["createdAt"].replace("T", " ")[:19],
            _first_lines(row["content"]),
            _request_of(row["metadata"]),
        )
    return table


def _first_lines(text: str) -> str:
    lines = text.strip().splitlines()
    shown = "\n".join(lines[:SHOWN_LINES])
    if len(shown) > SHOWN_CHARS:
        shown = shown[: SHOWN_CHARS - 1] + "…"
    elif len(lines) > SHOWN_LINES:
        shown += f"\n… ({len(lines) - SHOWN_LINES} more lines)"
    return shown


def _request_of(metadata: dict[str, Any]) -> str:
    """The reply request a message asks (a cross-conversation send) or answers (a delivered
    reply or failure notice), with which side it is."""
    cross = metadata.get("crossConversation")
    if isinstance(cross, dict) and cross.get("replyRequestId"):
        return f"asks {cross['replyRequestId']}"
    answered = metadata.get("replyToRequestId")
    if isinstance(answered, str):
        return f"answers {answered}"
    return ""
