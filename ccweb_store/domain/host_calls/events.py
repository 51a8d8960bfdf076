"""The ``events.list`` call: the event outbox read a page at a time."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field

from ccweb_store.domain.call_models import CallModel, PageSize, listed
from ccweb_store.domain.ids import ID_MAX_LENGTH

#: How many events ``events.list`` returns when it is not told.
DEFAULT_EVENT_PAGE = 100


class ListEvents(CallModel):
    """``events.list``: events after ``after``, oldest first, of ``types`` and
    ``conversation`` if given (the type names are checked by the event filter)."""

    after: Annotated[int, Field(ge=0)] | None = None
    limit: PageSize = DEFAULT_EVENT_PAGE
    types: Annotated[list[str] | None, BeforeValidator(listed)] = None
    conversation: Annotated[str, Field(max_length=ID_MAX_LENGTH)] | None = None
