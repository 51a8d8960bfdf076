"""The plan a database makes for a statement as the repositories run it."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from ccweb_store.store.compiled_parts import compile_parts
from ccweb_store.store.uow import Store


async def query_plan(
    store: Store,
    statement: sa.Select[Any] | sa.TextClause,
    params: dict[str, Any],
    *,
    only_indexes: bool = True,
) -> str:
    """The engine's plan for ``statement`` compiled here with its parameters left bound, as
    the repository runs it (PostgreSQL: the generic plan of a prepared statement, which
    cannot depend on the values), as one string. ``only_indexes`` forbids PostgreSQL a
    sequential scan, so that the plan names the index that can answer."""
    parts = compile_parts(statement, store.engine.dialect, ())
    compiled = parts.sql
    bound = parts.compiled.construct_params(params)
    values = [bound[name] for name in parts.names]
    async with store.engine.connect() as connection:
        if store.dialect == "sqlite":
            plan = await connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}", tuple(values))
            return " ".join(str(row) for row in plan)
        # Statistics of this test's rows, not of whatever an earlier test left in the tables
        # the suite shares: the plan of one index against another follows them.
        await connection.execute(sa.text("ANALYZE"))
        if only_indexes:
            await connection.execute(sa.text("SET LOCAL enable_seqscan = off"))
            await connection.execute(sa.text("SET LOCAL enable_bitmapscan = off"))
        await connection.execute(sa.text("SET LOCAL plan_cache_mode = force_generic_plan"))
        await connection.exec_driver_sql(f"PREPARE planned AS {compiled}")
        try:
            arguments = ", ".join(
                str(value) if isinstance(value, int) else f"'{value}'" for value in values
            )
            called = f"planned({arguments})" if arguments else "planned"
            plan = await connection.exec_driver_sql(f"EXPLAIN EXECUTE {called}")
            return " ".join(str(row) for row in plan)
        finally:
            await connection.exec_driver_sql("DEALLOCATE planned")
