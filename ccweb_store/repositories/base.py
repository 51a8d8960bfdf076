"""What every repository shares: validation at the boundary, keyset cursors, and the
one-row INSERT/UPDATE … RETURNING helpers the hot path is built on."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import QueryableAttribute, make_transient_to_detached
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.util import identity_key

from ccweb_store import errors
from ccweb_store.errors import DomainError, InvalidInput
from ccweb_store.models import (
    SESSION_ID_MAX_LENGTH,
    SESSION_ID_PATTERN,
    Base,
    Message,
    ReplyRequest,
    Run,
    Session,
)

MAX_PAGE = 500

_T = TypeVar("_T")
_B = TypeVar("_B", bound=Base)


def validate_session_id(value: object, *, code: str = errors.INVALID_CONVERSATION_ID) -> str:
    """Return ``value`` if it is a well-formed conversation id, else raise ``code``."""
    if (
        not isinstance(value, str)
        or not value
        or len(value) > SESSION_ID_MAX_LENGTH
        or not SESSION_ID_PATTERN.match(value)
    ):
        raise InvalidInput(
            f"invalid conversation id {value!r}: use 1-{SESSION_ID_MAX_LENGTH} letters, "
            "digits, '_' or '-', starting with a letter or digit",
            code=code,
        )
    return value


def validate_choice(value: object, choices: Sequence[str], code: str, what: str) -> str:
    """Return ``value`` if it is one of ``choices``, else raise ``code``."""
    if not isinstance(value, str) or value not in choices:
        raise InvalidInput(
            f"invalid {what} {value!r}: expected one of {', '.join(choices)}", code=code
        )
    return value


def encode_cursor(*parts: Any) -> str:
    """An opaque keyset cursor (the last row's sort key)."""
    raw = json.dumps([p.isoformat() if isinstance(p, datetime) else p for p in parts])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, kinds: Sequence[type]) -> list[Any]:
    """Parse a cursor made by ``encode_cursor`` whose parts have the given types."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        parts = json.loads(base64.urlsafe_b64decode(padded.encode()))
        if not isinstance(parts, list) or len(parts) != len(kinds):
            raise ValueError
        return [
            datetime.fromisoformat(p) if k is datetime else k(p)
            for p, k in zip(parts, kinds, strict=True)
        ]
    except (ValueError, TypeError) as exc:
        raise InvalidInput(f"invalid cursor {cursor!r}", code=errors.INVALID_CURSOR) from exc


# --- statements of the request hot path, built once ------------------------------------------
# Building a statement (coercing each ``.where``, generating its cache key) costs more than
# running it on SQLite, so the queries every send, claim and completion runs are built once
# at import, with bound parameters, in the module of their table, and only executed per
# call. Parameters that fill INSERT/UPDATE values are named ``p_…``: SQLAlchemy reserves the
# column names there.


def one_of(
    column: sa.ColumnElement[str] | QueryableAttribute[str], values: Sequence[str]
) -> sa.ColumnElement[bool]:
    """``column IN (…)`` over fixed values, each a plain bound parameter of the statement.

    An IN over a list bound at execution (an "expanding" parameter) re-renders the SQL on
    every call, which costs more than running it; hot-path statements that need another set
    of values are built once per set (``lru_cache``) instead.
    """
    return column.in_([sa.literal(value) for value in values])


@lru_cache(maxsize=8)
def column_attributes(model: type[Base]) -> tuple[tuple[str, sa.ColumnElement[Any]], ...]:
    """``(attribute name, column)`` of every column of a mapped class."""
    return tuple((attr.key, attr.columns[0]) for attr in sa.inspect(model).column_attrs)


@lru_cache(maxsize=8)
def insert_statement(model: type[Base]) -> sa.Insert:
    """``INSERT INTO <table> … RETURNING`` every column, on the table (Core, no flush)."""
    table = Base.metadata.tables[model.__tablename__]
    return sa.insert(table).returning(*table.c)


SESSIONS = Base.metadata.tables[Session.__tablename__]
MESSAGES = Base.metadata.tables[Message.__tablename__]
REPLIES = Base.metadata.tables[ReplyRequest.__tablename__]
RUNS = Base.metadata.tables[Run.__tablename__]


class Repository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    @property
    def dialect(self) -> str:
        return self.session.get_bind().dialect.name

    async def _insert(self, row: Base, conflict: Callable[[], DomainError]) -> None:
        """Insert ``row`` now, turning a uniqueness clash into ``conflict()``.

        One Core ``INSERT … RETURNING`` (a flush of the unit of work costs several times
        more); the returned columns, server defaults included, fill ``row``, which then joins
        the session as if it had been loaded. Like a flush, a ``None`` leaves a column with a
        server default to that default. No savepoint: a clash ends the unit of work (the
        caller raises, the transaction rolls back), so nothing ever continues in it.
        """
        columns = column_attributes(type(row))
        state = row.__dict__
        values = {
            column.name: state[key]
            for key, column in columns
            if key in state and not (state[key] is None and column.server_default is not None)
        }
        try:
            returned = (await self.session.execute(insert_statement(type(row)), values)).one()
        except IntegrityError as exc:
            raise conflict() from exc
        attach_returned(self.session, row, returned._mapping)


async def update_returning(session: AsyncSession, stmt: sa.Update, model: type[_T]) -> _T | None:
    """Run a conditional UPDATE of one row; the updated row if it matched, else None.

    ``RETURNING`` the row refreshes the loaded object in the same statement (SQLite ≥ 3.35
    and PostgreSQL both support it), instead of a second SELECT.
    """
    returning = stmt.returning(model).execution_options(
        synchronize_session=False, populate_existing=True
    )
    row: _T | None = (await session.execute(returning)).scalars().first()
    return row


def attach_returned(session: AsyncSession, row: Base, returned: Mapping[Any, Any]) -> None:
    """Fill ``row`` from a ``RETURNING`` of every column and make it a loaded object."""
    for key, column in column_attributes(type(row)):
        setattr(row, key, returned[column])
    make_transient_to_detached(row)
    session.add(row)


async def update_one(
    session: AsyncSession,
    model: type[_B],
    stmt: sa.UpdateBase,
    params: dict[str, Any],
) -> _B | None:
    """Run a Core UPDATE of one row returning every column; the session's object for the
    row, refreshed from it (as ``populate_existing`` would), or None if no row matched."""
    row = (await session.execute(stmt, params)).first()
    if row is None:
        return None
    values = row._mapping
    mapper = sa.inspect(model)
    key = identity_key(model, tuple(values[column] for column in mapper.primary_key))
    loaded = session.sync_session.identity_map.get(key)
    if loaded is None:
        fresh = model()
        attach_returned(session, fresh, values)
        return fresh
    for attribute, column in column_attributes(model):
        set_committed_value(loaded, attribute, values[column])
    found: _B = loaded
    return found
