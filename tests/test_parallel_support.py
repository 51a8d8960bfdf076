"""The suite's own support for pytest-xdist: each worker's ports are its own."""

from __future__ import annotations

import socket

import pytest

from tests.servers import END_PORT, FIRST_PORT, free_port, worker_ports


def _ports_of(monkeypatch: pytest.MonkeyPatch, worker: str, count: int) -> range:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(count))
    return worker_ports()


@pytest.mark.parametrize("count", [1, 2, 3, 8, 64])
def test_each_worker_hands_out_ports_no_other_worker_does(
    monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    shares = [_ports_of(monkeypatch, f"gw{index}", count) for index in range(count)]
    taken = [port for share in shares for port in share]
    assert len(taken) == len(set(taken))  # no port in two shares
    assert all(len(share) >= (END_PORT - FIRST_PORT) // count for share in shares)
    assert min(taken) >= FIRST_PORT and max(taken) < END_PORT  # below the ephemeral range


def test_a_serial_run_may_use_every_port_of_the_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    assert worker_ports() == range(FIRST_PORT, END_PORT)


def test_a_free_port_is_in_the_workers_share_and_nothing_listens_on_it() -> None:
    port = free_port()
    assert port in worker_ports()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # free: the bind succeeds
