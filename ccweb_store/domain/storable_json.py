"""A JSON value made storable, saying where and why each part of it was kept as text.

``json_values.keep_as_text`` replaces each part of a value that breaks the stored-value rule
by ``{"$ccwebJsonText": <its JSON text>}``; ``storable`` does the same and returns, for each
replaced part, its path and the reason, which ``import-json`` and ``repair-json`` report.
With ``nul`` it also keeps as text every string holding U+0000 (and every object with such a
key): PostgreSQL's ``jsonb`` cannot hold that character, and the API refuses it, so the
importer stores the same value on both engines.

``clean_text`` and ``replace_bad_text`` are the rule of a text column: PostgreSQL's ``text``
holds neither U+0000 nor a lone surrogate (which no UTF-8 text can).
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from ccweb_store.domain.json_values import (
    KEPT_AS_TEXT,
    MAX_DEPTH,
    find_problem,
    keep_as_text,
    keeps_rule,
    kept_text,
    short_path,
    valid_text,
)

#: A longer reason (one naming a number of hundreds of digits) is cut here.
MAX_REASON_CHARS = 160
NUL_IN_TEXT = "the text holds a NUL character (U+0000), which PostgreSQL cannot store"
NUL_IN_KEY = "a key holds a NUL character (U+0000), which PostgreSQL cannot store"
TOO_DEEP = f"nested deeper than {MAX_DEPTH} levels of arrays and objects"

#: What a text column cannot hold: U+0000 and the surrogates (in a ``str``, a surrogate is
#: always a lone one: ``json.loads`` joins an escaped pair into the character it stands for).
_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")
_PLAIN_KEY = re.compile(r"[A-Za-z_$][A-Za-z0-9_$-]*")

#: Where a part was kept as text (``metadata.x[2]``) and why.
Place = tuple[str, str]


def clean_text(text: str) -> bool:
    """Whether a text column can hold ``text`` (no U+0000, no lone surrogate)."""
    return "\x00" not in text and valid_text(text)


def replace_bad_text(text: str) -> str:
    """``text`` with each U+0000 and lone surrogate replaced by U+FFFD."""
    return _BAD_TEXT.sub("\ufffd", text)


def storable(value: Any, name: str, *, nul: bool = False) -> tuple[Any, list[Place]]:
    """``value`` with every part that breaks the rule kept as text (with ``nul``, every part
    holding U+0000 too), and where each such part was and why; ``value`` itself, and no
    places, when nothing breaks it.

    A value a few hundred levels short of Python's recursion limit, which ``json.loads`` could
    read but which cannot be written back as text at the depth it sits, raises
    ``RecursionError``: ``import-json`` then reports its file as too deep to read,
    ``repair-json`` keeps the whole stored text.
    """
    if keeps_rule(value, nul=nul):
        return value, []
    kept, _ = keep_as_text(value)
    places: list[Place] = []
    return _reported(value, kept, name, nul, places), places


def surely_storable(value: Any) -> bool:
    """Whether ``value``, known to hold no NaN and no Infinity, keeps the rule and holds no
    U+0000: a quick and cautious check at C speed (a false answer only means ``storable`` must
    look). orjson refuses a lone surrogate and, with ``OPT_STRICT_INTEGER``, an integer beyond
    53 bits, and writes U+0000 as its escape; a value written with at most ``MAX_DEPTH``
    brackets cannot nest deeper."""
    try:
        text = orjson.dumps(value, option=orjson.OPT_STRICT_INTEGER)
    except TypeError:  # orjson.JSONEncodeError included
        return False
    brackets = text.count(b"{") + text.count(b"[")
    return brackets <= MAX_DEPTH and b"\\u0000" not in text


def kept_notes(places: list[Place]) -> list[Place]:
    """What ``import-json`` reports of each place: ``("metadata.x", "kept as text: the
    integer … is outside the signed 64-bit range")``."""
    return [(path, f"kept as text: {reason}") for path, reason in places]


def replaced_note(path: str, kept_in: str) -> Place:
    """What ``import-json`` reports of a text column's value given U+FFFD."""
    return (
        path,
        "has U+FFFD in place of its NUL characters and lone surrogates; "
        f"the source value is kept in {kept_in}",
    )


def _reported(original: Any, kept: Any, path: str, nul: bool, places: list[Place]) -> Any:
    """``kept`` (``keep_as_text`` of ``original``) with each replaced part recorded in
    ``places``; with ``nul``, the parts holding U+0000 kept as text as well. Recursion is
    bounded by ``kept``, which nests at most ``MAX_DEPTH`` levels."""
    if kept_text(kept) is not None and kept_text(original) is None:
        places.append((short_path(path), _reason(original)))
        return kept
    kind = type(kept)
    if kind is dict:
        if nul and any("\x00" in key for key in kept):
            places.append((short_path(path), NUL_IN_KEY))
            return {KEPT_AS_TEXT: json.dumps(original)}
        return {
            key: _reported(original[key], child, _child_path(path, key), nul, places)
            for key, child in kept.items()
        }
    if kind is list:
        return [
            _reported(item, child, f"{path}[{position}]", nul, places)
            for position, (item, child) in enumerate(zip(original, kept, strict=True))
        ]
    if nul and kind is str and "\x00" in kept:
        places.append((short_path(path), NUL_IN_TEXT))
        return {KEPT_AS_TEXT: json.dumps(kept)}
    return kept


def _reason(value: Any) -> str:
    """Why ``value`` was kept as text: its first problem, or (a part cut at the deepest level
    allowed, which holds none of its own) its depth."""
    problem = find_problem(value, "")
    reason = TOO_DEEP if problem is None else problem.reason
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 1] + "…"
    return reason


def _child_path(path: str, key: str) -> str:
    """``path.key``, or ``path["a key"]`` for a key that is not a plain name."""
    return f"{path}.{key}" if _PLAIN_KEY.fullmatch(key) else f"{path}[{json.dumps(key)}]"
