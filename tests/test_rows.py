"""The row values of ``store.rows``: one per table, its fields the table's columns in order."""

from __future__ import annotations

import pytest

from ccweb_store.domain.rows import TABLE_OF, Run
from ccweb_store.store.models import Base


@pytest.mark.parametrize("value_type", list(TABLE_OF), ids=lambda value_type: value_type.__name__)
def test_each_row_value_has_its_tables_columns_in_order(
    value_type: type[tuple[object, ...]],
) -> None:
    columns = [column.key for column in Base.metadata.tables[TABLE_OF[value_type]].c]
    fields = [field.removesuffix("_") for field in value_type._fields]
    assert fields == columns


def test_a_row_value_is_built_from_a_row_and_cannot_change() -> None:
    row = (
        "run_1",
        "conv",
        "user_turn",
        "queued",
        None,
        None,
        0,
        None,
        None,
        0,
        None,
        None,
        None,
        None,
        None,
    )
    run = Run._make(row)
    assert (run.id, run.status, run.attempts) == ("run_1", "queued", 0)
    with pytest.raises(AttributeError):
        run.status = "running"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Run._make(row[:-1])
