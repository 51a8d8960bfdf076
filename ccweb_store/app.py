"""The ASGI application: ``/healthz`` now, ``/mcp`` and ``/rpc`` as they land."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ccweb_store import __version__
from ccweb_store.config import Settings
from ccweb_store.db import current_revision, migrate
from ccweb_store.uow import Store

log = logging.getLogger("ccweb_store")


def create_app(
    settings: Settings | None = None, *, store: Store | None = None, migrate_on_start: bool = True
) -> Starlette:
    """Build the app. Pass ``store`` to share an engine (tests); otherwise one is made."""
    settings = settings or (store.settings if store else Settings())

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        owned = store is None
        active = store or Store.from_settings(settings)
        try:
            if migrate_on_start:
                await migrate(active.engine)
            app.state.store = active
            log.info("ccweb-store %s ready on %s", __version__, active.dialect)
            yield
        finally:
            if owned:
                await active.dispose()

    app = Starlette(routes=[Route("/healthz", healthz, methods=["GET"])], lifespan=lifespan)
    app.state.settings = settings
    if store is not None:
        app.state.store = store
    return app


async def healthz(request: Request) -> JSONResponse:
    """Liveness and schema state: ``{"status": "ok", "database": …, "revision": …}``."""
    store: Store = request.app.state.store
    try:
        async with store.engine.connect() as connection:
            revision = await current_revision(connection)
    except Exception as exc:  # the database is down: say so instead of a bare 500
        log.warning("health check failed: %s", exc)
        return JSONResponse(
            {"status": "error", "database": store.dialect, "error": "database unreachable"},
            status_code=503,
        )
    return JSONResponse(
        {"status": "ok", "database": store.dialect, "revision": revision, "version": __version__}
    )
