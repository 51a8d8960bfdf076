"""Every ccweb tool's answer (its ``outputSchema``), the failure every tool may answer
instead, and how the tools are listed (``tools/list``, the host's dynamic tools and composer
items). What a tool takes is ``contract.tools``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict

from ccweb_store.contract.base import Output, Timestamp, omitted
from ccweb_store.contract.objects import Reply
from ccweb_store.domain.kinds import ReplyMode, ReplyStatus, RunStatus


class SendAnswer(Output):
    """``ccweb_send_message``'s answer: what was queued and, for ``return_and_continue``, the
    waiting request and how its reply comes back."""

    ok: Literal[True]
    reply_mode: str
    message_id: str
    run_id: str
    target_conversation_id: str
    target_title: str | None
    delivery_status: str
    request_id: str = omitted()
    status: str = omitted()
    reply_delivery: Literal["automatic"] = omitted()
    source_auto_run: Literal[True] = omitted()

    @classmethod
    def of(
        cls,
        reply_mode: ReplyMode,
        message_id: str,
        run_id: str,
        target: tuple[str, str | None],
        request_id: str | None,
    ) -> SendAnswer:
        """The send to ``target`` (its id and title) written; a ``one_way`` one has no
        ``request_id``."""
        request: dict[str, Any] = {}
        if request_id is not None:
            request = {
                "request_id": request_id,
                "status": ReplyStatus.WAITING,
                "reply_delivery": "automatic",
                "source_auto_run": True,
            }
        return cls(
            ok=True,
            reply_mode=reply_mode,
            message_id=message_id,
            run_id=run_id,
            target_conversation_id=target[0],
            target_title=target[1],
            delivery_status=RunStatus.QUEUED,
            **request,
        )


class CreatedConversation(Output):
    """``ccweb_create_conversation``'s answer: the conversation and, when it was sent a first
    message, that send (its reply request's status as ``replyStatus``)."""

    ok: Literal[True]
    conversation_id: str
    title: str | None
    reply_mode: str = omitted()
    message_id: str = omitted()
    run_id: str = omitted()
    delivery_status: str = omitted()
    request_id: str = omitted()
    reply_status: str = omitted()
    reply_delivery: Literal["automatic"] = omitted()
    source_auto_run: Literal[True] = omitted()

    @classmethod
    def of(
        cls, conversation_id: str, title: str | None, sent: SendAnswer | None
    ) -> CreatedConversation:
        send: dict[str, Any] = {}
        if sent is not None:
            kept = ("reply_mode", "message_id", "run_id", "delivery_status", "request_id")
            send = {name: getattr(sent, name) for name in kept if name in sent.model_fields_set}
            if "request_id" in send:
                send |= {
                    "reply_status": sent.status,
                    "reply_delivery": sent.reply_delivery,
                    "source_auto_run": sent.source_auto_run,
                }
        return cls(ok=True, conversation_id=conversation_id, title=title, **send)


class ListedConversation(Output):
    """A conversation as ``ccweb_list_conversations`` lists it: metadata only."""

    conversation_id: str
    title: str | None
    agent: str | None
    created_at: Timestamp
    updated_at: Timestamp
    running: bool
    message_count: int
    is_source: bool


class ConversationListing(Output):
    """``ccweb_list_conversations``' answer: newest activity first, never message text."""

    conversations: list[ListedConversation]
    has_more: bool


class PendingReplyList(Output):
    """``ccweb_get_pending_reply``'s answer without a ``requestId``: the open requests."""

    replies: list[Reply]
    count: int


#: ``ccweb_get_pending_reply``'s answer: the one request asked for, or the open ones.
PendingReplyAnswer = Reply | PendingReplyList


class UserInput(Output):
    """One of the user's messages as ``ccweb_list_user_inputs`` returns it."""

    message_id: str
    #: As the repository reads it: the API's ISO text already.
    created_at: str | None
    content: str
    content_chars: int
    original_chars: int
    truncated: bool

    @classmethod
    def of(
        cls, message_id: str, created_at: str | None, content: str, original_chars: int
    ) -> UserInput:
        """``content``, all or the beginning of a message of ``original_chars``."""
        return cls(
            message_id=message_id,
            created_at=created_at,
            content=content,
            content_chars=len(content),
            original_chars=original_chars,
            truncated=len(content) < original_chars,
        )


class UserInputs(Output):
    """``ccweb_list_user_inputs``' answer."""

    conversation_id: str
    limit: int
    max_chars: int
    total_chars: int
    returned: int
    has_more: bool
    inputs: list[UserInput]


class PromptCard(Output):
    """``ccweb_prompt_user``'s answer: the form's id and the message that shows it."""

    ok: Literal[True]
    prompt_id: str
    message_id: str


class ToolErrorDetail(Output):
    """What went wrong: the error's code, its message, and what the error adds (``limit``, …)."""

    model_config = ConfigDict(extra="allow")
    code: str
    message: str


class ToolError(Output):
    """A tool's failure (``isError: true``): every tool's ``outputSchema`` admits it beside the
    tool's answer, since MCP holds the ``structuredContent`` of every result to that schema."""

    error: ToolErrorDetail


class ToolAnnotations(Output):
    """A tool's MCP annotations."""

    title: str
    read_only_hint: bool
    destructive_hint: Literal[False]
    open_world_hint: Literal[False]


class ToolDefinition(Output):
    """A tool as ``tools/list`` and the host's ``tools.list`` show it."""

    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    annotations: ToolAnnotations


class DynamicToolDefinition(ToolDefinition):
    """A tool as the host's ``tools.dynamic`` shows it."""

    namespace: str


class ComposerItem(Output):
    """One of the composer's ``/`` candidates (``tools.composerItems``)."""

    id: str
    name: str
    description: str
