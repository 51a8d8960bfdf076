"""The enum CHECK constraints (``messages.role``, ``reply_requests.status``, ``runs.kind``,
``runs.status``) written as ``column = 'a' OR column = 'b' …`` instead of ``column IN ('a',
'b', …)``: the same values allowed, NULL passing as before (the columns are NOT NULL anyway).

Why: SQLite evaluates an ``IN`` list of more than two constants by building a temporary
table of the values, and a CHECK is evaluated once per row written, so every INSERT into
``runs`` built two such tables and every other INSERT and status UPDATE one: 3.3 of the 5.4 µs
of inserting a run. A chain of ``=`` builds nothing. PostgreSQL gets the same text, so that
both engines hold what ``models.py`` declares.

SQLite cannot alter a constraint, and rebuilding the three tables would copy every row and
drop the 0003 views and the 0006 expression index. A CHECK constraint changes nothing on
disk, so the CREATE TABLE text in ``sqlite_schema`` is rewritten in place instead, the
procedure SQLite documents for such changes ("Making Other Kinds Of Table Schema Changes" in
its ALTER TABLE page): ``writable_schema``, the new text, ``schema_version`` + 1 so that every
connection reads the schema again. Each rewrite must find the text 0001 wrote (or the new
text, should an earlier run have stopped half-way), or the migration stops before changing
anything. PostgreSQL drops and adds each constraint.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from collections.abc import Callable, Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: (table, constraint name, column, allowed values), as 0001 created them.
CHECKS = (
    ("messages", "ck_messages_ck_messages_role", "role", ("user", "assistant", "system", "tool")),
    (
        "reply_requests",
        "ck_reply_requests_ck_reply_requests_status",
        "status",
        ("waiting", "ready", "returned", "failed"),
    ),
    ("runs", "ck_runs_ck_runs_kind", "kind", ("user_turn", "cross_conversation", "reply_auto_run")),
    (
        "runs",
        "ck_runs_ck_runs_status",
        "status",
        ("queued", "running", "completed", "failed", "cancelled"),
    ),
)


def _in_list(column: str, values: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _equalities(column: str, values: Sequence[str]) -> str:
    return " OR ".join(f"{column} = {v!r}" for v in values)


def upgrade() -> None:
    _rewrite(_in_list, _equalities)


def downgrade() -> None:
    _rewrite(_equalities, _in_list)


def _rewrite(
    old: Callable[[str, Sequence[str]], str], new: Callable[[str, Sequence[str]], str]
) -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        _rewrite_sqlite(bind, old, new)
        return
    for table, name, column, values in CHECKS:
        op.drop_constraint(op.f(name), table, type_="check")
        op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} CHECK ({new(column, values)})")


def _rewrite_sqlite(
    bind: sa.engine.Connection,
    old: Callable[[str, Sequence[str]], str],
    new: Callable[[str, Sequence[str]], str],
) -> None:
    read = sa.text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = :name")
    tables: dict[str, str] = {}
    for table, name, column, values in CHECKS:
        sql = tables.get(table) or bind.execute(read, {"name": table}).scalar_one()
        before = f"CONSTRAINT {name} CHECK ({old(column, values)})"
        after = f"CONSTRAINT {name} CHECK ({new(column, values)})"
        if sql.count(after) == 1:  # rewritten already (a run stopped half-way, re-run)
            tables[table] = sql
            continue
        if sql.count(before) != 1:
            raise RuntimeError(f"0008: {table} has no constraint {before!r} to rewrite")
        tables[table] = sql.replace(before, after)
    version = bind.exec_driver_sql("PRAGMA schema_version").scalar_one()
    bind.exec_driver_sql("PRAGMA writable_schema = ON")
    try:
        write = sa.text("UPDATE sqlite_master SET sql = :sql WHERE type = 'table' AND name = :name")
        for table, sql in tables.items():
            bind.execute(write, {"sql": sql, "name": table})
        bind.exec_driver_sql(f"PRAGMA schema_version = {int(version) + 1}")
    finally:
        bind.exec_driver_sql("PRAGMA writable_schema = OFF")
