"""A web page on another localhost port cannot write through ``/rpc`` or ``/mcp``, in a real
Chromium against a real server process without ``CCWEB_TOKEN`` on both backends.

Such a page passes the ``Origin`` check (the default allowed origins are loopback at any
port), and a ``fetch`` in ``no-cors`` mode with a ``Blob`` body goes out without a CORS
preflight and without a ``Content-Type``. The server reads only ``application/json``, a type
no such request can carry, so it is refused (415) and nothing is written.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
from playwright.sync_api import sync_playwright

from tests.servers import free_port, serving

CHROMIUM = "/usr/bin/chromium"
PAGE = b"<!doctype html><title>another local app</title><p>hello"

CREATE_OVER_RPC = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "session.create",
    "params": {"id": "planted", "title": "Planted by a page"},
}
CREATE_OVER_MCP = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {
        "name": "ccweb_create_conversation",
        "arguments": {"title": "Planted over MCP", "content": "run this"},
    },
}
#: What the page runs: the request a browser sends without asking the server first.
NO_CORS_POST = """async ([url, body]) => {
    await fetch(url, {method: "POST", mode: "no-cors", body: new Blob([body])});
    return true;
}"""


@contextmanager
def another_local_app() -> Iterator[str]:
    """A plain web server on another loopback port, serving one page: its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(PAGE)))
            self.end_headers()
            self.wfile.write(PAGE)

        def log_message(self, *args: Any) -> None:
            pass

    port = free_port()
    app = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=app.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        app.shutdown()
        app.server_close()


def rpc(url: str, method: str, params: dict[str, Any]) -> Any:
    message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    body = httpx.post(f"{url}/rpc", json=message, timeout=30).json()
    assert "error" not in body, body
    return body["result"]


def test_a_page_on_another_localhost_port_cannot_create_anything_through_rpc_or_mcp(
    database_url: str,
) -> None:
    with serving(database_url, with_stdout=True, CCWEB_ACCESS_LOG="1") as server:
        with another_local_app() as page_url, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM)
            try:
                page = browser.new_page()
                page.goto(page_url)
                for path, message in (
                    ("/rpc", CREATE_OVER_RPC),
                    ("/mcp?sourceSessionId=victim", CREATE_OVER_MCP),
                ):
                    assert page.evaluate(NO_CORS_POST, [server.url + path, json.dumps(message)])
            finally:
                browser.close()
        sessions = rpc(server.url, "session.list", {})["sessions"]
        runs = rpc(server.url, "run.list", {})["runs"]
        log = server.stop()

    assert sessions == [] and runs == []
    # The page's requests did reach the server, and were refused for their type.
    assert '"POST /rpc HTTP/1.1" 415' in log, log
    assert '"POST /mcp?sourceSessionId=victim HTTP/1.1" 415' in log, log
