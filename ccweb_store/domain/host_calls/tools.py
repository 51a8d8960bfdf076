"""The ``tools.call`` and ``tools.callDynamic`` calls: a tool run for a source conversation
(the ``tools.*`` listings take ``NoParams``)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from ccweb_store.domain.call_models import CallModel, coded
from ccweb_store.domain.context import Source
from ccweb_store.domain.errors import INVALID_ARGUMENTS


class ToolsCall(CallModel):
    """``tools.call`` / ``tools.callDynamic``: a tool run for a source conversation; ``tool``
    or ``name``, ``args`` or ``arguments``, ``sourceSessionId`` or ``sourceConversationId``
    (the tool's own model validates the arguments)."""

    tool: Any = None
    name: Any = None
    args: Any = None
    arguments: Any = None
    source_session_id: str | None = None
    source_conversation_id: str | None = None
    source_hop_count: Annotated[int, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _named(self) -> ToolsCall:
        if not isinstance(self.tool_name, str) or not self.tool_name:
            raise coded(
                INVALID_ARGUMENTS, "tool (or name) is required: the name of the tool to call"
            )
        return self

    @property
    def tool_name(self) -> Any:
        return self.tool if self.tool is not None else self.name

    @property
    def tool_arguments(self) -> Any:
        return self.args if self.args is not None else self.arguments

    @property
    def source(self) -> Source:
        """The calling conversation (none named: no source) at its hop count."""
        session = self.source_session_id or self.source_conversation_id
        return Source(session or None, self.source_hop_count or 0)
