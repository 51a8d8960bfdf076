"""The console's routes: its pages (Jinja2, autoescaped), the login, and its three actions
(retry and fail a reply request, requeue a run), each read and done through ``services``.

Every answer carries ``SECURITY_HEADERS`` (``http/headers.py``: a strict
Content-Security-Policy, scripts and styles from this server only, nothing inline, no
frames), as every answer of the app does. Actions are form POSTs that pass the exact
``Origin`` check (``origin_refusal``: an ``Origin`` is required, as browsers always send one
with a POST, and it must be the console's own or an allowed origin with its port) and answer
with a redirect back to the page (POST/redirect/GET). Wrong tokens typed into the login form
count towards the login throttle (``throttle.LoginThrottle``). A refusal is the page saying
what went wrong to a browser (``Accept: text/html``) and ``{"error": {"code", "message"}}``
to anyone else.
"""

from __future__ import annotations

import hmac
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ccweb_store.config import Settings
from ccweb_store.domain.errors import DomainError, InvalidInput
from ccweb_store.domain.host_calls import FailReply, RequeueRun, RetryReply
from ccweb_store.domain.ids import OPEN_REPLY_STATUSES
from ccweb_store.http.console import HOME, LOGIN_PATH, STATIC_PREFIX, session
from ccweb_store.http.console.rendering import domain_refusal, refusal, render
from ccweb_store.http.headers import SECURITY_HEADERS
from ccweb_store.http.origins import same_origin
from ccweb_store.http.throttle import LoginThrottle, client_address, throttled_message
from ccweb_store.protocol import shapes
from ccweb_store.protocol.argument_errors import built
from ccweb_store.services import console, credentials, replies, runs
from ccweb_store.store.uow import Store

#: The most a login or action form may hold, in bytes.
MAX_FORM_BYTES = 64 * 1024
STATIC_TYPES = {
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}


def redirect(location: str, **headers: str) -> RedirectResponse:
    return RedirectResponse(location, status_code=303, headers={**SECURITY_HEADERS, **headers})


def origin_refusal(request: Request) -> Response | None:
    """A 403 unless the request's ``Origin`` is the console's own (the scheme, host and port
    the request came to) or an entry of ``CCWEB_ALLOWED_ORIGINS`` with its exact port."""
    settings: Settings = request.app.state.settings
    origin = request.headers.get("origin")
    own = f"{request.url.scheme}://{request.url.netloc}"
    if origin is not None and same_origin(origin, own, settings.allowed_origins):
        return None
    message = "a console action must come from the console's own page: " + (
        "this request has no Origin header"
        if origin is None
        else f"origin {origin!r} is not this console ({own}); open the console at {own}, "
        "or add the origin, with its port, to CCWEB_ALLOWED_ORIGINS (behind a TLS proxy, "
        "set CCWEB_FORWARDED_ALLOW_IPS to the proxy's address)"
    )
    return refusal(request, 403, "origin_not_allowed", message)


async def read_form(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body as ``{name: first value}``."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise InvalidInput(f"the form is over {MAX_FORM_BYTES} bytes")
    try:
        text = body.decode()
    except UnicodeDecodeError as exc:
        raise InvalidInput("the form is not UTF-8") from exc
    return {name: values[0] for name, values in parse_qs(text, keep_blank_values=True).items()}


def back_to(form: dict[str, str], notice: str) -> str:
    """Where an action returns: the page it came from (a path on this server), with a
    notice."""
    target = form.get("next", HOME)
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        target = HOME
    path, _, query = target.partition("?")
    kept = [(k, v) for k, vs in parse_qs(query).items() if k != "notice" for v in vs]
    return f"{path}?{urlencode([*kept, ('notice', notice)])}"


# ---- pages ------------------------------------------------------------------------------


async def overview_page(request: Request) -> Response:
    """``GET /``: conversations, open reply requests (``?state=&conversation=``), runs."""
    store: Store = request.app.state.store
    state = request.query_params.get("state")
    conversation_id = request.query_params.get("conversation")
    try:
        chosen = console.ReplyFilter.of(state, conversation_id)
        view = overview_shown(await console.overview(store, chosen))
    except DomainError as exc:
        return domain_refusal(request, exc)
    return render(
        request,
        "overview.html",
        view=view,
        chosen=chosen,
        states=OPEN_REPLY_STATUSES,
        notice=request.query_params.get("notice"),
        here=_here(request),
    )


async def conversation_page(request: Request) -> Response:
    """``GET /console/conversations/{id}?before=``: one conversation."""
    store: Store = request.app.state.store
    session_id = request.path_params["session_id"]
    before = request.query_params.get("before")
    if before is not None and (not before.isdigit() or len(before) > 18):
        return refusal(request, 400, "invalid_arguments", "before must be a message's seq")
    try:
        page = await console.conversation(store, session_id, int(before) if before else None)
        view = conversation_shown(page)
    except DomainError as exc:
        return domain_refusal(request, exc)
    return render(
        request,
        "conversation.html",
        view=view,
        notice=request.query_params.get("notice"),
        here=_here(request),
        quote=quote,
    )


def overview_shown(view: console.Overview) -> dict[str, Any]:
    """The overview as its template reads it: the host API's JSON shapes, each conversation
    with ``repliesIn`` / ``repliesOut``, each run with its conversation's ``sessionTitle``."""
    sessions = [
        shapes.session_view_out(session)
        | {
            "repliesIn": view.replies_in[session.row.id],
            "repliesOut": view.replies_out[session.row.id],
        }
        for session in view.sessions
    ]
    titles = {session.row.id: session.row.title for session in view.sessions}
    return {
        "latestEventId": view.latest_event_id,
        "conversations": sessions,
        "replies": [shapes.reply_out(reply) for reply in view.replies],
        "runs": [
            shapes.run_out(run) | {"sessionTitle": titles.get(run.session_id)} for run in view.runs
        ],
    }


def conversation_shown(page: console.ConversationPage) -> dict[str, Any]:
    """One conversation as its template reads it: the host API's JSON shapes, its runs with
    ``sessionTitle`` as the overview's."""
    title = page.session.row.title
    return {
        "latestEventId": page.latest_event_id,
        "session": shapes.session_view_out(page.session),
        "messages": [shapes.message_out(row) for row in page.messages],
        "olderBefore": page.older_before,
        "inputs": shapes.user_inputs_out(page.inputs),
        "replies": [shapes.reply_out(reply) for reply in page.replies],
        "runs": [shapes.run_out(run) | {"sessionTitle": title} for run in page.runs],
    }


def _here(request: Request) -> str:
    """This page's path and query without its notice: where its actions come back to."""
    kept = [(k, v) for k, v in request.query_params.multi_items() if k != "notice"]
    return request.url.path + (f"?{urlencode(kept)}" if kept else "")


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
    """``POST /console/login``: the operator token in, the login cookie out."""
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
        cookie = session.set_cookie_header(session.cookie_value(settings.token), secure=secure)
        return redirect(HOME, **{"Set-Cookie": cookie})
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


# ---- actions ----------------------------------------------------------------------------


async def retry_reply(request: Request) -> Response:
    """``POST /console/replies/{request_id}/retry``."""
    request_id = request.path_params["request_id"]

    async def act(store: Store, form: dict[str, str]) -> str:
        reply = await replies.retry_reply(store, built(RetryReply, request_id=request_id))
        return f"request {request_id} retried: now {reply.status}"

    return await _action(request, act)


async def fail_reply(request: Request) -> Response:
    """``POST /console/replies/{request_id}/fail`` with ``reason``."""
    request_id = request.path_params["request_id"]

    async def act(store: Store, form: dict[str, str]) -> str:
        reason = form.get("reason", "").strip()
        reply = await replies.fail_reply(
            store, built(FailReply, request_id=request_id, reason=reason)
        )
        return f"request {request_id} failed: now {reply.status}"

    return await _action(request, act)


async def requeue_run(request: Request) -> Response:
    """``POST /console/runs/{run_id}/requeue``."""
    run_id = request.path_params["run_id"]

    async def act(store: Store, form: dict[str, str]) -> str:
        await runs.requeue_run(store, built(RequeueRun, run_id=run_id))
        return f"run {run_id} requeued"

    return await _action(request, act)


async def _action(request: Request, act: Any) -> Response:
    refused = origin_refusal(request)
    if refused is not None:
        return refused
    try:
        form = await read_form(request)
        notice = await act(request.app.state.store, form)
    except DomainError as exc:
        return domain_refusal(request, exc)
    return redirect(back_to(form, notice))


ROUTES = [
    Route(HOME, overview_page, methods=["GET"]),
    Route("/console/conversations/{session_id}", conversation_page, methods=["GET"]),
    Route(LOGIN_PATH, login_page, methods=["GET"]),
    Route(LOGIN_PATH, login, methods=["POST"]),
    Route("/console/logout", logout, methods=["POST"]),
    Route("/console/replies/{request_id}/retry", retry_reply, methods=["POST"]),
    Route("/console/replies/{request_id}/fail", fail_reply, methods=["POST"]),
    Route("/console/runs/{run_id}/requeue", requeue_run, methods=["POST"]),
    Route(STATIC_PREFIX + "{name}", static_file, methods=["GET"]),
]
