"""The console's routes: its pages (Jinja2, autoescaped), its script and style sheet, the
login, and its actions (``actions.py``), each read and done through ``services``.

Every answer carries ``SECURITY_HEADERS`` (``http/headers.py``: a strict
Content-Security-Policy, scripts and styles from this server only, nothing inline, no
frames), as every answer of the app does. Wrong tokens typed into the login form count
towards the login throttle (``throttle.LoginThrottle``). A refusal is the page saying what
went wrong to a browser (``Accept: text/html``) and ``{"error": {"code", "message"}}`` to
anyone else.
"""

from __future__ import annotations

import hmac
from importlib import resources
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ccweb_store.config import Settings
from ccweb_store.domain.errors import DomainError
from ccweb_store.domain.ids import OPEN_REPLY_STATUSES
from ccweb_store.http.console import HOME, LOGIN_PATH, STATIC_PREFIX, actions, session, views
from ccweb_store.http.console.actions import origin_refusal, read_form, redirect
from ccweb_store.http.console.rendering import domain_refusal, refusal, render
from ccweb_store.http.headers import SECURITY_HEADERS
from ccweb_store.http.throttle import LoginThrottle, client_address, throttled_message
from ccweb_store.services import console, credentials
from ccweb_store.store.uow import Store

STATIC_TYPES = {
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}


# ---- pages ------------------------------------------------------------------------------


async def overview_page(request: Request) -> Response:
    """``GET /``: conversations, open reply requests (``?state=&conversation=``), runs; each
    a page (``?conversations_after=&replies_after=&runs_after=``)."""
    if not _bound(request):
        return render(request, "shell.html")
    store: Store = request.app.state.store
    state = request.query_params.get("state")
    conversation_id = request.query_params.get("conversation")
    try:
        chosen = console.ReplyFilter.of(state, conversation_id)
        shown = await console.overview(store, chosen, views.cursors(request))
    except DomainError as exc:
        return domain_refusal(request, exc)
    view = views.overview_shown(shown)
    return render(
        request,
        "overview.html",
        view=view,
        chosen=chosen,
        states=OPEN_REPLY_STATUSES,
        notice=request.query_params.get("notice"),
        here=views.here(request),
        pages=views.page_links(request, view),
    )


async def conversation_page(request: Request) -> Response:
    """``GET /console/conversations/{id}?before=``: one conversation."""
    if not _bound(request):
        return render(request, "shell.html")
    store: Store = request.app.state.store
    session_id = request.path_params["session_id"]
    before = request.query_params.get("before")
    if before is not None and (not before.isdigit() or len(before) > 18):
        return refusal(request, 400, "invalid_arguments", "before must be a message's seq")
    try:
        page = await console.conversation(
            store, session_id, int(before) if before else None, views.cursors(request)
        )
    except DomainError as exc:
        return domain_refusal(request, exc)
    view = views.conversation_shown(page)
    return render(
        request,
        "conversation.html",
        view=view,
        notice=request.query_params.get("notice"),
        here=views.here(request),
        pages=views.page_links(request, view),
        quote=quote,
    )


def _bound(request: Request) -> bool:
    """Whether the request may see the console's data (``session.bound``); without it, the
    page is its frame only (``shell.html``), which the page's script fills by reading the
    page again with the login's key."""
    settings: Settings = request.app.state.settings
    return session.bound(settings.token, request.scope, request.headers)


async def static_file(request: Request) -> Response:
    """``GET /console/static/{name}``: the console's script and style sheet."""
    name = request.path_params["name"]
    media_type = STATIC_TYPES.get(name)
    if media_type is None:
        return refusal(request, 404, "not_found", f"no console file {name!r}")
    body = (resources.files("ccweb_store.http.console") / "static" / name).read_bytes()
    headers = {**SECURITY_HEADERS, "Cache-Control": "no-cache"}
    return Response(body, media_type=media_type, headers=headers)


# ---- login ------------------------------------------------------------------------------


async def login_page(request: Request) -> Response:
    """``GET /console/login``: the form (straight to the console when no token is set)."""
    settings: Settings = request.app.state.settings
    if settings.token is None:
        return redirect(HOME)
    return render(request, "login.html", error=None)


async def login(request: Request) -> Response:
    """``POST /console/login``: the operator token in, the login cookie and its key out
    (``session``)."""
    settings: Settings = request.app.state.settings
    if settings.token is None:
        return redirect(HOME)
    refused = origin_refusal(request)
    if refused is not None:
        return refused
    try:
        form = await read_form(request)
    except DomainError as exc:
        return domain_refusal(request, exc)
    given = form.get("token", "").strip()
    throttle: LoginThrottle = request.app.state.login_throttle
    address = client_address(request.scope.get("client"))
    wait = throttle.retry_after(address) if given else None
    if wait is not None:
        return refusal(
            request,
            429,
            "too_many_attempts",
            throttled_message(wait),
            headers={"Retry-After": str(wait)},
        )
    if given and hmac.compare_digest(given.encode(), settings.token.encode()):
        secure = request.url.scheme == "https"
        value = session.cookie_value(settings.token)
        cookie = session.set_cookie_header(value, secure=secure)
        # The key goes in the fragment, which the browser keeps and never sends.
        key = urlencode({session.KEY_FRAGMENT: session.login_key(settings.token, value)})
        return redirect(f"{HOME}#{key}", **{"Set-Cookie": cookie})
    if given:
        throttle.failed(address)
    if credentials.looks_like_token(given):
        message = (
            "a conversation credential does not open the console: type the operator token "
            "(CCWEB_TOKEN)"
        )
    elif not given:
        message = "type the operator token (CCWEB_TOKEN)"
    else:
        message = "that is not the operator token: check the token configured as CCWEB_TOKEN"
    if "text/html" in request.headers.get("accept", ""):
        return render(request, "login.html", status=401, error=message)
    return refusal(request, 401, "unauthorized", message)


async def logout(request: Request) -> Response:
    """``POST /console/logout``: the login cookie cleared."""
    refused = origin_refusal(request)
    if refused is not None:
        return refused
    cleared = session.clear_cookie_header(secure=request.url.scheme == "https")
    return redirect(LOGIN_PATH, **{"Set-Cookie": cleared})


ROUTES = [
    Route(HOME, overview_page, methods=["GET"]),
    Route("/console/conversations/{session_id}", conversation_page, methods=["GET"]),
    Route(LOGIN_PATH, login_page, methods=["GET"]),
    Route(LOGIN_PATH, login, methods=["POST"]),
    Route("/console/logout", logout, methods=["POST"]),
    Route("/console/replies/{request_id}/retry", actions.retry_reply, methods=["POST"]),
    Route("/console/replies/{request_id}/fail", actions.fail_reply, methods=["POST"]),
    Route("/console/runs/{run_id}/requeue", actions.requeue_run, methods=["POST"]),
    Route("/console/runs/{run_id}/cancel", actions.cancel_run, methods=["POST"]),
    Route(STATIC_PREFIX + "{name}", static_file, methods=["GET"]),
]
