"""What the fuzzer checks beyond an answer's class (``bench/fuzz_http.py``).

- The JSON-RPC id (``id_problem``): an answer carries the id of its request exactly, read
  from the text (``parse_raw`` keeps numbers as written): ``-9223372036854775809`` must come
  back as that integer, not as a float, and a string as the same string; null only for a
  request whose id could not be read or an error answered before it was.
- -32603 anywhere in an answer, a batch's included (``internal_error``).
- The read-back (``read_back``): after a round of inputs, every conversation's
  ``message.list`` (every page) and ``reply.list`` (every page), and ``session.list`` and
  ``reply.list`` themselves, must answer a result. A value that was accepted, or half
  written by a refused call, must never make a later read fail (a "poison row"). Between
  rounds, after each input that wrote rows, the newest messages of the conversations it
  names are read (``ReadBack.messages``): the first to fail names the input that wrote it.
- ``shorten`` writes a failing body in about 200 characters, ``expand`` gives it back.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import orjson

from bench.harness import JSON_HEADERS, Connection, ServerGone

#: How long one answer may take before its request counts as cut off.
ANSWER_SECONDS = 60.0
#: The read-back's page size: the largest the host API serves.
READ_PAGE = 500
MAX_PAGES = 1000
INTERNAL_ERROR = -32603


class IntText(str):
    """An integer as written in JSON text."""


class FloatText(str):
    """A number with a fraction or exponent as written in JSON text."""


def _no_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def parse_raw(text: str | bytes) -> Any:
    """JSON text decoded with every number kept as written (``IntText``, ``FloatText``);
    ``ValueError`` for what is not JSON (``NaN`` included), ``RecursionError`` past
    Python's nesting limit."""
    return json.loads(text, parse_int=IntText, parse_float=FloatText, parse_constant=_no_constant)


def same_id(sent: Any, answered: Any) -> bool:
    """Whether an answered id (``parse_raw``) is the sent one: an integer as an integer of
    the same value, another number as a number of the same decimal value, a string as the
    same string, null as null."""
    if isinstance(sent, IntText):
        return isinstance(answered, IntText) and int(sent) == int(answered)
    if isinstance(sent, FloatText):
        return isinstance(answered, IntText | FloatText) and Decimal(sent) == Decimal(answered)
    if isinstance(sent, str):
        return type(answered) is str and answered == sent
    return sent is None and answered is None


#: Errors answered before a request's id is read: they may carry ``"id": null``.
UNREAD_ID_CODES = frozenset({-32700, -32600})


def request_ids(body: bytes) -> tuple[str, ...] | None:
    """The ids an answer to ``body`` may carry, as ``Hostile.ids`` (none: it must be null);
    None when there is nothing to check: a batch, a notification, a body too deep to read."""
    try:
        message = parse_raw(body)
    except RecursionError:
        return None
    except ValueError:
        return ()
    if not isinstance(message, dict) or "id" not in message:
        return None
    sent = message["id"]
    if sent is None:
        return ("null",)
    if isinstance(sent, IntText | FloatText):
        return (str(sent),)
    return (json.dumps(sent),) if isinstance(sent, str) else ()


def id_problem(
    ids: tuple[str, ...], answer: Any, status: int, code: int | None, kind: str
) -> str | None:
    """What is wrong with the id of ``answer`` (a single answer, ``parse_raw``), if anything.

    ``ids`` are those it may carry; none: it must be null. A null id is also right for an
    HTTP error (documented as ``"id": null``), and for an error answered before the id is
    read: ``UNREAD_ID_CODES``, or a value the JSON rule refuses (``kind``
    ``invalid_json_value`` or ``too_deep``), which may be the id itself.
    """
    if not isinstance(answer, dict) or "id" not in answer:
        return None
    answered = answer["id"]
    unread = status != 200 or code in UNREAD_ID_CODES or kind in ("invalid_json_value", "too_deep")
    if answered is None and (not ids or unread):
        return None
    if any(same_id(parse_raw(text), answered) for text in ids):
        return None
    shown = answered if isinstance(answered, IntText | FloatText) else json.dumps(answered)
    sent = " or ".join(shorten(text, 60) for text in ids) or "no readable id"
    return f"sent id {sent}, answered with id {shorten(str(shown), 60)} ({kind})"


def id_kind(ids: tuple[str, ...]) -> str:
    """What an id sent was, in a word or two: what id failures are grouped by."""
    if not ids:
        return "an id that cannot be read"
    sent = parse_raw(ids[-1])
    if isinstance(sent, IntText):
        return "an integer id" + ("" if -(2**63) <= int(sent) < 2**64 else " outside 64 bits")
    if isinstance(sent, FloatText):
        return "a number id"
    return "a string id" if isinstance(sent, str) else "a null id"


def error_code(message: Any) -> int | None:
    """The JSON-RPC error code of a ``parse_raw`` message, if it is an error."""
    error = message.get("error") if isinstance(message, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return int(code) if isinstance(code, IntText) else None


def internal_error(message: Any, body: bytes) -> bool:
    """Whether an answer (or one answer of a batch) is a JSON-RPC -32603; ``message`` is
    its ``parse_raw`` reading, None when it could not be read here (too deep)."""
    if message is None:
        return b'"code":%d' % INTERNAL_ERROR in body
    messages = message if isinstance(message, list) else [message]
    return any(error_code(item) == INTERNAL_ERROR for item in messages)


# --- reading every conversation back --------------------------------------------------------


@dataclass
class ReadBack:
    """Reads of every conversation after a round, and those that did not answer a result."""

    connection: Connection
    calls: int = 0
    failures: list[tuple[str, str, str]] = field(default_factory=list)  # method, whose, why

    async def call(self, method: str, params: Mapping[str, Any], whose: str) -> Any:
        """The result of a host call, or None (a failure recorded)."""
        self.calls += 1
        message = {"jsonrpc": "2.0", "id": self.calls, "method": method, "params": params}
        try:
            answer = await asyncio.wait_for(
                self.connection.request("POST", "/rpc", orjson.dumps(message), JSON_HEADERS),
                ANSWER_SECONDS,
            )
        except (ServerGone, TimeoutError) as exc:
            await self.connection.close()
            self.failures.append((method, whose, f"no answer: {exc}"))
            return None
        try:
            body = orjson.loads(answer.body)
        except ValueError:
            body = None
        if answer.status == 200 and isinstance(body, dict) and "result" in body:
            return body["result"]
        why = f"HTTP {answer.status}"
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):
            why += f", error {error.get('code')}: {str(error.get('message'))[:120]}"
        else:
            why += f", {answer.headers.get('content-type', '')!r} {answer.body[:120]!r}"
        self.failures.append((method, whose, why))
        return None

    async def pages(self, method: str, params: Mapping[str, Any], whose: str) -> list[Any]:
        """Every page of a ``nextCursor`` list; the pages that answered."""
        results, cursor = [], None
        for _ in range(MAX_PAGES):
            page = await self.call(method, {**params, "cursor": cursor}, whose)
            if page is None:
                break
            results.append(page)
            cursor = page.get("nextCursor")
            if not cursor:
                break
        return results

    async def messages(self, session_id: str, after: int = 0) -> int | None:
        """``message.list`` of one conversation from ``afterSeq`` ``after``, every page: the
        last seq read, or None when a page failed."""
        for _ in range(MAX_PAGES):
            params = {"sessionId": session_id, "afterSeq": after, "limit": READ_PAGE}
            page = await self.call("message.list", params, session_id)
            if page is None:
                return None
            if len(page["messages"]) < READ_PAGE:
                return int(page["nextAfterSeq"])
            if page["nextAfterSeq"] <= after:
                self.failures.append(("message.list", session_id, "nextAfterSeq did not advance"))
                return None
            after = page["nextAfterSeq"]
        return after

    async def conversation(self, session_id: str) -> None:
        """``message.list`` and ``reply.list`` of one conversation, every page."""
        await self.messages(session_id)
        await self.pages("reply.list", {"sessionId": session_id, "limit": READ_PAGE}, session_id)


async def read_back(port: int, fallback: Iterable[str]) -> tuple[ReadBack, list[str]]:
    """Every conversation (``session.list``, every page; ``fallback`` when it lists none), its
    messages and reply requests, and every reply request: each read must answer a result.
    The reads, and the conversations read."""
    done = ReadBack(Connection(port))
    sessions = await done.pages("session.list", {"limit": READ_PAGE}, "*")
    ids = [session["id"] for page in sessions for session in page["sessions"]] or list(fallback)
    for session_id in ids:
        await done.conversation(session_id)
    await done.pages("reply.list", {"limit": READ_PAGE}, "*")
    await done.connection.close()
    return done, ids


# --- short bodies -----------------------------------------------------------------------------

#: A unit of one character, or of up to 12 starting with a bracket, a brace or a backslash
#: (so that a run of nesting is cut at its brackets), repeated 5 times or more.
_RUN = re.compile(r"([\[\]{}\\].{0,11}?|.)\1{4,}", re.DOTALL)
_EXPANSION = re.compile(r"⟪(\d+)×(.+?)⟫", re.DOTALL)


def shorten(text: str, width: int = 200) -> str:
    """``text`` in about ``width`` characters: a run of a unit (``_RUN``) written 5 times or
    more becomes ``⟪count×unit⟫`` (``expand`` undoes it); what is still too long
    keeps its start and end around ``…``."""
    short = _RUN.sub(lambda m: f"⟪{len(m[0]) // len(m[1])}×{m[1]}⟫", text)
    if len(short) > width:
        short = short[: width - 40] + "…" + short[-39:]
    return short


def expand(short: str) -> str:
    """The text ``shorten`` collapsed (when it did not also cut it)."""
    return _EXPANSION.sub(lambda m: m[2] * int(m[1]), short)
