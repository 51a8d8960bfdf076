"""Repositories: SQL for each table, and nothing else.

They take the unit of work's ``AsyncConnection`` and ``UnitState``, and never commit.
State changes are conditional (``UPDATE … WHERE status IN (…)``) and report whether they
won, so two writers can never both move the same row.
"""

from ccweb_store.store.repositories.base import UnitState, decode_cursor, encode_cursor
from ccweb_store.store.repositories.credentials import CredentialRepository, SecretRepository
from ccweb_store.store.repositories.debugging import DebuggingRepository
from ccweb_store.store.repositories.events import EventRepository
from ccweb_store.store.repositories.identity import IdentityRepository
from ccweb_store.store.repositories.json_columns import JsonColumnRepository
from ccweb_store.store.repositories.messages import (
    LATEST_NONBLANK_BY_ROLE,
    MessageRepository,
    MessageText,
)
from ccweb_store.store.repositories.monitoring import MonitoringRepository
from ccweb_store.store.repositories.replies import ReplyRepository
from ccweb_store.store.repositories.runs import RunRepository
from ccweb_store.store.repositories.sends import SendRepository
from ccweb_store.store.repositories.sessions import SendParties, SessionRepository
from ccweb_store.store.repositories.whole_tables import WholeTableRepository

__all__ = [
    "LATEST_NONBLANK_BY_ROLE",
    "CredentialRepository",
    "DebuggingRepository",
    "EventRepository",
    "IdentityRepository",
    "JsonColumnRepository",
    "MessageRepository",
    "MessageText",
    "MonitoringRepository",
    "ReplyRepository",
    "RunRepository",
    "SecretRepository",
    "SendParties",
    "SendRepository",
    "SessionRepository",
    "UnitState",
    "WholeTableRepository",
    "decode_cursor",
    "encode_cursor",
]
