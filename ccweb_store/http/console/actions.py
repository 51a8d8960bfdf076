"""The console's actions: retry and fail a reply request, requeue and cancel a run, each done
through ``services`` and answered with a redirect back to the page it came from, with a
notice saying what happened (POST/redirect/GET).

An action is a form POST that passes the exact ``Origin`` check (``origin_refusal``: an
``Origin`` is required, as browsers always send one with a POST, and it must be the
console's own or an allowed origin with its port) and carries the login's key
(``session.KEY_FIELD``, which the page's script adds), or the token itself. The page shows an
action only where it can succeed; a refusal still says what went wrong and what to do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ccweb_store.config import Settings
from ccweb_store.contract.objects import Reply
from ccweb_store.contract.replies import FailReply, RetryReply
from ccweb_store.contract.runs import CancelRun, RequeueRun
from ccweb_store.domain.errors import DomainError, InvalidInput
from ccweb_store.domain.kinds import ReplyStatus
from ccweb_store.http.console import HOME, session
from ccweb_store.http.console.rendering import domain_refusal, refusal
from ccweb_store.http.headers import SECURITY_HEADERS
from ccweb_store.http.origins import same_origin
from ccweb_store.protocol.argument_errors import built
from ccweb_store.services import replies, runs
from ccweb_store.store.uow import Store

#: The most a login or action form may hold, in bytes.
MAX_FORM_BYTES = 64 * 1024

#: The refusal of an action that came with the login cookie but not its key.
NOT_BOUND = (
    "a console action needs the login's key, which only the console's own page sends: take "
    "the action from the console's page (log in again if it asks)"
)
#: The reason a run cancelled here gives, and a request it answered fails with.
CANCELLED_HERE = "cancelled from the console"
#: An action's work: the store and the form in, the notice out.
Act = Callable[[Store, dict[str, str]], Awaitable[str]]


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


async def retry_reply(request: Request) -> Response:
    """``POST /console/replies/{request_id}/retry``."""
    request_id = request.path_params["request_id"]

    async def act(store: Store, form: dict[str, str]) -> str:
        reply = await replies.retry_reply(store, built(RetryReply, request_id=request_id))
        return retried_notice(reply)

    return await _action(request, act)


def retried_notice(reply: Reply) -> str:
    """What a retry did, by where it left the request."""
    request_id, target = reply.request_id, reply.target_title or reply.target_conversation_id
    if reply.status == ReplyStatus.RETURNED:
        return f"Request {request_id}: its reply went back to the source."
    if reply.status == ReplyStatus.READY:
        return (
            f"Request {request_id}: its reply is ready and goes back to the source when the "
            "source's current run ends."
        )
    return f"Request {request_id}: {target} is asked again; a new run is queued for it."


async def fail_reply(request: Request) -> Response:
    """``POST /console/replies/{request_id}/fail`` with ``reason``."""
    request_id = request.path_params["request_id"]

    async def act(store: Store, form: dict[str, str]) -> str:
        reason = form.get("reason", "").strip()
        await replies.fail_reply(store, built(FailReply, request_id=request_id, reason=reason))
        return f"Request {request_id} failed; its source is told why."

    return await _action(request, act)


async def requeue_run(request: Request) -> Response:
    """``POST /console/runs/{run_id}/requeue``."""
    run_id = request.path_params["run_id"]

    async def act(store: Store, form: dict[str, str]) -> str:
        await runs.requeue_run(store, built(RequeueRun, run_id=run_id))
        return f"Run {run_id} is back in the queue for the next worker."

    return await _action(request, act)


async def cancel_run(request: Request) -> Response:
    """``POST /console/runs/{run_id}/cancel`` (``force=1`` for a running run), as
    ``run.cancel``: a request the run answers fails, and its source is told."""
    run_id = request.path_params["run_id"]

    async def act(store: Store, form: dict[str, str]) -> str:
        force = form.get("force") == "1"
        call = built(CancelRun, run_id=run_id, force=force, reason=CANCELLED_HERE)
        ended = await runs.cancel_run(store, call)
        failed = "".join(
            f" Request {reply.request_id}, which it answered, failed; its source is told."
            for reply in ended.replies
            if reply.status == ReplyStatus.FAILED and reply.last_error == CANCELLED_HERE
        )
        return f"Run {run_id} cancelled." + failed

    return await _action(request, act)


async def _action(request: Request, act: Act) -> Response:
    refused = origin_refusal(request)
    if refused is not None:
        return refused
    try:
        form = await read_form(request)
        settings: Settings = request.app.state.settings
        key = form.get(session.KEY_FIELD)
        if not session.bound(settings.token, request.scope, request.headers, key):
            return refusal(request, 401, "unauthorized", NOT_BOUND)
        notice = await act(request.app.state.store, form)
    except DomainError as exc:
        return domain_refusal(request, exc)
    return redirect(back_to(form, notice))
