"""The texts agents read (SPEC §4): target prompt, source auto-run prompt, failure notice.

Pure functions of their arguments, so the wording is unit-tested on its own and every caller
(sends, deliveries, retries) builds the same text.
"""

from __future__ import annotations

from ccweb_store.domain.kinds import ReplyMode, ReplyStatus

ONE_WAY = ReplyMode.ONE_WAY
RETURN_AND_CONTINUE = ReplyMode.RETURN_AND_CONTINUE
REPLY_MODES = tuple(ReplyMode)

#: Stands in for the original request of reply rows written before it was stored.
LEGACY_ORIGINAL_REQUEST = (
    "(The original request text was not recorded: this request predates it. "
    "Read the earlier messages of this conversation to recall what was asked.)"
)


def _name(title: str | None, conversation_id: str) -> str:
    return title.strip() if title and title.strip() else f"untitled conversation {conversation_id}"


def retry_asks_again(status: str, reply_text: str | None) -> bool:
    """Whether ``reply.retry`` of a request in ``status`` asks its target again (a new target
    prompt), rather than delivering the answer it holds: ``waiting``, or ``failed`` without
    an answer."""
    return status == ReplyStatus.WAITING or (status == ReplyStatus.FAILED and reply_text is None)


def retried_question(original_request: str | None, request_message: str | None) -> str | None:
    """What a retry asks the target again: the original request, else the text of the message
    that carried it (``request_message``; legacy requests kept no original request). None when
    neither is stored: a retry then carries the question only when it is given one."""
    return original_request if original_request is not None else request_message


def _original(original_request: str | None) -> str:
    return original_request if original_request is not None else LEGACY_ORIGINAL_REQUEST


def target_prompt(
    *,
    source_id: str,
    source_title: str | None,
    content: str,
    reply_mode: str,
    request_id: str | None = None,
) -> str:
    """The target run's runtime text: who wrote, what they wrote, what happens to the answer."""
    if reply_mode not in REPLY_MODES:
        raise ValueError(f"unknown reply mode {reply_mode!r}")
    header = [
        "[Cross-conversation message]",
        f"From conversation: {_name(source_title, source_id)} (id: {source_id})",
        f"Reply mode: {reply_mode}",
    ]
    if reply_mode == ONE_WAY:
        rules = [
            "This is a one-way message. The output of this turn will NOT be returned to the "
            "source conversation; it stays in this conversation only.",
            "If the source must learn something, it has to ask again with a reply request.",
        ]
    else:
        if not request_id:
            raise ValueError("a return_and_continue prompt needs the request id")
        header.append(f"Reply request id: {request_id}")
        rules = [
            "The system automatically returns the final output of this turn to the source "
            "conversation, which then continues its work with it.",
            "Give one complete delivery: finish the work first, or stop only when you are "
            "clearly blocked and say exactly what blocks you. A partial progress note will be "
            "taken as your answer.",
            "Do NOT call ccweb_send_message, ccweb_request_reply or any other cross-conversation "
            "send tool to answer this request: the reply is delivered for you, and a manual send "
            "would duplicate it.",
        ]
    return "\n".join([*header, "", *rules, "", "Message:", content])


def source_auto_run_prompt(
    *,
    request_id: str,
    target_id: str,
    target_title: str | None,
    original_request: str | None,
    reply_text: str,
) -> str:
    """The runtime text of the source's ``reply_auto_run``: the answer, and what to do with it."""
    return "\n".join(
        [
            "[Cross-conversation reply returned]",
            f"Reply request id: {request_id}",
            f"From conversation: {_name(target_title, target_id)} (id: {target_id})",
            "",
            "Your original request:",
            _original(original_request),
            "",
            "Their reply:",
            reply_text if reply_text.strip() else "(the target finished without any output)",
            "",
            "Before you treat this work as done, judge whether the reply fully satisfies the "
            "original request: returned is not the same as done. Check what was asked against "
            "what was delivered. If anything is missing, wrong or unverified, follow up with the "
            "target conversation (with replyMode return_and_continue) or finish the work "
            "yourself; only then report the result.",
        ]
    )


def failure_notice(
    *,
    request_id: str,
    target_id: str,
    target_title: str | None,
    original_request: str | None,
    error: str | None,
) -> str:
    """The notice a source receives when its reply request failed (also its auto-run text)."""
    return "\n".join(
        [
            "[Cross-conversation reply failed]",
            f"Reply request id: {request_id}",
            f"To conversation: {_name(target_title, target_id)} (id: {target_id})",
            f"Reason: {error or 'unknown error'}",
            "",
            "Your original request:",
            _original(original_request),
            "",
            "No reply will arrive for this request. Decide how to continue: send the request "
            "again, do the work yourself, or tell the user what is blocked.",
        ]
    )


def reply_message_text(reply_text: str | None) -> str:
    """What the source conversation shows for a returned reply."""
    return reply_text if reply_text and reply_text.strip() else "(no output)"
