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

from collections.abc import Sequence
from typing import NamedTuple

from ccweb_store.contract.tool_answers import UserInput, UserInputs
from ccweb_store.contract.tools import ListUserInputs
from ccweb_store.domain import errors
from ccweb_store.domain.content import text_of
from ccweb_store.domain.context import Source, refuse_other_conversation
from ccweb_store.domain.errors import InvalidInput
from ccweb_store.domain.ids import validate_session_id
from ccweb_store.domain.kinds import Role
from ccweb_store.store.uow import Store, UnitOfWork


class Budget:
    """``maxChars`` code points shared by the inputs, spent from the newest one on.

    Each input that fits is returned whole. The first that does not keeps its beginning and
    ends the list: every older input is dropped (``cut``). When the budget is already spent
    exactly, that input is dropped rather than returned empty. Python ``str`` length counts
    code points, so no code point is ever split.
    """

    __slots__ = ("cut", "remaining")

    def __init__(self, max_chars: int) -> None:
        self.remaining = max_chars
        self.cut = False

    def spend(self, text: str) -> str | None:
        """What of ``text`` is returned (None: nothing); once ``cut`` is set, no older input
        is."""
        if len(text) <= self.remaining:
            self.remaining -= len(text)
            return text
        self.cut = True
        kept = text[: self.remaining] or None  # none left: dropped rather than returned empty
        self.remaining = 0
        return kept


class Budgeted(NamedTuple):
    """One input after the budget (``apply_budget``): what is returned of it and how long it
    was."""

    content: str
    original_chars: int
    truncated: bool


def apply_budget(texts_newest_first: Sequence[str], max_chars: int) -> tuple[list[Budgeted], bool]:
    """The ``Budget`` spent on ``texts_newest_first``: the kept ones and whether it cut."""
    budget = Budget(max_chars)
    kept: list[Budgeted] = []
    for text in texts_newest_first:
        content = budget.spend(text)
        if content is not None:
            kept.append(Budgeted(content, len(text), len(content) < len(text)))
        if budget.cut:
            break
    return kept, budget.cut


def target_conversation(source: Source, explicit: str | None) -> str:
    """The explicit ``conversationId`` (checked at the edge, never falling back when it is
    bad), else the source.

    A caller bound to its conversation by a credential may name only that one.
    """
    if explicit is not None:
        refuse_other_conversation(source, explicit, "user inputs")
        return explicit
    if source.session_id is None:
        raise InvalidInput(
            "no conversation to read: pass conversationId, or call this tool from a "
            "conversation (sourceSessionId)",
            code=errors.MISSING_SOURCE_CONVERSATION,
        )
    return validate_session_id(source.session_id)


#: The length of a typical input, to guess how many rows a budget spends (``first_batch``).
TYPICAL_INPUT_CHARS = 250


def first_batch(max_chars: int) -> int:
    """How many inputs the first read asks for: as many as spend ``max_chars`` at
    ``TYPICAL_INPUT_CHARS`` each. Shorter inputs cost one more read (of the rest); longer
    ones cost nothing."""
    return -(-max_chars // TYPICAL_INPUT_CHARS)


async def list_user_inputs(store: Store, source: Source, args: ListUserInputs) -> UserInputs:
    """``ccweb_list_user_inputs``: the conversation's newest user inputs within a budget."""
    limit, max_chars = args.limit, args.max_chars
    session_id = target_conversation(source, args.conversation_id)
    budget = Budget(max_chars)
    async with store.read_uow() as uow:
        inputs, older = await newest_inputs(uow, session_id, limit, budget)
        if not inputs and not older:  # an input proves the conversation exists; none, nothing
            await uow.sessions.require(session_id)
    inputs.reverse()
    return UserInputs(
        conversation_id=session_id,
        limit=limit,
        max_chars=max_chars,
        total_chars=max_chars - budget.remaining,
        returned=len(inputs),
        has_more=older,
        inputs=inputs,
    )


async def newest_inputs(
    uow: UnitOfWork, session_id: str, limit: int, budget: Budget
) -> tuple[list[UserInput], bool]:
    """The newest ``limit`` user inputs with non-blank text that ``budget`` keeps, newest
    first, and whether an older input exists beyond them.

    Reading stops at the input the budget cuts, or at one input more than ``limit`` (which
    tells that older ones exist). The first read asks for what a budget of that size usually
    spends (``first_batch``), the next ones for the rest: with inputs of a few hundred
    characters the default budget reads 4 rows, not 16.
    """
    inputs: list[UserInput] = []
    wanted = min(limit + 1, first_batch(budget.remaining))
    before_seq: int | None = None
    while True:
        batch = await uow.messages.latest_nonblank_by_role(
            session_id, Role.USER, limit=wanted, before_seq=before_seq
        )
        for message_id, _, content, created_at in batch:
            text = text_of(content)
            if not text or text.isspace():  # what ``text.strip()`` tells, without a copy
                continue
            if len(inputs) == limit:
                return inputs, True
            kept = budget.spend(text)
            if kept is not None:
                inputs.append(UserInput.of(message_id, created_at, kept, len(text)))
            if budget.cut:
                return inputs, True
        if len(batch) < wanted:
            return inputs, False
        before_seq = batch[-1][1]
        wanted = limit + 1 - len(inputs)
