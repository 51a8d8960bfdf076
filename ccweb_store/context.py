"""Who is calling: the source conversation and hop count that came with a tool call."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Source:
    """The conversation whose agent calls a tool (``None`` when the caller named none)."""

    session_id: str | None = None
    hop_count: int = 0
