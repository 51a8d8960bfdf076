"""The Starlette app: ``/mcp`` (agents), ``/rpc`` (the host), ``/events``, ``/healthz`` and
the operator console (``/`` and ``/console/…``, ``console/pages.py``).

``create_app`` builds ``Starlette(routes=…, middleware=…, lifespan=…)``: the bearer token
(``auth.BearerAuth``, when one is set, with the login throttle) guards every route but
``/healthz``, behind the
``Host`` check (``hosts.HostCheck``) that guards every route; the ``Origin``
check (``origins.origin_checked``) guards the two JSON-RPC endpoints; every refusal and
failure is answered as JSON by the exception handlers here. The endpoints find the settings
and the store on ``app.state``.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ccweb_store import __version__
from ccweb_store.config import Settings
from ccweb_store.domain.errors import DatabaseFileMissing, DatabaseUnavailable
from ccweb_store.http import event_stream, mcp_http, metrics, rpc
from ccweb_store.http.asgi import Endpoint
from ccweb_store.http.auth import BearerAuth
from ccweb_store.http.console import pages as console_pages
from ccweb_store.http.headers import SECURITY_HEADERS, SecurityHeaders
from ccweb_store.http.hosts import HostCheck, allowed_hosts
from ccweb_store.http.origins import origin_checked
from ccweb_store.http.payloads import http_error, method_not_allowed
from ccweb_store.http.throttle import LoginThrottle
from ccweb_store.protocol import jsonrpc
from ccweb_store.services.event_reads import tend_events
from ccweb_store.services.run_endings import sweep_expired_leases
from ccweb_store.store.background import running
from ccweb_store.store.db import migrate
from ccweb_store.store.uow import Store

log = logging.getLogger("ccweb_store")

#: The JSON-RPC endpoints, whose refusals are JSON-RPC errors: what their 405 answer adds.
JSON_RPC_PATHS = {"/mcp": mcp_http.NOT_ALLOWED, "/rpc": rpc.NOT_ALLOWED}

INTERNAL_ERROR_MESSAGE = "internal error: the server logged the details"


def create_app(
    settings: Settings | None = None,
    *,
    store: Store | None = None,
    migrate_on_start: bool = True,
    freeze_gc_after_startup: bool = False,
    login_throttle: LoginThrottle | None = None,
) -> Starlette:
    """Build the app. Pass ``store`` to share an engine (tests); otherwise one is made when
    the app starts, and disposed of when it stops. ``login_throttle`` counts wrong operator
    tokens (a shorter window or limit in tests); by default 10 a minute per address.

    ``freeze_gc_after_startup`` is for the process that is the server (``serve``): see
    ``freeze_startup_objects``.
    """
    settings = settings or (store.settings if store else Settings())

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        owned = store is None
        active = store or Store.from_settings(settings)
        try:
            if migrate_on_start:
                await migrate(active.engine)
            app.state.store = active
            if freeze_gc_after_startup:
                freeze_startup_objects()
            log.debug("ccweb-store %s ready on %s", __version__, active.dialect)
            vacuum_every = await active.vacuum_interval(settings.postgres_vacuum_seconds)
            async with (
                _in_background(sweep_expired_leases, active, settings.lease_sweep_seconds),
                _in_background(Store.keep_vacuumed, active, vacuum_every),
                _in_background(tend_events, active, settings.event_retention_days),
            ):
                yield
        finally:
            if owned:
                await active.dispose()

    allowed = settings.allowed_origins
    routes = [  # matched in order: the busiest first
        Route("/mcp", Endpoint(origin_checked(mcp_http.answer_mcp, allowed)), methods=["POST"]),
        Route("/rpc", Endpoint(origin_checked(rpc.answer_rpc, allowed)), methods=["POST"]),
        Route("/events", Endpoint(event_stream.answer_events), methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics.answer_metrics, methods=["GET"]),
        *console_pages.ROUTES,
    ]
    middleware = [  # outermost first: refused hosts are counted in the metrics too
        Middleware(SecurityHeaders),
        Middleware(metrics.RequestMetrics),
        Middleware(HostCheck, allowed=allowed_hosts(settings)),
    ]
    throttle = login_throttle or LoginThrottle()
    if settings.token:
        middleware.append(
            Middleware(
                BearerAuth,
                token=settings.token,
                open_paths=BearerAuth.OPEN_PATHS | metrics.public_paths(settings),
                throttle=throttle,
            )
        )
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={HTTPException: http_exception, Exception: internal_error},
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.store = store
    app.state.login_throttle = throttle
    event_stream.quiet_cut_streams()
    return app


async def http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's refusals (no such path, a method the path does not serve) as JSON: a
    JSON-RPC error on ``/mcp`` and ``/rpc``, else ``{"error": {"code", "message"}}``; each
    says what the service does serve."""
    assert isinstance(exc, HTTPException)
    path = request.url.path
    if exc.status_code == 405 and path in JSON_RPC_PATHS:
        return method_not_allowed(request, JSON_RPC_PATHS[path])
    target = f"{request.method} {path}"
    headers = dict(exc.headers or {})
    if exc.status_code == 404:
        code = "not_found"
        message = (
            f"{target}: no such endpoint; this service answers POST /mcp, POST /rpc, "
            "GET /events, GET /healthz, GET /metrics and the operator console at GET /"
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
    """The 500 answer to an exception that escaped an endpoint, logged with its traceback: a
    JSON-RPC error on ``/mcp`` and ``/rpc``, else ``{"error": {"code": "internal_error",
    "message"}}``. A client gone mid-request is nobody's bug, and nobody is left to read
    the answer: it is not logged here."""
    if not isinstance(exc, ClientDisconnect):
        log.error("internal error answering %s %s", request.method, request.url.path, exc_info=exc)
    # Starlette sends this answer from outside every middleware: it sets its headers itself.
    if request.url.path in JSON_RPC_PATHS:
        return http_error(
            500, jsonrpc.INTERNAL_ERROR, INTERNAL_ERROR_MESSAGE, headers=SECURITY_HEADERS
        )
    body = {"error": {"code": "internal_error", "message": INTERNAL_ERROR_MESSAGE}}
    return JSONResponse(body, status_code=500, headers=SECURITY_HEADERS)


def freeze_startup_objects() -> None:
    """Move every object alive once the server has started (modules, the schema, compiled
    statements, the engine) out of the garbage collector's reach (``gc.freeze``).

    They live as long as the process, yet each full collection would walk all of them,
    pausing the event loop. Collected first, so no garbage is frozen with them.
    """
    gc.collect()
    gc.freeze()


@asynccontextmanager
async def _in_background(
    job: Callable[[Store, float], Coroutine[Any, Any, None]], store: Store, interval: float
) -> AsyncIterator[None]:
    """Run ``job(store, interval)`` (``sweep_expired_leases``, ``Store.keep_vacuumed``) in the
    background while the app serves; an interval of 0 runs nothing."""
    if interval <= 0:
        yield
        return
    async with running(job(store, interval), job.__name__):
        yield


async def healthz(request: Request) -> JSONResponse:
    """Liveness and schema state: ``{"status": "ok", "database": …, "revision": …}``, or 503
    with ``{"status": "error", "database": …, "error": {"code", "message"}}`` when the database
    cannot serve. The answer needs no token, so it names neither the database's host nor its
    path: the server log does."""
    store: Store = request.app.state.store
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
