"""The one rule for JSON values the service stores or returns, and what to do with a value
that breaks it.

A value may be stored (message metadata, a conversation's ``extra``, prompt answers) when:

- it nests at most ``MAX_DEPTH`` arrays and objects (``depth``: ``1`` and ``"a"`` are 0,
  ``{}`` is 1, ``{"a": [1]}`` is 2);
- every integer is within the signed 64-bit range (``INT_MIN`` .. ``INT_MAX``), which every
  engine and every JSON library the service uses keeps exactly;
- every number is finite (JSON has no NaN or Infinity);
- every string, object keys included, is valid Unicode (no lone surrogate).

A request that breaks the rule is refused before anything is written (``require_storable``,
``InvalidJsonValue``: JSON-RPC ``-32602`` with ``data.code = "invalid_json_value"``, the path
and the limit). A value that breaks it and must still be kept (an imported record, a row
written before the rule) is kept losslessly as its JSON text under ``KEPT_AS_TEXT``
(``keep_as_text``), which every reader can read back.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ccweb_store.domain.errors import InvalidInput

log = logging.getLogger("ccweb_store.json_values")

#: The deepest nesting of arrays and objects a stored value may have.
MAX_DEPTH = 64
INT_MIN = -(2**63)
INT_MAX = 2**63 - 1
#: The key of the object that stands for a value kept as its JSON text:
#: ``{"$ccwebJsonText": "18446744073709551616"}``.
KEPT_AS_TEXT = "$ccwebJsonText"
INVALID_JSON_VALUE = "invalid_json_value"
#: A longer path in an error is shortened to its two ends.
MAX_PATH_CHARS = 160


class InvalidJsonValue(InvalidInput):
    """A value breaks the JSON rule; ``data`` names the ``path`` and the ``limit``."""

    code = INVALID_JSON_VALUE
    rpc_code = -32602


@dataclass(frozen=True)
class Problem:
    """Where a value breaks the rule (``path``: ``metadata.a[2]``) and how."""

    path: str
    reason: str
    limit: str

    def error(self) -> InvalidJsonValue:
        return InvalidJsonValue(
            f"{self.path}: {self.reason}; the limit is {self.limit}. Send a value within it "
            "(a number too large for 64 bits can travel as a string)",
            data={"path": self.path, "limit": self.limit},
        )


def keeps_rule(value: Any, *, nul: bool = False) -> bool:
    """Whether ``value`` keeps the rule (with ``nul``, and holds no U+0000 either): the
    quick check every value takes before ``find_problem`` looks for where it breaks it."""
    return _within([value], -1, nul)


def _within(container: dict[str, Any] | list[Any], level: int, nul: bool) -> bool:
    """``keeps_rule`` of a container nested in ``level`` others (recursing at most
    ``MAX_DEPTH`` levels). Scalars are checked in the loop, without a call each: a message's
    metadata is mostly scalars."""
    if type(container) is dict:
        try:
            keys = "".join(container)  # every key at once: one call, not one a key
        except TypeError:  # a key that is not text
            return False
        if not valid_text(keys) or (nul and "\x00" in keys):
            return False
        children: Any = container.values()
    else:
        children = container
    for child in children:
        kind = type(child)
        if kind is str:
            if not valid_text(child) or (nul and "\x00" in child):
                return False
        elif kind is dict or kind is list:
            if level + 1 >= MAX_DEPTH or not _within(child, level + 1, nul):
                return False
        elif kind is int:
            if not INT_MIN <= child <= INT_MAX:
                return False
        elif kind is float:
            if child - child != 0.0:  # NaN and the infinities
                return False
        elif child is not None and kind is not bool:
            return False
    return True


def find_problem(value: Any, name: str, *, max_depth: int = MAX_DEPTH) -> Problem | None:
    """The first place where ``value`` breaks the rule, or None.

    Walks without recursion, so a value nested thousands of levels deep is measured, not a
    ``RecursionError``. ``name`` starts the path.
    """
    # Each entry: (value, its depth counting itself, its parent entry's index, its key).
    entries: list[tuple[Any, int, int, Any]] = [(value, 0, -1, None)]
    pending = [0]
    while pending:
        index = pending.pop()
        item, depth, _, _ = entries[index]
        kind = type(item)
        if kind is dict or kind is list:
            if depth + 1 > max_depth:
                return Problem(
                    _path(entries, index, name),
                    f"nested deeper than {max_depth} levels of arrays and objects",
                    f"{max_depth} levels",
                )
            if kind is dict:
                for key, child in item.items():
                    if type(key) is not str or not valid_text(key):
                        return Problem(
                            _path(entries, index, name),
                            f"the key {key!r} is not valid Unicode text",
                            "valid Unicode (no lone surrogates)",
                        )
                    entries.append((child, depth + 1, index, key))
                    pending.append(len(entries) - 1)
            else:
                for position, child in enumerate(item):
                    entries.append((child, depth + 1, index, position))
                    pending.append(len(entries) - 1)
        elif kind is int:
            if not INT_MIN <= item <= INT_MAX:
                return Problem(
                    _path(entries, index, name),
                    f"the integer {item} is outside the signed 64-bit range",
                    f"{INT_MIN}..{INT_MAX}",
                )
        elif kind is float:
            if not math.isfinite(item):
                return Problem(
                    _path(entries, index, name),
                    f"{item} is not a finite number",
                    "finite numbers only",
                )
        elif kind is str:
            if not valid_text(item):
                return Problem(
                    _path(entries, index, name),
                    "the text holds a lone surrogate (not valid Unicode)",
                    "valid Unicode (no lone surrogates)",
                )
        elif item is not None and kind is not bool:
            return Problem(
                _path(entries, index, name),
                f"a {kind.__name__} is not a JSON value",
                "JSON values only",
            )
    return None


def require_storable(value: Any, name: str) -> None:
    """Refuse ``value`` (``InvalidJsonValue``) when it breaks the rule."""
    if keeps_rule(value):
        return
    problem = find_problem(value, name)
    if problem is not None:
        raise problem.error()


def keep_as_text(value: Any) -> tuple[Any, list[str]]:
    """``value`` with every part that breaks the rule replaced by ``{KEPT_AS_TEXT: its JSON
    text}``, and where each replaced part was (empty: ``value`` itself, unchanged).

    A container at the deepest allowed level that holds another container is replaced
    whole, so the result nests at most ``MAX_DEPTH`` levels. The text is what
    ``json.dumps`` writes (ASCII, NaN and lone surrogates as escapes): reading it back with
    ``json.loads`` gives the original value. A place is its path, and the ``id`` of the
    nearest object around it that has one (the row it belongs to, in an answer).
    """
    if keeps_rule(value):
        return value, []
    replaced: list[str] = []
    return _kept(value, 1, "$", None, replaced), replaced


def kept_text(value: Any) -> str | None:
    """The JSON text a value kept by ``keep_as_text`` stands for, or None."""
    if type(value) is dict and len(value) == 1 and type(value.get(KEPT_AS_TEXT)) is str:
        text: str = value[KEPT_AS_TEXT]
        return text
    return None


def edited(value: dict[str, Any], edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """A copy of the object ``value`` changed by ``edit``; an object kept whole as text (one
    with a key that is not valid Unicode) is read back, changed and kept as text again."""
    text = kept_text(value)
    if text is None:
        copy = dict(value)
        edit(copy)
        return copy
    whole = json.loads(text)
    edit(whole)
    return {KEPT_AS_TEXT: json.dumps(whole)}


def restored(value: Any) -> Any:
    """``value`` with every part kept as text (``keep_as_text``) read back from its text: the
    original value, as ``json.loads`` reads it."""
    text = kept_text(value)
    if text is not None:
        return json.loads(text)
    if type(value) is dict:
        return {key: restored(child) for key, child in value.items()}
    if type(value) is list:
        return [restored(child) for child in value]
    return value


def _kept(value: Any, level: int, path: str, owner: str | None, replaced: list[str]) -> Any:
    """``keep_as_text`` below the top; ``level`` is the nesting level ``value`` would have as
    a container (the recursion is bounded by ``MAX_DEPTH``)."""
    kind = type(value)
    if kind is dict or kind is list:
        children = value.values() if kind is dict else value
        deep = level >= MAX_DEPTH and any(type(child) in (dict, list) for child in children)
        bad_key = kind is dict and any(type(key) is not str or not valid_text(key) for key in value)
        if deep or bad_key:
            return _as_text(value, path, owner, replaced)
        if kind is dict:
            row_id = value.get("id")
            if type(row_id) is str and find_problem(row_id, "") is None:
                owner = row_id
            return {
                key: _kept(child, level + 1, f"{path}.{key}", owner, replaced)
                for key, child in value.items()
            }
        return [
            _kept(child, level + 1, f"{path}[{position}]", owner, replaced)
            for position, child in enumerate(value)
        ]
    if kind in (int, float, str) and find_problem(value, "") is not None:
        return _as_text(value, path, owner, replaced)
    return value  # anything else is left to the encoder (which refuses what is not JSON)


def _as_text(value: Any, path: str, owner: str | None, replaced: list[str]) -> dict[str, str]:
    replaced.append(path if owner is None else f"{path} (in {owner!r})")
    try:
        text = json.dumps(value)
    except (RecursionError, ValueError, TypeError):
        text = json.dumps(repr(value))
    return {KEPT_AS_TEXT: text}


def readable(value: Any, context: str) -> Any:
    """``value`` as an answer can always carry it: the parts that break the rule kept as
    text (``keep_as_text``), each logged with ``context`` (what the value is)."""
    result, replaced = keep_as_text(value)
    for place in replaced:
        log.warning(
            "%s holds a JSON value that breaks the stored-value rule at %s; it is answered as "
            '{"%s": <its JSON text>}. `ccweb-store repair-json` rewrites such rows',
            context,
            place,
            KEPT_AS_TEXT,
        )
    return result


def loads_stored(text: str | bytes) -> Any:
    """A stored JSON column's value: ``json.loads``, or, for text it cannot read back (nested
    beyond Python's recursion limit), that text kept under ``KEPT_AS_TEXT`` and logged, so
    that no row makes a read fail."""
    try:
        return json.loads(text)
    except (RecursionError, ValueError) as exc:
        shown = text.decode(errors="replace") if isinstance(text, bytes) else text
        log.warning(
            "a stored JSON value cannot be read back (%s: %.80s…); it is answered as "
            '{"%s": <its JSON text>}. `ccweb-store repair-json` rewrites such rows',
            type(exc).__name__,
            shown,
            KEPT_AS_TEXT,
        )
        return {KEPT_AS_TEXT: shown}


def valid_text(text: str) -> bool:
    """Whether ``text`` is valid Unicode: no lone surrogate (``str.isascii`` first: the usual
    case)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _path(entries: list[tuple[Any, int, int, Any]], index: int, name: str) -> str:
    keys: list[Any] = []
    while index > 0:
        _, _, parent, key = entries[index]
        keys.append(key)
        index = parent
    path = name
    for key in reversed(keys):
        path += f"[{key}]" if type(key) is int else (f".{key}" if path else str(key))
    return short_path(path) or "$"


def short_path(path: str) -> str:
    """A path of dozens or thousands of levels as its two ends."""
    if len(path) <= MAX_PATH_CHARS:
        return path
    return f"{path[: MAX_PATH_CHARS // 2]}…{path[-MAX_PATH_CHARS // 4 :]}"
