"""The HTTP plumbing shared by ``POST /mcp`` and ``POST /rpc``, on the bare ASGI interface.

Both endpoints are ASGI functions that read their request straight from the scope and
``receive`` (``Incoming``) and send a JSON answer as two messages (``send_json``), without
building Starlette's ``Request``, ``Headers``, ``QueryParams`` or ``JSONResponse``. Those
objects cost a cheap tool call about a third of its CPU: each parses or copies more than the
endpoint reads. What a client sees does not change; the rules Starlette applies are kept:

- a header is read as its first occurrence (``Headers.get``), by its lower-case name as
  ASGI servers pass it, decoded as Latin-1;
- a query parameter is its last occurrence (``QueryParams``), blank values kept; the parsed
  query string is cached, since an agent sends the same URL with every call;
- the body is the ``http.request`` messages' bodies joined; ``http.disconnect`` before the
  end raises ``ClientDisconnect``, as ``Request.stream`` does;
- a JSON answer carries ``content-length`` then ``content-type: application/json``, as
  ``JSONResponse`` writes them; its body is ``jsonrpc.dumps``.

Rare answers (errors, SSE, 202/204) are Starlette ``Response`` objects sent with
``send_response``: the same code as before, off the busy path.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qsl

from starlette import responses
from starlette.datastructures import URL
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from ccweb_store.protocol.jsonrpc import INVALID_REQUEST, RpcError, dumps, error_response, parse

JSON_CONTENT_TYPE = (b"content-type", b"application/json")


class JSONResponse(responses.JSONResponse):
    """Starlette's JSON response, encoded by ``jsonrpc.dumps``."""

    def render(self, content: Any) -> bytes:
        return dumps(content)


class Incoming:
    """One HTTP request as the ASGI server handed it over: its scope, its ``receive`` and,
    by lower-case name, the first value of each header (raw bytes)."""

    __slots__ = ("headers", "receive", "scope")

    def __init__(self, scope: Scope, receive: Receive) -> None:
        self.scope = scope
        self.receive = receive
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            if name not in headers:
                headers[name] = value
        self.headers = headers

    def header(self, name: bytes) -> str | None:
        """The first value of header ``name`` (lower case), as ``Headers.get`` reads it."""
        value = self.headers.get(name)
        return None if value is None else value.decode("latin-1")

    def header_items(self) -> list[tuple[str, str]]:
        """Every header, repeats included, as ``Headers.items`` lists them."""
        return [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in self.scope["headers"]
        ]

    @property
    def query(self) -> Mapping[str, str]:
        """The query string's parameters (the last of a repeated one), as ``QueryParams``."""
        return parse_query(self.scope.get("query_string", b""))


#: Query strings up to this long are parsed once and kept (``parse_query``, at most 1,024 of
#: them); a longer one is parsed every time, so that no client can fill the memory with them.
CACHED_QUERY_BYTES = 1024


def parse_query(query_string: bytes) -> Mapping[str, str]:
    """A query string's parameters, read-only: cached when it is short, as every call from an
    agent repeats the URL it was given."""
    if len(query_string) <= CACHED_QUERY_BYTES:
        return _parse_query_cached(query_string)
    return _parse_query(query_string)


def _parse_query(query_string: bytes) -> Mapping[str, str]:
    return MappingProxyType(dict(parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)))


_parse_query_cached = lru_cache(maxsize=1024)(_parse_query)


async def send_json(send: Send, content: Any, status: int = 200) -> None:
    """Send ``content`` as a JSON answer: what ``JSONResponse(content, status)`` sends."""
    body = dumps(content)
    headers = [(b"content-length", str(len(body)).encode("latin-1")), JSON_CONTENT_TYPE]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def send_response(response: responses.Response, incoming: Incoming, send: Send) -> None:
    """Send a Starlette response (the rare answers)."""
    await response(incoming.scope, incoming.receive, send)


# Refusals before dispatch, and reading the JSON body.


def http_error(
    status_code: int,
    code: int,
    message: str,
    data: Any = None,
    *,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """An HTTP error whose body is a JSON-RPC error (``id: null``), as MCP clients expect."""
    return JSONResponse(
        error_response(None, RpcError(code, message, data)),
        status_code=status_code,
        headers=headers,
    )


class BodyTooLarge(Exception):
    """The request body is over the configured limit."""


class Rejected(Exception):
    """A request refused before dispatch; ``response`` is the HTTP answer to send."""

    def __init__(self, response: JSONResponse) -> None:
        super().__init__(response.status_code)
        self.response = response


async def read_body(incoming: Incoming, limit: int) -> bytes:
    """The request body, refused before it is parsed when it exceeds ``limit`` bytes."""
    declared = incoming.header(b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await incoming.receive()
        if message["type"] == "http.request":
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge
            if not message.get("more_body", False):
                return b"".join([*chunks, chunk]) if chunks else chunk
            chunks.append(chunk)
        elif message["type"] == "http.disconnect":
            raise ClientDisconnect


async def read_payload(incoming: Incoming, limit: int, *, parse_error_status: int = 200) -> Any:
    """The parsed JSON-RPC payload of the request; raises ``Rejected`` with a 415 for a body
    declared as something else than JSON, a 413 for an oversized body and a -32700 answer
    (with ``parse_error_status``) for malformed JSON."""
    content_type = incoming.header(b"content-type") or ""
    if not is_json_media_type(content_type):
        raise Rejected(
            http_error(
                415,
                INVALID_REQUEST,
                f"unsupported media type {content_type!r}: "
                "send the JSON-RPC body with Content-Type: application/json",
            )
        )
    try:
        body = await read_body(incoming, limit)
    except BodyTooLarge:
        raise Rejected(too_large(limit)) from None
    try:
        return parse(body)
    except RpcError as error:
        raise Rejected(
            JSONResponse(error_response(None, error), status_code=parse_error_status)
        ) from None


def is_json_media_type(content_type: str) -> bool:
    """Whether a ``Content-Type`` value declares JSON: ``application/json`` (any parameters),
    ``application/json-rpc``, a ``+json`` type, or nothing at all (read as JSON)."""
    if content_type in JSON_MEDIA_TYPES:  # the usual spelling, without a parameter
        return True
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type in JSON_MEDIA_TYPES or media_type.endswith("+json")


JSON_MEDIA_TYPES = frozenset({"", "application/json", "application/json-rpc"})


def method_not_allowed(scope: Scope, detail: str) -> JSONResponse:
    """The 405 answer to anything but ``POST``."""
    return http_error(
        405,
        INVALID_REQUEST,
        f"{scope['method']} {URL(scope=scope).path} is not supported: {detail}",
        headers={"Allow": "POST"},
    )


def too_large(limit: int) -> JSONResponse:
    """The 413 answer to an oversized body."""
    return http_error(
        413,
        INVALID_REQUEST,
        f"request body too large: the limit is {limit} bytes (CCWEB_MAX_BODY_BYTES)",
    )
