"""Text is data: every terminal view prints stored text (agent output, titles, errors, labels)
as it was written, never as rich markup, whatever brackets it holds; and every view is built
from ``cli/tables.py``, which makes that so."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ccweb_store
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.store.uow import Store
from tests import host_calls
from tests.cli_support import run_cli
from tests.lifecycle_support import ask, claim, complete
from tests.servers import server_env

#: Text an agent writes that rich would read as markup: a closing tag it cannot match (a
#: MarkupError), a tag it would swallow, a style it would apply.
REPORT = "Wrote the report to [/tmp/report.txt]"
CHECKLIST = "- [x] lint ok"
STYLED = "[red]see log[/red]"
AGENT_TEXT = "\n".join((REPORT, CHECKLIST, STYLED))
CLI = Path(ccweb_store.__file__).parent / "cli"


async def seed(store: Store) -> dict[str, str]:
    """Two conversations titled with markup, a returned request and a failed one whose
    texts are markup, a request no run will answer, and a credential with such a label."""
    async with store.uow() as uow:
        await uow.sessions.create("alpha", title=STYLED, cwd=CHECKLIST)
        await uow.sessions.create("beta", title=REPORT)
        await uow.commit()
    await host_calls.append_message(
        store, {"sessionId": "alpha", "role": "user", "content": AGENT_TEXT}
    )
    returned = await ask(store, "alpha", "beta", AGENT_TEXT)
    run = await claim(store, kinds=["cross_conversation"])
    assert run is not None
    await complete(store, run["id"], output=AGENT_TEXT, workerId=run["workerId"])
    failed = await ask(store, "alpha", "beta", AGENT_TEXT)
    run = await claim(store, kinds=["cross_conversation"])
    assert run is not None
    await complete(store, run["id"], status="failed", error=AGENT_TEXT, workerId=run["workerId"])
    async with store.uow() as uow:
        await uow.replies.insert(
            {
                "request_id": "req-orphan",
                "source_conversation_id": "alpha",
                "source_title": STYLED,
                "target_conversation_id": "beta",
                "target_title": REPORT,
                "status": "waiting",
                "created_at": utcnow(),
            }
        )
        await uow.commit()
    await host_calls.mint_credential(store, {"sessionId": "alpha", "label": STYLED})
    return {"returned": returned["requestId"], "failed": failed["requestId"]}


def lines_of(database_url: str, *args: str, columns: str | None = None) -> list[str]:
    env = server_env(CCWEB_DATABASE_URL=database_url)
    if columns is not None:
        env["COLUMNS"] = columns
    result = run_cli(*args, env=env)
    assert result.returncode in (0, 1), result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout.splitlines()


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        (["replies", "show", "{returned}"], (REPORT, CHECKLIST, STYLED)),
        (["replies", "show", "{failed}"], (REPORT, CHECKLIST, STYLED)),
        (["replies", "list"], (REPORT, CHECKLIST, STYLED)),
        (["messages", "alpha"], (REPORT, CHECKLIST, STYLED)),
        (["conversations", "list"], (REPORT, STYLED)),
        (["conversations", "show", "alpha"], (REPORT, CHECKLIST, STYLED)),
        (["runs", "list"], (REPORT, CHECKLIST, STYLED)),
        (["credentials", "list"], (STYLED,)),
        (["doctor"], (REPORT, STYLED)),
    ],
)
async def test_every_view_prints_agent_text_titles_and_errors_as_they_were_written(
    store: Store, database_url: str, command: list[str], shown: tuple[str, ...]
) -> None:
    requests = await seed(store)

    printed = "\n".join(lines_of(database_url, *[part.format(**requests) for part in command]))

    for text in shown:
        assert text in printed, (text, printed)


async def test_a_request_shown_piped_fits_80_columns_or_the_width_columns_asks_for(
    store: Store, database_url: str
) -> None:
    requests = await seed(store)

    piped = lines_of(database_url, "replies", "show", requests["returned"])
    narrow = lines_of(database_url, "replies", "show", requests["returned"], columns="60")

    panels = [line for line in piped if line.startswith(("╭", "│", "╰"))]
    assert panels and max(len(line) for line in panels) == 80
    narrow_panels = [line for line in narrow if line.startswith(("╭", "│", "╰"))]
    assert narrow_panels and max(len(line) for line in narrow_panels) == 60
    assert all(len(line) <= 60 for line in narrow)


def test_no_command_builds_a_rich_view_but_through_the_tables_module() -> None:
    """rich reads a string it renders as markup unless told otherwise (a panel's title
    always): only ``cli/tables.py``, whose helpers print text as text, may import it."""
    importing_rich = []
    for path in sorted(CLI.rglob("*.py")):
        if path.name == "tables.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        checked_only = {
            id(node)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
            for node in ast.walk(block)
        }
        for node in ast.walk(tree):
            if id(node) in checked_only:
                continue
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            if any(name == "rich" or name.startswith("rich.") for name in names):
                importing_rich.append(f"{path.name}:{node.lineno}")
    assert importing_rich == []
