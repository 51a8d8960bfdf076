"""A unit of work's transaction on the driver, whatever the database: statements compiled once
(``statements``), run by the dialect's driver (``store.sqlite.driver``,
``store.postgres.driver``), their errors raised as SQLAlchemy's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

from ccweb_store.domain.events import Event
from ccweb_store.store.bulk import copy_insert
from ccweb_store.store.statements import Batch, Compiled, Rows, is_prebuilt, prebuilt

Params = Mapping[str, Any] | Sequence[Mapping[str, Any]] | None


class CompiledStatements:
    """The compiled forms of the prebuilt statements one database runs, by statement and the
    names of the values given (SQLAlchemy compiles an INSERT or UPDATE for those). Prebuilt
    statements are few (module constants and bounded ``lru_cache``s); should more come, the
    forms kept are dropped past ``KEEP`` and compiled again as they are used."""

    KEEP = 2048

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self._kept: dict[tuple[sa.Executable, tuple[str, ...]], Compiled] = {}

    def get(self, stmt: sa.Executable, keys: tuple[str, ...]) -> Compiled:
        compiled = self._kept.get((stmt, keys))
        if compiled is None:
            compiled = Compiled(stmt, self.dialect, keys)
            if is_prebuilt(stmt):
                if len(self._kept) >= self.KEEP:
                    self._kept.clear()
                self._kept[(stmt, keys)] = compiled
        return compiled


class Transaction:
    """One unit of work's connection: the statements it runs, in the transaction it began
    (or, for ``autocommit``, each on its own).

    A driver subclass runs SQL with positional values (``fetch``, ``fetch_many``) and ends the
    transaction (``commit``, ``rollback``, ``close``)."""

    #: Whether the steps of a ``Batch`` run as one statement (``Batch.as_one_statement``).
    one_statement_batches = False
    #: Whether rows read to be changed are locked until the transaction ends
    #: (``SELECT … FOR UPDATE``); without, the database's one writer holds all of them.
    locks_rows = False
    #: How SQL reads a JSON column (``{}``) as the text the database holds, and writes one
    #: from JSON text; and whether JSON numbers are kept as decimals (see ``JsonColumnRepository``).
    json_as_text = "{}"
    json_from_text = "{}"
    json_numbers_are_numeric = False
    #: Whether events get their ids only after their transaction committed, so that ids come
    #: in commit order (``repositories.events``: the inbox and its move): where transactions
    #: write at once.
    orders_events = False
    #: Whether a change writes its own events in the statement that makes it (a data-modifying
    #: ``WITH`` under the ordering lock, ``events.ordered_insert``) instead of noting them for
    #: the flush at the commit: where each statement commits by itself (a PostgreSQL unit of
    #: work without a transaction), so that a change and its events still commit together.
    #: Only changes that can (``RunLeases.claim``) may run in such a unit of work.
    events_in_statements = False
    #: Whether a claim's own UPDATE writes its ``run.started`` event, by a trigger of the
    #: connection's (``store.sqlite.one_statement``): the claim then notes it as written.
    claim_event_by_trigger = False
    #: What this process's event notices carry, so that its own listener can tell them apart.
    event_origin = ""

    def __init__(self, statements: CompiledStatements) -> None:
        self.statements = statements
        #: Set when the unit of work committed or rolled back: no statement may follow.
        self.ended = False
        #: Statements to run, each committing by itself, once the transaction has committed
        #: (``after_commit``).
        self.then: list[tuple[sa.Executable, dict[str, Any]]] = []

    def after_commit(self, stmt: sa.Executable, params: dict[str, Any]) -> None:
        """Run ``stmt`` on this connection once the transaction has committed, before the
        commit returns (moving its events: ``repositories.events``). A transaction that
        rolls back runs none. Only a driver whose transactions order their events by it
        (``orders_events``) runs them."""
        if not self.orders_events:
            raise RuntimeError("this database runs no statements after a commit")
        self.then.append((stmt, params))

    async def execute(self, stmt: sa.Executable, params: Params = None) -> Rows:
        """Run ``stmt`` with ``params`` (one mapping, or several for an executemany)."""
        if self.ended:
            raise RuntimeError("this unit of work has ended; run statements in a new one")
        if params is not None and not isinstance(params, Mapping):
            await self.execute_many(stmt, params)
            return Rows([], len(params))
        compiled = self.statements.get(stmt, tuple(params) if params else ())
        sql, values = compiled.statement(params)
        raw, count = await self.fetch(sql, values, compiled.returns_rows)
        return Rows(compiled.rows(raw), count, compiled.keys)

    async def execute_many(self, stmt: sa.Executable, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run ``stmt``, which returns nothing, once per parameter set of ``rows`` (all with
        the same names)."""
        if self.ended:
            raise RuntimeError("this unit of work has ended; run statements in a new one")
        if not rows:
            return
        compiled = self.statements.get(stmt, tuple(rows[0]))
        if compiled.returns_rows is not False or compiled.expanding:
            for row in rows:
                await self.execute(stmt, row)
            return
        await self.fetch_many(compiled.sql, compiled.many(rows))

    async def execute_batch(
        self, batch: Batch, values: dict[str, Any], events: Sequence[Event] = ()
    ) -> tuple[Rows, bool]:
        """Run the steps of ``batch`` with ``values``: what the last step returned, and whether
        the batch wrote ``events`` (the unit of work's events noted so far) too. Here it does
        not: the outbox is written at the commit (``EventRepository.flush``)."""
        steps = (batch.as_one_statement(),) if self.one_statement_batches else batch.statements
        result = Rows([], 0)
        for stmt in steps:
            # Compiled for the names its bound parameters have, not for every value given: a
            # value named like a column must not become a column of a step.
            compiled = self.statements.get(stmt, ())
            raw, count = await self.fetch(
                compiled.sql, compiled.values(values), compiled.returns_rows
            )
            result = Rows(compiled.rows(raw), count, compiled.keys)
        return result, False

    async def copy_rows(self, table: sa.Table, rows: Sequence[Sequence[Any]]) -> None:
        """Insert ``rows`` of ``table``: every column's value in table order, JSON columns as
        their JSON text (``bulk.copy_select``). A driver may write them its fastest way."""
        keys = [column.key for column in table.columns]
        await self.execute_many(
            prebuilt(copy_insert(table)), [dict(zip(keys, row, strict=True)) for row in rows]
        )

    async def keep_issued_ids(self, table: sa.Table, highest: int) -> None:
        """Make the database hand out ids of ``table`` above ``highest`` from now on."""
        raise NotImplementedError

    async def fetch(
        self, sql: str, values: Sequence[Any], returns_rows: bool | None
    ) -> tuple[list[Any], int]:
        """Run ``sql``: the rows it returned (if it returns rows; None: whatever it returns)
        and how many rows it changed or returned."""
        raise NotImplementedError

    async def fetch_many(self, sql: str, values: list[Sequence[Any]]) -> None:
        """Run ``sql`` once per set of ``values``."""
        raise NotImplementedError

    async def commit(self) -> None:
        raise NotImplementedError

    async def rollback(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        """Roll back what was not committed and give the connection back."""
        raise NotImplementedError
