"""The ORM schema (SPEC §1). Alembic migrations mirror it exactly; ``alembic check`` proves it.

Each class declares one table and is named ``<Thing>Row`` (``SessionRow`` for
``sessions``, ``RunRow`` for ``runs``, …): it exists for the schema, Alembic's autogenerate
and the tables' columns (``RunRow.__table__.c``), and no object of it is ever made. The rows
the repositories return are the immutable values of ``rows.py`` (``Conversation``, ``Run``, …).

The one exception is ``MIGRATION_OWNED_INDEXES``: expression indexes that a migration creates
and the ORM does not declare (SQLite cannot reflect them, so autogenerate cannot compare
them); ``migrations/env.py`` leaves exactly these out of the comparison.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.visitors import InternalTraversal

from ccweb_store.domain.ids import (
    AGENT_MAX_LENGTH,
    AGENT_SESSION_ID_MAX_LENGTH,
    COPY_STATES,
    ID_MAX_LENGTH,
    REPLY_STATUSES,
    ROLES,
    RUN_KINDS,
    RUN_STATUSES,
    SESSION_ID_MAX_LENGTH,
)
from ccweb_store.store.column_types import UTCDateTime

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def _one_of(column: str, values: tuple[str, ...]) -> str:
    """A CHECK that ``column`` holds one of ``values``: ``column = 'a' OR column = 'b' …``.

    Not ``column IN (…)``: SQLite evaluates an IN list of more than two constants by building
    a temporary table of them, for every row written (migration 0008).
    """
    return " OR ".join(f"{column} = {value!r}" for value in values)


JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
NOW = sa.text("CURRENT_TIMESTAMP")


class Base(DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime(),
        dict[str, Any]: JSONType,
    }


class SessionRow(Base):
    """A conversation (``conversationId`` = ``sessions.id``)."""

    __tablename__ = "sessions"
    __table_args__ = (
        # Newest activity first (the operator's and the console's lists), newest created
        # first (session.list), newest message first (conversation_activity): migration 0014.
        sa.Index(None, "updated_at", "id"),
        sa.Index(None, "created_at", "id"),
        sa.Index(None, "last_message_at"),
    )

    id: Mapped[str] = mapped_column(sa.String(SESSION_ID_MAX_LENGTH), primary_key=True)
    title: Mapped[str | None] = mapped_column(sa.Text)
    agent: Mapped[str | None] = mapped_column(sa.String(AGENT_MAX_LENGTH))
    cwd: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime] = mapped_column(server_default=NOW)
    updated_at: Mapped[datetime] = mapped_column(server_default=NOW)
    archived_at: Mapped[datetime | None]
    extra: Mapped[dict[str, Any] | None]
    #: The agent's own session (a Claude Code session id, a Codex thread id) that the
    #: conversation's next run resumes.
    agent_session_id: Mapped[str | None] = mapped_column(sa.String(AGENT_SESSION_ID_MAX_LENGTH))
    #: The real path this conversation's runs must stay under (None: no box): recorded when an
    #: agent's credential creates it, and checked by the worker when each run starts.
    box: Mapped[str | None] = mapped_column(sa.Text)
    #: The newest ``created_at`` of its messages, kept by every write of a message.
    last_message_at: Mapped[datetime | None]


class MessageRow(Base):
    """One message of a conversation; ``seq`` orders it within its session."""

    __tablename__ = "messages"
    __table_args__ = (
        sa.UniqueConstraint("session_id", "seq"),
        sa.CheckConstraint(_one_of("role", ROLES), name="role"),
        # Serves "latest N messages of role R in session S" as an index range scan.
        sa.Index(None, "session_id", "role", "seq"),
        # Migration 0006 adds REPLY_TO_REQUEST_ID_INDEX on an expression (see the end of file).
    )

    id: Mapped[str] = mapped_column(sa.String(ID_MAX_LENGTH), primary_key=True)
    session_id: Mapped[str] = mapped_column(
        sa.ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False
    )
    seq: Mapped[int] = mapped_column(sa.BigInteger, nullable=False)
    role: Mapped[str] = mapped_column(sa.String(16), nullable=False)
    content: Mapped[str] = mapped_column(sa.Text, nullable=False)
    created_at: Mapped[datetime | None] = mapped_column(server_default=NOW)
    metadata_: Mapped[dict[str, Any] | None] = mapped_column("metadata")


class ReplyRequestRow(Base):
    """A ``return_and_continue`` request: the target's answer must reach the source."""

    __tablename__ = "reply_requests"
    __table_args__ = (
        sa.CheckConstraint(_one_of("status", REPLY_STATUSES), name="status"),
        sa.Index(None, "source_conversation_id", "status"),
        sa.Index(None, "target_conversation_id", "status"),
        sa.Index(None, "status", "created_at"),
    )

    request_id: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    message_id: Mapped[str | None] = mapped_column(sa.String(128))
    source_conversation_id: Mapped[str] = mapped_column(sa.String(128), nullable=False)
    source_title: Mapped[str | None] = mapped_column(sa.Text)
    target_conversation_id: Mapped[str] = mapped_column(sa.String(128), nullable=False)
    target_title: Mapped[str | None] = mapped_column(sa.Text)
    status: Mapped[str] = mapped_column(sa.String(16), nullable=False)
    hop_count: Mapped[int] = mapped_column(server_default=sa.text("0"))
    source_auto_run: Mapped[bool] = mapped_column(server_default=sa.true())
    reply_text: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime] = mapped_column(server_default=NOW)
    completed_at: Mapped[datetime | None]
    returned_at: Mapped[datetime | None]
    reply_message_id: Mapped[str | None] = mapped_column(sa.String(128))
    last_error: Mapped[str | None] = mapped_column(sa.Text)
    original_request: Mapped[str | None] = mapped_column(sa.Text)
    #: What ``import-json`` kept of a legacy entry that no column reproduces (``legacy_json``).
    extra: Mapped[dict[str, Any] | None]


class RunRow(Base):
    """One agent turn in one conversation, queued for a worker to claim."""

    __tablename__ = "runs"
    __table_args__ = (
        sa.CheckConstraint(_one_of("kind", RUN_KINDS), name="kind"),
        sa.CheckConstraint(_one_of("status", RUN_STATUSES), name="status"),
        sa.Index(None, "status", "created_at"),
        # A claim for one kind finds its queued runs in claim order (migration 0005).
        sa.Index(None, "status", "kind", "created_at", "id"),
        sa.Index(None, "session_id", "status"),
        sa.Index(None, "reply_request_id"),
        # The database itself refuses a second running run for one session.
        sa.Index(
            "uq_runs_one_running_per_session",
            "session_id",
            unique=True,
            sqlite_where=sa.text("status = 'running'"),
            postgresql_where=sa.text("status = 'running'"),
        ),
    )

    id: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    session_id: Mapped[str] = mapped_column(
        sa.ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False
    )
    kind: Mapped[str] = mapped_column(sa.String(32), nullable=False)
    status: Mapped[str] = mapped_column(sa.String(16), nullable=False)
    runtime_text: Mapped[str | None] = mapped_column(sa.Text)
    reply_request_id: Mapped[str | None] = mapped_column(
        sa.ForeignKey("reply_requests.request_id", ondelete="SET NULL")
    )
    hop_count: Mapped[int] = mapped_column(server_default=sa.text("0"))
    worker_id: Mapped[str | None] = mapped_column(sa.String(ID_MAX_LENGTH))
    lease_expires_at: Mapped[datetime | None]
    attempts: Mapped[int] = mapped_column(server_default=sa.text("0"))
    created_at: Mapped[datetime] = mapped_column(server_default=NOW)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    output: Mapped[str | None] = mapped_column(sa.Text)
    error: Mapped[str | None] = mapped_column(sa.Text)


class ConversationCredentialRow(Base):
    """A credential bound to one conversation (``credentials.py``): its signed token names this
    row, which says whether it still holds. The token itself is never stored."""

    __tablename__ = "conversation_credentials"
    __table_args__ = (sa.Index(None, "session_id", "created_at"),)

    id: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    session_id: Mapped[str] = mapped_column(
        sa.ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False
    )
    label: Mapped[str | None] = mapped_column(sa.Text)
    #: The least hop count of the sends made with it (a worker binds its run's hop count).
    hop_count: Mapped[int] = mapped_column(server_default=sa.text("0"))
    created_at: Mapped[datetime] = mapped_column(server_default=NOW)
    expires_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]


class ServerSecretRow(Base):
    """A secret the server made for itself, by name: the key that signs conversation
    credentials, unless ``CCWEB_CREDENTIAL_SECRET`` supplies one. Never logged or printed."""

    __tablename__ = "server_secrets"

    name: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    value: Mapped[str] = mapped_column(sa.Text, nullable=False)
    created_at: Mapped[datetime] = mapped_column(server_default=NOW)


class _EventColumns:
    """The columns of an event, but its id: the outbox's and its inbox's."""

    type: Mapped[str] = mapped_column(sa.String(32), nullable=False)
    #: The conversation the change happened in (a reply's source).
    conversation_id: Mapped[str | None] = mapped_column(sa.String(128))
    #: The other conversation a reply event concerns (its target), which sees it too.
    peer_conversation_id: Mapped[str | None] = mapped_column(sa.String(128))
    message_id: Mapped[str | None] = mapped_column(sa.String(128))
    run_id: Mapped[str | None] = mapped_column(sa.String(128))
    request_id: Mapped[str | None] = mapped_column(sa.String(128))
    created_at: Mapped[datetime] = mapped_column(nullable=False)
    payload: Mapped[dict[str, Any] | None] = mapped_column(JSONType)


class EventRow(_EventColumns, Base):
    """One change, written by the transaction that made it (the outbox ``GET /events`` and
    ``events.list`` read). Ids only grow, in commit order, and are never reused
    (``AUTOINCREMENT`` on SQLite), so "every event after N" is a gap-free resume point."""

    __tablename__ = "events"
    __table_args__ = (
        sa.Index(None, "conversation_id", "id"),
        sa.Index(None, "peer_conversation_id", "id"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True
    )


class EventInboxRow(_EventColumns, Base):
    """Events committed with their changes but not yet given their ids (PostgreSQL, where
    transactions write at once): the transaction writes here, and once it has committed one
    short statement moves them to ``events`` under the ordering lock (``repositories.events``).
    Empty between moves, and always on SQLite, whose one writer writes ``events`` itself."""

    __tablename__ = "event_inbox"

    #: The order the events were written in, which their ids keep.
    id: Mapped[int] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True
    )


class DatabaseIdentityRow(Base):
    """This database's own random id (one row, made with its schema by migration 0010): two
    URLs that reach one database read the same id. ``copy`` does not copy it, so a copy is a
    database with an id of its own."""

    __tablename__ = "database_identity"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(server_default=NOW)


class CopyMarkerRow(Base):
    """The copy ``copy`` wrote, or is writing, into this database (one row, ``name`` =
    'copy'): the source's identity and URL (without credentials) and whether it finished.
    ``copy --resume`` continues only a copy that is in progress from the same source. Not
    copied itself."""

    __tablename__ = "copy_marker"
    __table_args__ = (sa.CheckConstraint(_one_of("state", COPY_STATES), name="state"),)

    name: Mapped[str] = mapped_column(sa.String(16), primary_key=True)
    source_id: Mapped[str] = mapped_column(sa.String(36), nullable=False)
    source_url: Mapped[str] = mapped_column(sa.Text, nullable=False)
    state: Mapped[str] = mapped_column(sa.String(16), nullable=False)
    started_at: Mapped[datetime] = mapped_column(nullable=False)
    finished_at: Mapped[datetime | None]


# --- the expression index on metadata.replyToRequestId (migration 0006) ---------------------

_JSON_KEY_PATTERN = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")


class JsonKeyText(sa.ColumnElement[str]):
    """A top-level key of a JSON column as text, the key written into the SQL.

    SQLite ``json_extract(col, '$.key')``, PostgreSQL ``(col ->> 'key')``. The key is a
    literal, not a bound parameter: only then can either planner match the expression to an
    index built on the same text. (``MESSAGES.c.metadata[key].as_string()`` binds the path.)
    """

    __visit_name__ = "json_key_text"
    inherit_cache = True
    _traverse_internals = [  # noqa: RUF012 (SQLAlchemy declares it a plain attribute)
        ("column", InternalTraversal.dp_clauseelement),
        ("key", InternalTraversal.dp_string),
    ]
    type = sa.Text()

    def __init__(self, column: sa.ColumnElement[Any], key: str) -> None:
        if not _JSON_KEY_PATTERN.fullmatch(key):
            raise ValueError(f"not a plain JSON key: {key!r}")
        self.column = column
        self.key = key


@compiles(JsonKeyText, "sqlite")
def _json_key_text_sqlite(element: JsonKeyText, compiler: SQLCompiler, **kw: Any) -> str:
    return f"json_extract({compiler.process(element.column, **kw)}, '$.{element.key}')"


@compiles(JsonKeyText, "postgresql")
def _json_key_text_postgresql(element: JsonKeyText, compiler: SQLCompiler, **kw: Any) -> str:
    return f"({compiler.process(element.column, **kw)} ->> '{element.key}')"


#: ``messages (metadata.replyToRequestId, session_id, seq) WHERE metadata.replyToRequestId
#: IS NOT NULL``: finds the replies already delivered for a request (SPEC §4) without reading
#: the source's other messages. Created by migration 0006 with ``reply_to_request_id``.
REPLY_TO_REQUEST_ID_INDEX = "ix_messages_reply_to_request_id"

MIGRATION_OWNED_INDEXES = frozenset({REPLY_TO_REQUEST_ID_INDEX})


def reply_to_request_id(metadata: sa.ColumnElement[Any] | None = None) -> JsonKeyText:
    """``messages.metadata.replyToRequestId`` as text, exactly as ``REPLY_TO_REQUEST_ID_INDEX``
    indexes it (a query must render this same expression for the index to serve it).

    ``metadata`` defaults to the ORM table's column; the migration passes a bare
    ``sa.column("metadata")``. Changing what this renders needs a migration that rebuilds
    the index.
    """
    column = MessageRow.__table__.c.metadata if metadata is None else metadata
    return JsonKeyText(column, "replyToRequestId")
