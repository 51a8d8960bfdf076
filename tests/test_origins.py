"""Which browser ``Origin`` values the defaults and a configured list let through."""

from __future__ import annotations

import pytest

from ccweb_store.config import DEFAULT_ALLOWED_ORIGINS
from ccweb_store.http.origins import origin_allowed


@pytest.mark.parametrize(
    "origin",
    [
        "http://localhost",
        "http://localhost:3000",
        "HTTP://LOCALHOST:3000",
        "https://127.0.0.1:8443",
        "http://[::1]",
        "http://[::1]:5173",
    ],
)
def test_loopback_origins_on_any_port_are_allowed_by_default(origin: str) -> None:
    assert origin_allowed(origin, DEFAULT_ALLOWED_ORIGINS)


@pytest.mark.parametrize(
    "origin",
    [
        "http://evil.example",
        "null",
        "",
        "not a url",
        "file://",
        "http://localhost.evil.example",
        "https://127.0.0.1.nip.io",
        "http://[::1].evil.example",
        "http://evil.example@localhost",
        "http://localhost:99999",
        "ftp://localhost",
    ],
)
def test_anything_else_is_refused_by_default(origin: str) -> None:
    assert not origin_allowed(origin, DEFAULT_ALLOWED_ORIGINS)


def test_an_allowed_origin_with_a_port_matches_only_that_port() -> None:
    allowed = ("https://cc.example.org:8443",)
    assert origin_allowed("https://cc.example.org:8443", allowed)
    assert not origin_allowed("https://cc.example.org", allowed)
    assert not origin_allowed("https://cc.example.org:8444", allowed)


def test_a_star_allows_every_well_formed_origin() -> None:
    assert origin_allowed("https://anything.example", ("*",))
