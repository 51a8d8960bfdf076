"""A team's year of data, written in bulk into a migrated SQLite file (``sqlite3.executemany``):
conversations, their messages, reply requests (some of them open), finished runs and a queue,
as ``bench/team_year.py`` measures them.

Every conversation has ~equal share of the messages but one, ``long``, of ``LONG`` messages;
times spread over the year before now, so that the newest activity, the newest creation and
the newest message orders all differ. Conversations ``c00000``… hold the queued runs
(``user_turn``), one each; the open requests are the newest ones.
"""

from __future__ import annotations

import random
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

#: Messages of the one long conversation, in every database.
LONG = 10_000
YEAR = timedelta(days=365)
WORDS = [
    "plan",
    "build",
    "test",
    "review",
    "deploy",
    "check",
    "report",
    "schema",
    "worker",
    "reply",
    "queue",
    "page",
]


@dataclass(frozen=True)
class Size:
    """How much a database holds."""

    conversations: int
    messages: int
    requests: int
    #: Open requests by state: waiting, ready, failed (the newest requests).
    open: tuple[int, int, int]
    finished_runs: int
    queued_runs: int

    def shown(self) -> str:
        return (
            f"{self.conversations:,} conversations, {self.messages + LONG:,} messages, "
            f"{self.requests:,} reply requests ({sum(self.open):,} open), "
            f"{self.finished_runs:,} finished runs, {self.queued_runs:,} queued"
        )


TEAM_YEAR = Size(10_000, 1_000_000, 50_000, (350, 100, 100), 100_000, 500)
SMALL = Size(100, 10_000, 500, (60, 60, 30), 1_000, 50)
QUICK_BIG = Size(400, 8_000, 1_000, (60, 60, 30), 2_000, 60)
QUICK_SMALL = Size(40, 800, 200, (60, 60, 30), 200, 20)


def sqlite_time(value: datetime) -> str:
    """A UTC time as the store keeps it on SQLite (``column_types``)."""
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")


def conversation_id(n: int) -> str:
    return f"c{n:05d}"


def generate(path: Path, size: Size, *, seed: int = 51) -> None:
    """Fill the migrated SQLite file at ``path`` with ``size``'s rows."""
    rng = random.Random(seed)
    now = datetime.now(UTC)
    start = now - YEAR
    ids = [conversation_id(n) for n in range(size.conversations)] + ["long"]
    created = {sid: start + YEAR * rng.random() * 0.9 for sid in ids}
    with closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = OFF")
        last = _messages(db, rng, ids, created, size, now)
        db.executemany(
            "INSERT INTO sessions (id, title, agent, created_at, updated_at, last_message_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [
                (
                    sid,
                    f"Conversation {sid}",
                    "claude",
                    sqlite_time(created[sid]),
                    last[sid],
                    last[sid],
                )
                for sid in ids
            ],
        )
        _requests(db, rng, ids, size, start)
        _runs(db, rng, ids, size, start, now)
        db.commit()
        db.execute("ANALYZE")
        db.commit()
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _messages(
    db: sqlite3.Connection,
    rng: random.Random,
    ids: list[str],
    created: dict[str, datetime],
    size: Size,
    now: datetime,
) -> dict[str, str]:
    """Each conversation's messages, one every few minutes from its creation on; the time of
    its last one, by conversation."""
    each = size.messages // max(size.conversations, 1)
    last: dict[str, str] = {}
    for sid in ids:
        count = LONG if sid == "long" else each
        span = (now - created[sid]).total_seconds() * rng.random()
        step = span / max(count, 1)
        rows = []
        for seq in range(1, count + 1):
            at = sqlite_time(created[sid] + timedelta(seconds=seq * step))
            text = f"#{seq} " + " ".join(rng.choice(WORDS) for _ in range(16))
            rows.append((f"{sid}-{seq}", sid, seq, "user" if seq % 2 else "assistant", text, at))
            if len(rows) == 50_000:
                _insert_messages(db, rows)
                rows = []
        _insert_messages(db, rows)
        last[sid] = sqlite_time(created[sid] + timedelta(seconds=count * step))
    return last


def _insert_messages(db: sqlite3.Connection, rows: list[tuple[object, ...]]) -> None:
    db.executemany(
        "INSERT INTO messages (id, session_id, seq, role, content, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        rows,
    )


def _requests(
    db: sqlite3.Connection, rng: random.Random, ids: list[str], size: Size, start: datetime
) -> None:
    """``size.requests`` requests at random times over the year; the newest are the open
    ones, in the proportions of ``size.open``, the others returned."""
    times = sorted(start + YEAR * rng.random() for _ in range(size.requests))
    waiting, ready, failed = size.open
    states = ["returned"] * (size.requests - waiting - ready - failed)
    tail = ["waiting"] * waiting + ["ready"] * ready + ["failed"] * failed
    rng.shuffle(tail)
    states += tail
    rows = []
    for n, (at, state) in enumerate(zip(times, states, strict=True)):
        source, target = rng.sample(ids, 2)
        answered = state in ("returned", "ready")
        done = sqlite_time(at + timedelta(minutes=5))
        rows.append(
            (
                f"req-{n:06d}",
                source,
                f"Conversation {source}",
                target,
                f"Conversation {target}",
                state,
                f"Please check part {n} of the plan",
                "Checked: all good" if answered else None,
                sqlite_time(at),
                done if state != "waiting" else None,
                done if state == "returned" else None,
                "the target's run failed" if state == "failed" else None,
            )
        )
    db.executemany(
        "INSERT INTO reply_requests (request_id, source_conversation_id, source_title, "
        "target_conversation_id, target_title, status, original_request, reply_text, "
        "created_at, completed_at, returned_at, last_error) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )


def _runs(
    db: sqlite3.Connection,
    rng: random.Random,
    ids: list[str],
    size: Size,
    start: datetime,
    now: datetime,
) -> None:
    """Finished runs at random times over the year, each ``cross_conversation`` one naming
    the request it answered, and one queued ``user_turn`` run in each of the first
    ``size.queued_runs`` conversations."""
    kinds = ("user_turn", "cross_conversation", "reply_auto_run")
    rows = []
    for n in range(size.finished_runs):
        at = start + YEAR * rng.random()
        status = "failed" if n % 20 == 0 else "completed"
        kind = kinds[n % 3]
        answered = f"req-{n // 3 % size.requests:06d}" if kind == "cross_conversation" else None
        rows.append(
            (
                f"run-{n:06d}",
                rng.choice(ids),
                kind,
                answered,
                status,
                "bench-worker",
                1,
                sqlite_time(at),
                sqlite_time(at + timedelta(seconds=1)),
                sqlite_time(at + timedelta(seconds=30)),
                "done" if status == "completed" else None,
                "boom" if status == "failed" else None,
            )
        )
    db.executemany(
        "INSERT INTO runs (id, session_id, kind, reply_request_id, status, worker_id, "
        "attempts, created_at, started_at, finished_at, output, error) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    db.executemany(
        "INSERT INTO runs (id, session_id, kind, status, created_at) "
        "VALUES (?, ?, 'user_turn', 'queued', ?)",
        [
            (f"queued-{n:05d}", conversation_id(n), sqlite_time(now - timedelta(minutes=n)))
            for n in range(size.queued_runs)
        ],
    )
