"""An order-independent checksum of a table's rows, equal on SQLite and PostgreSQL when the
rows hold the same values.

Each row is written in one canonical form (its values in column order; a JSON column's text
parsed and written again with sorted keys and every number as its normalised decimal, since
``jsonb`` writes ``1e20`` as ``100000000000000000000``; times as ISO text in UTC) and hashed
(BLAKE2b, 128 bits); the table's checksum is the sum of the rows' hashes modulo 2¹²⁸, so the
order the rows are read in does not matter, and a row missing, added, doubled or changed
changes it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from decimal import Decimal
from hashlib import blake2b
from typing import Any

import orjson

from ccweb_store.store.whole_tables import Table, json_positions

_MODULUS = 1 << 128


def _number(value: Decimal) -> dict[str, str]:
    return {"$number": str(value.normalize())}


def canonical_json(text: str) -> str:
    """The canonical text of a JSON value (see the module docstring)."""
    value = json.loads(text, parse_float=Decimal, parse_int=Decimal, parse_constant=Decimal)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_number)


class TableChecksum:
    """The running checksum and row count of one table's rows, read as
    ``store.bulk.copy_select`` reads them."""

    def __init__(self, table: Table) -> None:
        self.json_positions = json_positions(table)
        self.rows = 0
        self._total = 0

    def add(self, rows: Iterable[Sequence[Any]]) -> None:
        total = self._total
        count = 0
        positions = self.json_positions
        for row in rows:
            values = list(row)
            for index in positions:
                if values[index] is not None:
                    values[index] = canonical_json(values[index])
            try:
                encoded = orjson.dumps(values)
            except TypeError:  # an integer beyond 64 bits
                encoded = json.dumps(values, default=str).encode()
            total += int.from_bytes(blake2b(encoded, digest_size=16).digest())
            count += 1
        self._total = total % _MODULUS
        self.rows += count

    @property
    def hexdigest(self) -> str:
        return f"{self._total:032x}"
