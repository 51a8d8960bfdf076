"""The host API's calls as pydantic models (SPEC §3), one per method: what ``/rpc`` parses a
call's ``params`` into, once, where it enters (``http/rpc.py``), and what the services take.

Every method has one, in the module of its area: ``sessions``, ``messages``, ``runs``,
``replies``, ``credentials``, ``operator``, ``events`` (``events.list``), ``prompt_forms``
(``prompt.respond``) and ``tools`` (``tools.call``); those that take no params take
``call_models.NoParams``. Like the tools' models (``tool_arguments``), names are camelCase on
the wire and snake_case in Python, JSON types are exact and unknown keys are ignored.

This package re-exports every model and constant of its modules (and ``NoParams``), so callers
import from ``ccweb_store.domain.host_calls`` whichever area a call belongs to.
"""

from ccweb_store.domain.call_models import NoParams
from ccweb_store.domain.host_calls.credentials import (
    CenturySeconds,
    CredentialTerms,
    ListCredentials,
    MintCredential,
    RevokeCredential,
)
from ccweb_store.domain.host_calls.events import DEFAULT_EVENT_PAGE, ListEvents
from ccweb_store.domain.host_calls.messages import (
    CONTENT_RULE,
    DEFAULT_MESSAGE_PAGE,
    AppendMessage,
    ListMessages,
    RecentMessages,
)
from ccweb_store.domain.host_calls.operator import (
    DEFAULT_OPERATOR_PAGE,
    OperatorConversation,
    OperatorConversations,
    OperatorDoctor,
    OperatorPendingReplies,
    OperatorReplyStory,
)
from ccweb_store.domain.host_calls.prompt_forms import RespondToPrompt
from ccweb_store.domain.host_calls.replies import (
    DEFAULT_REPLY_PAGE,
    REPLY_STATUS_NAMES,
    ExpireReplies,
    FailReply,
    GetReply,
    ListReplies,
    ReplyStatusName,
    RetryReply,
)
from ccweb_store.domain.host_calls.runs import (
    COMPLETION_STATUSES,
    DEFAULT_RUN_PAGE,
    MAX_LEASE_SECONDS,
    MAX_WAIT_SECONDS,
    MIN_LEASE_SECONDS,
    RUN_KIND_NAMES,
    CancelRun,
    ClaimRun,
    CompleteRun,
    EnqueueRun,
    HeartbeatRun,
    Kind,
    LeaseSeconds,
    ListRuns,
    RequeueRun,
    StartRun,
    WorkerId,
)
from ccweb_store.domain.host_calls.sessions import (
    DEFAULT_SESSION_PAGE,
    ArchiveSession,
    CreateSession,
    GetSession,
    ListSessions,
    UpdateSession,
)
from ccweb_store.domain.host_calls.tools import ToolsCall

__all__ = [
    "COMPLETION_STATUSES",
    "CONTENT_RULE",
    "DEFAULT_EVENT_PAGE",
    "DEFAULT_MESSAGE_PAGE",
    "DEFAULT_OPERATOR_PAGE",
    "DEFAULT_REPLY_PAGE",
    "DEFAULT_RUN_PAGE",
    "DEFAULT_SESSION_PAGE",
    "MAX_LEASE_SECONDS",
    "MAX_WAIT_SECONDS",
    "MIN_LEASE_SECONDS",
    "REPLY_STATUS_NAMES",
    "RUN_KIND_NAMES",
    "AppendMessage",
    "ArchiveSession",
    "CancelRun",
    "CenturySeconds",
    "ClaimRun",
    "CompleteRun",
    "CreateSession",
    "CredentialTerms",
    "EnqueueRun",
    "ExpireReplies",
    "FailReply",
    "GetReply",
    "GetSession",
    "HeartbeatRun",
    "Kind",
    "LeaseSeconds",
    "ListCredentials",
    "ListEvents",
    "ListMessages",
    "ListReplies",
    "ListRuns",
    "ListSessions",
    "MintCredential",
    "NoParams",
    "OperatorConversation",
    "OperatorConversations",
    "OperatorDoctor",
    "OperatorPendingReplies",
    "OperatorReplyStory",
    "RecentMessages",
    "ReplyStatusName",
    "RequeueRun",
    "RespondToPrompt",
    "RetryReply",
    "RevokeCredential",
    "StartRun",
    "ToolsCall",
    "UpdateSession",
    "WorkerId",
]
