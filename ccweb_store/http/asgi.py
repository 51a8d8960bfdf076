"""The lean path of ``POST /mcp`` and ``POST /rpc``: the one place the service steps around
parts of Starlette, because the ``send``, ``list`` and ``sdk`` rows of ``bench/compare.py``
need it.

Starlette routes the two endpoints and runs its middleware, the bearer auth and its exception
handlers around them as around any route. What the endpoints skip is Starlette's
request/response wrapper: ``Endpoint`` is the ASGI app the route calls, and it reads the
request straight from the scope and ``receive`` (``Incoming``) instead of building a
``Request`` whose ``Headers`` scan every header at each lookup and whose ``QueryParams``
parse the query string at each request, and it sends a JSON answer as two messages instead
of building a ``JSONResponse``. Those objects do more work than these endpoints need, and on
a cheap tool call that work is a large share of the request (the rows above measure it).
What a client sees does not change; the rules Starlette applies are kept:

- a header is read as its first occurrence (``Headers.get``), by its lower-case name as
  ASGI servers pass it, decoded as Latin-1;
- a query parameter is its last occurrence (``QueryParams``), blank values kept; the parsed
  query string is cached, since an agent sends the same URL with every call;
- the body is the ``http.request`` messages' bodies joined; ``http.disconnect`` before the
  end raises ``ClientDisconnect``, as ``Request.stream`` does, which ``Endpoint`` logs as one
  debug line and answers nothing to (the client is gone);
- a ``JSONAnswer`` carries ``content-length`` then ``content-type: application/json``, as
  ``JSONResponse`` writes them; its body is ``jsonrpc.dumps``.

Every other answer (refusals, SSE, 202/204) is a Starlette ``Response``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from functools import lru_cache, update_wrapper
from types import MappingProxyType
from typing import Any, NamedTuple
from urllib.parse import parse_qsl

from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ccweb_store.protocol.jsonrpc import dumps

log = logging.getLogger("ccweb_store.http")

JSON_CONTENT_TYPE = (b"content-type", b"application/json")


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

    @property
    def state(self) -> Any:
        """The app's ``state``: its settings and its store."""
        return self.scope["app"].state

    def header(self, name: bytes) -> str | None:
        """The first value of header ``name`` (lower case), as ``Headers.get`` reads it."""
        value = self.headers.get(name)
        return None if value is None else value.decode("latin-1")

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


class BodyTooLarge(Exception):
    """The request body is over the configured limit."""


async def read_body(incoming: Incoming, limit: int) -> bytes:
    """The request body, refused (``BodyTooLarge``) as soon as it exceeds ``limit`` bytes:
    before a byte is read when its declared length does."""
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


class JSONAnswer(NamedTuple):
    """An answer ``Endpoint`` sends as ``JSONResponse(body, status)`` would."""

    body: Any
    status: int = 200


#: What an endpoint's answer function returns: a JSON answer, or any Starlette response.
Answer = JSONAnswer | Response
AnswerFunction = Callable[[Incoming], Awaitable[Answer]]


class Endpoint:
    """The ASGI app a ``Route`` calls for ``answer(incoming)`` (an instance, so that Starlette
    does not wrap it as a request/response function)."""

    def __init__(self, answer: AnswerFunction) -> None:
        self.answer = answer
        update_wrapper(self, answer)  # the route's name and the docstring are the answer's

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            answer = await self.answer(Incoming(scope, receive))
        except ClientDisconnect:
            # Nobody is left to answer, and a client that hangs up is nobody's bug.
            log.debug(
                "the client of %s %s disconnected before its request ended",
                scope["method"], scope["path"],
            )  # fmt: skip
            return
        if isinstance(answer, Response):
            await answer(scope, receive, send)
            return
        body = dumps(answer.body)
        headers = [(b"content-length", str(len(body)).encode("latin-1")), JSON_CONTENT_TYPE]
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
