"""The ORM schema (SPEC §1). Alembic migrations mirror it exactly; ``alembic check`` proves it.

The one exception is ``MIGRATION_OWNED_INDEXES``: expression indexes that a migration creates
and the ORM does not declare (SQLite cannot reflect them, so autogenerate cannot compare
them); ``migrations/env.py`` leaves exactly these out of the comparison.
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.visitors import InternalTraversal
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

ROLES = ("user", "assistant", "system", "tool")
REPLY_STATUSES = ("waiting", "ready", "returned", "failed")
OPEN_REPLY_STATUSES = ("waiting", "ready", "failed")
RUN_KINDS = ("user_turn", "cross_conversation", "reply_auto_run")
RUN_STATUSES = ("queued", "running", "completed", "failed", "cancelled")
#: A run in one of these makes its conversation busy: a send to it is refused (``target_busy``).
ACTIVE_RUN_STATUSES = ("queued", "running")
FINISHED_RUN_STATUSES = ("completed", "failed", "cancelled")

#: A whole conversation id (``\A…\Z``: ``$`` would also match before a trailing newline, so
#: ``"abc\n"`` would pass); use it with ``fullmatch``.
SESSION_ID_PATTERN = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_-]*\Z")
SESSION_ID_MAX_LENGTH = 128
#: The longest message id, reply request id and worker id the columns hold.
ID_MAX_LENGTH = 128
#: The longest ``sessions.agent`` the column holds.
AGENT_MAX_LENGTH = 64

_last_id_ns = 0

#: Draws the random part of ids: seeded from the OS once per process (and again in a forked
#: child, which would otherwise repeat its parent's sequence), not a syscall per id.
_id_random = random.Random(os.urandom(32))


def _reseed_id_random() -> None:
    _id_random.seed(os.urandom(32))


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork either
    os.register_at_fork(after_in_child=_reseed_id_random)


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


#: ``new_id``'s text: printf-style, which makes an id in 0.7 µs where an f-string's
#: ``{now:016x}`` took 1.1 (a send makes three).
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


def _one_of(column: str, values: tuple[str, ...]) -> str:
    """A CHECK that ``column`` holds one of ``values``: ``column = 'a' OR column = 'b' …``.

    Not ``column IN (…)``: SQLite evaluates an IN list of more than two constants by building
    a temporary table of them, for every row written (migration 0008).
    """
    return " OR ".join(f"{column} = {value!r}" for value in values)


#: How SQLAlchemy's SQLite ``DATETIME`` stores a value (its default ``storage_format``):
#: ``YYYY-MM-DD HH:MM:SS.ffffff``, the text every SQLite datetime column of this schema holds,
#: besides ``CURRENT_TIMESTAMP``'s ``YYYY-MM-DD HH:MM:SS``. SQLite compares these as strings,
#: so the width must not vary. Its date part:
SQLITE_DATE_FORMAT = "%04d-%02d-%02d "
#: The date part of the text, by UTC date, for the dates formatted lately: rows written
#: together mostly share a few dates (an import writes a conversation's messages, hours
#: apart), and the date is half the formatting.
_date_texts: dict[date, str] = {}
_DATE_TEXTS_KEPT = 4096


#: The time part's pieces, made once: ``HH:MM:`` by minute of the day, ``SS.`` by second,
#: and the microseconds of a whole millisecond (``123000``) by millisecond.
_HOUR_MINUTE_TEXTS = tuple(
    f"{hour:02d}:{minute:02d}:" for hour in range(24) for minute in range(60)
)
_SECOND_TEXTS = tuple(f"{second:02d}." for second in range(60))
_MILLISECOND_TEXTS = tuple(f"{millisecond:03d}000" for millisecond in range(1000))


def _sqlite_datetime_to_text(value: datetime | None) -> str | None:
    """A datetime as SQLite stores it: naive taken as UTC, aware converted to UTC.

    The time part is put together from pieces made once (``HH:MM:``, ``SS.``, and the
    microseconds of a whole millisecond, the usual precision; others are formatted):
    0.48 µs a value against 0.73 for ``time().isoformat("microseconds")``, the same text.
    """
    if value is None:
        return None
    if value.tzinfo is not None and value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    day = value.date()
    date_text = _date_texts.get(day)
    if date_text is None:
        if len(_date_texts) >= _DATE_TEXTS_KEPT:
            _date_texts.clear()
        date_text = SQLITE_DATE_FORMAT % (value.year, value.month, value.day)
        _date_texts[day] = date_text
    microsecond = value.microsecond
    return "".join(
        (
            date_text,
            _HOUR_MINUTE_TEXTS[value.hour * 60 + value.minute],
            _SECOND_TEXTS[value.second],
            _MILLISECOND_TEXTS[microsecond // 1000]
            if microsecond % 1000 == 0
            else f"{microsecond:06d}",
        )
    )


_fromisoformat = datetime.fromisoformat


def sqlite_text_to_datetime(value: str | None) -> datetime | None:
    """A stored SQLite datetime as an aware UTC datetime (text without an offset is UTC)."""
    if value is None:
        return None
    # Parsing the text with a UTC offset appended costs a fraction of parsing it and then
    # ``replace(tzinfo=UTC)``, and text the store wrote has no offset of its own. Text with
    # one does not parse with another appended, and whatever does not come back in UTC (a
    # date alone, where "+" reads as the date-time separator) is converted the slow way.
    try:
        utc = _fromisoformat(value + "+00:00")
    except ValueError:
        utc = None
    if utc is not None and utc.tzinfo is UTC:
        return utc
    parsed = _fromisoformat(value)  # what SQLAlchemy's DATETIME result processor does
    if parsed.tzinfo is not None:
        return parsed.astimezone(UTC)
    return parsed.replace(tzinfo=UTC)


def _aware_to_utc(value: datetime | None) -> datetime | None:
    """A datetime read from the database as an aware UTC datetime (a naive one is UTC).
    asyncpg's are in UTC already, but for ±infinity, which it reads as naive ``datetime.max``
    and ``min``."""
    if value is None or value.tzinfo is UTC:
        return value
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


#: The last datetime bound on SQLite, and its text: a write binds one time several times (a
#: send's message, session touch, reply request and run all carry the same ``now``), and only
#: the first needs formatting. A datetime is immutable, so the same object has the same text.
_last_bound: tuple[datetime | None, str | None] = (None, None)


def _sqlite_bind_datetime(value: datetime | None) -> str | None:
    """``_sqlite_datetime_to_text``, reusing the text of the last value when it comes again."""
    global _last_bound
    last, text = _last_bound
    if value is last:
        return text
    text = _sqlite_datetime_to_text(value)
    _last_bound = (value, text)
    return text


#: Bind processors → the same conversion for a column of values converted one after another
#: (``repositories.direct.execute_many``): there each value comes once, and a cache of the
#: last one only costs its check.
SQLITE_COLUMN_BIND_PROCESSORS: dict[Callable[[Any], Any], Callable[[Any], Any]] = {
    _sqlite_bind_datetime: _sqlite_datetime_to_text
}


class UTCDateTime(TypeDecorator[datetime]):
    """``TIMESTAMP WITH TIME ZONE`` that always hands back aware UTC datetimes.

    SQLite stores no zone, so naive values read from it are UTC by construction. On SQLite
    the conversion both ways is one plain function each (``bind_processor`` /
    ``result_processor``) instead of SQLAlchemy's ``DATETIME`` processor wrapped around
    ``process_bind_param`` / ``process_result_value``: the same values, for a third of the
    cost binding and a fifth reading; some 40 datetimes pass through a round trip of the hot
    path. PostgreSQL keeps SQLAlchemy's bind processor; asyncpg reads ``TIMESTAMPTZ`` as
    datetimes in UTC already, which its result processor (``_aware_to_utc``) hands back as
    they are, without SQLAlchemy's wrapper around ``process_result_value``.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def bind_processor(self, dialect: sa.Dialect) -> Callable[[Any], Any] | None:
        if dialect.name == "sqlite":
            return _sqlite_bind_datetime
        return super().bind_processor(dialect)

    def result_processor(self, dialect: sa.Dialect, coltype: Any) -> Callable[[Any], Any] | None:
        if dialect.name == "sqlite":
            return sqlite_text_to_datetime
        if dialect.driver == "asyncpg":
            return _aware_to_utc
        return super().result_processor(dialect, coltype)

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        return _aware_to_utc(value)


JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
NOW = sa.text("CURRENT_TIMESTAMP")


#: Marks an object a repository filled from a row (``repositories.base.Repository._load``).
FROM_DATABASE = "_ccweb_from_database"


class Base(DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime(),
        dict[str, Any]: JSONType,
    }

    def __setattr__(self, key: str, value: Any) -> None:
        # Repositories write with Core statements and hand out objects no ORM session tracks:
        # a change to one would be lost without a word, so it is refused instead.
        if FROM_DATABASE in self.__dict__:
            raise AttributeError(
                f"{type(self).__name__}.{key} is read-only: objects read from the database "
                "are snapshots of their rows; change the row through a repository"
            )
        super().__setattr__(key, value)


class Session(Base):
    """A conversation (``conversationId`` = ``sessions.id``)."""

    __tablename__ = "sessions"
    __table_args__ = (sa.Index(None, "updated_at"),)

    id: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    title: Mapped[str | None] = mapped_column(sa.Text)
    agent: Mapped[str | None] = mapped_column(sa.String(AGENT_MAX_LENGTH))
    cwd: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime] = mapped_column(server_default=NOW)
    updated_at: Mapped[datetime] = mapped_column(server_default=NOW)
    archived_at: Mapped[datetime | None]
    extra: Mapped[dict[str, Any] | None]


class Message(Base):
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


class ReplyRequest(Base):
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


class Run(Base):
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


class ConversationCredential(Base):
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


class ServerSecret(Base):
    """A secret the server made for itself, by name: the key that signs conversation
    credentials, unless ``CCWEB_CREDENTIAL_SECRET`` supplies one. Never logged or printed."""

    __tablename__ = "server_secrets"

    name: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    value: Mapped[str] = mapped_column(sa.Text, nullable=False)
    created_at: Mapped[datetime] = mapped_column(server_default=NOW)


# --- the expression index on metadata.replyToRequestId (migration 0006) ---------------------

_JSON_KEY_PATTERN = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")


class JsonKeyText(sa.ColumnElement[str]):
    """A top-level key of a JSON column as text, the key written into the SQL.

    SQLite ``json_extract(col, '$.key')``, PostgreSQL ``(col ->> 'key')``. The key is a
    literal, not a bound parameter: only then can either planner match the expression to an
    index built on the same text. (``Message.metadata_[key].as_string()`` binds the path.)
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
    column = Message.__table__.c.metadata if metadata is None else metadata
    return JsonKeyText(column, "replyToRequestId")
