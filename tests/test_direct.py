"""``repositories.direct.Compiled.parameters``: the values a prebuilt statement binds, in the
order of its SQL, for each backend's dialect (the statements themselves run on both engines
in test_repositories.py and test_postgres_statements.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import InvalidRequestError

from ccweb_store.store.repositories import direct

_TABLE = sa.Table(
    "direct_probe",
    sa.MetaData(),
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("status", sa.String),
    sa.Column("at", sa.DateTime(timezone=True)),
)
_NONE = direct.prebuilt(sa.select(_TABLE.c.id).where(_TABLE.c.status.is_(None)))
_ONE = direct.prebuilt(sa.select(_TABLE.c.id).where(_TABLE.c.id == sa.bindparam("id")))
_SEVERAL = direct.prebuilt(
    sa.select(_TABLE.c.id).where(
        _TABLE.c.id == sa.bindparam("id"),
        _TABLE.c.status == "queued",
        _TABLE.c.at < sa.bindparam("at"),
    )
)
_DIALECTS = [
    pytest.param(sqlite.dialect(), id="sqlite"),
    pytest.param(PGDialect_asyncpg(), id="postgres"),
]


def _compiled(stmt: sa.Executable, dialect: Dialect, params: dict | None) -> direct.Compiled:
    compiled = direct.compiled_form(stmt, dialect, params)
    assert compiled is not None
    return compiled


@pytest.mark.parametrize("dialect", _DIALECTS)
def test_parameters_none_one_and_several_in_sql_order(dialect: Dialect) -> None:
    assert list(_compiled(_NONE, dialect, None).parameters(None)) == []
    assert list(_compiled(_ONE, dialect, {"id": "a"}).parameters({"id": "a"})) == ["a"]
    at = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    given = {"at": at, "id": "b"}
    values = list(_compiled(_SEVERAL, dialect, given).parameters(given))
    assert values[:2] == ["b", "queued"]  # the fixed value filled in between
    processor = _TABLE.c.at.type.dialect_impl(dialect).bind_processor(dialect)
    assert values[2] == (processor(at) if processor else at)


@pytest.mark.parametrize("dialect", _DIALECTS)
def test_parameters_missing_value_is_sqlalchemys_error(dialect: Dialect) -> None:
    compiled = _compiled(_SEVERAL, dialect, {"id": "b"})
    with pytest.raises(InvalidRequestError, match="'at'"):
        compiled.parameters({"id": "b"})
