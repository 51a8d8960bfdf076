"""Settings, read from ``CCWEB_*`` environment variables (and overridable by CLI flags)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal

import platformdirs
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from ccweb_store.contract.runs import MAX_LEASE_SECONDS

#: The SQLite file's name inside the data directory.
DATABASE_FILE_NAME = "ccweb.db"
MIN_SECRET_CHARS = 32
#: The shortest operator token (``CCWEB_TOKEN``) any command accepts.
MIN_TOKEN_CHARS = 16
MAKE_TOKEN = 'python3 -c "import secrets; print(secrets.token_urlsafe(32))"'
#: What ``CCWEB_LOG_LEVEL`` (``--log-level``) may be.
LOG_LEVELS = ("debug", "info", "warning", "error")
#: The ``CCWEB_*`` variables ccweb-store reads that are not settings: what the worker gives an
#: agent's command (``worker.config.child_environment``), the server URL ``worker`` and
#: ``conversation-url`` read, the variable of the example in docs/tools.md, and the test
#: suite's, the benchmarks' and CI's (every ``CCWEB_TEST_``/``CCWEB_BENCH_`` name too).
OTHER_VARIABLES = frozenset(
    {
        "CCWEB_URL",
        "CCWEB_MCP_URL",
        "CCWEB_MCP_ENDPOINT",
        "CCWEB_CREDENTIAL",
        "CCWEB_CONVERSATION_ID",
        "CCWEB_RUN_ID",
        "CCWEB_RUN_KIND",
        "CCWEB_HOP_COUNT",
        "CCWEB_AGENT_SESSION_ID",
        "CCWEB_TARGET",
        "CCWEB_REQUIRE_POSTGRES",
        "CCWEB_REQUIRE_AGENTS",
        "CCWEB_AGENT_CACHE",
        "CCWEB_UPDATE_SCREENSHOTS",
        "CCWEB_HYPOTHESIS_PROFILE",
        "CCWEB_FLOOR_DATABASE",
    }
)
OTHER_PREFIXES = ("CCWEB_TEST_", "CCWEB_BENCH_")
DEFAULT_ALLOWED_ORIGINS = (
    "http://localhost",
    "http://127.0.0.1",
    "http://[::1]",
    "https://localhost",
    "https://127.0.0.1",
    "https://[::1]",
)


class Settings(BaseSettings):
    """Every knob of the service. Environment variables use the ``CCWEB_`` prefix."""

    # Errors never echo the value: it may be a secret, or a URL holding a password.
    model_config = SettingsConfigDict(
        env_prefix="CCWEB_", extra="ignore", hide_input_in_errors=True
    )

    #: Unset: the SQLite file ``ccweb.db`` in ``data_dir``, whatever the working directory.
    database_url: str = ""
    #: Where the default SQLite database lives: the platform's user data directory for
    #: ccweb-store (``platformdirs``) unless ``CCWEB_DATA_DIR`` names another.
    data_dir: Path = Field(default_factory=lambda: default_data_dir())
    host: str = "127.0.0.1"
    port: int = Field(default=8787, ge=1, le=65535)
    token: str | None = None
    #: Signs conversation credentials (``credentials.py``); unset, the server makes one and
    #: keeps it in the database. Never logged or printed.
    credential_secret: SecretStr | None = None
    #: Refuse ``/mcp`` requests that carry no conversation credential (the operator token
    #: still passes).
    require_conversation_credentials: bool = False
    max_hops: int = Field(default=4, ge=0)
    max_content_chars: int = Field(default=200_000, ge=1)
    allowed_origins: Annotated[tuple[str, ...], NoDecode] = DEFAULT_ALLOWED_ORIGINS
    #: Host names requests may name besides loopback, the bind address and the hosts of
    #: ``allowed_origins`` (``http/hosts.py``); ``*`` allows every host.
    allowed_hosts: Annotated[tuple[str, ...], NoDecode] = ()
    #: The proxies (IP addresses or networks, ``*`` for any) whose ``X-Forwarded-Proto`` and
    #: ``X-Forwarded-For`` the server believes: the scheme a console cookie is ``Secure`` by,
    #: and the client address of the access log. Empty: no proxy is believed.
    forwarded_allow_ips: Annotated[tuple[str, ...], NoDecode] = ()
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    lease_seconds: int = Field(default=300, ge=1, le=MAX_LEASE_SECONDS)
    max_attempts: int = Field(default=3, ge=1)
    lease_sweep_seconds: float = Field(default=5.0, ge=0)  # 0 disables the sweeper
    # PostgreSQL: how often the service vacuums the tables it updates (``vacuum.py``); unset,
    # every second when the server's autovacuum is off, else never; 0, never.
    postgres_vacuum_seconds: float | None = Field(default=None, ge=0)
    sqlite_busy_timeout_ms: int = Field(default=30_000, ge=0)
    #: How long the event outbox keeps events (``GET /events``, ``events.list``).
    event_retention_days: float = Field(default=7.0, gt=0)
    #: Seconds between heartbeat comments on an idle ``GET /events`` stream.
    events_heartbeat_seconds: float = Field(default=15.0, gt=0)
    #: Open ``GET /events`` streams one conversation credential may hold at once in one server
    #: process (the operator's are not counted); past it, 429 ``too_many_streams``.
    max_streams_per_credential: int = Field(default=8, ge=1)
    log_level: str = "info"
    #: ``text`` (one line per record) or ``json`` (one JSON object per line), for ``serve``.
    log_format: Literal["text", "json"] = "text"
    #: Log one line per request (``serve --access-log``).
    access_log: bool = False
    #: Serve ``GET /metrics`` without the operator token; only allowed on a loopback bind.
    metrics_public: bool = False

    @field_validator("data_dir", mode="before")
    @classmethod
    def _data_dir_or_default(cls, value: object) -> object:
        if value is None or value == "":
            return default_data_dir()
        return Path(str(value)).expanduser() if isinstance(value, str | Path) else value

    @model_validator(mode="after")
    def _database_in_data_dir(self) -> Settings:
        if not self.database_url.strip():
            self.database_url = data_dir_database_url(self.data_dir)
        return self

    @field_validator("allowed_origins", "allowed_hosts", mode="before")
    @classmethod
    def _split_origins(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip().rstrip("/") for part in value.split(",") if part.strip())
        return value

    @field_validator("forwarded_allow_ips", mode="before")
    @classmethod
    def _split_addresses(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("forwarded_allow_ips")
    @classmethod
    def _addresses(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            if entry == "*":
                continue
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(
                    f"CCWEB_FORWARDED_ALLOW_IPS: {entry!r} is not an IP address or network: "
                    "list the reverse proxy's addresses (e.g. 127.0.0.1,::1), comma-separated"
                ) from None
        return value

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        if value.lower() not in LOG_LEVELS:
            raise ValueError(
                f"CCWEB_LOG_LEVEL (--log-level) {value!r} is not a log level: use "
                + ", ".join(LOG_LEVELS)
            )
        return value.lower()

    @field_validator("token", "credential_secret", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return value or None

    @field_validator("token")
    @classmethod
    def _token_usable(cls, value: str | None) -> str | None:
        """Refuse a token that is set but blank, has spaces around it (a client's
        ``Authorization`` header can never match it) or is short enough to guess, on every
        command and any host: each is a mistake, and loopback is reachable by every local
        user and by web pages the host's browser opens."""
        if value is None:
            return None
        if not value.strip():
            problem = "is set but blank"
        elif value != value.strip():
            problem = "begins or ends with whitespace, which no client can send"
        elif len(value) < MIN_TOKEN_CHARS:
            problem = f"is shorter than {MIN_TOKEN_CHARS} characters"
        else:
            return value
        raise ValueError(
            f"CCWEB_TOKEN (--token) {problem}: unset it, or set a random token of at least "
            f"{MIN_TOKEN_CHARS} characters; make one with: {MAKE_TOKEN}"
        )

    @field_validator("credential_secret")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_SECRET_CHARS:
            raise ValueError(
                f"CCWEB_CREDENTIAL_SECRET must be at least {MIN_SECRET_CHARS} characters; "
                "make one with: python3 -c 'import secrets; print(secrets.token_hex(32))'"
            )
        return value

    @cached_property
    def database_kind(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return database_kind(self.database_url)

    @property
    def database_in_data_dir(self) -> bool:
        """Whether the database is the default one, ``ccweb.db`` in ``data_dir``."""
        return self.database_url == data_dir_database_url(self.data_dir)

    @property
    def host_is_loopback(self) -> bool:
        return is_loopback_host(self.host)


def setting_variables() -> frozenset[str]:
    """The environment variable of every setting: ``CCWEB_`` and the field's name."""
    return frozenset(f"CCWEB_{name.upper()}" for name in Settings.model_fields)


def misspelt_variables(environ: Mapping[str, str]) -> list[str]:
    """A line for each ``CCWEB_*`` variable of ``environ`` that ccweb-store does not read,
    naming the closest one it does: a misspelt setting would otherwise be ignored without a
    word (a misspelt ``CCWEB_TOKEN``: a server with no token)."""
    import difflib

    settings = setting_variables()
    known = settings | OTHER_VARIABLES
    lines = []
    for name in sorted(environ):
        if not name.startswith("CCWEB_") or name in known or name.startswith(OTHER_PREFIXES):
            continue
        closest = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.0)
        hint = f"; did you mean {closest[0]}?" if closest else ""
        lines.append(f"{name} is not a setting{hint}")
    return lines


def default_data_dir() -> Path:
    """The platform's user data directory for ccweb-store (e.g. ``~/.local/share/ccweb-store``)."""
    return Path(platformdirs.user_data_dir("ccweb-store", appauthor=False))


def data_dir_database_url(data_dir: Path) -> str:
    """The URL of the default SQLite database in ``data_dir``."""
    return f"sqlite+aiosqlite:///{data_dir.absolute() / DATABASE_FILE_NAME}"


def database_kind(url: str) -> str:
    """The engine family of a database URL, refusing the ones we do not support."""
    scheme = url.split(":", 1)[0].split("+", 1)[0].lower()
    if scheme == "sqlite":
        return "sqlite"
    if scheme in ("postgresql", "postgres"):
        return "postgresql"
    raise ValueError(
        f"unsupported database URL scheme {scheme!r}: use sqlite+aiosqlite:///PATH "
        "or postgresql+asyncpg://USER@HOST/DB"
    )


def normalize_database_url(url: str) -> str:
    """Map the plain ``sqlite://`` / ``postgresql://`` forms to their async drivers."""
    kind = database_kind(url)
    scheme, rest = url.split(":", 1)
    if "+" in scheme:
        return url
    return f"{'sqlite+aiosqlite' if kind == 'sqlite' else 'postgresql+asyncpg'}:{rest}"


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
