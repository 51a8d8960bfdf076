"""A conversation's box: the real path (``realpath``) its runs must stay under, recorded when
an agent's credential creates it (``services.messaging``) and checked by the worker when a run
starts. Resolving a path is the caller's I/O; this module only compares resolved paths."""

from __future__ import annotations

import os


def within(real_path: str, box: str) -> bool:
    """Whether the resolved absolute ``real_path`` is ``box`` or a folder inside it."""
    return os.path.commonpath([box, real_path]) == box
