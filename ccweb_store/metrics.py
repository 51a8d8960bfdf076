"""The counters and histograms the server keeps as it works, in the ``prometheus-client``
library's default registry; ``GET /metrics`` (``http/metrics.py``) shows them with the figures
it reads from the database at each scrape.

Like ``config``, every layer but the domain and the worker may import this module: a count is
taken where the event happens. Every metric has labels, so no value exists before its first
use: with ``PROMETHEUS_MULTIPROC_DIR`` set (several server processes, see
docs/operations.md), importing this module writes nothing to that directory.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram, disable_created_metrics

# No ``*_created`` series: a timestamp per label set that no dashboard here reads.
disable_created_metrics()  # type: ignore[no-untyped-call]

#: Request latencies, in seconds: a cheap tool call takes a fraction of a millisecond, a busy
#: database's lock wait up to its timeout (30 s by default).
LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip

REQUESTS = Counter(
    "ccweb_requests",
    "HTTP requests answered, by endpoint, JSON-RPC method, tool and outcome "
    "(ok, error, tool_error, refused, failed)",
    ["endpoint", "method", "tool", "outcome"],
)
REQUEST_SECONDS = Histogram(
    "ccweb_request_duration_seconds",
    "Time from a request's arrival to the end of its answer, by endpoint, method and tool",
    ["endpoint", "method", "tool"],
    buckets=LATENCY_BUCKETS,
)
LEASE_EXPIRIES = Counter(
    "ccweb_lease_expiries",
    "Runs whose worker's lease expired, by what became of them (requeued, failed: out of attempts)",
    ["outcome"],
)
SENDS_WITHOUT_REPLY_MODE = Counter(
    "ccweb_sends_without_reply_mode",
    "Sends that left out replyMode and were sent one_way (SPEC's compatibility rule): agents "
    "whose tool definitions predate replyMode, by tool",
    ["tool"],
)
DATABASE_ERRORS = Counter(
    "ccweb_database_errors",
    "Times the database could not serve (unreachable, busy, full, file gone), by when: "
    "begin (a unit of work starting), work (its statements or commit), close, health",
    ["during"],
)
