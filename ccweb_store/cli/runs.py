"""``ccweb-store runs``: inspect the run queue, put a run whose worker died back in it, and
cancel a run nobody should wait for."""

from __future__ import annotations

from typing import Annotated

import typer

from ccweb_store.cli.common import (
    AsJson,
    Conversation,
    DatabaseUrl,
    Limit,
    OlderThan,
    duration_option,
    model_call,
    print_json,
    with_store,
)
from ccweb_store.cli.tables import print_table, runs_json_table

runs_app = typer.Typer(
    help="Inspect the run queue and recover runs.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)


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
    """Runs, newest first.

    Example: ccweb-store runs list --status running --older-than 1h
    """
    from ccweb_store.contract.runs import ListRuns
    from ccweb_store.domain.ids import MAX_PAGE
    from ccweb_store.services.runs import list_runs

    seconds = duration_option(older_than, "--older-than")
    limit = min(limit, MAX_PAGE)
    query = model_call(
        ListRuns,
        status=status,
        session_id=conversation,
        older_than_seconds=seconds,
        limit=limit,
    )
    runs = with_store(database_url, lambda store: list_runs(store, query)).model_dump()["runs"]
    if as_json:
        print_json({"runs": runs, "count": len(runs)})
    elif not runs:
        typer.echo("No runs match.")
    else:
        caption = f"{len(runs)} run(s), newest first"
        if len(runs) == limit:
            caption += f"; showing the first {limit} (use --limit for more)"
        print_table(runs_json_table(runs, "Runs", caption))


@runs_app.command("requeue")
def runs_requeue(
    run_id: Annotated[str, typer.Argument(help="The run id")],
    as_json: AsJson = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Put a running run whose worker died back in the queue (attempts + 1).

    Any worker can then claim it. A run that is not running exits 1.

    Example: ccweb-store runs requeue run_0123
    """
    from ccweb_store.contract.runs import RequeueRun
    from ccweb_store.services.runs import requeue_run

    call = model_call(RequeueRun, run_id=run_id)
    run = with_store(database_url, lambda store: requeue_run(store, call)).model_dump()
    if as_json:
        print_json(run)
    else:
        typer.echo(f"run {run['id']}: {run['status']} again (attempts {run['attempts']})")


@runs_app.command("cancel")
def runs_cancel(
    run_id: Annotated[str, typer.Argument(help="The run id")],
    reason: Annotated[
        str | None,
        typer.Option(help="Why, recorded as the run's error and told to a waiting source"),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Also end a running run (its worker stops)")
    ] = False,
    as_json: AsJson = False,
    database_url: DatabaseUrl = None,
) -> None:
    """End a queued run (or a running one, with --force) as cancelled.

    The reply request it answered fails as if the run had failed, so its source is told and
    nobody waits for it; `replies retry` can then ask again. A worker that still holds a
    forced run loses its lease at its next heartbeat and stops. A run that already ended
    exits 1.

    Example: ccweb-store runs cancel run_0123 --reason "asked the wrong conversation"
    """
    from ccweb_store.contract.runs import CancelRun
    from ccweb_store.services.runs import cancel_run

    call = model_call(CancelRun, run_id=run_id, reason=reason, force=force)
    result = with_store(database_url, lambda store: cancel_run(store, call)).model_dump()
    if as_json:
        print_json(result)
        return
    run = result["run"]
    typer.echo(f"run {run['id']}: cancelled ({run['error']})")
    for reply in result["replies"]:
        typer.echo(f"reply request {reply['requestId']}: {reply['status']}")
