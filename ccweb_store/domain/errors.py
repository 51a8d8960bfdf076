"""Domain errors: one small hierarchy, each carrying the snake_case code the SPEC names.

Protocol modules map these to their wire shape (MCP tool errors, JSON-RPC -32000 errors,
CLI exit codes); nothing below the service layer lets a raw database error escape.
"""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """A failure the caller can understand and act on."""

    code: str = "domain_error"
    #: The JSON-RPC error code this failure is answered with on ``/rpc`` and ``/mcp``.
    rpc_code: int = -32000

    def __init__(
        self, message: str, *, code: str | None = None, data: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        #: Details a client can act on (a path, a limit, ``retryAfter``), sent beside ``code``.
        self.data = data or {}

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.data}


class InvalidInput(DomainError):
    """The caller sent something malformed or out of range."""

    code = "invalid_arguments"


class NotFound(DomainError):
    """The named thing does not exist (or is not visible to the caller)."""

    code = "not_found"


class Conflict(DomainError):
    """The request is well-formed but the current state forbids it."""

    code = "conflict"


# Codes named by the SPEC, gathered so callers and tests share one spelling.
INVALID_ARGUMENTS = "invalid_arguments"
INVALID_CONVERSATION_ID = "invalid_conversation_id"
INVALID_REPLY_MODE = "invalid_reply_mode"
MISSING_SOURCE_CONVERSATION = "missing_source_conversation"
CONVERSATION_NOT_FOUND = "conversation_not_found"
CONVERSATION_EXISTS = "conversation_exists"
CONVERSATION_BUSY = "conversation_busy"
CANNOT_TARGET_SELF = "cannot_target_self"
TARGET_BUSY = "target_busy"
HOP_LIMIT_EXCEEDED = "hop_limit_exceeded"
REQUEST_NOT_FOUND = "request_not_found"
REQUEST_EXISTS = "request_exists"
RUN_NOT_FOUND = "run_not_found"
MESSAGE_NOT_FOUND = "message_not_found"
MESSAGE_EXISTS = "message_exists"
LEASE_LOST = "lease_lost"
INVALID_STATE = "invalid_state"
PROMPT_NOT_FOUND = "prompt_not_found"
PROMPT_ALREADY_ANSWERED = "prompt_already_answered"
NOT_IMPLEMENTED = "not_implemented"
INVALID_ROLE = "invalid_role"
INVALID_STATUS = "invalid_status"
INVALID_KIND = "invalid_kind"
INVALID_CURSOR = "invalid_cursor"
EVENTS_EXPIRED = "events_expired"

# Conversation credentials (``credentials.py``).
INVALID_CREDENTIAL = "invalid_credential"
CREDENTIAL_EXPIRED = "credential_expired"
CREDENTIAL_REVOKED = "credential_revoked"
CREDENTIAL_REQUIRED = "credential_required"
CREDENTIAL_CONVERSATION_MISMATCH = "credential_conversation_mismatch"
CREDENTIAL_NOT_FOUND = "credential_not_found"
CONVERSATION_FORBIDDEN = "conversation_forbidden"
OUTSIDE_CREDENTIAL_SCOPE = "outside_credential_scope"

# The database, not the request (``DatabaseUnavailable``, ``DatabaseFileMissing``).
DATABASE_UNAVAILABLE = "database_unavailable"
DATABASE_FILE_MISSING = "database_file_missing"


#: Seconds a client is told to wait before retrying a request the database could not serve.
RETRY_AFTER_SECONDS = 2


class DatabaseUnavailable(DomainError):
    """The database could not serve the request (unreachable, restarting, an I/O error): the
    request itself was fine, and the same request may succeed after ``retryAfter`` seconds."""

    code = DATABASE_UNAVAILABLE
    #: What ``/healthz`` says, which names neither the database's host nor its path.
    summary = "the database is unavailable: retry later; the server log says why"

    def __init__(self, reason: str, *, retry_after: int = RETRY_AFTER_SECONDS) -> None:
        super().__init__(
            f"{reason}; retry after {retry_after} seconds", data={"retryAfter": retry_after}
        )
        self.retry_after = retry_after


class DatabaseFileMissing(DomainError):
    """The SQLite file the server opened is no longer at its path (deleted, moved away, or
    another file moved there): whatever is written now would be lost at the next start."""

    code = DATABASE_FILE_MISSING
    summary = (
        "the database file was removed or replaced while the server ran: restore it or "
        "restart the server; the server log names the path"
    )

    def __init__(self, path: str) -> None:
        super().__init__(
            f"the database file at {path} was removed or replaced while the server ran: "
            "nothing was written; restore the file to that path or restart the server",
            data={"path": path},
        )
