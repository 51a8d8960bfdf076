"""Reading cc-web's JSON files: bytes to a JSON value, timestamps to times, and why a file
cannot be imported. ``legacy_sessions`` and ``legacy_replies`` normalise what this reads into
row values, without losing a byte; the import (``load``) plans and writes them.

Pure code, no database. Files are only ever opened for reading (``Path.read_bytes``).

Values no column can hold (``storable_json``): a part of a JSON value (``metadata``, ``extra``)
that breaks the stored-value rule of ``json_values`` or holds U+0000 is kept as its JSON text,
``{"$ccwebJsonText": "18446744073709551616"}``, which ``json.loads`` reads back to the source
value; a text column's value holding U+0000 or a lone surrogate has U+FFFD in their place and
its source value is kept as text where such values go (``extra``, ``metadata.legacy``; a
message id of that kind is replaced by the derived one). Each is listed in ``notes``, which
the import reports. A file nested too deep for ``json.loads`` to read is a broken file.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ccweb_store.domain.timestamps import exact_iso

#: Why a file nested too deep for ``json.loads`` (or for a part of it to be written back as
#: text) is skipped.
TOO_DEEP_TO_READ = (
    "nested too deep to read (arrays and objects nested about a thousand levels; "
    "a stored value may nest 64)"
)

_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: Epoch milliseconds as a time: ``_EPOCH + _MILLISECOND * ms``, exact integer arithmetic;
#: ``OverflowError`` out of range.
_MILLISECOND = timedelta(milliseconds=1)
#: Numbers below this are epoch seconds, from it on epoch milliseconds: the two readings
#: overlap only on times no cc-web state holds.
_SECONDS_BELOW = 1e11


class LegacyFileError(Exception):
    """A source file that cannot be imported; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def is_epoch_milliseconds(value: Any) -> bool:
    """Whether ``value`` is the usual timestamp of cc-web: an integer of epoch milliseconds."""
    return type(value) is int and abs(value) >= _SECONDS_BELOW


def from_epoch_milliseconds(value: int) -> datetime | None:
    """The time of integer epoch milliseconds, exactly; None out of range."""
    try:
        return _EPOCH + _MILLISECOND * value
    except OverflowError:
        return None


def parse_timestamp(value: Any) -> datetime | None:
    """ISO 8601 text (naive means UTC) or epoch milliseconds (number or numeric text)."""
    if is_epoch_milliseconds(value):
        return from_epoch_milliseconds(value)
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip()
        if _NUMBER.match(text):
            value = float(text) if "." in text else int(text)
        else:
            try:
                parsed = datetime.fromisoformat(text)
            except ValueError:
                return None
            return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    if isinstance(value, int | float):
        try:
            if abs(value) < _SECONDS_BELOW:
                return _EPOCH + timedelta(seconds=value)
            return _EPOCH + timedelta(milliseconds=value)
        except (OverflowError, ValueError):  # too large, infinite, or not a number (NaN)
            return None
    return None


def exact_timestamp(raw: Any, parsed: datetime | None) -> bool:
    """Whether writing ``parsed`` back the way cc-web does (or, for a time finer than a
    millisecond, with its microseconds: ``exact_iso``) gives ``raw`` again."""
    return parsed is not None and isinstance(raw, str) and exact_iso(parsed) == raw


class FiniteScreen:
    """``json`` hooks that note whether a decoded value holds NaN or Infinity: while
    ``finite`` stays True, ``surely_storable`` can check a value at C speed. The decoder calls
    them for the constants ``NaN``, ``Infinity`` and ``-Infinity`` and for each number with a
    fraction or an exponent (``1e400`` is Infinity), and never for the integers every message
    holds."""

    def __init__(self) -> None:
        self.finite = True

    def constant(self, name: str) -> float:
        self.finite = False
        return float(name)

    def fraction(self, text: str) -> float:
        number = float(text)
        if number - number != 0.0:  # NaN and the infinities
            self.finite = False
        return number

    def decoder(self) -> json.JSONDecoder:
        """A decoder calling these hooks (what ``json.loads`` makes of the same arguments)."""
        return json.JSONDecoder(parse_constant=self.constant, parse_float=self.fraction)


def load_screened_json(path: Path) -> tuple[Any, bool]:
    """The JSON value of a file, opened read-only (``LegacyFileError`` if it is not JSON),
    and whether the value holds no NaN and no Infinity (``FiniteScreen``)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LegacyFileError(f"cannot read: {exc.strerror or exc}") from exc
    screen = FiniteScreen()
    try:
        value = json.loads(data, parse_constant=screen.constant, parse_float=screen.fraction)
    except UnicodeDecodeError as exc:
        raise LegacyFileError(f"not UTF-8 text: {exc.reason}") from exc
    except json.JSONDecodeError as exc:
        raise LegacyFileError(
            f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from exc
    except RecursionError:
        raise LegacyFileError(TOO_DEEP_TO_READ) from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise LegacyFileError(f"a number cannot be read: {exc}".split(";")[0]) from exc
    return value, screen.finite


def json_kind(value: Any) -> str:
    """What kind of JSON value ``value`` is, for a message saying what was expected."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "null"
