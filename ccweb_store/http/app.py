"""The ASGI application: ``/mcp`` (agents), ``/rpc`` (the host) and ``/healthz``."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hmac
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import Headers, QueryParams
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ccweb_store import __version__
from ccweb_store.config import Settings
from ccweb_store.domain.errors import DatabaseFileMissing, DatabaseUnavailable
from ccweb_store.http.asgi import http_error
from ccweb_store.http.mcp_http import OPERATOR_SCOPE_KEY, mcp_app
from ccweb_store.http.rpc import rpc_app
from ccweb_store.protocol import jsonrpc
from ccweb_store.services import credentials
from ccweb_store.services.runs import sweep_expired_leases
from ccweb_store.store.db import migrate
from ccweb_store.store.postgres.vacuum import keep_vacuumed, vacuum_interval
from ccweb_store.store.uow import Store

log = logging.getLogger("ccweb_store")


def create_app(
    settings: Settings | None = None,
    *,
    store: Store | None = None,
    migrate_on_start: bool = True,
    freeze_gc_after_startup: bool = False,
) -> App:
    """Build the app. Pass ``store`` to share an engine (tests); otherwise one is made.

    ``freeze_gc_after_startup`` is for the process that is the server (``serve``): see
    ``freeze_startup_objects``.
    """
    settings = settings or (store.settings if store else Settings())

    @asynccontextmanager
    async def lifespan(app: App) -> AsyncIterator[None]:
        owned = store is None
        active = store or Store.from_settings(settings)
        try:
            if migrate_on_start:
                await migrate(active.engine)
            app.store = active
            if freeze_gc_after_startup:
                freeze_startup_objects()
            log.info("ccweb-store %s ready on %s", __version__, active.dialect)
            vacuum_every = await vacuum_interval(active, settings.postgres_vacuum_seconds)
            async with (
                _in_background(sweep_expired_leases, active, settings.lease_sweep_seconds),
                _in_background(keep_vacuumed, active, vacuum_every),
            ):
                yield
        finally:
            if owned:
                await active.dispose()

    routes = [  # matched in order: the busiest first
        Route("/rpc", AnyMethod(rpc_app)),
        Route("/mcp", AnyMethod(mcp_app)),
        Route("/healthz", healthz, methods=["GET"]),
    ]
    middleware = [Middleware(BearerAuth, token=settings.token)] if settings.token else []
    app = App(
        routes=routes,
        middleware=middleware,
        exception_handlers={HTTPException: http_exception, Exception: internal_error},
        lifespan=lifespan,
        busy_routes={"/rpc": rpc_app, "/mcp": mcp_app},
        settings=settings,
        store=store,
    )
    return app


class App(Starlette):
    """The Starlette app, with ``POST`` to the busy routes (``/rpc``, ``/mcp``) served without
    Starlette's middleware stack and router.

    Those layers (the error and exception middlewares, the router's path matching, the
    wrappers around ``send``) cost a bare endpoint about as much as the endpoint itself. For a
    busy route's ``POST`` this calls the route's ASGI app straight from the server, behind
    ``BearerAuth`` when a token is set, exactly as the full stack would; every other request
    (other methods and paths, lifespan) goes through Starlette. An endpoint that raises is
    answered a JSON-RPC 500 and logged here, as Starlette's error middleware (with
    ``internal_error``) answers one on every other path.

    The endpoints find the settings and the store (set when the app starts, unless given) as
    plain attributes of the app (``scope["app"]``): reading ``app.state`` raises and catches
    an ``AttributeError`` inside Starlette's ``State`` at every read.
    """

    def __init__(
        self,
        *,
        busy_routes: dict[str, ASGIApp],
        settings: Settings,
        store: Store | None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.settings = settings
        self.store = store
        token = settings.token
        self.busy_routes = busy_routes
        self._serve_busy: ASGIApp = (
            BearerAuth(self._call_endpoint, token) if token else self._call_endpoint
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and scope["path"] in self.busy_routes
            and not scope.get("root_path")
        ):
            scope["app"] = self
            try:
                await self._serve_busy(scope, receive, send)
            except ClientDisconnect:
                raise  # nobody is left to answer
            except Exception:
                log.exception("internal error answering %s %s", scope["method"], scope["path"])
                await _send_internal_error(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    async def _call_endpoint(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.busy_routes[scope["path"]](scope, receive, send)


INTERNAL_ERROR_MESSAGE = "internal error: the server logged the details"


async def _send_internal_error(scope: Scope, receive: Receive, send: Send) -> None:
    """Answer a busy route's request whose endpoint raised: a JSON-RPC error with id null, as
    ``internal_error`` answers elsewhere. Nothing says here whether the endpoint had begun its
    answer (watching ``send`` for that would cost every request); if it had, the server
    refuses a second one, and there is nothing more to send."""
    response = http_error(500, jsonrpc.INTERNAL_ERROR, INTERNAL_ERROR_MESSAGE)
    with contextlib.suppress(Exception):
        await response(scope, receive, send)


async def http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's refusals (no such path, a method the path does not serve) as JSON:
    ``{"error": {"code", "message"}}``, saying what the service does serve."""
    assert isinstance(exc, HTTPException)
    target = f"{request.method} {request.url.path}"
    headers = dict(exc.headers or {})
    if exc.status_code == 404:
        code = "not_found"
        message = (
            f"{target}: no such endpoint; this service answers POST /mcp, POST /rpc "
            "and GET /healthz"
        )
    elif exc.status_code == 405:
        # Starlette lists a route's methods in set order, which changes between processes.
        allowed = ", ".join(sorted(m.strip() for m in headers.get("Allow", "GET").split(",")))
        headers["Allow"] = allowed
        code = "method_not_allowed"
        message = f"{target} is not supported: use {allowed}"
    else:
        code = "http_error"
        message = f"{target}: {exc.detail}"
    body = {"error": {"code": code, "message": message}}
    return JSONResponse(body, status_code=exc.status_code, headers=headers)


async def internal_error(request: Request, exc: Exception) -> Response:
    """The 500 answer to an exception that escaped an endpoint served through Starlette (the
    server logs it): a JSON-RPC error on ``/mcp`` and ``/rpc``, else
    ``{"error": {"code": "internal_error", "message"}}``."""
    if request.url.path in ("/mcp", "/rpc"):
        return http_error(500, jsonrpc.INTERNAL_ERROR, INTERNAL_ERROR_MESSAGE)
    body = {"error": {"code": "internal_error", "message": INTERNAL_ERROR_MESSAGE}}
    return JSONResponse(body, status_code=500)


def freeze_startup_objects() -> None:
    """Move every object alive once the server has started (modules, the schema, compiled
    statements, the engine) out of the garbage collector's reach (``gc.freeze``).

    They live as long as the process, yet each full collection walked all of them: a pause
    of ~44 ms on the event loop, every few thousand requests. Collected first, so no
    garbage is frozen with them.
    """
    gc.collect()
    gc.freeze()


class AnyMethod:
    """An ASGI app that Starlette routes whatever the HTTP method, so that it answers a method
    it does not serve with its own JSON-RPC 405 instead of Starlette's plain-text one (a
    plain function would be taken for a request/response endpoint)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


@asynccontextmanager
async def _in_background(
    job: Callable[[Store, float], Coroutine[Any, Any, None]], store: Store, interval: float
) -> AsyncIterator[None]:
    """Run ``job(store, interval)`` (``sweep_expired_leases``, ``keep_vacuumed``) in the
    background while the app serves; an interval of 0 runs nothing."""
    if interval <= 0:
        yield
        return
    task = asyncio.create_task(job(store, interval), name=job.__name__)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def healthz(request: Request) -> JSONResponse:
    """Liveness and schema state: ``{"status": "ok", "database": …, "revision": …}``, or 503
    with ``{"status": "error", "database": …, "error": {"code", "message"}}`` when the database
    cannot serve. The answer needs no token, so it names neither the database's host nor its
    path: the server log does."""
    store: Store = request.app.store
    try:
        revision = await store.health()
    except (DatabaseUnavailable, DatabaseFileMissing) as exc:
        log.warning("health check failed: %s", exc.message)
        error: dict[str, Any] = {"code": exc.code, "message": exc.summary}
        headers = {}
        if isinstance(exc, DatabaseUnavailable):
            error["retryAfter"] = exc.retry_after
            headers["Retry-After"] = str(exc.retry_after)
        return _unhealthy(store, error, headers)
    except Exception:
        log.exception("health check failed")
        error = {
            "code": "health_check_failed",
            "message": "the database did not answer the health check: the server logged why",
        }
        return _unhealthy(store, error, {})
    return JSONResponse(
        {"status": "ok", "database": store.dialect, "revision": revision, "version": __version__}
    )


def _unhealthy(store: Store, error: dict[str, Any], headers: dict[str, str]) -> JSONResponse:
    body = {"status": "error", "database": store.dialect, "error": error}
    return JSONResponse(body, status_code=503, headers=headers)


class BearerAuth:
    """With ``CCWEB_TOKEN`` set, every path but ``/healthz`` needs ``Authorization: Bearer``.

    The operator token opens everything (and marks the request, ``OPERATOR_SCOPE_KEY``). A
    conversation credential (``credentials.py``, in the header or in ``?credential=``) is let
    through to ``/mcp`` only, whose endpoint checks it; it never opens ``/rpc``.
    """

    OPEN_PATHS = frozenset({"/healthz"})

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        given = Headers(scope=scope).get("authorization", "")
        scheme, _, value = given.partition(" ")
        bearer = value.strip() if scheme.lower() == "bearer" else ""
        if bearer and hmac.compare_digest(bearer.encode("latin-1"), self.expected):
            scope[OPERATOR_SCOPE_KEY] = True
            await self.app(scope, receive, send)
            return
        conversation_credential = credentials.looks_like_token(bearer) or (
            credentials.QUERY_PARAMETER in QueryParams(scope.get("query_string", b""))
        )
        if conversation_credential and scope["path"] == "/mcp":
            await self.app(scope, receive, send)
            return
        if conversation_credential:
            message = (
                "a conversation credential opens /mcp only: the host API needs the operator "
                "token, 'Authorization: Bearer <CCWEB_TOKEN>'"
            )
        elif not given:
            message = "missing bearer token: send 'Authorization: Bearer <CCWEB_TOKEN>'"
        else:
            message = "invalid bearer token: check the token configured as CCWEB_TOKEN"
        response = http_error(
            401, jsonrpc.UNAUTHORIZED, message, headers={"WWW-Authenticate": "Bearer"}
        )
        await response(scope, receive, send)
