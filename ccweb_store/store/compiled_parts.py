"""What the store reads from a statement SQLAlchemy compiled, in one place.

The store runs SQLAlchemy's SQL on the driver itself (``statements``), so it reads more of a
compiled statement than its text. These attributes of ``SQLCompiler`` have public names but
are documented little or not at all, so a release of SQLAlchemy may change them; nothing
else in the store reads them:

- ``positiontup``: the bound parameters' names in the order the positional SQL binds them
  (``?`` on SQLite, ``$1`` on PostgreSQL, which may number them in another order than they
  appear): the driver is given the values in that order.
- ``binds``: each bound parameter by name: its type (how a value is converted before it is
  bound), whether it is ``required``, and the value the statement gives it itself
  (``effective_value``: ``status == 'queued'`` bound), used when a caller leaves it out.
- ``insert_prefetch``, ``update_prefetch``: the columns whose default SQLAlchemy computes in
  Python before an INSERT or UPDATE runs. The driver would not compute them, so a statement
  that has any is refused.
- ``post_compile_params``, ``literal_execute_params``: the parameters rendered into the SQL
  per execution (a list bound to an ``IN``, a literal-executed ``LIMIT``): such a statement's
  SQL is rendered again for each set of values.
- ``construct_expanded_state``: that rendering, for one set of values: its ``statement``
  (the SQL), ``positiontup`` and ``positional_parameters`` (the names and values in binding
  order, a list's items each a parameter of its own) and ``processors`` (the conversions of
  those items).

``tests/test_compiled_parts.py`` checks each of them on both dialects, and CI runs it against
the newest SQLAlchemy the project's pin allows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import InvalidRequestError
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import BindParameter

Processor = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class CompiledParts:
    """A statement compiled for one dialect: its SQL and its bound parameters in the order
    the SQL binds them."""

    compiled: SQLCompiler
    sql: str
    #: The parameters' names, in binding order (``positiontup``).
    names: tuple[str, ...]
    #: The parameters themselves, in the same order (``binds``).
    binds: tuple[BindParameter[Any], ...]
    #: Whether the SQL is rendered per execution (``post_compile_params``,
    #: ``literal_execute_params``): run it through ``expanded``.
    expanding: bool


@dataclass(frozen=True, slots=True)
class ExpandedStatement:
    """A statement whose SQL is rendered per execution, rendered for one set of values
    (``construct_expanded_state``)."""

    sql: str
    #: The names and the values to bind, in binding order: a list's items each of its own.
    names: tuple[str, ...]
    values: Sequence[Any]
    #: The conversions of the parameters the rendering made (a list's items), by name.
    processors: Mapping[str, Processor]


def compile_parts(stmt: sa.Executable, dialect: Dialect, keys: Sequence[str]) -> CompiledParts:
    """``stmt`` compiled for ``dialect``; ``keys``: the names of the values an INSERT or
    UPDATE is given (SQLAlchemy compiles one for those columns). Refuses a statement that is
    not SQL, or that needs a column default computed in Python (``insert_prefetch``,
    ``update_prefetch``)."""
    compiled = stmt.compile(dialect=dialect, column_keys=sorted(keys))  # type: ignore[attr-defined]
    if not isinstance(compiled, SQLCompiler):
        raise InvalidRequestError(f"cannot run {type(stmt).__name__} on the driver")
    if compiled.insert_prefetch or compiled.update_prefetch:
        raise InvalidRequestError("a column default computed in Python: give its value")
    names = tuple(compiled.positiontup or ())
    return CompiledParts(
        compiled=compiled,
        sql=str(compiled),
        names=names,
        binds=tuple(compiled.binds[name] for name in names),
        expanding=bool(compiled.post_compile_params or compiled.literal_execute_params),
    )


def expanded(parts: CompiledParts, params: Mapping[str, Any]) -> ExpandedStatement:
    """The SQL of an ``expanding`` statement rendered for ``params``, and the values to bind
    (not converted yet: ``processors`` has the conversions of the parameters it made)."""
    state = parts.compiled.construct_expanded_state(dict(params))
    return ExpandedStatement(
        sql=state.statement,
        names=tuple(state.positiontup or ()),
        values=state.positional_parameters,
        processors=state.processors,
    )


def parameters_by_name(stmt: sa.Executable) -> Mapping[str, BindParameter[Any]]:
    """The bound parameters of ``stmt`` by name (``binds``), compiled for no dialect in
    particular: what a parameter is, whatever the database."""
    compiled = stmt.compile()  # type: ignore[attr-defined]
    binds: Mapping[str, BindParameter[Any]] = compiled.binds
    return binds
