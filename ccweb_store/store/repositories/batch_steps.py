"""The shape of one write in a ``statements.Batch``, as each table's repository module builds it
(``touch_step``, ``append_step``, ``waiting_request_step``, ``enqueue_step``).

A step is a prebuilt statement that returns nothing (or, last in a batch run as one statement,
its row), and the names its bound parameters take their values from: ``{"p_id": "run_id"}``
binds the statement's ``p_id`` to the batch values' ``run_id``. The module of a table owns its
statement and its parameter names; a batch only chooses which values fill them.
"""

from __future__ import annotations

from sqlalchemy.sql.dml import UpdateBase

BatchStep = tuple[UpdateBase, dict[str, str]]
