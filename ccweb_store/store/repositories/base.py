"""What every repository shares: validation at the boundary, keyset cursors, and the
one-row INSERT/UPDATE … RETURNING helpers the hot path is built on. Rows come back as the
values of ``domain.rows``."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from ccweb_store.domain import errors, json_values
from ccweb_store.domain.errors import DomainError, InvalidInput
from ccweb_store.domain.events import Event
from ccweb_store.domain.rows import TABLE_OF
from ccweb_store.store.models import Base
from ccweb_store.store.statements import Batch, Rows
from ccweb_store.store.statements import prebuilt as prebuilt
from ccweb_store.store.transaction import Transaction

#: A row value of ``domain.rows`` (a ``NamedTuple``; ``_make`` is its public constructor).
_V = TypeVar("_V", bound=tuple[Any, ...])


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
        if json_values.find_problem(parts, "cursor") is not None:
            raise ValueError
        return [
            datetime.fromisoformat(p) if k is datetime else k(p)
            for p, k in zip(parts, kinds, strict=True)
        ]
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise InvalidInput(f"invalid cursor {cursor!r}", code=errors.INVALID_CURSOR) from exc


# --- statements of the request hot path, built once ------------------------------------------
# Building a statement (coercing each ``.where``, generating its cache key) costs more than
# running it on SQLite, so the queries every send, claim and completion runs are built once
# at import, with bound parameters, in the module of their table, and only executed per
# call. Parameters that fill INSERT/UPDATE values are named ``p_…``: SQLAlchemy reserves the
# column names there.


_CONSTANT = re.compile(r"\A[a-z_]+\Z")


def constant(value: str) -> sa.ColumnElement[str]:
    """An enum value (a status, a kind) written into the SQL as a literal, not bound.

    SQLite cannot tell whether a partial index applies to ``status = ?`` before the value is
    bound, so it prepares such a statement again on every run (the claim query against
    ``uq_runs_session_id_running``, many times its cost); a literal is planned once, and
    PostgreSQL matches it to partial indexes too. Only plain lowercase words pass.
    """
    if not _CONSTANT.fullmatch(value):
        raise ValueError(f"not an enum value: {value!r}")
    return sa.literal_column(f"'{value}'", sa.String())


def one_of(column: sa.ColumnElement[str], values: Sequence[str]) -> sa.ColumnElement[bool]:
    """``column IN (…)`` over fixed enum values, written into the SQL (see ``constant``).

    An IN over a list bound at execution (an "expanding" parameter) re-renders the SQL on
    every call, which costs more than running it; hot-path statements that need another set
    of values are built once per set (``lru_cache``) instead.
    """
    return column.in_([constant(value) for value in values])


def table_of(value_type: type[tuple[Any, ...]]) -> sa.Table:
    """The table whose rows ``value_type`` holds."""
    return Base.metadata.tables[TABLE_OF[value_type]]


@lru_cache(maxsize=8)
def column_attributes(
    value_type: type[tuple[Any, ...]],
) -> tuple[tuple[str, sa.Column[Any]], ...]:
    """``(field, column)`` of every column of a value type's table, in column order."""
    fields: tuple[str, ...] = getattr(value_type, "_fields")  # noqa: B009 (NamedTuple's)
    return tuple(zip(fields, table_of(value_type).c, strict=True))


#: ``(field, column name, has a server default)`` of each column of a value type's table,
#: worked out the first time a repository inserts one.
_INSERT_COLUMNS: dict[type[tuple[Any, ...]], tuple[tuple[str, str, bool], ...]] = {}


def _insert_columns(value_type: type[tuple[Any, ...]]) -> tuple[tuple[str, str, bool], ...]:
    columns = _INSERT_COLUMNS.get(value_type)
    if columns is None:
        columns = _INSERT_COLUMNS[value_type] = tuple(
            (field, column.name, column.server_default is not None)
            for field, column in column_attributes(value_type)
        )
    return columns


SESSIONS = Base.metadata.tables["sessions"]
MESSAGES = Base.metadata.tables["messages"]
REPLIES = Base.metadata.tables["reply_requests"]
RUNS = Base.metadata.tables["runs"]


class UnitState:
    """What the repositories of one unit of work share: its transaction, the sessions it
    locked and the changes it made."""

    def __init__(self, transaction: Transaction) -> None:
        self.transaction = transaction
        #: Sessions whose rows the current transaction read to change (``SessionRepository``;
        #: locked where the database locks rows).
        self.locked_sessions: dict[str, Any] = {}
        #: The changes made so far, written to the outbox at the commit (``events.py``).
        self.events: list[Event] = []
        #: The changes whose events their own statements wrote already
        #: (``Transaction.events_in_statements``): the commit tells the feed of them too.
        self.written_events: list[Event] = []

    def note(self, event: Event, *, written: bool = False) -> None:
        """Note a change for the event outbox (``EventRepository.flush`` writes it), or, when
        ``written``, an event the change's own statement wrote already."""
        (self.written_events if written else self.events).append(event)


class Repository:
    """SQL on one table, inside the unit of work's transaction.

    Every change is a Core statement. Rows come back as the immutable values of
    ``domain.rows``, each built by its type from the row the driver returned (``_load``): a
    value never changes after it is read, so a method that changes a row returns the changed
    row (``UPDATE … RETURNING``) for the caller to use.
    """

    def __init__(self, state: UnitState) -> None:
        self.state = state
        self.transaction = state.transaction

    async def _execute(
        self,
        stmt: sa.Executable,
        params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    ) -> Rows:
        """Run ``stmt`` in the unit of work's transaction."""
        return await self.transaction.execute(stmt, params)

    async def _execute_batch(self, batch: Batch, values: dict[str, Any]) -> Rows:
        """Run the steps of ``batch`` with ``values`` in the unit of work's transaction. Where
        the driver writes them with it (SQLite), the events noted so far go with the batch:
        note a batch's own changes before running it."""
        state = self.state
        rows, wrote_events = await self.transaction.execute_batch(batch, values, state.events)
        if wrote_events:
            state.written_events.extend(state.events)
            state.events = []
        return rows

    async def _execute_many(self, stmt: sa.Executable, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run ``stmt`` once per parameter set of ``rows`` (one executemany), returning nothing."""
        await self.transaction.execute_many(stmt, rows)

    @staticmethod
    def _load(value_type: type[_V], row: Sequence[Any]) -> _V:
        """The value ``value_type`` of ``row`` (every column, in table order)."""
        value: _V = getattr(value_type, "_make")(row)  # noqa: B009 (NamedTuple's constructor)
        return value

    async def _first(
        self, value_type: type[_V], stmt: sa.Executable, params: Mapping[str, Any] | None = None
    ) -> _V | None:
        """The first row of ``stmt`` (selecting or returning every column) as a value."""
        row = (await self._execute(stmt, params)).first()
        return None if row is None else self._load(value_type, row)

    async def _all(
        self, value_type: type[_V], stmt: sa.Executable, params: Mapping[str, Any] | None = None
    ) -> list[_V]:
        """Every row of ``stmt`` (selecting or returning every column) as values."""
        make = getattr(value_type, "_make")  # noqa: B009 (NamedTuple's constructor)
        return [make(row) for row in (await self._execute(stmt, params))]

    async def _insert(
        self, value_type: type[_V], values: Mapping[str, Any], conflict: Callable[[], DomainError]
    ) -> _V:
        """Insert one row (field names as keys) now; the row as a value, server defaults
        included. A uniqueness clash raises ``conflict()``.

        One Core ``INSERT … RETURNING``. Like a flush, a ``None`` leaves a column with a
        server default to that default. No savepoint: a clash ends the unit of work (the
        caller raises, the transaction rolls back), so nothing ever continues in it.
        """
        stmt = insert_statement(table_of(value_type))
        try:
            row = (await self._execute(stmt, _insert_params(value_type, values))).one()
        except IntegrityError as exc:
            raise conflict() from exc
        return self._load(value_type, row)

    async def _insert_unread(
        self, table: sa.Table, values: Mapping[str, Any], conflict: Callable[[], DomainError]
    ) -> None:
        """``_insert`` into ``table`` (column names as keys) without reading the row back,
        for a caller that needs nothing of it but what it gave: on SQLite, ``RETURNING`` and
        converting its row cost more than the INSERT itself."""
        params = {
            name: value
            for name, value in values.items()
            if not (value is None and table.c[name].server_default is not None)
        }
        try:
            await self._execute(insert_statement(table, read_back=False), params)
        except IntegrityError as exc:
            raise conflict() from exc

    async def _page(
        self,
        value_type: type[_V],
        stmt: sa.Select[Any],
        limit: int,
        sort_key: Callable[[_V], tuple[Any, ...]],
    ) -> tuple[list[_V], str | None]:
        """Up to ``limit`` rows of ``stmt`` and the cursor to the next page (None: no more),
        made from the last row's ``sort_key``."""
        rows = await self._all(value_type, stmt.limit(limit + 1))
        if len(rows) <= limit:
            return rows, None
        rows = rows[:limit]
        return rows, encode_cursor(*sort_key(rows[-1]))

    async def _update_returning(self, value_type: type[_V], stmt: sa.Update) -> _V | None:
        """Run a conditional UPDATE of one row; the updated row if it matched, else None."""
        return await self._first(value_type, stmt.returning(*table_of(value_type).c))


def _insert_params(value_type: type[tuple[Any, ...]], values: Mapping[str, Any]) -> dict[str, Any]:
    """An insert's parameters by column name; like a flush, a ``None`` leaves a column with a
    server default to that default."""
    return {
        name: values[key]
        for key, name, defaulted in _insert_columns(value_type)
        if key in values and not (defaulted and values[key] is None)
    }


@lru_cache(maxsize=16)
def insert_statement(table: sa.Table, *, read_back: bool = True) -> sa.Insert:
    """``INSERT INTO <table>`` (Core, no flush), ``RETURNING`` every column if ``read_back``."""
    stmt = sa.insert(table)
    return prebuilt(stmt.returning(*table.c) if read_back else stmt)
