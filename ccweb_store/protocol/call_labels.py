"""What a request asked, noted as it is dispatched, for the metrics' labels: the method it
called (when it is one of ours), the tool a tool call ran, and whether that tool failed. The
HTTP layer opens a note per request (``noting``) and reads it once the answer is made; nothing
reads the payload again to find them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass
class CallLabels:
    """The labels of one request's call ("" where nothing was noted)."""

    method: str = ""
    tool: str = ""
    tool_error: bool = False


_CURRENT: ContextVar[CallLabels | None] = ContextVar("ccweb_call_labels", default=None)


@contextmanager
def noting() -> Iterator[CallLabels]:
    """A note for the request handled in the block; dispatchers fill it in (even from a task
    of their own: the note is one object)."""
    labels = CallLabels()
    token = _CURRENT.set(labels)
    try:
        yield labels
    finally:
        _CURRENT.reset(token)


def note_method(method: str) -> None:
    """The request called ``method`` (one this server answers)."""
    labels = _CURRENT.get()
    if labels is not None:
        labels.method = method


def note_tool(tool: str, *, failed: bool = False) -> None:
    """The call ran ``tool`` (one of the registry's); ``failed``: it answered a tool error."""
    labels = _CURRENT.get()
    if labels is not None:
        labels.tool = tool
        labels.tool_error = failed
