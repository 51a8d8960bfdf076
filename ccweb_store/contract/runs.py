"""The ``run.*`` calls: start or enqueue a run, a worker's claim, heartbeat and completion,
the listing, requeue and cancel; and the bounds on leases and long polls."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field

from ccweb_store.contract.base import (
    AgentSessionId,
    AgeSeconds,
    ConversationId,
    Input,
    Output,
    PageSize,
    Text,
    between,
    listed,
    number,
    omitted,
    one_of,
)
from ccweb_store.contract.credentials import CredentialTerms, Minted
from ccweb_store.contract.objects import Message, Reply, Run, Session
from ccweb_store.domain import rows
from ccweb_store.domain.errors import INVALID_KIND, INVALID_STATUS
from ccweb_store.domain.ids import ID_MAX_LENGTH
from ccweb_store.domain.kinds import RunKind, RunStatus

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

RUN_KIND_NAMES = tuple(RunKind)
Kind = Annotated[RunKind, BeforeValidator(one_of(RUN_KIND_NAMES, INVALID_KIND, "kind", RunKind))]
WorkerId = Annotated[str, Field(max_length=ID_MAX_LENGTH)]
LeaseSeconds = Annotated[
    int,
    AfterValidator(
        between(MIN_LEASE_SECONDS, MAX_LEASE_SECONDS, " (7 days; heartbeat to hold a run longer)")
    ),
]


class StartRun(Input):
    """``run.start``: a run the host drives itself, already ``running``."""

    session_id: ConversationId
    kind: Kind = RunKind.USER_TURN
    runtime_text: str | None = None
    worker_id: WorkerId | None = None


class EnqueueRun(Input):
    """``run.enqueue``: a ``queued`` run for a worker to claim."""

    session_id: ConversationId
    kind: Kind = RunKind.USER_TURN
    runtime_text: str | None = None


class ClaimRun(Input):
    """``run.claim``: lease the oldest queued run of an idle conversation."""

    worker_id: Annotated[Text, Field(max_length=ID_MAX_LENGTH)]
    lease_seconds: LeaseSeconds | None = None
    kinds: Annotated[list[Kind] | None, BeforeValidator(listed)] = None
    wait_seconds: Annotated[
        float | None,
        BeforeValidator(number),
        AfterValidator(between(0, MAX_WAIT_SECONDS, " seconds")),
    ] = None
    with_conversation: bool = False
    mint_credential: CredentialTerms | None = None


class HeartbeatRun(Input):
    """``run.heartbeat``: extend the lease of a run this worker holds."""

    run_id: Text
    worker_id: Annotated[Text, Field(max_length=ID_MAX_LENGTH)]
    lease_seconds: LeaseSeconds | None = None


class CompleteRun(Input):
    """``run.complete``: close a run with its output or error."""

    run_id: Text
    status: Annotated[
        RunStatus,
        BeforeValidator(
            one_of(tuple(COMPLETION_STATUSES), INVALID_STATUS, "run status", RunStatus)
        ),
    ]
    output: str | None = None
    error: str | None = None
    worker_id: WorkerId | None = None
    #: The agent's own session the run ran in: the conversation's next run resumes it.
    agent_session_id: AgentSessionId | None = None


class ListRuns(Input):
    """``run.list``: runs newest first, by conversation, status and age."""

    session_id: ConversationId | None = None
    status: Annotated[
        list[
            Annotated[
                RunStatus,
                BeforeValidator(one_of(tuple(RunStatus), INVALID_STATUS, "run status", RunStatus)),
            ]
        ]
        | None,
        BeforeValidator(listed),
    ] = None
    older_than_seconds: AgeSeconds | None = None
    limit: PageSize = DEFAULT_RUN_PAGE


class RequeueRun(Input):
    """``run.requeue``: put a running run back in the queue."""

    run_id: Text
    worker_id: WorkerId | None = None


class CancelRun(Input):
    """``run.cancel``: end a queued run, or a running one with ``force``."""

    run_id: Text
    reason: str | None = None
    force: bool = False


class RunList(Output):
    """``run.list``'s answer: runs newest first."""

    runs: list[Run]


class Completion(Output):
    """``run.complete``'s and ``run.cancel``'s answer: the closed run, its output message
    (None: it wrote none) and the reply requests its end moved."""

    run: Run
    message: Message | None
    replies: list[Reply]

    @classmethod
    def of(
        cls, run: rows.Run, message: rows.Message | None, replies: list[rows.ReplyRequest]
    ) -> Completion:
        return cls(
            run=Run.model_validate(run),
            message=Message.model_validate(message) if message is not None else None,
            replies=[Reply.model_validate(reply) for reply in replies],
        )


class Claim(Output):
    """``run.claim``'s answer: the run leased (None: nothing to claim) and, when the claim was
    asked for them and took a run, its conversation and a credential for it."""

    run: Run | None
    conversation: Session = omitted()
    credential: Minted = omitted()
