"""The schema's own ids: ordered and unique across processes."""

from __future__ import annotations

import os
import re

from ccweb_store.models import new_id


def _random_part(identifier: str) -> str:
    return identifier[-10:]


def test_ids_stay_unique_and_in_creation_order_when_made_in_a_burst() -> None:
    ids = [new_id("run") for _ in range(50_000)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert all(re.fullmatch(r"run_[0-9a-f]{16}[0-9a-f]{10}", i) for i in ids)
    assert len({_random_part(i) for i in ids}) > len(ids) - 5  # 40 random bits each


def test_a_forked_child_draws_other_random_parts_than_its_parent() -> None:
    """The random part comes from a per-process generator: a child forked from the parent
    is reseeded, so the two do not make the same ids when their clocks agree."""
    new_id("run")  # the generator exists and has been used before the fork
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child process
        try:
            os.close(read_end)
            os.write(write_end, " ".join(new_id("run") for _ in range(20)).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    mine = [new_id("run") for _ in range(20)]
    with os.fdopen(read_end, "rb") as pipe:
        theirs = pipe.read().decode().split()
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(theirs) == 20
    assert not {_random_part(i) for i in mine} & {_random_part(i) for i in theirs}
