"""``normalise_message``: each mapped field's rule, what goes to ``metadata.legacy``, and when
the metadata is made storable (the importer's tests read whole files; these pin each field)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from ccweb_store.domain.json_values import KEPT_AS_TEXT
from ccweb_store.domain.storable_json import NUL_IN_TEXT
from ccweb_store.importer.legacy_messages import normalise_message

EPOCH_MS = 1709287260123
INSTANT = datetime(2024, 3, 1, 10, 1, 0, 123000, tzinfo=UTC)
BASE = {"role": "user", "content": "hi"}


@pytest.mark.parametrize(
    ("raw", "id_key", "wanted_id", "metadata"),
    [
        pytest.param({"id": "m"}, "id", "m", {}, id="an id is taken as it is"),
        pytest.param(
            {"messageId": "m"}, "messageId", "m", {"legacy": {"messageId": "m"}}, id="messageId"
        ),
        pytest.param(
            {"id": "m", "messageId": "n"},
            "id",
            "m",
            {"messageId": "n", "legacyFields": ["messageId"]},
            id="id before messageId",
        ),
        pytest.param({"id": ""}, "id", None, {"legacy": {"id": ""}}, id="an empty id"),
        pytest.param({"id": "x" * 129}, "id", None, {"legacy": {"id": "x" * 129}}, id="too long"),
        pytest.param(
            {"messageId": 7}, "messageId", None, {"legacy": {"messageId": 7}}, id="not text"
        ),
        pytest.param({}, None, None, {}, id="no id"),
    ],
)
def test_a_message_id_is_wanted_only_when_a_column_holds_it(
    raw: dict[str, Any], id_key: str | None, wanted_id: str | None, metadata: dict[str, Any]
) -> None:
    message = normalise_message(3, {**BASE, **raw})
    assert (message.id_key, message.wanted_id, message.metadata) == (id_key, wanted_id, metadata)


@pytest.mark.parametrize(
    ("raw", "role", "legacy"),
    [
        pytest.param({"role": "assistant"}, "assistant", None, id="known"),
        pytest.param({"role": "robot"}, "system", {"role": "robot"}, id="unknown"),
        pytest.param({}, "system", {"role": None}, id="absent"),
    ],
)
def test_a_role_no_column_knows_becomes_system_and_is_kept(
    raw: dict[str, Any], role: str, legacy: dict[str, Any] | None
) -> None:
    message = normalise_message(0, {"content": "hi", **raw})
    assert message.role == role
    assert message.metadata.get("legacy") == legacy


@pytest.mark.parametrize(
    ("content", "text", "metadata"),
    [
        pytest.param("hi", "hi", {}, id="text"),
        pytest.param(
            [{"type": "text", "text": "a"}, {"type": "image"}],
            "a",
            {"contentBlocks": [{"type": "text", "text": "a"}, {"type": "image"}]},
            id="blocks",
        ),
        pytest.param(5, "5", {"legacy": {"content": 5}}, id="a number"),
        pytest.param(None, "", {"legacy": {"content": None}}, id="null"),
    ],
)
def test_content_that_is_not_text_is_kept_beside_its_text(
    content: Any, text: str, metadata: dict[str, Any]
) -> None:
    message = normalise_message(0, {"role": "user", "content": content})
    assert (message.content, message.metadata, message.notes) == (text, metadata, ())


def test_absent_content_is_empty_text_and_kept_as_null() -> None:
    message = normalise_message(0, {"role": "user"})
    assert (message.content, message.metadata) == ("", {"legacy": {"content": None}})


@pytest.mark.parametrize(
    ("content", "kept_in", "metadata"),
    [
        pytest.param(
            "a\x00b",
            "metadata.legacy.content",
            {"legacy": {"content": {KEPT_AS_TEXT: '"a\\u0000b"'}}},
            id="text",
        ),
        pytest.param(
            [{"type": "text", "text": "a\x00b"}],
            "metadata.contentBlocks",
            {"contentBlocks": [{"type": "text", "text": {KEPT_AS_TEXT: '"a\\u0000b"'}}]},
            id="blocks",
        ),
    ],
)
def test_content_with_a_nul_gets_u_fffd_and_says_where_its_source_is_kept(
    content: Any, kept_in: str, metadata: dict[str, Any]
) -> None:
    message = normalise_message(0, {"role": "user", "content": content})
    assert message.content == "a\ufffdb"
    assert message.metadata == metadata
    assert message.notes[0] == (
        "content",
        "has U+FFFD in place of its NUL characters and lone surrogates; the source value is "
        f"kept in {kept_in}",
    )


@pytest.mark.parametrize(
    ("raw", "created_at", "legacy"),
    [
        pytest.param({"timestamp": EPOCH_MS}, INSTANT, {"timestamp": EPOCH_MS}, id="epoch ms"),
        pytest.param({"timestamp": "2024-03-01T10:01:00.123Z"}, INSTANT, None, id="exact text"),
        pytest.param(
            {"timestamp": "2024-03-01 10:01"},
            datetime(2024, 3, 1, 10, 1, tzinfo=UTC),
            {"timestamp": "2024-03-01 10:01"},
            id="other text",
        ),
        pytest.param({"timestamp": "soon"}, None, {"timestamp": "soon"}, id="not a time"),
        pytest.param({"timestamp": 10**18}, None, {"timestamp": 10**18}, id="out of range"),
        pytest.param(
            {"createdAt": "2024-03-01T10:01:00.123Z"},
            INSTANT,
            {"createdAt": "2024-03-01T10:01:00.123Z"},
            id="createdAt",
        ),
        pytest.param(
            {"timestamp": EPOCH_MS, "createdAt": "x"},
            INSTANT,
            {"timestamp": EPOCH_MS},
            id="timestamp before createdAt",
        ),
        pytest.param({}, None, None, id="no time"),
    ],
)
def test_a_time_is_kept_unless_its_column_gives_it_back_exactly(
    raw: dict[str, Any], created_at: datetime | None, legacy: dict[str, Any] | None
) -> None:
    message = normalise_message(0, {**BASE, **raw})
    assert message.created_at == created_at
    assert message.metadata.get("legacy") == legacy


@pytest.mark.parametrize(
    ("own", "metadata"),
    [
        pytest.param({"model": "x"}, {"model": "x"}, id="an object"),
        pytest.param("x", {"legacy": {"metadata": "x"}}, id="not an object"),
        pytest.param({}, {"legacy": {"metadata": {}}}, id="empty"),
        pytest.param({"legacy": 1}, {"legacy": {"metadata": {"legacy": 1}}}, id="a reserved key"),
    ],
)
def test_a_message_s_own_metadata_is_the_base_unless_the_importer_writes_its_keys(
    own: Any, metadata: dict[str, Any]
) -> None:
    assert normalise_message(0, {**BASE, "metadata": own}).metadata == metadata


def test_other_keys_join_the_metadata_in_order_and_a_clash_goes_to_legacy() -> None:
    raw = {
        "metadata": {"model": "a"},
        "content": [{"type": "text", "text": "t"}],
        "role": "robot",
        "model": "b",
        "tokens": 3,
        "legacyFields": 1,
        "messageId": "m",
        "timestamp": EPOCH_MS,
    }
    metadata = normalise_message(0, raw).metadata
    assert list(metadata) == ["model", "contentBlocks", "tokens", "legacyFields", "legacy"]
    assert metadata["legacyFields"] == ["tokens"]
    assert list(metadata["legacy"].items()) == [
        ("messageId", "m"),
        ("role", "robot"),
        ("timestamp", EPOCH_MS),
        ("model", "b"),
        ("legacyFields", 1),
    ]


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        pytest.param({"metadata": {"a": "x\x00"}}, "metadata.a", id="own metadata"),
        pytest.param({"id": "m\x00"}, "metadata.legacy.id", id="an unusable id"),
        pytest.param({"role": "r\x00"}, "metadata.legacy.role", id="an unknown role"),
        pytest.param({"content": {"t": "x\x00"}}, "metadata.legacy.content.t", id="content"),
        pytest.param({"timestamp": "x\x00"}, "metadata.legacy.timestamp", id="a time"),
        pytest.param({"x": "x\x00"}, "metadata.x", id="another key"),
    ],
)
def test_each_unchecked_source_value_is_made_storable(raw: dict[str, Any], path: str) -> None:
    message = normalise_message(0, {**BASE, **raw}, finite=True)
    assert message.notes[-1] == (path, f"kept as text: {NUL_IN_TEXT}")


def test_a_nan_in_a_message_not_screened_as_finite_is_kept_as_text() -> None:
    message = normalise_message(0, {**BASE, "x": float("nan")})
    assert message.metadata == {"x": {KEPT_AS_TEXT: "NaN"}, "legacyFields": ["x"]}
