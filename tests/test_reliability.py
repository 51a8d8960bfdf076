"""The quick versions of the reliability commands (bench/), on both backends, asserting the
invariants the commands print: no send lost or doubled under duplicated completions across two
server processes, no 5xx or undocumented answer to bad input and no row from a refused call,
no data without the token."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from bench import crash_server, fuzz_http, hostile, isolation, stress_load
from bench.harness import Answer, ServerProcess
from ccweb_store.domain import errors
from ccweb_store.protocol import registry as rpc

BACKEND_NAMES = {"sqlite": "SQLite", "postgres": "PostgreSQL"}


@pytest.mark.slow
def test_500_sends_over_two_servers_with_every_run_completed_twice_lose_and_double_nothing(
    backend: str, database_url: str
) -> None:
    options = stress_load.LoadOptions(
        requests=500, conversations=60, senders=6, workers=6, servers=2, seconds=300
    )
    report = stress_load.check_backend(BACKEND_NAMES[backend], database_url, options)
    assert report.ok, report.render()
    assert report.value("requests sent (acknowledged)") == 500
    assert report.value("duplicates") == 0
    assert report.value("lost") == 0
    assert report.value("concurrent completions that disagreed") == 0
    assert report.value("left open (run or reply not finished)") == 0


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_every_postgresql_connection_ended_under_load_loses_and_doubles_nothing(
    backend: str, database_url: str
) -> None:
    """``crash_server.py --cut-connections``: the server's connections end (as when PostgreSQL
    restarts) three times under load; it keeps serving, and every acknowledged send finishes
    once."""
    options = crash_server.CrashOptions(
        kills=3,
        phase_seconds=1.0,
        conversations=12,
        senders=3,
        workers=3,
        seconds=120,
        cut_connections=True,
    )
    report = crash_server.crash_backend(BACKEND_NAMES[backend], database_url, options)
    assert report.ok, report.render()
    assert report.value("sends acknowledged") > 0
    assert report.value("duplicates") == 0
    assert report.value("lost") == 0
    assert report.value("stuck (a run or reply not finished)") == 0


def test_the_fuzz_corpus_and_random_inputs_get_documented_answers_and_write_nothing(
    backend: str, database_url: str
) -> None:
    options = fuzz_http.FuzzOptions(inputs=300, hostile=0, seconds=300, seed=3)
    report = fuzz_http.fuzz_backend(BACKEND_NAMES[backend], database_url, options)
    assert report.ok, report.render()
    assert report.value("5xx answers") == 0
    assert report.value("-32603 answers") == 0
    assert report.value("answers whose id is not the request's") == 0
    assert report.value("answers that are not a documented error") == 0
    assert report.value("rows written by refused calls") == 0
    assert report.value("read-back calls that failed") == 0
    tried = report.value("inputs tried (corpus + random + hostile)")
    assert tried.startswith(f"{len(fuzz_http.load_corpus()) + 300:,} ")


@pytest.mark.slow
def test_hostile_values_anywhere_get_no_5xx_no_internal_error_and_leave_conversations_readable(
    backend: str, database_url: str
) -> None:
    """``fuzz_http.py --hostile``: every (target, slot) pair gets a value of every family but
    the last (strings near the body limit, the slowest: the command sends them); after every
    250 inputs every conversation's messages and reply requests must still be read."""
    count = len(hostile.targets(fuzz_http.RPC_PARAMS)) * (len(hostile.FAMILIES) - 1)
    options = fuzz_http.FuzzOptions(
        inputs=0, corpus=False, hostile=count, round_size=250, seconds=300, seed=3
    )
    report = fuzz_http.fuzz_backend(BACKEND_NAMES[backend], database_url, options)
    assert report.ok, report.render()
    assert report.value("inputs tried (corpus + random + hostile)").startswith(f"{count:,} ")
    assert report.value("5xx answers") == 0
    assert report.value("-32603 answers") == 0
    assert report.value("answers whose id is not the request's") == 0
    assert report.value("read-back calls that failed") == 0
    assert report.value("rows written by refused calls") == 0


def test_without_the_token_no_request_gets_data_and_a_foreign_origin_gets_403(
    database_url: str,
) -> None:
    token = "isolation-test-token-1234567890"
    server = ServerProcess(database_url, {"CCWEB_TOKEN": token}).start()
    try:

        async def checks() -> tuple[isolation.Tally, isolation.Tally]:
            await isolation.seed(server.port, token)
            # The right token first: past the wrong ones, the login throttle refuses it too.
            origins = await isolation.foreign_origins(server.port, token)
            return await isolation.without_token(server.port, token, database_url), origins

        tokenless, origins = asyncio.run(checks())
    finally:
        server.stop()
    assert tokenless.tried > 800
    assert tokenless.with_data == []
    assert tokenless.wrong == []
    assert tokenless.refused == tokenless.tried - len(isolation.wrong_credentials(token))
    assert origins.wrong == [] and origins.refused == origins.tried


@pytest.mark.slow
def test_every_non_loopback_start_without_a_token_refuses_and_creates_nothing(
    tmp_path: Path,
) -> None:
    binds = isolation.public_binds(tmp_path)
    assert binds.wrong == []
    assert binds.refused == binds.tried == 6


def test_the_tool_argument_corpus_is_what_the_registry_generates() -> None:
    lines = fuzz_http.TOOL_CORPUS.read_text().splitlines()
    expected = fuzz_http.tool_argument_corpus()
    assert [json.loads(line) for line in lines] == json.loads(json.dumps(expected)), (
        "run: python bench/fuzz_http.py --write-tool-corpus"
    )


def test_the_fuzzer_knows_every_host_method_and_every_error_code() -> None:
    assert set(fuzz_http.RPC_PARAMS) == set(rpc.METHODS)
    assert errors.TARGET_BUSY in fuzz_http.DOCUMENTED_CODES
    assert errors.LEASE_LOST in fuzz_http.DOCUMENTED_CODES
    for code in ("invalid_json_value", "database_file_missing", "database_unavailable"):
        assert code in fuzz_http.DOCUMENTED_CODES
    assert "domain_error" not in fuzz_http.DOCUMENTED_CODES  # a DomainError without a code


def test_every_domain_error_code_the_service_raises_is_a_named_documented_one() -> None:
    package = fuzz_http.ROOT / "ccweb_store"
    spelled_out = [
        f"{path.relative_to(package)}: {match}"
        for path in package.rglob("*.py")
        for match in re.findall(r"code=\"[a-z_]+\"", path.read_text())
    ]
    assert spelled_out == [], "name the code in ccweb_store/errors.py and list it in the docs"


@pytest.mark.parametrize(
    ("status", "content_type", "body", "verdict"),
    [
        (500, "text/plain", b"Internal Server Error", "undocumented: HTTP 500"),
        (405, "text/plain; charset=utf-8", b"Method Not Allowed", "undocumented: HTTP 405"),
        (
            200,
            "application/json",
            b'{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"internal error"}}',
            "undocumented: JSON-RPC error -32603",
        ),
        (
            200,
            "application/json",
            b'{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":'
            b'"x","data":{"code":"conflict"}}}',
            "undocumented: -32000",
        ),
        (
            200,
            "application/json",
            b'{"id":1,"result":{}}',
            "undocumented: HTTP 200, not a JSON-RPC",
        ),
        (
            413,
            "application/json",
            b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"too large"}}',
            "too_large",
        ),
        (
            200,
            "application/json",
            b'{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":'
            b'"x","data":{"code":"target_busy"}}}',
            "error:target_busy",
        ),
        (
            200,
            "application/json",
            b'{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":'
            b'"x","data":{"code":"lease_lost"}}}',
            "error:lease_lost",
        ),
        (
            200,
            "application/json",
            b'{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":'
            b'"x","data":{"code":"database_unavailable","retryAfter":1}}}',
            "error:database_unavailable",
        ),
        (
            200,
            "application/json",
            b'{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":'
            b'"x","data":{"code":"database_file_missing","path":"/x.db"}}}',
            "error:database_file_missing",
        ),
        (
            200,
            "application/json",
            b'{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"x","data":'
            b'{"code":"invalid_json_value","path":"params.metadata.k","limit":64}}}',
            "invalid_json_value",
        ),
        (
            200,
            "application/json",
            b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"x","data":'
            b'{"code":"invalid_json_value","path":"params","limit":64}}}',
            "too_deep",
        ),
        (
            200,
            "application/json",
            b'{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"x","data":'
            b'{"code":"invalid_json_value"}}}',
            "undocumented: invalid_json_value without data.path",
        ),
    ],
)
def test_the_fuzzer_tells_documented_answers_from_the_rest(
    status: int, content_type: str, body: bytes, verdict: str
) -> None:
    answer = Answer(status, {"content-type": content_type}, body, 0.0)
    assert fuzz_http.classify("/rpc", answer).startswith(verdict)


DOCS = fuzz_http.ROOT / "docs" / "errors.md"


def _section(start: str, end: str) -> str:
    text = DOCS.read_text()
    return text[text.index(start) : text.index(end)]


def test_the_docs_list_exactly_the_domain_error_codes_the_fuzzer_accepts() -> None:
    section = _section("### Domain error codes", "## Limits")
    listed = set(re.findall(r"^\| `([a-z_]+)` \|", section, re.MULTILINE))
    assert listed == fuzz_http.DOCUMENTED_CODES


def test_the_docs_list_exactly_the_error_answers_the_fuzzer_accepts() -> None:
    section = _section("## Documented answers", "### Domain error codes")
    listed = set()
    for endpoint, status, code in re.findall(
        r"^\| (both|`/mcp`|`/rpc`) \| (\d{3})[^|]*\| (-\d+)", section, re.MULTILINE
    ):
        if int(code) == fuzz_http.DOMAIN_ERROR:
            continue
        for path in ("/mcp", "/rpc") if endpoint == "both" else (endpoint.strip("`"),):
            listed.add((path, int(status), int(code)))
    assert listed == set(fuzz_http.ERROR_ANSWERS)
