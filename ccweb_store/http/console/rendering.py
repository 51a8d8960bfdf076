"""How the console's pages are rendered: the Jinja2 environment (autoescaped, strict about
undefined names) with its filters for times and excerpts, and a refusal as a page to a browser
or JSON to anyone else. The routes (``pages.py``) decide what a page shows."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from ccweb_store.config import Settings
from ccweb_store.domain.errors import Conflict, DomainError, NotFound
from ccweb_store.http.console import STATIC_PREFIX
from ccweb_store.http.headers import SECURITY_HEADERS

#: How much of a request's text the overview shows.
EXCERPT_CHARS = 160


def _age(value: str | None, *, now: datetime | None = None) -> str:
    """How long ago an ISO time was, the largest unit: ``"42 s"``, ``"5 min"``, ``"3 h"``."""
    if not value:
        return ""
    seconds = ((now or datetime.now(UTC)) - datetime.fromisoformat(value)).total_seconds()
    return _span(max(0, int(seconds)))


def _left(value: str | None, *, now: datetime | None = None) -> str:
    """The time left until an ISO time, or ``"expired"``."""
    if not value:
        return ""
    seconds = (datetime.fromisoformat(value) - (now or datetime.now(UTC))).total_seconds()
    return "expired" if seconds <= 0 else _span(int(seconds))


def _expired(value: str | None) -> bool:
    return bool(value) and _left(value) == "expired"


def _span(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} d"


def _excerpt(text: str | None, limit: int = EXCERPT_CHARS) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("ccweb_store.http.console", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
TEMPLATES.filters.update(age=_age, left=_left, expired=_expired, excerpt=_excerpt)
TEMPLATES.globals.update(urlencode=urlencode, STATIC=STATIC_PREFIX)


def render(request: Request, name: str, *, status: int = 200, **context: Any) -> HTMLResponse:
    settings: Settings = request.app.state.settings
    context.setdefault("notice", None)
    body = TEMPLATES.get_template(name).render(logged_in=settings.token is not None, **context)
    return HTMLResponse(body, status_code=status, headers=SECURITY_HEADERS)


def refusal(
    request: Request,
    status: int,
    code: str,
    message: str,
    *,
    headers: dict[str, str] | None = None,
) -> Response:
    """A refusal: the problem page to a browser, JSON to anyone else."""
    if "text/html" in request.headers.get("accept", ""):
        response: Response = render(
            request, "problem.html", status=status, code=code, message=message
        )
    else:
        body = {"error": {"code": code, "message": message}}
        response = JSONResponse(body, status_code=status, headers=SECURITY_HEADERS)
    response.headers.update(headers or {})
    return response


def domain_refusal(request: Request, exc: DomainError) -> Response:
    if isinstance(exc, NotFound):
        status = 404
    elif isinstance(exc, Conflict):
        status = 409
    else:
        status = 400
    return refusal(request, status, exc.code, exc.message)
