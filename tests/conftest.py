"""Backends for the integration tests: a fresh SQLite file per test, and PostgreSQL.

Every integration test that takes ``database_url`` (or ``store``) runs once per backend.
SQLite: each test gets a copy of one file migrated once per run. PostgreSQL runs when
``CCWEB_TEST_POSTGRES_URL`` names a server (e.g. ``postgresql+asyncpg://root@127.0.0.1:5432/test``);
the suite then creates a database of its own, migrates it with Alembic, empties it before each
test and drops it at the end. Under pytest-xdist each worker has its own of both, its own
scratch data directory and (``tests/servers.py``) its own ports.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg
import pytest
from hypothesis import HealthCheck, settings
from sqlalchemy.engine import make_url

from bench.scratch_databases import create_database, drop_database
from ccweb_store.config import Settings
from ccweb_store.store.db import create_engine, migrate
from ccweb_store.store.models import Base
from ccweb_store.store.uow import Store
from tests.worker_support import Bench, bench_on

POSTGRES_ENV = "CCWEB_TEST_POSTGRES_URL"
DATA_DIR_ENV = "CCWEB_DATA_DIR"
HYPOTHESIS_PROFILE_ENV = "CCWEB_HYPOTHESIS_PROFILE"

# Property tests: a few examples each in the suite (the same ones every run, so CI is
# repeatable), thousands of fresh ones with CCWEB_HYPOTHESIS_PROFILE=deep.
_SHARED_FIXTURES = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
settings.register_profile(
    "ci",
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=_SHARED_FIXTURES,
)
settings.register_profile(
    "deep",
    max_examples=2000,
    deadline=None,
    database=None,
    suppress_health_check=_SHARED_FIXTURES,
)
settings.load_profile(os.environ.get(HYPOTHESIS_PROFILE_ENV, "ci"))
REQUIRE_POSTGRES_ENV = "CCWEB_REQUIRE_POSTGRES"
BACKENDS = ("sqlite", "postgres")


_data_dir: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Every command a test runs, in-process or as a subprocess, keeps its default database in
    a scratch data directory: the suite never writes into the user's real one."""
    global _data_dir
    _data_dir = tempfile.mkdtemp(prefix="ccweb-test-data-")
    os.environ[DATA_DIR_ENV] = _data_dir


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` first (in their order), then the rest: under pytest-xdist the
    workers then finish together, instead of one running a long test alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _data_dir is not None:
        shutil.rmtree(_data_dir, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line for the PostgreSQL tests skipped for want of a server, instead of one each."""
    if os.environ.get(POSTGRES_ENV):
        return
    skipped = [
        report
        for report in terminalreporter.stats.get("skipped", [])
        if POSTGRES_ENV in str(getattr(report, "longrepr", ""))
    ]
    if skipped:
        terminalreporter.write_line(
            f"{len(skipped)} PostgreSQL tests skipped: {POSTGRES_ENV} is not set "
            "(e.g. postgresql+asyncpg://root@127.0.0.1:5432/test)",
            yellow=True,
        )


def postgres_server_url() -> str | None:
    url = os.environ.get(POSTGRES_ENV)
    if not url:
        message = (
            f"PostgreSQL tests need {POSTGRES_ENV} "
            "(e.g. postgresql+asyncpg://root@127.0.0.1:5432/test)"
        )
        if os.environ.get(REQUIRE_POSTGRES_ENV):
            pytest.fail(message + f"; {REQUIRE_POSTGRES_ENV} is set, so they may not skip")
        pytest.skip(message)
    return url


@contextmanager
def own_postgres_database() -> Iterator[str]:
    """An empty, uniquely named database on the test server, dropped when the block ends;
    its URL."""
    server = postgres_server_url()
    assert server is not None
    name = f"ccweb_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    url = asyncio.run(create_database(server, name))
    try:
        yield url
    finally:
        asyncio.run(drop_database(server, name))


async def migrate_url(url: str, revision: str = "head") -> None:
    engine = create_engine(url)
    try:
        await migrate(engine, revision)
    finally:
        await engine.dispose()


class _Emptier:
    """Empties a PostgreSQL database before each test on one connection kept for the run.

    ``DELETE`` children first, all in one round trip (the simple query protocol runs a
    multi-statement string as one transaction): on the few rows a test leaves it is much
    cheaper than ``TRUNCATE``, which makes new files for every table and index, and a kept
    connection saves a new one per test. The connection lives on a thread of its own, with its
    own event loop, because each test's ``asyncio.run`` has another; a test that ends every
    connection to the database ends it too, and the next call connects again.
    """

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._connections: dict[str, asyncpg.Connection] = {}
        threading.Thread(target=self._loop.run_forever, name="pg-emptier", daemon=True).start()

    def empty(self, url: str) -> None:
        asyncio.run_coroutine_threadsafe(self._empty(url), self._loop).result()

    async def _empty(self, url: str) -> None:
        connection = self._connections.get(url)
        if connection is not None and not connection.is_closed():
            try:
                await connection.execute(_DELETE_EVERY_ROW)
                return
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
                connection.terminate()  # ended from outside (or failed): try a new one
        dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        self._connections[url] = connection = await asyncpg.connect(dsn)
        await connection.execute(_DELETE_EVERY_ROW)


_emptier: _Emptier | None = None


def truncate_all(url: str) -> None:
    """Empty every table of the schema at ``url``, keeping ``alembic_version``."""
    global _emptier
    if _emptier is None:
        _emptier = _Emptier()
    _emptier.empty(url)


_DELETE_EVERY_ROW = "".join(
    f'DELETE FROM "{table.name}";' for table in reversed(Base.metadata.sorted_tables)
)


@pytest.fixture(autouse=True)
def no_checkpoint_thread_outlives_its_test() -> Iterator[None]:
    """Every store a test opens is closed by its end, with its WAL checkpoint thread."""
    yield
    left = [t.name for t in threading.enumerate() if t.name.startswith("wal-checkpoint")]
    assert not left, f"checkpoint threads still running after the test: {left}"


@pytest.fixture(scope="session")
def migrated_postgres_url() -> Iterator[str]:
    """One migrated PostgreSQL database for the whole run (created lazily)."""
    with own_postgres_database() as url:
        asyncio.run(migrate_url(url))
        yield url


@pytest.fixture(scope="session")
def migrated_sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SQLite file migrated to head for the whole run (per xdist worker), which each test
    copies: a copy costs far less than running every migration again."""
    path = tmp_path_factory.mktemp("template") / "ccweb.db"
    asyncio.run(migrate_url(f"sqlite+aiosqlite:///{path}"))
    return path


def copy_migrated_sqlite(template: Path, path: Path) -> str:
    """A migrated, empty SQLite database at ``path``, private (0600) as the service makes its
    databases; its URL."""
    shutil.copy(template, path)  # the template's mode too
    return f"sqlite+aiosqlite:///{path}"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The backend a test runs on: ``sqlite`` or ``postgres``."""
    name: str = request.param
    if name == "postgres":
        postgres_server_url()
    return name


@pytest.fixture
def database_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A migrated, empty database for this test."""
    if backend == "sqlite":
        template: Path = request.getfixturevalue("migrated_sqlite_template")
        return copy_migrated_sqlite(template, tmp_path / "ccweb.db")
    url: str = request.getfixturevalue("migrated_postgres_url")
    truncate_all(url)
    return url


@pytest.fixture
def empty_database_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """A database with no schema at all, for migration tests."""
    if backend == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"
        return
    with own_postgres_database() as url:
        yield url


@pytest.fixture
def fresh_database_url(
    empty_database_url: str, backend: str, request: pytest.FixtureRequest
) -> str:
    """A second migrated, empty database (for a clean import or copy to compare with)."""
    if backend == "sqlite":
        template: Path = request.getfixturevalue("migrated_sqlite_template")
        path = make_url(empty_database_url).database
        assert path is not None
        return copy_migrated_sqlite(template, Path(path))
    asyncio.run(migrate_url(empty_database_url))
    return empty_database_url


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, token=None)


@pytest.fixture
async def store(settings: Settings) -> AsyncIterator[Store]:
    """A ``Store`` on the migrated test database."""
    active = Store.from_settings(settings)
    try:
        yield active
    finally:
        await active.dispose()


@pytest.fixture
async def pair(store: Store) -> Store:
    """The store with a source ``conv-a`` (Planner) and a target ``conv-b`` (Tester)."""
    async with store.uow() as uow:
        await uow.sessions.create("conv-a", title="Planner")
        await uow.sessions.create("conv-b", title="Tester")
        await uow.commit()
    return store


@pytest.fixture
def fresh_postgres_url() -> Iterator[str]:
    """An empty PostgreSQL database of its own (no schema)."""
    with own_postgres_database() as url:
        yield url


@pytest.fixture
def bench(database_url: str) -> Iterator[Bench]:
    """A real server with the operator token, and the ``ccweb-store worker`` processes a test
    starts (``tests/worker_support.py``)."""
    with bench_on(database_url) as started:
        yield started
