"""``/mcp``: MCP over Streamable HTTP, stateless (SPEC §2), answered through ``asgi.Endpoint``.

The HTTP side of ``mcp.py``'s protocol: the ``Accept`` (JSON or one SSE event) and body
checks, the routing headers, and the caller's source (the app's route table serves ``POST``
only, behind the ``Origin`` check). No session id is issued or required. The source
conversation comes from a conversation credential when the request carries one
(``?credential=`` or ``Authorization: Bearer ccw1.…``; ``credentials.py``), else from the
query string (``sourceSessionId``/``sourceConversationId``, ``sourceHopCount``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache

from starlette.responses import Response

from ccweb_store.config import Settings
from ccweb_store.domain import errors
from ccweb_store.domain.context import Source
from ccweb_store.http.asgi import (
    CACHED_QUERY_BYTES,
    Answer,
    Incoming,
    JSONAnswer,
    parse_query,
)
from ccweb_store.http.auth import OPERATOR_SCOPE_KEY
from ccweb_store.http.metrics import note_call
from ccweb_store.http.payloads import Rejected, http_error, read_payload
from ccweb_store.protocol import jsonrpc
from ccweb_store.protocol.call_labels import noting
from ccweb_store.protocol.mcp import handle_mcp_payload
from ccweb_store.protocol.mcp_wire import ROUTING_HEADERS
from ccweb_store.services import credentials
from ccweb_store.services.credentials import CredentialRefused
from ccweb_store.store.uow import Store

#: What the 405 answer to any method but ``POST`` adds.
NOT_ALLOWED = "this server is stateless (no stream, no session); send JSON-RPC with POST"

#: Longer hop counts are refused before they are read (any count over the limit is refused
#: by a send anyway; Python refuses to read integers of more than 4,300 digits).
MAX_HOP_DIGITS = 9


class SourceError(ValueError):
    """The query string's source context is malformed."""


#: The routing headers' names as an ASGI scope spells them (lower case, bytes).
RAW_ROUTING_HEADERS = {name.encode("latin-1"): name for name in ROUTING_HEADERS}


def routing_headers(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """The routing headers of an HTTP request (the ASGI scope's raw pairs) by lower-case
    name, trimmed of surrounding whitespace; a repeated one is joined with ", " (RFC 9110
    §5.3), so it matches nothing."""
    found: dict[str, list[str]] = {}
    for raw_name, raw_value in raw:
        key = RAW_ROUTING_HEADERS.get(raw_name)
        if key is not None:
            found.setdefault(key, []).append(raw_value.decode("latin-1").strip(" \t"))
    return {key: ", ".join(values) for key, values in found.items()}


def query_source(query_string: bytes) -> Source:
    """``source_from_query`` of a raw query string, cached as ``asgi.parse_query`` is (a
    ``Source`` is immutable)."""
    if len(query_string) <= CACHED_QUERY_BYTES:
        return _cached_query_source(query_string)
    return source_from_query(parse_query(query_string))


@lru_cache(maxsize=1024)
def _cached_query_source(query_string: bytes) -> Source:
    return source_from_query(parse_query(query_string))


def source_from_query(query: Mapping[str, str]) -> Source:
    """The caller's source conversation and hop count, from the query string."""
    session_id = query.get("sourceSessionId") or query.get("sourceConversationId") or None
    raw_hops = query.get("sourceHopCount")
    hop_count = 0
    if raw_hops not in (None, ""):
        if not raw_hops.isascii() or not raw_hops.isdigit() or len(raw_hops) > MAX_HOP_DIGITS:
            shown = raw_hops if len(raw_hops) <= 40 else raw_hops[:40] + "…"
            raise SourceError(
                f"sourceHopCount must be a non-negative integer of at most {MAX_HOP_DIGITS} "
                f"digits, got {shown!r}: leave it out for a conversation a person started (0)"
            )
        hop_count = int(raw_hops)
    return Source(session_id, hop_count)


def presented_token(incoming: Incoming) -> str | None:
    """The conversation credential a request carries: ``?credential=`` or a bearer token
    shaped like one (an operator token in the header is not one)."""
    in_query = incoming.query.get(credentials.QUERY_PARAMETER)
    authorization = incoming.header(b"authorization")
    if authorization is None:
        return in_query
    scheme, _, value = authorization.partition(" ")
    value = value.strip()
    in_header = (
        value if scheme.lower() == "bearer" and credentials.looks_like_token(value) else None
    )
    if in_query is not None and in_header is not None and in_query != in_header:
        raise SourceError(
            "two different conversation credentials: one in ?credential= and another in the "
            "Authorization header; send one"
        )
    return in_query if in_query is not None else in_header


async def resolve_source(incoming: Incoming, store: Store, settings: Settings) -> Source:
    """The caller's source: bound by its credential when it presents one (a
    ``sourceSessionId`` that names another conversation is refused), else the query string.

    A bound source's hop count is the larger of the credential's and ``sourceHopCount``.
    Raises ``SourceError`` (malformed query) or ``CredentialRefused``.
    """
    source = query_source(incoming.scope.get("query_string", b""))
    token = presented_token(incoming)
    if token is None:
        if settings.require_conversation_credentials and not incoming.scope.get(OPERATOR_SCOPE_KEY):
            raise CredentialRefused(
                "this server requires a conversation credential on /mcp "
                "(CCWEB_REQUIRE_CONVERSATION_CREDENTIALS): use the URL that "
                "`ccweb-store conversation-url <conversation id>` prints",
                code=errors.CREDENTIAL_REQUIRED,
            )
        return source
    binding = await credentials.authenticate(store, token)
    for name in ("sourceSessionId", "sourceConversationId"):
        named = incoming.query.get(name)
        if named and named != binding.conversation_id:
            raise CredentialRefused(
                f"this credential is bound to conversation {binding.conversation_id!r}, but "
                f"{name}={named!r} names another: a conversation can only speak as itself. "
                f"Leave {name} out of the URL (the credential names the conversation)",
                code=errors.CREDENTIAL_CONVERSATION_MISMATCH,
            )
    return Source(binding.conversation_id, max(source.hop_count, binding.hop_count), bound=True)


def credential_refusal(refused: CredentialRefused) -> Response:
    """403 for a credential used as another conversation, 401 for one that does not hold."""
    if refused.code == errors.CREDENTIAL_CONVERSATION_MISMATCH:
        return http_error(403, jsonrpc.FORBIDDEN, refused.message, {"code": refused.code})
    return http_error(
        401,
        jsonrpc.UNAUTHORIZED,
        refused.message,
        {"code": refused.code},
        headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
    )


#: The longest ``Accept`` value whose reading is kept (``sse_only``, at most 256 of them).
CACHED_ACCEPT_CHARS = 256


def sse_only(accept: str | None) -> bool | None:
    """``_wants_sse_only``, cached for a value of usual length: a client sends the same
    ``Accept`` with every request."""
    if accept is not None and len(accept) <= CACHED_ACCEPT_CHARS:
        return _wants_sse_only_cached(accept)
    return _wants_sse_only(accept)


def _wants_sse_only(accept: str | None) -> bool | None:
    """False: answer JSON; True: answer one SSE event; None: the client accepts neither."""
    if not accept or not accept.strip():
        return False
    types = {part.split(";", 1)[0].strip().lower() for part in accept.split(",")}
    if types & {"application/json", "application/*", "*/*"}:
        return False
    if "text/event-stream" in types:
        return True
    return None


_wants_sse_only_cached = lru_cache(maxsize=256)(_wants_sse_only)


async def answer_mcp(incoming: Incoming) -> Answer:
    """``POST /mcp``: answer a JSON-RPC message (or a 2025-03-26 batch) as JSON, as one SSE
    event, or 202 when nothing is owed; refuse what cannot be answered."""
    settings: Settings = incoming.state.settings
    store: Store = incoming.state.store
    sse = sse_only(incoming.header(b"accept"))
    if sse is None:
        return http_error(
            406,
            jsonrpc.INVALID_REQUEST,
            "not acceptable: accept application/json or text/event-stream",
        )
    try:
        source = await resolve_source(incoming, store, settings)
    except SourceError as exc:
        return http_error(400, jsonrpc.INVALID_REQUEST, str(exc))
    except CredentialRefused as refused:
        return credential_refusal(refused)
    try:
        payload = await read_payload(incoming, settings.max_body_bytes, parse_error_status=400)
    except Rejected as rejected:
        return rejected.response
    headers = routing_headers(incoming.scope["headers"])
    with noting() as labels:
        reply = await handle_mcp_payload(store, source, payload, headers)
    note_call(incoming.scope, payload, reply.body, labels)
    if reply.body is None:
        return Response(status_code=202)
    if sse and reply.status == 200:
        data = jsonrpc.dumps(reply.body).decode()
        return Response(
            f"event: message\ndata: {data}\n\n",
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )
    return JSONAnswer(reply.body, reply.status)
