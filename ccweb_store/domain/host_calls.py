"""The host API's calls as pydantic models (SPEC §3), one per method: what ``/rpc`` parses a
call's ``params`` into, once, where it enters (``http/rpc.py``), and what the services take.

Every method has one: ``session.*``, ``message.*``, ``run.*``, ``reply.*``, ``credential.*``,
``operator.*``, ``events.list``, ``prompt.respond`` and ``tools.call`` (``NoParams`` for those
that take none). Like the tools' models (``tool_arguments``), names are camelCase on the wire
and snake_case in Python, JSON types are exact and unknown keys are ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from ccweb_store.domain.arguments import CENTURY_SECONDS, INT32_MAX
from ccweb_store.domain.call_models import (
    CallModel,
    ConversationId,
    Text,
    clamped,
    coded,
    json_type,
    refuse,
    stripped_or_none,
)
from ccweb_store.domain.context import Source
from ccweb_store.domain.errors import INVALID_ARGUMENTS, INVALID_KIND, INVALID_ROLE, INVALID_STATUS
from ccweb_store.domain.ids import AGENT_MAX_LENGTH, ID_MAX_LENGTH, MAX_PAGE
from ccweb_store.domain.kinds import ReplyStatus, Role, RunKind, RunStatus
from ccweb_store.domain.tool_arguments import QUERY_MAX_CHARS

#: The longest lease a worker may ask for: a week (it heartbeats to hold a run longer).
MAX_LEASE_SECONDS = 7 * 24 * 3600
#: The shortest lease a worker may ask for (``leaseSeconds``); ``runs._lease_expired`` relies
#: on it.
MIN_LEASE_SECONDS = 1
#: The longest a long-polling ``run.claim`` waits (``waitSeconds``).
MAX_WAIT_SECONDS = 60
#: How many runs ``run.list`` returns when it is not told.
DEFAULT_RUN_PAGE = 50
#: The statuses ``run.complete`` closes a run with.
COMPLETION_STATUSES = (RunStatus.COMPLETED, RunStatus.FAILED)


def _one_of(
    choices: tuple[str, ...], code: str, what: str, make: Callable[[str], Any]
) -> Callable[[Any], Any]:
    """A text that must be one of ``choices`` (``code`` otherwise), as ``make`` makes it."""

    def check(value: Any) -> Any:
        if not isinstance(value, str) or value not in choices:
            raise coded(code, f"invalid {what} {value!r}: expected one of {', '.join(choices)}")
        return make(value)

    return check


def _listed(value: Any) -> Any:
    """One text stands for a list of one."""
    return [value] if isinstance(value, str) else value


def _shown(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def _between(low: float, high: float, unit: str = "") -> Callable[[Any], Any]:
    """A number from ``low`` to ``high``; the refusal names the bound and ``unit``."""

    def check(value: Any) -> Any:
        if value < low:
            raise refuse(f"must be at least {_shown(low)}, got {_shown(value)}")
        if value > high:
            raise refuse(f"must be at most {_shown(high)}{unit}, got {_shown(value)}")
        return value

    return check


def _number(value: Any) -> Any:
    """An integer where a number is asked is that number (JSON does not tell them apart)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if value is not None and not isinstance(value, float):
        raise refuse(f"must be a number, got {json_type(value)}")
    return value


RUN_KIND_NAMES = tuple(RunKind)
Kind = Annotated[RunKind, BeforeValidator(_one_of(RUN_KIND_NAMES, INVALID_KIND, "kind", RunKind))]
WorkerId = Annotated[str, Field(max_length=ID_MAX_LENGTH)]
LeaseSeconds = Annotated[
    int,
    AfterValidator(
        _between(MIN_LEASE_SECONDS, MAX_LEASE_SECONDS, " (7 days; heartbeat to hold a run longer)")
    ),
]


class StartRun(CallModel):
    """``run.start``: a run the host drives itself, already ``running``."""

    session_id: ConversationId
    kind: Kind = RunKind.USER_TURN
    runtime_text: str | None = None
    worker_id: WorkerId | None = None


class EnqueueRun(CallModel):
    """``run.enqueue``: a ``queued`` run for a worker to claim."""

    session_id: ConversationId
    kind: Kind = RunKind.USER_TURN
    runtime_text: str | None = None


CenturySeconds = Annotated[int, AfterValidator(_between(1, CENTURY_SECONDS, " (100 years)"))]


class CredentialTerms(CallModel):
    """A credential to mint: its lifetime (none: it never expires) and its label; also
    ``run.claim``'s ``mintCredential``."""

    expires_in_seconds: CenturySeconds | None = None
    label: str | None = None


class ClaimRun(CallModel):
    """``run.claim``: lease the oldest queued run of an idle conversation."""

    worker_id: Annotated[Text, Field(max_length=ID_MAX_LENGTH)]
    lease_seconds: LeaseSeconds | None = None
    kinds: Annotated[list[Kind] | None, BeforeValidator(_listed)] = None
    wait_seconds: Annotated[
        float | None,
        BeforeValidator(_number),
        AfterValidator(_between(0, MAX_WAIT_SECONDS, " seconds")),
    ] = None
    with_conversation: bool = False
    mint_credential: CredentialTerms | None = None


class HeartbeatRun(CallModel):
    """``run.heartbeat``: extend the lease of a run this worker holds."""

    run_id: Text
    worker_id: Annotated[Text, Field(max_length=ID_MAX_LENGTH)]
    lease_seconds: LeaseSeconds | None = None


class CompleteRun(CallModel):
    """``run.complete``: close a run with its output or error."""

    run_id: Text
    status: Annotated[
        RunStatus,
        BeforeValidator(
            _one_of(tuple(COMPLETION_STATUSES), INVALID_STATUS, "run status", RunStatus)
        ),
    ]
    output: str | None = None
    error: str | None = None
    worker_id: WorkerId | None = None


class ListRuns(CallModel):
    """``run.list``: runs newest first, by conversation, status and age."""

    session_id: ConversationId | None = None
    status: Annotated[
        list[
            Annotated[
                RunStatus,
                BeforeValidator(_one_of(tuple(RunStatus), INVALID_STATUS, "run status", RunStatus)),
            ]
        ]
        | None,
        BeforeValidator(_listed),
    ] = None
    older_than_seconds: (
        Annotated[int, AfterValidator(_between(0, CENTURY_SECONDS, " (100 years)"))] | None
    ) = None
    limit: Annotated[int, AfterValidator(clamped(1, MAX_PAGE))] = DEFAULT_RUN_PAGE


class RequeueRun(CallModel):
    """``run.requeue``: put a running run back in the queue."""

    run_id: Text
    worker_id: WorkerId | None = None


class CancelRun(CallModel):
    """``run.cancel``: end a queued run, or a running one with ``force``."""

    run_id: Text
    reason: str | None = None
    force: bool = False


REPLY_STATUS_NAMES = tuple(ReplyStatus)
ReplyStatusName = Annotated[
    ReplyStatus,
    BeforeValidator(_one_of(REPLY_STATUS_NAMES, INVALID_STATUS, "reply status", ReplyStatus)),
]
#: How many reply requests ``reply.list`` returns when it is not told.
DEFAULT_REPLY_PAGE = 50


class ListReplies(CallModel):
    """``reply.list``: requests oldest first, by status and conversation (either side)."""

    status: Annotated[list[ReplyStatusName] | None, BeforeValidator(_listed)] = None
    session_id: ConversationId | None = None
    limit: Annotated[int, AfterValidator(clamped(1, MAX_PAGE))] = DEFAULT_REPLY_PAGE
    cursor: str | None = None


class GetReply(CallModel):
    """``reply.get``: one request by id."""

    request_id: Text


class RetryReply(CallModel):
    """``reply.retry``: try a request again (what that means per state: ``services/replies``)."""

    request_id: Text


class FailReply(CallModel):
    """``reply.fail``: fail a waiting or ready request, telling its source ``reason``."""

    request_id: Text
    reason: Text


class ExpireReplies(CallModel):
    """``reply.expire``: fail ``waiting`` requests made more than ``olderThanSeconds`` ago."""

    older_than_seconds: Annotated[
        float,
        BeforeValidator(_number),
        AfterValidator(_between(0, CENTURY_SECONDS, " (100 years)")),
    ]


#: How many conversations ``session.list`` returns when it is not told.
DEFAULT_SESSION_PAGE = 50
#: How many messages ``message.list`` and ``message.recent`` return when they are not told.
DEFAULT_MESSAGE_PAGE = 100
#: What ``message.append``'s ``content`` must be, said when it is anything else.
CONTENT_RULE = "content is required: a string or a list of {type: 'text', text} blocks"


def _message_content(value: Any) -> Any:
    if not isinstance(value, str | list):
        raise coded(INVALID_ARGUMENTS, CONTENT_RULE)
    return value


def _role(value: Any) -> Any:
    if not isinstance(value, str) or value not in tuple(Role):
        raise coded(
            INVALID_ROLE,
            f"role {value!r} is not a message role: use one of {', '.join(tuple(Role))}",
        )
    return Role(value)


class CreateSession(CallModel):
    """``session.create``: a new conversation (an id of the caller's, or a new one)."""

    id: str | None = None
    title: str | None = None
    agent: Annotated[str, Field(max_length=AGENT_MAX_LENGTH)] | None = None
    cwd: str | None = None


class GetSession(CallModel):
    """``session.get``: one conversation with its active run."""

    id: Text


class ArchiveSession(CallModel):
    """``session.archive``: hide a conversation from the lists (``archived: false`` shows it)."""

    id: ConversationId
    archived: bool = True


class ListSessions(CallModel):
    """``session.list``: conversations newest created first, a page at a time."""

    limit: Annotated[int, AfterValidator(clamped(1, MAX_PAGE))] = DEFAULT_SESSION_PAGE
    cursor: str | None = None


class AppendMessage(CallModel):
    """``message.append``: a message at the conversation's next ``seq``; ``content`` is text or
    cc-web's list of ``{type: "text", text}`` blocks."""

    session_id: ConversationId
    content: Annotated[Any, BeforeValidator(_message_content)] = Field(
        default=None, validate_default=True
    )
    role: str = ""
    metadata: dict[str, Any] | None = None
    id: Annotated[str, Field(max_length=ID_MAX_LENGTH)] | None = None


class RecentMessages(CallModel):
    """``message.recent``: the newest messages before ``beforeSeq``, of ``role`` if given."""

    session_id: Text
    before_seq: Annotated[int, Field(ge=1)] | None = None
    limit: Annotated[int, AfterValidator(clamped(1, MAX_PAGE))] = DEFAULT_MESSAGE_PAGE
    role: Annotated[Role, BeforeValidator(_role)] | None = None


class ListMessages(CallModel):
    """``message.list``: messages after ``afterSeq``, in order."""

    session_id: Text
    after_seq: Annotated[int, Field(ge=0)] = 0
    limit: Annotated[int, AfterValidator(clamped(1, MAX_PAGE))] = DEFAULT_MESSAGE_PAGE


class MintCredential(CredentialTerms):
    """``credential.mint``: a new credential of a conversation, at ``hopCount`` (the least hop
    count of the sends made with it)."""

    session_id: ConversationId
    hop_count: Annotated[int, AfterValidator(_between(0, INT32_MAX))] = 0


class ListCredentials(CallModel):
    """``credential.list``: newest first, active ones only unless ``includeInactive``."""

    session_id: ConversationId | None = None
    include_inactive: bool = False
    limit: Annotated[int, AfterValidator(clamped(1, MAX_PAGE))] = 50


class RevokeCredential(CallModel):
    """``credential.revoke``: the credential stops working at once."""

    credential_id: Text


#: How many rows the operator's listings return when they are not told.
DEFAULT_OPERATOR_PAGE = 100


class OperatorConversations(CallModel):
    """``operator.conversations``: conversations, newest activity first (``query``: id or
    title; archived ones only with ``includeArchived``)."""

    limit: Annotated[int, AfterValidator(clamped(1, MAX_PAGE))] = DEFAULT_OPERATOR_PAGE
    query: Annotated[
        str | None, Field(max_length=QUERY_MAX_CHARS), AfterValidator(stripped_or_none)
    ] = None
    include_archived: bool = False


class OperatorConversation(CallModel):
    """``operator.conversation``: one conversation, its open requests and newest runs."""

    id: ConversationId


class OperatorPendingReplies(CallModel):
    """``operator.pendingReplies``: open requests, oldest first."""

    status: Annotated[list[str] | None, BeforeValidator(_listed)] = None
    session_id: str | None = None
    older_than_seconds: (
        Annotated[int, AfterValidator(_between(0, CENTURY_SECONDS, " (100 years)"))] | None
    ) = None
    limit: Annotated[int, AfterValidator(clamped(1, MAX_PAGE))] = DEFAULT_OPERATOR_PAGE


class OperatorReplyStory(CallModel):
    """``operator.replyStory``: one request's story."""

    request_id: Text


#: How many events ``events.list`` returns when it is not told.
DEFAULT_EVENT_PAGE = 100


class ListEvents(CallModel):
    """``events.list``: events after ``after``, oldest first, of ``types`` and
    ``conversation`` if given (the type names are checked by the event filter)."""

    after: Annotated[int, Field(ge=0)] | None = None
    limit: Annotated[int, AfterValidator(clamped(1, MAX_PAGE))] = DEFAULT_EVENT_PAGE
    types: Annotated[list[str] | None, BeforeValidator(_listed)] = None
    conversation: Annotated[str, Field(max_length=ID_MAX_LENGTH)] | None = None


def _prompt_id(value: Any) -> Any:
    if not isinstance(value, str) or not value.strip():
        raise coded(
            INVALID_ARGUMENTS, "promptId must be the non-empty id ccweb_prompt_user returned"
        )
    return value


class RespondToPrompt(CallModel):
    """``prompt.respond``: answer a form card; the answers are checked against its questions
    (which only the stored card knows)."""

    prompt_id: Annotated[Any, BeforeValidator(_prompt_id)] = Field(
        default=None, validate_default=True
    )
    answers: Any = None


class NoParams(CallModel):
    """A method that takes no parameters (any given are ignored)."""


class ToolsCall(CallModel):
    """``tools.call`` / ``tools.callDynamic``: a tool run for a source conversation; ``tool``
    or ``name``, ``args`` or ``arguments``, ``sourceSessionId`` or ``sourceConversationId``
    (the tool's own model validates the arguments)."""

    tool: Any = None
    name: Any = None
    args: Any = None
    arguments: Any = None
    source_session_id: str | None = None
    source_conversation_id: str | None = None
    source_hop_count: Annotated[int, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _named(self) -> ToolsCall:
        if not isinstance(self.tool_name, str) or not self.tool_name:
            raise coded(
                INVALID_ARGUMENTS, "tool (or name) is required: the name of the tool to call"
            )
        return self

    @property
    def tool_name(self) -> Any:
        return self.tool if self.tool is not None else self.name

    @property
    def tool_arguments(self) -> Any:
        return self.args if self.args is not None else self.arguments

    @property
    def source(self) -> Source:
        """The calling conversation (none named: no source) at its hop count."""
        session = self.source_session_id or self.source_conversation_id
        return Source(session or None, self.source_hop_count or 0)
