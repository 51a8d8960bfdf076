"""What a console page's template reads: the services' views in the host API's JSON shapes,
and the links to each list's next and first page (``LIST_PARAMS``: one keyset cursor per
list in the query string)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request

from ccweb_store.contract.objects import Message, Reply, Run, Session
from ccweb_store.domain.kinds import conversation_state
from ccweb_store.services import console

#: The query parameter that holds where each list of a page starts (its keyset cursor).
LIST_PARAMS = {
    "conversations": "conversations_after",
    "replies": "replies_after",
    "runs": "runs_after",
}


def cursors(request: Request) -> console.Cursors:
    """Where each list of the requested page starts."""
    query = request.query_params
    given = {name: query.get(param) or None for name, param in LIST_PARAMS.items()}
    return console.Cursors(**given)


def overview_shown(view: console.Overview) -> dict[str, Any]:
    """The overview as its template reads it: the host API's JSON shapes, each conversation
    with its ``state`` and ``repliesIn`` / ``repliesOut``, each run with its conversation's
    ``sessionTitle``; each list as ``{rows, next}`` (``next``: its next page's cursor)."""
    sessions = [
        _session(session)
        | {
            "state": _state(session),
            "repliesIn": view.replies_in[session.row.id],
            "repliesOut": view.replies_out[session.row.id],
        }
        for session in view.sessions.rows
    ]
    runs = [
        Run.model_validate(run).model_dump() | {"sessionTitle": view.titles.get(run.session_id)}
        for run in view.runs.rows
    ]
    return {
        "latestEventId": view.latest_event_id,
        "conversations": {"rows": sessions, "next": view.sessions.next_cursor},
        "replies": _requests(view.replies),
        "runs": {"rows": runs, "next": view.runs.next_cursor},
    }


def conversation_shown(page: console.ConversationPage) -> dict[str, Any]:
    """One conversation as its template reads it, its lists as the overview's."""
    title = page.session.row.title
    runs = [
        Run.model_validate(run).model_dump() | {"sessionTitle": title} for run in page.runs.rows
    ]
    return {
        "latestEventId": page.latest_event_id,
        "session": _session(page.session) | {"state": _state(page.session)},
        "messages": [Message.model_validate(row).model_dump() for row in page.messages],
        "olderBefore": page.older_before,
        "inputs": page.inputs.model_dump(),
        "replies": _requests(page.replies),
        "runs": {"rows": runs, "next": page.runs.next_cursor},
    }


def _session(shown: console.Shown) -> dict[str, Any]:
    return Session.of(shown.row, shown.active_run).model_dump()


def _state(shown: console.Shown) -> str:
    active = shown.active_run
    return conversation_state(None if active is None else active.status)


def _requests(requests: console.OpenRequests) -> dict[str, Any]:
    """A page of open requests, each with the target run still answering it
    (``answeringRun``: its id and status; None: none does, so a retry can ask again)."""
    rows = []
    for reply in requests.page.rows:
        run = requests.answering.get(reply.request_id)
        answering = None if run is None else {"id": run.id, "status": run.status}
        rows.append(Reply.model_validate(reply).model_dump() | {"answeringRun": answering})
    return {"rows": rows, "next": requests.page.next_cursor}


def page_links(request: Request, view: dict[str, Any]) -> dict[str, dict[str, str | None]]:
    """For each list of the page: the link to its next page (None: this is its last) and,
    on a later page, the link back to its first (None: this is its first)."""
    kept = [(k, v) for k, v in request.query_params.multi_items() if k != "notice"]
    links: dict[str, dict[str, str | None]] = {}
    for name, param in LIST_PARAMS.items():
        if name not in view:
            continue
        others = [(k, v) for k, v in kept if k != param]
        cursor = view[name]["next"]
        links[name] = {
            "next": _url(request, [*others, (param, cursor)]) if cursor else None,
            "first": _url(request, others) if request.query_params.get(param) else None,
        }
    return links


def here(request: Request) -> str:
    """This page's path and query without its notice: where its actions come back to."""
    return _url(request, [(k, v) for k, v in request.query_params.multi_items() if k != "notice"])


def _url(request: Request, query: list[tuple[str, str]]) -> str:
    return request.url.path + (f"?{urlencode(query)}" if query else "")
