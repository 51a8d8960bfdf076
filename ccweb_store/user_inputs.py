"""``ccweb_list_user_inputs`` (SPEC §5, seed 003): the user's own words, read-only.

The newest ``limit`` non-blank ``user`` messages of a conversation, trimmed to a shared
budget of ``maxChars`` Unicode code points filled from the newest, returned oldest first.
The query is a backward range scan of ``ix_messages_session_id_role_seq`` that reads
``limit + 1`` candidates (the extra one tells whether older inputs exist); it never loads
the conversation and runs in a read-only unit of work.

Blank messages: SQL skips rows whose content is empty once ASCII whitespace is trimmed, as a
filter on the index range, so they cost a row visit but no round trip. Python has the last
word (``content.text_of`` joins a stored block list; Unicode whitespace counts as blank);
when it rejects a row the next batch continues below the last seq read, so the work stays
O(limit + blank rows among the newest inputs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ccweb_store import errors
from ccweb_store.arguments import bounded_int
from ccweb_store.content import text_of
from ccweb_store.context import Source, refuse_other_conversation
from ccweb_store.errors import InvalidInput
from ccweb_store.repositories import MessageText, validate_session_id
from ccweb_store.uow import Store, UnitOfWork

DEFAULT_LIMIT = 15
MAX_LIMIT = 50
DEFAULT_MAX_CHARS = 1000
MAX_MAX_CHARS = 1000


class Budgeted(NamedTuple):
    """One input after the budget: what is returned of it and how long it was (a tuple:
    made once per returned input, at a fraction of a frozen dataclass's cost)."""

    content: str
    original_chars: int
    truncated: bool


def apply_budget(texts_newest_first: Sequence[str], max_chars: int) -> tuple[list[Budgeted], bool]:
    """Spend ``max_chars`` code points from the newest text on; return the kept ones and a cut flag.

    The first text that does not fit keeps its beginning (``truncated``) and every older one
    is dropped. When the budget is already spent exactly, that text is dropped rather than
    returned empty. Python ``str`` length counts code points, so no code point is ever split.
    """
    kept: list[Budgeted] = []
    remaining = max_chars
    for text in texts_newest_first:
        if len(text) <= remaining:
            kept.append(Budgeted(text, len(text), False))
            remaining -= len(text)
            continue
        if remaining > 0:
            kept.append(Budgeted(text[:remaining], len(text), True))
        return kept, True
    return kept, False


def target_conversation(source: Source, args: Mapping[str, Any]) -> str:
    """The explicit ``conversationId`` (never falling back when it is bad), else the source.

    A caller bound to its conversation by a credential may name only that one.
    """
    explicit = args.get("conversationId")
    if explicit is not None:
        conversation_id = validate_session_id(explicit)
        refuse_other_conversation(source, conversation_id, "user inputs")
        return conversation_id
    if source.session_id is None:
        raise InvalidInput(
            "no conversation to read: pass conversationId, or call this tool from a "
            "conversation (sourceSessionId)",
            code=errors.MISSING_SOURCE_CONVERSATION,
        )
    return validate_session_id(source.session_id)


async def newest_inputs(
    uow: UnitOfWork, session_id: str, count: int, max_chars: int
) -> list[tuple[MessageText, str]]:
    """Up to ``count`` newest user messages with non-blank text, newest first, with that text.

    Reading stops early once their text exceeds ``max_chars``: the budget cuts there, so no
    older input is returned and ``hasMore`` is already true. The first batch is what a
    budget of that size usually spends (``first_batch``), the next ones the rest of
    ``count``: with inputs of a few hundred characters the default budget reads 4 rows, not 16.
    """
    found: list[tuple[MessageText, str]] = []
    chars = 0
    before_seq: int | None = None
    batch_size = first_batch(max_chars)
    while len(found) < count and chars <= max_chars:
        wanted = min(count - len(found), batch_size)
        batch = await uow.messages.latest_nonblank_by_role(
            session_id, "user", limit=wanted, before_seq=before_seq
        )
        for row in batch:
            text = text_of(row.content)
            if text and not text.isspace():  # what ``text.strip()`` tells, without a copy
                found.append((row, text))
                chars += len(text)
        if len(batch) < wanted:
            break
        before_seq = batch[-1].seq
        batch_size = count
    return found


#: The length of a typical input, to guess how many rows a budget spends (``first_batch``).
TYPICAL_INPUT_CHARS = 250


def first_batch(max_chars: int) -> int:
    """How many inputs the first read asks for: as many as spend ``max_chars`` at
    ``TYPICAL_INPUT_CHARS`` each. Shorter inputs cost one more read (of the rest); longer
    ones cost nothing."""
    return -(-max_chars // TYPICAL_INPUT_CHARS)


async def list_user_inputs(store: Store, source: Source, args: Mapping[str, Any]) -> dict[str, Any]:
    """``ccweb_list_user_inputs``: the conversation's newest user inputs within a budget."""
    limit = bounded_int(args, "limit", DEFAULT_LIMIT, MAX_LIMIT)
    max_chars = bounded_int(args, "maxChars", DEFAULT_MAX_CHARS, MAX_MAX_CHARS)
    session_id = target_conversation(source, args)
    async with store.read_uow() as uow:
        candidates = await newest_inputs(uow, session_id, limit + 1, max_chars)
        if not candidates:  # an input proves the conversation exists; no input proves nothing
            await uow.sessions.require(session_id)
    older_beyond_limit = len(candidates) > limit
    candidates = candidates[:limit]
    kept, cut = apply_budget([text for _, text in candidates], max_chars)
    inputs = []
    total_chars = 0
    for (row, _), item in zip(candidates, kept, strict=False):
        chars = len(item.content)
        total_chars += chars
        inputs.append(
            {
                "messageId": row.id,
                "createdAt": row.created_at,
                "content": item.content,
                "contentChars": chars,
                "originalChars": item.original_chars,
                "truncated": item.truncated,
            }
        )
    inputs.reverse()
    return {
        "conversationId": session_id,
        "limit": limit,
        "maxChars": max_chars,
        "totalChars": total_chars,
        "returned": len(inputs),
        "hasMore": older_beyond_limit or cut,
        "inputs": inputs,
    }
