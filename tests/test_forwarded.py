"""Behind the documented TLS proxy: a real ``serve`` process believes ``X-Forwarded-Proto``
and ``X-Forwarded-For`` from the addresses of ``CCWEB_FORWARDED_ALLOW_IPS`` (``serve
--forwarded-allow-ips``) only, so the console's cookie is ``Secure`` and the access log names
the client; from anyone else the headers change nothing."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.cli_support import run_cli
from tests.servers import SERVE, free_port, server_env, start_server

TOKEN = "operator-token-behind-the-proxy"
PUBLIC = "ccweb.example.org"
CLIENT = "203.0.113.7"


def as_the_proxy_sends_it(origin: str) -> dict[str, str]:
    """What nginx (docs/deploy.md) sends on for a browser's login form on the public name."""
    return {
        "Host": PUBLIC,
        "Origin": origin,
        "X-Forwarded-Proto": "https",
        "X-Forwarded-For": CLIENT,
        "Accept": "application/json",
    }


def serve(tmp_path: Path, *flags: str, **env: str) -> tuple[str, str]:
    """Serve with ``flags`` and ``env``, log in once the way the proxy passes it on; the
    login's answer (status and ``Set-Cookie``) and the server's log."""
    port = free_port()
    server = start_server(
        [*SERVE, "--port", str(port), *flags],
        port=port,
        env=server_env(
            CCWEB_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'ccweb.db'}",
            CCWEB_TOKEN=TOKEN,
            CCWEB_ACCESS_LOG="1",
            CCWEB_ALLOWED_HOSTS=PUBLIC,
            **env,
        ),
        with_stdout=True,
    )
    try:
        login = httpx.post(
            f"{server.url}/console/login",
            data={"token": TOKEN},
            headers=as_the_proxy_sends_it(f"https://{PUBLIC}"),
            timeout=30,
        )
        answer = f"{login.status_code} {login.headers.get('set-cookie', '')} {login.text}"
    finally:
        log = server.stop()
    return answer, log


def access_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if "POST /console/login" in line]


@pytest.mark.parametrize(
    ("flags", "env"),
    [
        (("--forwarded-allow-ips", "127.0.0.1"), {}),
        ((), {"CCWEB_FORWARDED_ALLOW_IPS": "10.0.0.0/8, 127.0.0.0/8"}),
    ],
    ids=["flag", "environment"],
)
def test_from_a_trusted_proxy_the_cookie_is_secure_and_the_log_names_the_client(
    tmp_path: Path, flags: tuple[str, ...], env: dict[str, str]
) -> None:
    answer, log = serve(tmp_path, *flags, **env)

    assert answer.startswith("303 "), answer
    assert "ccweb_console=" in answer
    assert "; Secure" in answer or "; secure" in answer
    (line,) = access_lines(log)
    assert CLIENT in line


def test_without_a_trusted_proxy_the_forwarded_headers_change_nothing(tmp_path: Path) -> None:
    answer, log = serve(tmp_path)

    # The console is http://ccweb.example.org to this server: an https Origin is another one.
    assert answer.startswith("403 "), answer
    assert "CCWEB_FORWARDED_ALLOW_IPS" in answer
    assert "ccweb_console=" not in answer
    (line,) = access_lines(log)
    assert CLIENT not in line and "127.0.0.1" in line


def test_a_proxy_elsewhere_is_not_believed(tmp_path: Path) -> None:
    answer, log = serve(tmp_path, CCWEB_FORWARDED_ALLOW_IPS="10.0.0.1")

    assert answer.startswith("403 "), answer
    (line,) = access_lines(log)
    assert CLIENT not in line


def test_an_address_that_is_no_address_stops_serve_with_one_line(tmp_path: Path) -> None:
    result = run_cli(
        "serve",
        "--forwarded-allow-ips",
        "127.0.0.1,the-proxy",
        env=server_env(CCWEB_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'ccweb.db'}"),
    )

    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "CCWEB_FORWARDED_ALLOW_IPS: 'the-proxy' is not an IP address or network" in (
        result.stderr
    )
