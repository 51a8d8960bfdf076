"""How an answer's model is declared: a ``TypedDict`` (from ``typing_extensions``, which
pydantic needs on Python 3.11) marked ``closed``.

A shaping function returns plain dicts, so the hot path pays nothing for the model; mypy
checks every key and value where the dict is built, and the tests validate real answers with
``TypeAdapter(model)``, which the ``closed`` config makes refuse a key the model does not list
or a value of another JSON type.
"""

from __future__ import annotations

from pydantic import ConfigDict, with_config

#: The config of every answer's ``TypedDict`` (pydantic reads it as ``__pydantic_config__``).
ANSWER_CONFIG = ConfigDict(extra="forbid", strict=True)

closed = with_config(ANSWER_CONFIG)
