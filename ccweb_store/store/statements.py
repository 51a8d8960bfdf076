"""Statements compiled by SQLAlchemy and run by the store's driver, and what they return.

A unit of work runs every statement itself, on one driver connection in a transaction it owns
(``store.sqlite.driver``, ``store.postgres.driver``): SQLAlchemy builds and compiles the SQL
and supplies each type's conversions through its public API (``compile``,
``bind_processor``, ``result_processor``), and the order of its parameters through compiler
attributes read in ``compiled_parts`` alone; the driver runs the SQL and the values. A statement
marked ``prebuilt`` (built once, at import) is compiled once per database and kept; any other
statement is compiled each time it runs.
"""

from __future__ import annotations

import operator
from collections import namedtuple
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, TypeVar, cast

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import InvalidRequestError, MultipleResultsFound, NoResultFound
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.sql.elements import BindParameter
from sqlalchemy.sql.visitors import replacement_traverse

from ccweb_store.store.compiled_parts import compile_parts, expanded, parameters_by_name

Processor = Callable[[Any], Any]
_S = TypeVar("_S", bound=sa.Executable)

#: The execution option that marks a statement built once, whose compiled form is kept.
PREBUILT = "ccweb_prebuilt"


def prebuilt(stmt: _S) -> _S:
    """``stmt`` marked as built once (module level or a bounded ``lru_cache``): each database
    compiles it once and keeps the compiled form."""
    return stmt.execution_options(**{PREBUILT: True})


def is_prebuilt(stmt: sa.Executable) -> bool:
    return bool(stmt.get_execution_options().get(PREBUILT))


class Compiled:
    """One statement's SQL for one dialect, the order of its parameters, and the conversions
    of the values bound and returned."""

    __slots__ = (
        "converters",
        "defaults",
        "expanding",
        "keys",
        "names",
        "ordered",
        "parts",
        "processors",
        "results",
        "returns_rows",
        "sql",
        "width",
    )

    def __init__(self, stmt: sa.Executable, dialect: Dialect, keys: Sequence[str]) -> None:
        parts = self.parts = compile_parts(stmt, dialect, keys)
        #: Whether a parameter stands for a list (``IN``), whose SQL depends on its length:
        #: rendered per call (``compiled_parts.expanded``).
        self.expanding = parts.expanding
        self.sql = parts.sql
        #: The parameters' names, in the order the SQL binds them.
        self.names = parts.names
        #: The values the statement gives its parameters itself (``status == 'queued'`` bound),
        #: for those a caller leaves out.
        self.defaults = {
            name: bind.effective_value
            for name, bind in zip(parts.names, parts.binds, strict=True)
            if not bind.required
        }
        #: The values of ``names`` from a mapping, in order, as a tuple.
        self.ordered = _getter(self.names)
        #: The bind processor of each parameter by position (None: none).
        self.converters: tuple[Processor | None, ...] = tuple(
            bind.type.dialect_impl(dialect).bind_processor(dialect) for bind in parts.binds
        )
        #: Only the parameters whose values need converting: position, converter.
        self.processors = tuple(
            (index, processor)
            for index, processor in enumerate(self.converters)
            if processor is not None
        )
        # An INSERT, UPDATE or DELETE exports its RETURNING columns (none without); SQL text
        # (``sa.text``) says nothing of what it returns.
        columns = list(getattr(stmt, "exported_columns", ()))
        #: The names of the returned columns.
        self.keys = tuple(column.key for column in columns)
        #: Whether the statement returns rows: None for SQL text, which may or may not.
        self.returns_rows: bool | None = None if isinstance(stmt, sa.TextClause) else bool(columns)
        self.width = len(columns)
        #: Per returned column that needs converting (times, JSON, booleans): position, converter.
        self.results = tuple(
            (index, processor)
            for index, column in enumerate(columns)
            if (processor := column.type.dialect_impl(dialect).result_processor(dialect, None))
        )

    def statement(self, params: Mapping[str, Any] | None) -> tuple[str, Sequence[Any]]:
        """The SQL and the values to bind, in order, converted by their types."""
        if self.expanding:
            return self._expanded(params)
        return self.sql, self.values(params)

    def values(self, params: Mapping[str, Any] | None) -> Sequence[Any]:
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
        if not self.processors:
            return ordered
        values = list(ordered)
        for index, processor in self.processors:
            value = values[index]
            if value is not None:
                values[index] = processor(value)
        return values

    def _expanded(self, params: Mapping[str, Any] | None) -> tuple[str, Sequence[Any]]:
        rendered = expanded(self.parts, params or {})
        processors = {
            **dict(zip(self.names, self.converters, strict=True)),
            **rendered.processors,
        }
        values = [
            value if value is None or (convert := processors.get(name)) is None else convert(value)
            for name, value in zip(rendered.names, rendered.values, strict=True)
        ]
        return rendered.sql, values

    def many(self, rows: Sequence[Mapping[str, Any]]) -> list[Sequence[Any]]:
        """The values of several parameter sets; every value passes its type's converter, None
        included (so a JSON column stores ``null``), as SQLAlchemy's executemany does. Column
        by column: each parameter's values taken out of the rows and converted by one ``map``,
        the rows' tuples made by ``zip``."""
        if self.defaults:
            rows = [{**self.defaults, **row} for row in rows]
        columns: list[Any] = [list(map(operator.itemgetter(name), rows)) for name in self.names]
        for index, converter in enumerate(self.converters):
            if converter is not None:
                columns[index] = list(map(converter, columns[index]))
        return list(zip(*columns, strict=True))

    def rows(self, raw: list[Any]) -> list[Any]:
        """The rows the driver returned, their values converted by their columns' types."""
        if raw and self.returns_rows is not None and len(raw[0]) != self.width:
            raise InvalidRequestError(f"{self.sql!r} returned {len(raw[0])} columns")
        if not self.results:
            return raw
        converted = []
        for values in raw:
            row = list(values)
            for index, processor in self.results:
                if row[index] is not None:
                    row[index] = processor(row[index])
            converted.append(row)
        return converted


def _getter(names: tuple[str, ...]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """A function giving the values of ``names`` from a mapping, in order, as a tuple."""
    if len(names) > 1:
        return operator.itemgetter(*names)
    if names:
        only = operator.itemgetter(names[0])
        return lambda given: (only(given),)
    return lambda given: ()


class Rows:
    """What a statement returned: its rows (tuples, in the statement's column order) and how
    many rows it changed or returned; read like SQLAlchemy's ``Result``."""

    __slots__ = ("_rows", "keys", "rowcount")

    def __init__(self, rows: list[Any], rowcount: int, keys: Sequence[str] = ()) -> None:
        self._rows = rows
        self.rowcount = rowcount
        #: The names of the returned columns (``mappings``).
        self.keys = keys

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

    def scalar_one(self) -> Any:
        return self.one()[0]

    def scalars(self) -> Rows:
        return Rows([row[0] for row in self._rows], self.rowcount)

    def named(self) -> Rows:
        """The rows as named tuples: each value also an attribute named as its column."""
        if not self.keys:
            return self
        row_type = namedtuple("Row", self.keys, rename=True)  # type: ignore[misc]
        return Rows([row_type(*row) for row in self._rows], self.rowcount, self.keys)

    def mappings(self) -> Rows:
        """The rows as dicts by column name."""
        return Rows([dict(zip(self.keys, row, strict=True)) for row in self._rows], self.rowcount)


class Batch:
    """Prebuilt statements that return nothing, run with one set of values: writes of a unit
    of work that nobody reads back (a send's touch, message, request and run), or, with
    ``read_back``, whose last step's row is read back (a run's output message).

    Each step is a statement and the names its bound parameters take their values from
    (``{"p_id": "run_id"}``: the statement's ``p_id`` is the values' ``run_id``), so that
    statements written for one repository each can share values. A driver runs the steps one
    after another, or all as one statement where a round trip to the driver costs more than
    the statements:

    - PostgreSQL runs the steps before the last as data-modifying CTEs (``as_one_statement``:
      ``WITH step_0 AS (UPDATE …), step_1 AS (INSERT …) INSERT …``). It runs every
      sub-statement of a ``WITH`` exactly once, on one snapshot, in no set order, and checks
      foreign keys at the statement's end, so the steps must not read each other's rows (a
      send's do not: its message's ``seq`` reads the target's earlier messages only).
    - SQLite runs them in order, as the trigger of a view of its own
      (``store.sqlite.one_statement``).

    ``read_back`` is ``(table, name)``: the last step inserts a row of ``table`` whose primary
    key is the values' ``name``, and returns it (``RETURNING`` every column).

    Every batch made is listed in ``Batch.made``, in the order made (module constants, made
    at import), so that a driver can prepare each once per connection.
    """

    __slots__ = ("_combined", "names", "read_back", "statements", "types", "unread")

    made: ClassVar[list[Batch]] = []

    def __init__(
        self,
        *steps: tuple[UpdateBase, Mapping[str, str]],
        read_back: tuple[sa.Table, str] | None = None,
    ) -> None:
        bound = [_bound_as(stmt, names) for stmt, names in steps]
        #: The steps, each with its parameters named as the batch's values, none returning.
        self.unread: tuple[UpdateBase, ...] = tuple(prebuilt(stmt) for stmt in bound)
        if read_back is not None:
            bound[-1] = bound[-1].returning(*read_back[0].c)
        #: The steps as a driver runs them one by one: the last returning its row when read back.
        self.statements: tuple[UpdateBase, ...] = tuple(prebuilt(stmt) for stmt in bound)
        self.read_back = read_back
        #: The values' names the steps bind.
        self.names = tuple(sorted({name for _, names in steps for name in names.values()}))
        #: The type each value is bound as (the first step's that binds it).
        self.types: dict[str, Any] = {}
        for stmt in self.unread:
            for name, bind in parameters_by_name(stmt).items():
                if name in self.names:
                    self.types.setdefault(name, bind.type)
        self._combined: sa.Executable | None = None
        Batch.made.append(self)

    def as_one_statement(self) -> sa.Executable:
        """The steps as one statement of data-modifying CTEs."""
        if self._combined is None:
            *before, last = self.statements
            ctes = [stmt.cte(f"step_{index}") for index, stmt in enumerate(before)]
            self._combined = prebuilt(last.add_cte(*ctes))
        return self._combined


def _bound_as(stmt: UpdateBase, names: Mapping[str, str]) -> UpdateBase:
    """``stmt`` with its bound parameters renamed by ``names`` (the others kept)."""

    def rename(element: Any, **_: Any) -> Any:
        if isinstance(element, BindParameter) and element.key in names:
            return sa.bindparam(names[element.key], type_=element.type, required=True)
        return None

    return cast(UpdateBase, replacement_traverse(stmt, {}, rename))
