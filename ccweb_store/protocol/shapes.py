"""The wire's camelCase JSON, shaped from what the services return: the objects of SPEC §3
(Session, Message, Reply, Run), credentials, and the answers of the tools and host methods.

Services speak Python (rows and small dataclasses); the edges (``http/rpc.py``'s table, the
tool registry, the console, the CLI's ``--json``) shape their results here, so nothing else
decides how an answer looks on the wire.
"""

from __future__ import annotations

from typing import Any

from ccweb_store.services.credentials import CredentialList, MintedCredential
from ccweb_store.services.run_endings import Completion
from ccweb_store.services.runs import ClaimResult
from ccweb_store.services.schemas import (
    credential_out,
    message_out,
    reply_out,
    run_out,
    session_fields,
    session_out,
)
from ccweb_store.store.models import Run

__all__ = [
    "claim_out",
    "completion_out",
    "credential_out",
    "credentials_out",
    "message_out",
    "minted_out",
    "reply_out",
    "run_out",
    "runs_out",
    "session_fields",
    "session_out",
]


def runs_out(rows: list[Run]) -> dict[str, Any]:
    """``run.list``'s answer."""
    return {"runs": [run_out(row) for row in rows]}


def completion_out(result: Completion) -> dict[str, Any]:
    """The answer of ``run.complete`` and ``run.cancel``: the run, its output message, the
    replies it moved."""
    return {
        "run": run_out(result.run),
        "message": message_out(result.message) if result.message is not None else None,
        "replies": [reply_out(reply) for reply in result.replies],
    }


def minted_out(minted: MintedCredential) -> dict[str, Any]:
    """``credential.mint``'s answer: the credential, its token (shown only here) and, when
    the mint replaced a label's credentials, those it revoked."""
    out: dict[str, Any] = {"credential": credential_out(minted.row), "token": minted.token}
    if minted.revoked is not None:
        out["revoked"] = [credential_out(old) for old in minted.revoked]
    return out


def claim_out(result: ClaimResult) -> dict[str, Any]:
    """``run.claim``'s answer: ``{run}`` (None: nothing to claim), with ``conversation`` and
    ``credential`` when the claim was asked for them and took a run."""
    if result.run is None:
        return {"run": None}
    out: dict[str, Any] = {"run": run_out(result.run)}
    if result.conversation is not None:
        out["conversation"] = session_out(result.conversation)
    if result.credential is not None:
        out["credential"] = minted_out(result.credential)
    return out


def credentials_out(listed: CredentialList) -> dict[str, Any]:
    """``credential.list``'s answer: each credential active or not as of its reading."""
    return {"credentials": [credential_out(row, now=listed.as_of) for row in listed.rows]}
