"""A JSON object file read member by member, one array of it item by item, in bounded memory.

A cc-web session file of a million messages is hundreds of megabytes of text and several
times that as Python values; ``json.loads`` of it whole needs all of that at once. This reader
walks only the punctuation of the outer object (``{``, ``:``, ``,``, ``}``) and of the one
streamed array (``[``, ``,``, ``]``); every key and every value is decoded by the standard
library's own decoder (``JSONDecoder.raw_decode``) from a window of the file, so each value is
exactly what ``json.loads`` makes of it: the same hooks, the same lone surrogates, the same
errors.

It refuses (``NotStreamable``) whatever it would read differently from ``json.loads`` of the
whole file: text that is not UTF-8, a key given twice (``json.loads`` keeps the last), a
broken or too deeply nested document. The caller then reads the file whole, which gives the
answer, or the error, of record.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

#: Bytes read at a time; the window grows past it only for a value longer than that.
CHUNK = 1 << 20
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_AFTER_A_VALUE = frozenset(" \t\n\r,:]}")


class NotStreamable(Exception):
    """The file cannot be read member by member exactly as ``json.loads`` reads it whole."""


class Item:
    """An item of the streamed array: ``index`` and ``value``."""

    __slots__ = ("index", "value")

    def __init__(self, index: int, value: Any) -> None:
        self.index = index
        self.value = value


def stream_object(
    path: Path, streamed_key: str, decoder: json.JSONDecoder, *, chunk: int = CHUNK
) -> Iterator[tuple[str, Any] | Item]:
    """The members of the JSON object in ``path`` in file order, as ``(key, value)``; the
    value of ``streamed_key``, when it is an array, comes as ``(streamed_key, [])`` followed by
    its items (``Item``).

    Raises ``NotStreamable`` (see the module docstring) and ``OSError``.
    """
    with path.open("rb") as file:
        yield from stream_file(file, streamed_key, decoder, chunk=chunk)


def stream_file(
    file: BinaryIO, streamed_key: str, decoder: json.JSONDecoder, *, chunk: int = CHUNK
) -> Iterator[tuple[str, Any] | Item]:
    """``stream_object`` of an open binary file, read ``chunk`` bytes at a time as far as
    the member or item it yields."""
    yield from _Window(file, decoder, chunk).object_members(streamed_key)


class _Window:
    """The part of the file not read yet, as text: ``text[at:]`` then the rest of the file."""

    def __init__(self, file: BinaryIO, decoder: json.JSONDecoder, chunk: int) -> None:
        self.file = file
        self.decoder = decoder
        self.chunk = chunk
        # As ``json.loads`` decodes bytes: a UTF-8 BOM is skipped, surrogates pass.
        self.utf8 = codecs.getincrementaldecoder("utf-8-sig")("surrogatepass")
        self.text = ""
        self.at = 0
        self.eof = False

    def _more(self) -> bool:
        """Read another chunk into the window; False at the end of the file."""
        if self.eof:
            return False
        data = self.file.read(self.chunk)
        try:
            text = self.utf8.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            raise NotStreamable("not UTF-8 text") from exc
        if self.at:
            self.text = self.text[self.at :]
            self.at = 0
        self.text += text
        self.eof = not data
        return True

    def _peek(self) -> str:
        """The next character that is not whitespace ("" at the end), the window at it."""
        while True:
            self.at = _WHITESPACE.match(self.text, self.at).end()  # type: ignore[union-attr]
            if self.at < len(self.text):
                return self.text[self.at]
            if not self._more():
                return ""

    def _expect(self, *characters: str) -> str:
        found = self._peek()
        if found == "" or found not in characters:
            raise NotStreamable(f"expected one of {characters!r} at character {self.at}")
        self.at += 1
        return found

    def _value(self) -> Any:
        """The JSON value at the window, decoded as ``json.loads`` decodes it.

        A value the window ends in may be cut short (``12`` of ``123``, ``0`` of ``0.5``), so
        it is taken only with whitespace or ``,:]}`` after it, which no value goes on with, or
        at the end of the file; otherwise the window grows and the value is decoded again."""
        self._peek()
        while True:
            try:
                value, end = self.decoder.raw_decode(self.text, self.at)
            except json.JSONDecodeError:
                if self._more():
                    continue
                raise NotStreamable("not valid JSON") from None
            except RecursionError:
                raise NotStreamable("nested too deep") from None
            except ValueError as exc:  # an integer of more digits than Python converts
                raise NotStreamable(str(exc)) from None
            if (end < len(self.text) and self.text[end] in _AFTER_A_VALUE) or not self._more():
                self.at = end
                return value

    def object_members(self, streamed_key: str) -> Iterator[tuple[str, Any] | Item]:
        self._expect("{")
        seen: set[str] = set()
        if self._peek() == "}":
            self.at += 1
        else:
            while True:
                if self._peek() != '"':
                    raise NotStreamable("expected a key")
                key = self._value()
                if key in seen:
                    raise NotStreamable(f"the key {key!r} is given twice")
                seen.add(key)
                self._expect(":")
                if key == streamed_key and self._peek() == "[":
                    self.at += 1
                    yield key, []
                    yield from self._items()
                else:
                    yield key, self._value()
                if self._expect(",", "}") == "}":
                    break
        if self._peek() != "":
            raise NotStreamable("extra data after the object")

    def _items(self) -> Iterator[Item]:
        if self._peek() == "]":
            self.at += 1
            return
        index = 0
        while True:
            yield Item(index, self._value())
            index += 1
            if self._expect(",", "]") == "]":
                return
