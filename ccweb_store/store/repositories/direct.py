"""Prebuilt statements compiled once per backend and run straight on the driver.

A one-row statement takes ~10 µs in SQLite and one round trip to PostgreSQL; SQLAlchemy's
execution around it (cache-key lookup, execution context, parameter and result processing,
result object, and on asyncpg its asyncio adaptation: a greenlet and an adapted cursor per
statement) costs several times that (measured on SQLite: 11 µs against 56 µs for an
``UPDATE … RETURNING`` of one row). The repositories' hot statements are built once
(``prebuilt``); here each is also *compiled* once per backend: SQLAlchemy renders the SQL and
supplies the type processors (its public ``dialect_impl(...).bind_processor`` /
``result_processor``), and a call only orders the parameters, runs them on the driver and
converts the returned values:

- SQLite (``execute_sqlite``): a ``sqlite3`` cursor, on the event loop's thread.
- PostgreSQL (``execute_postgres``): asyncpg's ``fetch``, which prepares each statement once
  per connection and keeps it (asyncpg's statement cache). The transaction is the one
  SQLAlchemy's asyncpg adapter would begin for its first statement, begun the same way, so
  statements SQLAlchemy runs in the same unit of work share it and its commit ends it.

What SQLAlchemy's execution would add is kept: the transaction is begun as SQLAlchemy begins
it, driver errors come out as SQLAlchemy's exceptions, and a connection the server closed is
invalidated. A statement this cannot run exactly like SQLAlchemy would (built per call,
expanding ``IN`` parameters, Python-side column defaults to prefetch) is left to SQLAlchemy.
Several parameter sets go through ``execute_many`` on SQLite: one ``executemany`` on the
cursor, an insert ``ROWS_PER_INSERT`` rows to a statement (the importer's bulk inserts, where
SQLAlchemy's per-row execution context cost more than the rows' inserts), and through
SQLAlchemy on PostgreSQL.
"""

from __future__ import annotations

import operator
import re
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import chain
from typing import Any, TypeVar, cast

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.exc import (
    InvalidRequestError,
    MultipleResultsFound,
    NoResultFound,
    StatementError,
)
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.sql.elements import BindParameter
from sqlalchemy.sql.visitors import replacement_traverse

from ccweb_store.store.db import (
    begin_postgres_transaction,
    plain_cursor,
    raise_as_sqlalchemy_would,
    sqlalchemy_error,
    sqlite_json_bind,
    sqlite_json_dumps,
)
from ccweb_store.store.models import SQLITE_COLUMN_BIND_PROCESSORS

Processor = Callable[[Any], Any] | None
_S = TypeVar("_S", bound=sa.Executable)


class Compiled:
    """One statement's SQL for one backend, its parameter order, and its type processors."""

    __slots__ = (
        "binds",
        "bound",
        "column_processors",
        "defaults",
        "names",
        "ordered",
        "result_processors",
        "sql",
        "width",
    )

    def __init__(self, stmt: sa.Executable, compiled: SQLCompiler, dialect: Dialect) -> None:
        self.sql = str(compiled)
        #: Per positional parameter: its name, whether the caller must give it, the value the
        #: statement fixes otherwise (``status == "queued"``), and its type's bind processor.
        self.binds: tuple[tuple[str, bool, Any, Processor], ...] = tuple(
            (
                name,
                compiled.binds[name].required,
                compiled.binds[name].effective_value,
                compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect),
            )
            for name in compiled.positiontup or ()
        )
        # What ``parameters`` runs on every call, worked out here once.
        self.names = tuple(name for name, _, _, _ in self.binds)
        #: The values of ``names`` from a mapping, as a tuple: one C call instead of a
        #: comprehension's loop in Python.
        self.ordered: Callable[[Mapping[str, Any]], tuple[Any, ...]] = _getter(self.names)
        #: The values of the parameters a caller may leave out (the statement fixes them).
        self.defaults = {name: fixed for name, required, fixed, _ in self.binds if not required}
        #: The positions of the parameters whose values need converting, with the converter.
        self.bound: tuple[tuple[int, Callable[[Any], Any]], ...] = tuple(
            (index, processor)
            for index, (_, _, _, processor) in enumerate(self.binds)
            if processor is not None
        )
        #: ``execute_many``'s converter per parameter (None: none), which converts a column of
        #: values: the same conversion as the bind processor's, in fewer calls.
        self.column_processors: tuple[Processor, ...] = tuple(
            _column_processor(compiled.binds[name].type, dialect, processor)
            for name, _, _, processor in self.binds
        )
        processors = [
            column.type.dialect_impl(dialect).result_processor(dialect, None)
            for column in getattr(stmt, "exported_columns", ())
        ]
        self.width = len(processors)
        #: Only the columns whose values need converting (datetimes, JSON, booleans).
        self.result_processors: tuple[tuple[int, Callable[[Any], Any]], ...] = tuple(
            (index, processor) for index, processor in enumerate(processors) if processor
        )

    def parameters(self, params: Mapping[str, Any] | None) -> Sequence[Any]:
        """The values to bind, in order, converted by their types (None stays None)."""
        given: Mapping[str, Any] = params or {}
        if self.defaults:
            given = {**self.defaults, **given}
        try:
            ordered = self.ordered(given)
        except KeyError as missing:
            raise InvalidRequestError(
                f"a value is required for bind parameter {missing.args[0]!r}"
            ) from None
        if not self.bound:
            return ordered
        values = list(ordered)
        for index, processor in self.bound:
            value = values[index]
            if value is not None:
                values[index] = processor(value)
        return values

    def rows(self, raw: list[Any]) -> list[Any]:
        if not self.result_processors:
            return raw
        converted = []
        for values in raw:
            row = list(values)
            for index, processor in self.result_processors:
                if row[index] is not None:
                    row[index] = processor(row[index])
            converted.append(row)
        return converted


def _column_processor(type_: Any, dialect: Dialect, processor: Processor) -> Processor:
    """The converter ``execute_many`` uses for a bind of ``type_`` whose bind processor is
    ``processor``: the same conversion, without a cache of the last value (datetimes: each
    value of a column comes once) or SQLAlchemy's wrapper around the JSON serializer."""
    if processor is None:
        return None
    impl = type_.dialect_impl(dialect)
    if (
        isinstance(impl, sa.JSON)
        and type(impl).bind_processor is sa.JSON.bind_processor
        and getattr(type(impl), "_make_bind_processor", None)
        is getattr(sa.JSON, "_make_bind_processor", None)
        and not impl.none_as_null
        and getattr(dialect, "_json_serializer", None) is sqlite_json_dumps
        and impl._str_impl.bind_processor(dialect) is None
    ):
        return sqlite_json_bind
    return SQLITE_COLUMN_BIND_PROCESSORS.get(processor, processor)


def _getter(names: tuple[str, ...]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """A function giving the values of ``names`` from a mapping, in order, as a tuple."""
    if len(names) > 1:
        return operator.itemgetter(*names)
    if names:
        only = operator.itemgetter(names[0])
        return lambda given: (only(given),)
    return lambda given: ()


#: The statements run here, by id: built once (module level or ``lru_cache``), so they live
#: as long as the process. Anything else goes through SQLAlchemy, whose cache serves it.
_PREBUILT: dict[int, sa.Executable] = {}
#: Their compiled forms, by (statement id, backend, parameter names in the caller's order: a
#: tuple costs less to make than a set, and a call site always orders them alike): None when
#: SQLAlchemy must run it. The type processors depend only on the dialect's class (every
#: SQLite engine here has the same JSON serializer, ``db.sqlite_json_dumps``; PostgreSQL's keep
#: SQLAlchemy's), so one compiled form serves every engine of a backend in the process.
_COMPILED: dict[tuple[int, str, tuple[str, ...]], Compiled | None] = {}


def prebuilt(stmt: _S) -> _S:
    """Mark a statement built once as one to run straight on the driver."""
    _PREBUILT[id(stmt)] = stmt
    return stmt


def compiled_form(stmt: sa.Executable, dialect: Dialect, params: Any) -> Compiled | None:
    """The compiled form that runs ``stmt`` with ``params`` straight on the driver, or None
    when SQLAlchemy must run it (built per call, several parameter sets, …)."""
    if params is not None and type(params) is not dict:
        return None
    key = (id(stmt), dialect.name, tuple(params) if params else ())
    try:
        return _COMPILED[key]
    except KeyError:
        if id(stmt) not in _PREBUILT:
            return None
        compiled = _COMPILED[key] = _compile(stmt, dialect, key[2])
        return compiled


def _compile(stmt: Any, dialect: Dialect, keys: tuple[str, ...]) -> Compiled | None:
    # The same column keys SQLAlchemy's execution compiles with (they shape INSERT/UPDATE).
    compiled = stmt.compile(dialect=dialect, column_keys=sorted(keys))
    if (
        not isinstance(compiled, SQLCompiler)
        or dialect.paramstyle not in ("qmark", "numeric_dollar")
        or compiled.post_compile_params
        or compiled.literal_execute_params
        or compiled.insert_prefetch
        or compiled.update_prefetch
        or not hasattr(stmt, "exported_columns")
    ):
        return None
    return Compiled(stmt, compiled, dialect)


class Rows:
    """The part of SQLAlchemy's ``Result`` the repositories use, over fetched rows."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)

    def all(self) -> list[Any]:
        return self._rows

    def first(self) -> Any | None:
        return self._rows[0] if self._rows else None

    def one(self) -> Any:
        if not self._rows:
            raise NoResultFound("the statement returned no row")
        if len(self._rows) > 1:
            raise MultipleResultsFound("the statement returned several rows")
        return self._rows[0]

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def scalars(self) -> Rows:
        return Rows([row[0] for row in self._rows], self.rowcount)


def execute_sqlite(
    connection: Connection, driver: sqlite3.Connection, stmt: sa.Executable, params: Any
) -> Any:
    """Run ``stmt`` on SQLite: compiled once and straight on ``driver`` (the ``sqlite3``
    connection under ``connection``) when possible.

    Returns SQLAlchemy's result, or ``Rows`` with the same reading methods."""
    # compiled_form, its cache's hit inlined: this runs for every statement.
    if params is None:
        key: tuple[Any, ...] = (id(stmt), _SQLITE, ())
    elif type(params) is dict:
        key = (id(stmt), _SQLITE, tuple(params))
    else:
        return connection.execute(stmt, params)
    compiled = _COMPILED.get(key, _UNKNOWN)
    if compiled is _UNKNOWN:
        compiled = compiled_form(stmt, connection.dialect, params)
    if compiled is None:
        return connection.execute(stmt, params)
    if not driver.in_transaction:
        connection.begin()  # BEGIN IMMEDIATE / DEFERRED: the dialect's do_begin
    values = compiled.parameters(params)
    cursor = plain_cursor(driver)
    try:
        cursor.execute(compiled.sql, values)
        raw = cursor.fetchall() if compiled.width else []
    except sqlite3.Error as error:
        raise sqlalchemy_error(error, compiled.sql, values, connection.dialect) from error
    if raw and len(raw[0]) != compiled.width:
        raise InvalidRequestError(f"{compiled.sql!r} returned {len(raw[0])} columns")
    return Rows(compiled.rows(raw) if compiled.result_processors else raw, cursor.rowcount)


_SQLITE = sqlite.dialect.name
_UNKNOWN: Any = object()


def execute_many(
    connection: Connection,
    driver: sqlite3.Connection,
    stmt: sa.Executable,
    rows: Sequence[Mapping[str, Any]],
) -> None:
    """Run ``stmt`` (``prebuilt``, returning nothing) once per parameter set in ``rows``, all
    with the same keys, as one ``executemany`` on the cursor.

    Values are converted as SQLAlchemy's own executemany converts them: every value goes
    through its type's bind processor, None included (so a JSON column stores ``null``), and
    a processor's error comes out as ``StatementError``.
    """
    if not rows:
        return
    compiled = compiled_form(stmt, connection.dialect, rows[0])
    if compiled is None or compiled.width:
        connection.execute(stmt, list(rows))  # not prebuilt, or returning rows
        return
    names = [name for name, _, _, _ in compiled.binds]
    if not rows[0].keys() >= set(names):
        connection.execute(stmt, list(rows))  # a fixed or missing value: SQLAlchemy decides
        return
    if not driver.in_transaction:
        connection.begin()
    # Column by column: each column's values taken out of the rows and converted by maps,
    # then the rows' tuples made by zip, all iterated in C (no Python loop per row).
    try:
        columns: list[Any] = [list(map(operator.itemgetter(name), rows)) for name in names]
        for index, convert in enumerate(compiled.column_processors):
            if convert is not None:
                columns[index] = list(map(convert, columns[index]))
    except Exception as error:
        raise StatementError(str(error), compiled.sql, None, error) from error
    _insert_many(connection, driver, compiled.sql, list(zip(*columns, strict=True)))


#: Rows per statement when ``execute_many`` inserts: an ``INSERT … VALUES (…), (…), …`` of
#: this many rows costs SQLite a third less than as many steps of a one-row ``executemany``
#: (100,000 messages: 0.36 against 0.55 s of CPU, the same rows in the same order).
ROWS_PER_INSERT = 100
#: The fewest host parameters any SQLite allows in one statement (999 before 3.32).
_SQLITE_MIN_VARIABLES = 999
_ONE_ROW_VALUES = re.compile(r" VALUES (\(\?(?:, \?)*\))$")


def _insert_many(
    connection: Connection, driver: sqlite3.Connection, sql: str, parameters: list[Any]
) -> None:
    """``executemany`` of ``sql``; a one-row ``INSERT … VALUES (?, …)`` runs as statements of
    ``ROWS_PER_INSERT`` rows each, and the rows left over one by one.

    Either way the rows go in in order. An error rolls back the statement that failed, so
    rows of its group that come before the failing one are not inserted either: the
    importer, the one caller, rolls back the whole transaction then.
    """
    values = _ONE_ROW_VALUES.search(sql)
    per_statement = min(ROWS_PER_INSERT, _SQLITE_MIN_VARIABLES // max(1, len(parameters[0])))
    grouped = len(parameters) - len(parameters) % per_statement
    if values is None or per_statement < 2 or not grouped:
        _run_many(connection, driver, sql, parameters)
        return
    group_sql = sql + f", {values.group(1)}" * (per_statement - 1)
    groups = [
        list(chain.from_iterable(parameters[start : start + per_statement]))
        for start in range(0, grouped, per_statement)
    ]
    _run_many(connection, driver, group_sql, groups)
    if grouped < len(parameters):
        _run_many(connection, driver, sql, parameters[grouped:])


def _run_many(
    connection: Connection, driver: sqlite3.Connection, sql: str, parameters: Sequence[Any]
) -> None:
    """``executemany`` of ``sql`` on the plain cursor; driver errors come out as
    SQLAlchemy's."""
    try:
        plain_cursor(driver).executemany(sql, parameters)
    except sqlite3.Error as error:
        raise sqlalchemy_error(error, sql, parameters, connection.dialect) from error


def fetch_sqlite(
    connection: Connection, driver: sqlite3.Connection, sql: str, values: tuple[Any, ...]
) -> list[Any]:
    """The rows of a query written for SQLite (``?`` parameters), run straight on ``driver``
    in the transaction under way, as the driver returns them; driver errors come out as
    SQLAlchemy's. For the busiest read, where naming the parameters, ordering them and
    converting the rows (``execute_sqlite``) cost as much as the query."""
    cursor = plain_cursor(driver)
    try:
        cursor.execute(sql, values)
        return cursor.fetchall()
    except sqlite3.Error as error:
        raise sqlalchemy_error(error, sql, values, connection.dialect) from error


class Batch:
    """Prebuilt statements that return nothing, run with one set of values: writes of a unit
    of work that nobody reads back (a send's touch, message, request and run).

    Each step is a statement and the names its bound parameters take their values from
    (``{"p_id": "run_id"}``: the statement's ``p_id`` is the values' ``run_id``), so that
    statements written for one repository each can share values.

    On SQLite the batch is compiled once into each statement's SQL and a getter of its
    positional values, and each value is converted once per converter it is bound with (one
    time bound four times is formatted once): a step then costs its ``execute`` on the cursor
    and little else, where a statement through a repository method and ``execute_sqlite``
    costs several Python calls more (a send's four writes: 541,861 -> 481,607 instructions per
    send in process, 11%).

    On PostgreSQL the steps are one statement: the last step, the others before it as
    data-modifying CTEs (``WITH step_0 AS (UPDATE …), step_1 AS (INSERT …) INSERT …``), one
    round trip to the server instead of one per step. PostgreSQL runs every sub-statement of
    a ``WITH`` exactly once, on one snapshot, in no set order, and checks foreign keys at the
    statement's end, so the steps must not read each other's rows (a send's do not: its
    message's ``seq`` reads the target's earlier messages only).
    """

    __slots__ = ("_postgres", "_sqlite", "names", "steps")

    def __init__(self, *steps: tuple[UpdateBase, Mapping[str, str]]) -> None:
        for stmt, _ in steps:
            prebuilt(stmt)
        self.steps = steps
        #: The values' names the steps bind.
        self.names = tuple(sorted({name for _, names in steps for name in names.values()}))
        self._sqlite: _SQLiteBatch | None = None
        self._postgres: sa.Executable | None = None

    def sqlite(self, dialect: Dialect) -> _SQLiteBatch:
        """The batch compiled for SQLite (once per process, as ``compiled_form``)."""
        if self._sqlite is None:
            self._sqlite = _SQLiteBatch(self.steps, dialect)
        return self._sqlite

    def as_one_statement(self) -> sa.Executable:
        """The steps as one statement of data-modifying CTEs, its parameters named as the
        values are (PostgreSQL)."""
        if self._postgres is None:
            *before, last = (_bound_as(stmt, names) for stmt, names in self.steps)
            ctes = [stmt.cte(f"step_{index}") for index, stmt in enumerate(before)]
            self._postgres = prebuilt(last.add_cte(*ctes))
        return self._postgres


def _bound_as(stmt: UpdateBase, names: Mapping[str, str]) -> UpdateBase:
    """``stmt`` with its bound parameters renamed by ``names`` (the others kept)."""

    def rename(element: Any, **_: Any) -> Any:
        if isinstance(element, BindParameter) and element.key in names:
            return sa.bindparam(names[element.key], type_=element.type, required=True)
        return None

    return cast(UpdateBase, replacement_traverse(stmt, {}, rename))


class _SQLiteBatch:
    """A ``Batch`` compiled for SQLite: per step its SQL and the getter of its values."""

    __slots__ = ("converters", "fixed", "steps")

    def __init__(
        self, steps: Sequence[tuple[UpdateBase, Mapping[str, str]]], dialect: Dialect
    ) -> None:
        #: The converted values the steps bind: by (batch value, converter), the name each
        #: is stored under. One converter bound by several steps (a time's) converts once.
        converted: dict[tuple[str, Callable[[Any], Any]], str] = {}
        #: The values statements fix themselves (a literal SQLAlchemy binds inside a
        #: subquery), converted, each under a name of its step's own (``"1.coalesce_1"``).
        self.fixed: dict[str, Any] = {}
        self.steps: list[tuple[str, Callable[[Mapping[str, Any]], tuple[Any, ...]]]] = []
        for index, (stmt, names) in enumerate(steps):
            compiled = compiled_form(stmt, dialect, dict.fromkeys(names))
            if compiled is None or compiled.width:
                raise ValueError(
                    f"step {index} of a batch must run straight on SQLite and return nothing"
                )
            sources = []
            for name, required, fixed, processor in compiled.binds:
                if name in names:
                    source = names[name]
                    if processor is not None:
                        key = (source, processor)
                        source = converted.setdefault(key, f"{source}:{len(converted)}")
                elif not required:
                    source = f"{index}.{name}"
                    convert = processor is not None and fixed is not None
                    self.fixed[source] = processor(fixed) if convert else fixed  # type: ignore[misc]
                else:
                    raise ValueError(f"step {index} of a batch leaves {name!r} unbound")
                sources.append(source)
            self.steps.append((compiled.sql, _getter(tuple(sources))))
        #: (batch value, converter, name of the converted value), once each.
        self.converters = tuple(
            (source, converter, name) for (source, converter), name in converted.items()
        )


def execute_batch_sqlite(
    connection: Connection, driver: sqlite3.Connection, batch: Batch, values: dict[str, Any]
) -> None:
    """Run ``batch`` on SQLite straight on ``driver`` with ``values``, to which it adds the
    values converted by their types (and the statements' own fixed values)."""
    compiled = batch.sqlite(connection.dialect)
    for source, converter, name in compiled.converters:
        value = values[source]
        values[name] = None if value is None else converter(value)
    if compiled.fixed:
        values.update(compiled.fixed)
    if not driver.in_transaction:
        connection.begin()
    cursor = plain_cursor(driver)
    for sql, ordered in compiled.steps:
        parameters = ordered(values)
        try:
            cursor.execute(sql, parameters)
        except sqlite3.Error as error:
            raise sqlalchemy_error(error, sql, parameters, connection.dialect) from error


async def execute_postgres(connection: AsyncConnection, stmt: sa.Executable, params: Any) -> Any:
    """Run ``stmt`` on PostgreSQL: compiled once and straight on asyncpg when possible."""
    compiled = compiled_form(stmt, connection.dialect, params)
    if compiled is None:
        return await connection.execute(stmt, params)
    arguments = compiled.parameters(params)
    try:
        driver = await begin_postgres_transaction(connection)
        raw = await driver.fetch(compiled.sql, *arguments)
    except Exception as error:
        await raise_as_sqlalchemy_would(connection, error, compiled.sql, list(arguments))
    if raw and len(raw[0]) != compiled.width:
        raise InvalidRequestError(f"{compiled.sql!r} returned {len(raw[0])} columns")
    return Rows(compiled.rows(raw), len(raw))
