"""The service answers /healthz, in-process and as a real ``python server.py``."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import httpx
import sqlalchemy as sa

from ccweb_store.http.app import create_app
from ccweb_store.store.db import head_revision
from ccweb_store.store.uow import Store
from tests.cli_support import run_cli
from tests.servers import ROOT, free_port, server_env, start_server


async def test_healthz_reports_the_database_kind_and_schema_revision(store: Store) -> None:
    app = create_app(store=store, migrate_on_start=False)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
    ) as client:
        response = await client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["database"] == ("sqlite" if store.dialect == "sqlite" else "postgresql")
    assert body["revision"] == await head_revision()


def test_python_server_py_migrates_a_new_sqlite_file_and_serves_healthz(tmp_path: Path) -> None:
    port = free_port()
    database = tmp_path / "fresh.db"
    env = server_env(CCWEB_DATABASE_URL=f"sqlite+aiosqlite:///{database}", CCWEB_PORT=str(port))
    server = start_server(
        [sys.executable, str(ROOT / "server.py")], port=port, env=env, cwd=tmp_path
    )
    try:
        body = httpx.get(f"{server.url}/healthz", timeout=5).json()
        assert body["status"] == "ok" and body["database"] == "sqlite"
        engine = sa.create_engine(f"sqlite:///{database}")
        with engine.connect() as connection:
            revision = connection.execute(
                sa.text("SELECT version_num FROM alembic_version")
            ).scalar()
        engine.dispose()
        assert body["revision"] == revision
    finally:
        stderr = server.stop()
    assert f"listening on http://127.0.0.1:{port}" in stderr  # logs go to stderr


def test_serve_refuses_a_public_host_without_a_token(tmp_path: Path) -> None:
    result = run_cli("serve", "--host", "0.0.0.0", cwd=tmp_path, timeout=30)
    assert result.returncode == 2
    assert "CCWEB_TOKEN" in result.stderr and "127.0.0.1" in result.stderr
    assert not (tmp_path / "ccweb.db").exists()


def test_migrate_command_upgrades_and_downgrades(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'm.db'}"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return run_cli("migrate", *args, "--database-url", url, cwd=tmp_path)

    up = run()
    assert up.returncode == 0, up.stderr
    assert "revision" in up.stdout and "sqlite" in up.stdout
    down = run("0001", "--downgrade")
    assert down.returncode == 0, down.stderr
    assert "0001" in down.stdout


async def test_a_server_freezes_what_its_startup_left_alive_out_of_the_collectors_reach(
    store: Store,
) -> None:
    gc.unfreeze()
    app = create_app(store=store, migrate_on_start=False, freeze_gc_after_startup=True)
    try:
        async with app.router.lifespan_context(app):
            assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
    plain = create_app(store=store, migrate_on_start=False)
    async with plain.router.lifespan_context(plain):
        assert gc.get_freeze_count() == 0
