"""``GET /metrics`` in Prometheus' text format, and the middleware that counts and times
every request.

``RequestMetrics`` wraps the whole app: it times each request and counts it by endpoint,
method, tool and outcome (``ccweb_store.metrics``). ``/mcp`` and ``/rpc`` say what they
answered (``note_call``: the JSON-RPC method, the tool, ok / error / tool_error) in the ASGI
scope, and one they did not note was refused before it was read; for any other path the
HTTP status tells the outcome (refused: 4xx, failed: 5xx). Every label takes its value from a
fixed set, whatever a client sends (``other`` for an unknown method or tool), so the series
stay few.

The scrape shows the library's registry (this process's counters, or with
``PROMETHEUS_MULTIPROC_DIR`` set, every process's that writes to that directory) and what
``services.monitoring`` reads from the database then: ``ccweb_runs``,
``ccweb_open_replies``, ``ccweb_oldest_waiting_reply_age_seconds`` and ``ccweb_database_up``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from time import perf_counter
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ccweb_store.config import Settings
from ccweb_store.domain.errors import DatabaseFileMissing, DatabaseUnavailable
from ccweb_store.metrics import REQUEST_SECONDS, REQUESTS
from ccweb_store.protocol.call_labels import CallLabels
from ccweb_store.services.monitoring import Backlog, backlog
from ccweb_store.store.uow import Store

#: The environment variable of the library's multi-process mode: a directory every server
#: process writes its counters to, and that ``/metrics`` reads them all from.
MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"

#: The ASGI scope key under which ``/mcp`` and ``/rpc`` note ``(method, tool, outcome)``.
CALL_KEY = "ccweb.call"

#: The paths counted by name; any other is ``other``.
ENDPOINTS = frozenset({"/mcp", "/rpc", "/healthz", "/metrics", "/events"})
#: The endpoints that note each call they answer (``note_call``).
NOTING_ENDPOINTS = frozenset({"/mcp", "/rpc"})


class RequestMetrics:
    """ASGI middleware: count and time every HTTP request (``ccweb_requests_total``,
    ``ccweb_request_duration_seconds``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        #: The label children of each label set, made once: ``labels()`` takes a lock and
        #: builds a key on every call.
        self.children: dict[tuple[str, str, str, str], tuple[Any, Any]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = perf_counter()
        if scope["path"] in NOTING_ENDPOINTS:
            # The busy path: the endpoint notes what it answered, so ``send`` goes unwrapped.
            # Not noted, the request was refused before it was read (401, 406, 413, 415).
            try:
                await self.app(scope, receive, send)
            except BaseException:
                self.record(scope, 500, perf_counter() - started)
                raise
            self.record(scope, 200 if CALL_KEY in scope else 400, perf_counter() - started)
            return
        status = 500

        async def send_noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_noting_status)
        finally:
            self.record(scope, status, perf_counter() - started)

    def record(self, scope: Scope, status: int, seconds: float) -> None:
        path = scope["path"]
        endpoint = path if path in ENDPOINTS else "other"
        call = scope.get(CALL_KEY)
        if call is None or status >= 500:
            outcome = "ok" if status < 400 else "refused" if status < 500 else "failed"
            method, tool = ("", "") if call is None else call[:2]
        else:
            method, tool, outcome = call
        key = (endpoint, method, tool, outcome)
        children = self.children.get(key)
        if children is None:
            children = (
                REQUESTS.labels(*key),
                REQUEST_SECONDS.labels(endpoint, method, tool),
            )
            self.children[key] = children
        children[0].inc()
        children[1].observe(seconds)


def note_call(scope: Scope, payload: Any, answer: Any, labels: CallLabels) -> None:
    """Note in ``scope`` what a JSON-RPC request asked, as its dispatch noted it (``labels``:
    its method, each ``other`` when unknown, and its tool; ``batch`` for a batch) and how it
    went: ``error`` for a JSON-RPC error, ``tool_error`` for a tool's error result, else
    ``ok``."""
    if type(payload) is not dict:
        failed = isinstance(answer, list) and any(
            isinstance(item, dict) and "error" in item for item in answer
        )
        scope[CALL_KEY] = ("batch", "", "error" if failed else "ok")
        return
    outcome = "ok"
    if type(answer) is dict and "error" in answer:
        outcome = "error"
    elif labels.tool_error:
        outcome = "tool_error"
    scope[CALL_KEY] = (labels.method or "other", labels.tool, outcome)


def public_paths(settings: Settings) -> frozenset[str]:
    """``/metrics`` when ``CCWEB_METRICS_PUBLIC`` is set on a loopback bind (``serve``
    refuses it on another): it then needs no token."""
    if settings.metrics_public and settings.host_is_loopback:
        return frozenset({"/metrics"})
    return frozenset()


def registry() -> CollectorRegistry:
    """The registry a scrape shows: every process's counters from the multi-process
    directory when there is one, else this process's (with its CPU, memory and GC)."""
    directory = os.environ.get(MULTIPROC_DIR_ENV)
    if not directory:
        return REGISTRY
    collected = CollectorRegistry()
    MultiProcessCollector(collected, path=directory)  # type: ignore[no-untyped-call]
    return collected


class BacklogCollector(Collector):
    """One scrape's figures read from the database (None: it could not be read)."""

    def __init__(self, read: Backlog | None) -> None:
        self.read = read

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily(
            "ccweb_database_up", "1 when the database answered this scrape's queries, else 0"
        )
        up.add_metric([], 0 if self.read is None else 1)
        yield up
        if self.read is None:
            return
        yield gauge_by_status("ccweb_runs", "Runs queued or running now, by status", self.read.runs)
        yield gauge_by_status(
            "ccweb_open_replies",
            "Reply requests not yet returned to their source, by status (waiting: no answer "
            "yet; ready: answered, not delivered; failed: failure not yet delivered)",
            self.read.replies,
        )
        oldest = GaugeMetricFamily(
            "ccweb_oldest_waiting_reply_age_seconds",
            "Seconds since the oldest reply request still waiting for its answer was made "
            "(0 when none waits)",
        )
        oldest.add_metric([], self.read.oldest_waiting_seconds)
        yield oldest


def gauge_by_status(name: str, documentation: str, counts: Mapping[str, int]) -> Metric:
    family = GaugeMetricFamily(name, documentation, labels=["status"])
    for status, count in counts.items():
        family.add_metric([status], count)
    return family


async def scrape(store: Store) -> bytes:
    """The exposition text: the registry's metrics, then the backlog read now."""
    read: Backlog | None
    try:
        read = await backlog(store)
    except (DatabaseUnavailable, DatabaseFileMissing):
        read = None  # counted in ccweb_database_errors_total; shown as ccweb_database_up 0
    database = CollectorRegistry(auto_describe=False)
    database.register(BacklogCollector(read))
    return generate_latest(registry()) + generate_latest(database)


async def answer_metrics(request: Request) -> Response:
    """``GET /metrics``: Prometheus' text exposition format."""
    return Response(await scrape(request.app.state.store), media_type=CONTENT_TYPE_LATEST)
