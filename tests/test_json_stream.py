"""A JSON object file read member by member reads exactly what ``json.loads`` reads whole,
or refuses it; a session file streamed normalises to the session read whole."""

from __future__ import annotations

import io
import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccweb_store.importer.json_stream import Item, NotStreamable, stream_file, stream_object
from ccweb_store.importer.legacy_json import FiniteScreen
from ccweb_store.importer.legacy_sessions import (
    read_session_file,
    read_streamed_messages,
    read_streamed_session,
)
from tests.test_importer import alpha_session, beta_session

FALLBACK = datetime(2024, 1, 1, tzinfo=UTC)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()  # lone surrogates included: json.dumps escapes them
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def read_back(path: Path, key: str, chunk: int) -> dict[str, Any]:
    """The object ``stream_object`` reads, its streamed array put together again."""
    document: dict[str, Any] = {}
    for member in stream_object(path, key, FiniteScreen().decoder(), chunk=chunk):
        if isinstance(member, Item):
            items = document[key]
            assert member.index == len(items)
            items.append(member.value)
        else:
            document[member[0]] = member[1]
    return document


def same(a: Any, b: Any) -> bool:
    """Equal as JSON values, NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


@settings(max_examples=300, deadline=None)
@given(
    members=st.dictionaries(st.text(max_size=8), values, max_size=4),
    items=st.lists(values, max_size=6),
    at=st.integers(min_value=0, max_value=4),
    chunk=st.integers(min_value=1, max_value=40),
    indent=st.sampled_from([None, 0, 2]),
    ensure_ascii=st.booleans(),
)
def test_a_streamed_object_is_what_json_loads_reads_whole(
    tmp_path_factory: pytest.TempPathFactory,
    members: dict[str, Any],
    items: list[Any],
    at: int,
    chunk: int,
    indent: int | None,
    ensure_ascii: bool,
) -> None:
    members.pop("messages", None)
    pairs = list(members.items())
    pairs.insert(min(at, len(pairs)), ("messages", items))
    text = json.dumps(dict(pairs), indent=indent, ensure_ascii=ensure_ascii)
    path = tmp_path_factory.mktemp("stream") / "doc.json"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))

    assert same(read_back(path, "messages", chunk), json.loads(path.read_bytes()))


class CountingReads(io.BytesIO):
    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.read_so_far = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.read_so_far += len(data)
        return data


def test_an_item_comes_once_the_file_is_read_a_chunk_or_two_past_it() -> None:
    header = {f"key{i}": {"nested": list(range(i))} for i in range(50)}
    items = [{"id": f"m-{i}", "content": "x" * (i % 97), "n": i / 7} for i in range(2_000)]
    data = json.dumps({**header, "messages": items, "after": True}).encode()
    file = CountingReads(data)
    chunk = 64

    seen = 0
    for member in stream_file(file, "messages", json.JSONDecoder(), chunk=chunk):
        if isinstance(member, Item):
            assert member.value == items[member.index]
            ends = data.index(f'"m-{member.index}"'.encode()) + 200  # the item's last byte
            assert file.read_so_far <= ends + 2 * chunk
            seen += 1

    assert seen == len(items)
    assert file.read_so_far == len(data)


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b'{"a": 1, "a": 2}', "given twice"),
        (b'{"a": 1} {"b": 2}', "extra data"),
        (b'[{"a": 1}]', "expected one of"),
        (b'{"a": 1, "messages": [1, 2', "expected one of"),
        (b'{"a": 1, "messages": [1, "2', "not valid JSON"),
        (b'{"a": "\xff"}', "not UTF-8"),
        (b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deep"),
        (b'{"messages": [1 2]}', "expected one of"),
    ],
)
def test_what_json_loads_would_read_otherwise_or_not_at_all_is_refused(
    tmp_path: Path, content: bytes, why: str
) -> None:
    path = tmp_path / "doc.json"
    path.write_bytes(content)

    with pytest.raises(NotStreamable, match=why):
        read_back(path, "messages", 7)


def test_a_utf8_bom_is_skipped_as_json_loads_skips_it(tmp_path: Path) -> None:
    path = tmp_path / "doc.json"
    path.write_bytes(b'\xef\xbb\xbf{"messages": ["\xc3\xa9"], "x": 1e400}')

    assert read_back(path, "messages", 3) == json.loads(path.read_bytes())


def odd_session() -> dict[str, Any]:
    """A session whose columns come after its messages and whose times come from them."""
    return {
        "messages": [
            {"id": "o-1", "role": "user", "content": "late header", "timestamp": 1709287260000},
            "not a message",
            {"role": "robot", "content": [{"type": "text", "text": "x"}], "createdAt": "junk"},
            {"id": "o-1", "role": "user", "content": "same id", "timestamp": 1709283600000},
            {"id": "o-4", "role": "user", "content": "nul \u0000", "metadata": {"n": math.nan}},
        ],
        "id": "odd",
        "title": 7,
        "archived": True,
        "unknown": {"deep": [1, {"x": None}]},
    }


@pytest.mark.parametrize("session", [alpha_session(), beta_session(), odd_session()])
def test_a_session_streamed_normalises_to_the_session_read_whole(
    tmp_path: Path, session: dict[str, Any]
) -> None:
    path = tmp_path / "session.json"
    path.write_text(json.dumps(session, indent=1), encoding="utf-8")
    whole = read_session_file(path, fallback_time=FALLBACK)

    header, count = read_streamed_session(path, fallback_time=FALLBACK)
    messages = list(read_streamed_messages(path))

    assert count == len(messages)
    assert messages == whole.messages
    header.messages = messages
    assert header == whole
