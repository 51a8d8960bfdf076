"""What every repository shares: validation at the boundary, keyset cursors, and the
one-row INSERT/UPDATE … RETURNING helpers the hot path is built on."""

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
from sqlalchemy.orm import QueryableAttribute

from ccweb_store.domain import errors, json_values
from ccweb_store.domain.errors import DomainError, InvalidInput
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.store.models import (
    FROM_DATABASE,
    Base,
    Message,
    ReplyRequest,
    Run,
    SessionRow,
)
from ccweb_store.store.statements import Batch, Rows
from ccweb_store.store.statements import prebuilt as prebuilt
from ccweb_store.store.transaction import Transaction

_T = TypeVar("_T")
_B = TypeVar("_B", bound=Base)


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


def one_of(
    column: sa.ColumnElement[str] | QueryableAttribute[str], values: Sequence[str]
) -> sa.ColumnElement[bool]:
    """``column IN (…)`` over fixed enum values, written into the SQL (see ``constant``).

    An IN over a list bound at execution (an "expanding" parameter) re-renders the SQL on
    every call, which costs more than running it; hot-path statements that need another set
    of values are built once per set (``lru_cache``) instead.
    """
    return column.in_([constant(value) for value in values])


@lru_cache(maxsize=8)
def column_attributes(model: type[Base]) -> tuple[tuple[str, sa.ColumnElement[Any]], ...]:
    """``(attribute name, column)`` of every column of a mapped class."""
    return tuple((attr.key, attr.columns[0]) for attr in sa.inspect(model).column_attrs)


def _row_layout(model: type[Base]) -> tuple[tuple[str, ...], int]:
    """The attribute name of each column of the model's table, in the table's column order
    (the order of ``select(TABLE)`` and of ``RETURNING *TABLE.c``), and the position of the
    primary key among them."""
    by_name = {column.name: key for key, column in column_attributes(model)}
    table = Base.metadata.tables[model.__tablename__]
    keys = tuple(by_name[column.name] for column in table.c)
    (primary,) = table.primary_key.columns
    return keys, keys.index(by_name[primary.name])


#: ``_row_layout`` and the insert columns of each mapped class, worked out the first time a
#: repository reads or inserts one (``_load`` runs for every row read).
_ROW_LAYOUTS: dict[type[Base], tuple[tuple[str, ...], int]] = {}
_INSERT_COLUMNS: dict[type[Base], tuple[tuple[str, str, bool], ...]] = {}


def _layout(model: type[Base]) -> tuple[tuple[str, ...], int]:
    layout = _ROW_LAYOUTS.get(model)
    if layout is None:
        layout = _ROW_LAYOUTS[model] = _row_layout(model)
    return layout


def _insert_columns(model: type[Base]) -> tuple[tuple[str, str, bool], ...]:
    """``(attribute name, column name, has a server default)`` of each column."""
    columns = _INSERT_COLUMNS.get(model)
    if columns is None:
        columns = _INSERT_COLUMNS[model] = tuple(
            (key, column.name, column.server_default is not None)
            for key, column in column_attributes(model)
        )
    return columns


SESSIONS = Base.metadata.tables[SessionRow.__tablename__]
MESSAGES = Base.metadata.tables[Message.__tablename__]
REPLIES = Base.metadata.tables[ReplyRequest.__tablename__]
RUNS = Base.metadata.tables[Run.__tablename__]


class UnitState:
    """What the repositories of one unit of work share: its transaction, and the objects
    standing for the rows read so far."""

    def __init__(self, transaction: Transaction) -> None:
        self.transaction = transaction
        #: The object standing for each row read so far, by (mapped class, primary key).
        self.loaded: dict[tuple[type[Base], Any], Any] = {}
        #: Sessions whose rows the current transaction read to change (``SessionRepository``;
        #: locked where the database locks rows).
        self.locked_sessions: dict[str, Any] = {}
        #: The changes made so far, written to the outbox at the commit (``events.py``).
        self.events: list[dict[str, Any]] = []
        #: The changes whose events their own statements wrote already
        #: (``Transaction.events_in_statements``): the commit tells the feed of them too.
        self.written_events: list[dict[str, Any]] = []

    def note(
        self,
        event_type: str,
        conversation_id: str | None,
        *,
        peer: str | None = None,
        message_id: str | None = None,
        run_id: str | None = None,
        request_id: str | None = None,
        payload: dict[str, Any] | None = None,
        at: datetime | None = None,
        written: bool = False,
    ) -> None:
        """Note a change for the event outbox (``EventRepository.flush`` writes it), or, when
        ``written``, an event the change's own statement wrote already."""
        (self.written_events if written else self.events).append(
            {
                "type": event_type,
                "conversation_id": conversation_id,
                "peer_conversation_id": peer,
                "message_id": message_id,
                "run_id": run_id,
                "request_id": request_id,
                "created_at": at or utcnow(),
                "payload": payload,
            }
        )


class Repository:
    """SQL on one table, inside the unit of work's transaction.

    Rows come back as instances of the mapped classes, filled straight from the rows the
    driver returned: nothing here writes through the ORM — every change is a Core statement.
    One object stands for one row per unit of work (``_load``), refreshed whenever a
    statement returns that row, so a conditional ``UPDATE … RETURNING`` updates the object a
    caller already holds.
    """

    def __init__(self, state: UnitState) -> None:
        self.state = state
        self.transaction = state.transaction
        self._loaded = state.loaded

    async def _execute(
        self,
        stmt: sa.Executable,
        params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    ) -> Rows:
        """Run ``stmt`` in the unit of work's transaction."""
        return await self.transaction.execute(stmt, params)

    async def _execute_batch(self, batch: Batch, values: dict[str, Any]) -> Rows:
        """Run the steps of ``batch`` with ``values`` in the unit of work's transaction."""
        return await self.transaction.execute_batch(batch, values)

    async def _execute_many(self, stmt: sa.Executable, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run ``stmt`` once per parameter set of ``rows`` (one executemany), returning nothing."""
        await self.transaction.execute_many(stmt, rows)

    def _load(self, model: type[_B], row: Sequence[Any], into: _B | None = None) -> _B:
        """The unit of work's object for ``row`` (every column, in table order), refreshed.

        A new object is a bare instance of the mapped class, without the ORM's instance
        state (which only a session would use, and none ever sees these objects): its
        columns and the ``FROM_DATABASE`` mark go straight into ``__dict__``, where the
        mapped attributes read them, and ``Base.__setattr__`` refuses changes.
        """
        keys, primary = _layout(model)
        key = (model, row[primary])
        loaded = self._loaded.get(key, into)
        if loaded is None:
            loaded = model.__new__(model)
        fields = loaded.__dict__
        fields.update(zip(keys, row, strict=True))
        fields[FROM_DATABASE] = True
        self._loaded[key] = loaded
        found: _B = loaded
        return found

    async def _first(
        self, model: type[_B], stmt: sa.Executable, params: Mapping[str, Any] | None = None
    ) -> _B | None:
        """The first row of ``stmt`` (selecting or returning every column) as an object."""
        row = (await self._execute(stmt, params)).first()
        return None if row is None else self._load(model, row)

    async def _all(
        self, model: type[_B], stmt: sa.Executable, params: Mapping[str, Any] | None = None
    ) -> list[_B]:
        """Every row of ``stmt`` (selecting or returning every column) as objects."""
        return [self._load(model, row) for row in (await self._execute(stmt, params))]

    async def _insert(
        self,
        model: type[_B],
        values: Mapping[str, Any],
        conflict: Callable[[], DomainError],
        *,
        into: _B | None = None,
    ) -> _B:
        """Insert one row (attribute names as keys) now; the row as an object (``into`` if
        given), server defaults included. A uniqueness clash raises ``conflict()``.

        One Core ``INSERT … RETURNING``. Like a flush, a ``None`` leaves a column with a
        server default to that default. No savepoint: a clash ends the unit of work (the
        caller raises, the transaction rolls back), so nothing ever continues in it.
        """
        try:
            row = (
                await self._execute(insert_statement(model), _insert_params(model, values))
            ).one()
        except IntegrityError as exc:
            raise conflict() from exc
        return self._load(model, row, into)

    async def _insert_unread(
        self, model: type[Base], values: Mapping[str, Any], conflict: Callable[[], DomainError]
    ) -> None:
        """``_insert`` without reading the row back, for a caller that needs nothing of it
        but what it gave: on SQLite, ``RETURNING`` and converting its row cost more than
        the INSERT itself."""
        stmt = insert_statement(model, read_back=False)
        try:
            await self._execute(stmt, _insert_params(model, values))
        except IntegrityError as exc:
            raise conflict() from exc

    async def _page(
        self,
        model: type[_B],
        stmt: sa.Select[Any],
        limit: int,
        sort_key: Callable[[_B], tuple[Any, ...]],
    ) -> tuple[list[_B], str | None]:
        """Up to ``limit`` rows of ``stmt`` and the cursor to the next page (None: no more),
        made from the last row's ``sort_key``."""
        rows = await self._all(model, stmt.limit(limit + 1))
        if len(rows) <= limit:
            return rows, None
        rows = rows[:limit]
        return rows, encode_cursor(*sort_key(rows[-1]))

    async def _update_returning(self, model: type[_B], stmt: sa.Update) -> _B | None:
        """Run a conditional UPDATE of one row; the updated row if it matched, else None."""
        table = Base.metadata.tables[model.__tablename__]
        return await self._first(model, stmt.returning(*table.c))


def _insert_params(model: type[Base], values: Mapping[str, Any]) -> dict[str, Any]:
    """An insert's parameters by column name; like a flush, a ``None`` leaves a column with a
    server default to that default."""
    return {
        name: values[key]
        for key, name, defaulted in _insert_columns(model)
        if key in values and not (defaulted and values[key] is None)
    }


@lru_cache(maxsize=16)
def insert_statement(model: type[Base], *, read_back: bool = True) -> sa.Insert:
    """``INSERT INTO <table>`` (Core, no flush), ``RETURNING`` every column if ``read_back``."""
    table = Base.metadata.tables[model.__tablename__]
    stmt = sa.insert(table)
    return prebuilt(stmt.returning(*table.c) if read_back else stmt)
