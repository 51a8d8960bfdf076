"""Ids, their limits and the enum values of the schema: what a caller may name, checked before
any statement runs.

The tables (``store.models``) take their column widths and CHECK constraints from here, so the
checks a service makes and the ones the database makes cannot drift apart.
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Sequence

from ccweb_store.domain import errors
from ccweb_store.domain.errors import InvalidInput
from ccweb_store.domain.kinds import ReplyStatus, Role, RunKind, RunStatus

ROLES = tuple(Role)
REPLY_STATUSES = tuple(ReplyStatus)
OPEN_REPLY_STATUSES = (ReplyStatus.WAITING, ReplyStatus.READY, ReplyStatus.FAILED)
RUN_KINDS = tuple(RunKind)
RUN_STATUSES = tuple(RunStatus)
#: A run in one of these makes its conversation busy: a send to it is refused (``target_busy``).
ACTIVE_RUN_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING)
FINISHED_RUN_STATUSES = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)
#: The state of the copy a database holds (``copy_marker``): being written, or finished.
COPY_STATES = ("in progress", "done")

#: A whole conversation id (``\A…\Z``: ``$`` would also match before a trailing newline, so
#: ``"abc\n"`` would pass); use it with ``fullmatch``.
SESSION_ID_PATTERN = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_-]*\Z")
SESSION_ID_MAX_LENGTH = 128
#: The longest message id, reply request id and worker id the columns hold.
ID_MAX_LENGTH = 128
#: The longest ``sessions.agent`` the column holds.
AGENT_MAX_LENGTH = 64
#: The longest ``sessions.agent_session_id`` (an agent's own session or thread id).
AGENT_SESSION_ID_MAX_LENGTH = 256
#: The most rows one page of a listing holds, whatever ``limit`` a caller asks for.
MAX_PAGE = 500


def validate_session_id(value: object, *, code: str = errors.INVALID_CONVERSATION_ID) -> str:
    """Return ``value`` if it is a well-formed conversation id, else raise ``code``."""
    if (
        not isinstance(value, str)
        or not value
        or len(value) > SESSION_ID_MAX_LENGTH
        or not SESSION_ID_PATTERN.fullmatch(value)
    ):
        raise InvalidInput(
            f"invalid conversation id {value!r}: use 1-{SESSION_ID_MAX_LENGTH} letters, "
            "digits, '_' or '-', starting with a letter or digit",
            code=code,
        )
    return value


def conversation_label(title: str | None, conversation_id: str) -> str:
    """How a person reads a conversation's name: ``Title (id)``, or the id alone for a
    conversation without a title."""
    return f"{title} ({conversation_id})" if title and title != conversation_id else conversation_id


def validate_choice(value: object, choices: Sequence[str], code: str, what: str) -> str:
    """Return ``value`` if it is one of ``choices``, else raise ``code``."""
    if not isinstance(value, str) or value not in choices:
        raise InvalidInput(
            f"invalid {what} {value!r}: expected one of {', '.join(choices)}", code=code
        )
    return value


_last_id_ns = 0

#: Draws the random part of ids: seeded from the OS once per process (and again in a forked
#: child, which would otherwise repeat its parent's sequence), not a syscall per id.
_id_random = random.Random(os.urandom(32))


def _reseed_id_random() -> None:
    _id_random.seed(os.urandom(32))


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork either
    os.register_at_fork(after_in_child=_reseed_id_random)


#: ``new_id``'s text, printf-style: cheaper than an f-string's format spec on a path that makes
#: several ids per request.
_ID_FORMAT = "%s_%016x%010x"


def new_id(prefix: str) -> str:
    """A time-ordered unique id such as ``run_0186f0c2a1b2c3d4e5f60718``.

    The hex timestamp makes ids sort in creation order, so FIFO ties break sensibly; the 40
    random bits keep ids of two processes apart when their clocks agree to the nanosecond.
    """
    global _last_id_ns
    now = time.time_ns()
    if now <= _last_id_ns:
        now = _last_id_ns + 1
    _last_id_ns = now
    return _ID_FORMAT % (prefix, now, _id_random.getrandbits(40))
