"""Settings come from CCWEB_* variables with safe defaults."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs
import pytest

from ccweb_store.config import (
    MIN_TOKEN_CHARS,
    Settings,
    database_kind,
    is_loopback_host,
    normalize_database_url,
)


def test_defaults_are_sqlite_on_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CCWEB_DATABASE_URL", "CCWEB_HOST", "CCWEB_PORT", "CCWEB_TOKEN", "CCWEB_MAX_HOPS"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings()
    data_dir = Path(os.environ["CCWEB_DATA_DIR"])
    assert settings.database_url == f"sqlite+aiosqlite:///{data_dir / 'ccweb.db'}"
    assert settings.database_in_data_dir
    assert (settings.host, settings.port, settings.max_hops) == ("127.0.0.1", 8787, 4)
    assert settings.max_content_chars == 200_000
    assert settings.token is None
    assert settings.database_kind == "sqlite"


def test_without_a_data_dir_the_database_is_in_the_user_data_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CCWEB_DATABASE_URL", raising=False)
    monkeypatch.delenv("CCWEB_DATA_DIR", raising=False)
    expected = Path(platformdirs.user_data_dir("ccweb-store", appauthor=False))
    settings = Settings()
    assert settings.data_dir == expected
    assert settings.database_url == f"sqlite+aiosqlite:///{expected.absolute() / 'ccweb.db'}"


def test_the_database_does_not_depend_on_the_working_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("CCWEB_DATABASE_URL", raising=False)
    monkeypatch.setenv("CCWEB_DATA_DIR", str(tmp_path / "home"))
    first = Settings().database_url
    monkeypatch.chdir(tmp_path)
    assert Settings().database_url == first == f"sqlite+aiosqlite:///{tmp_path}/home/ccweb.db"


def test_a_database_url_is_not_the_data_dir_database(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CCWEB_DATABASE_URL", "sqlite+aiosqlite:///elsewhere.db")
    settings = Settings()
    assert settings.database_url == "sqlite+aiosqlite:///elsewhere.db"
    assert not settings.database_in_data_dir


def test_environment_variables_override_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CCWEB_DATABASE_URL", "postgresql+asyncpg://u@db/x")
    monkeypatch.setenv("CCWEB_MAX_HOPS", "7")
    monkeypatch.setenv("CCWEB_ALLOWED_ORIGINS", "https://ui.example, http://localhost:3000/")
    monkeypatch.setenv("CCWEB_TOKEN", "")
    settings = Settings()
    assert settings.database_kind == "postgresql"
    assert settings.max_hops == 7
    assert settings.allowed_origins == ("https://ui.example", "http://localhost:3000")
    assert settings.token is None


def test_a_bad_port_is_refused_with_a_validation_error() -> None:
    with pytest.raises(ValueError, match="port"):
        Settings(port=70000)


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("sqlite:///x.db", "sqlite"),
        ("sqlite+aiosqlite:///x.db", "sqlite"),
        ("postgresql://u@h/d", "postgresql"),
        ("postgres://u@h/d", "postgresql"),
    ],
)
def test_database_kinds_are_recognised(url: str, kind: str) -> None:
    assert database_kind(url) == kind


def test_an_unsupported_database_says_what_to_use_instead() -> None:
    with pytest.raises(ValueError, match="postgresql\\+asyncpg"):
        database_kind("mysql://u@h/d")


def test_plain_urls_get_the_async_drivers() -> None:
    assert normalize_database_url("sqlite:///x.db") == "sqlite+aiosqlite:///x.db"
    assert normalize_database_url("postgresql://u@h/d") == "postgresql+asyncpg://u@h/d"
    assert normalize_database_url("postgresql+asyncpg://u@h/d") == "postgresql+asyncpg://u@h/d"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("192.168.1.4", False),
        ("example.com", False),
    ],
)
def test_loopback_hosts_are_recognised(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


@pytest.mark.parametrize(
    ("token", "problem"),
    [
        ("   ", "is set but blank"),
        ("\t", "is set but blank"),
        ("short-token", "is shorter than 16 characters"),
        ("x" * (MIN_TOKEN_CHARS - 1), "is shorter than 16 characters"),
        (" a-long-enough-token-with-a-space ", "begins or ends with whitespace"),
    ],
)
def test_a_blank_short_or_padded_token_is_refused_saying_how_to_make_one(
    token: str, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem) as refused:
        Settings(token=token)
    said = str(refused.value)
    assert f"at least {MIN_TOKEN_CHARS} characters" in said
    assert "secrets.token_urlsafe(32)" in said
    if token.strip():
        assert token.strip() not in said  # the value is never echoed


def test_a_token_of_the_minimum_length_is_accepted_and_an_empty_one_is_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Settings(token="x" * MIN_TOKEN_CHARS).token == "x" * MIN_TOKEN_CHARS
    monkeypatch.setenv("CCWEB_TOKEN", "   ")
    with pytest.raises(ValueError, match="CCWEB_TOKEN"):
        Settings()
    monkeypatch.setenv("CCWEB_TOKEN", "")
    assert Settings().token is None
