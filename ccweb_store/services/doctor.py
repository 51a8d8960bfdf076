"""``ccweb-store doctor`` and the host API's ``operator.doctor``: checks of a running setup,
each with the command that fixes what it finds.

- the database answers and its schema is at the newest revision;
- the operator token suits the bind address (none on a non-loopback bind, a short or
  repetitive one);
- every ``CCWEB_*`` variable set is one ccweb-store reads (a misspelt setting is ignored);
- a SQLite database file (and its ``-wal``/``-shm``) is readable by its owner only;
- no running run's lease has expired (the server's sweeper requeues them; none runs?);
- no ``waiting`` request is left without a queued or running run naming it: no run will
  ever answer it (an imported request, a run cancelled by hand);
- the stored JSON values keep the stored-value rule (``json_repair``, as a dry run): by
  default the first ``QUICK_JSON_ROWS`` of each JSON column, so that the check costs the same
  whatever the database holds; every value with ``full`` (``doctor --full``).

A check is ``ok``, a ``warning`` (worth knowing, nothing broken) or ``action`` (something
needs the operator); the report is ``ok`` when no check needs action. It only reads.
"""

from __future__ import annotations

import os
import shlex
import stat

from ccweb_store.config import MAKE_TOKEN, Settings, misspelt_variables
from ccweb_store.contract.operator import Check, DoctorReport, OperatorDoctor
from ccweb_store.domain.errors import DomainError
from ccweb_store.domain.ids import conversation_label
from ccweb_store.domain.timestamps import iso, utcnow
from ccweb_store.services.json_repair import repair_json
from ccweb_store.store.db import database_file, head_revision
from ccweb_store.store.uow import Store

OK = "ok"
WARNING = "warning"
ACTION = "action"
#: Rows a check lists; its count still counts them all.
LISTED = 20
#: Rows of each JSON column the quick check reads (``doctor --full`` reads them all).
QUICK_JSON_ROWS = 1000
#: A token shorter than this, or with fewer distinct characters than ``MIN_DISTINCT``, is
#: worth replacing: ``secrets.token_urlsafe(32)`` makes 43 characters.
STRONG_TOKEN_CHARS = 32
MIN_DISTINCT = 10


def missing_database_report(path: str, settings: Settings) -> DoctorReport:
    """The report when the SQLite file is not there at all (the other checks need it)."""
    return DoctorReport.of(
        [
            Check.of(
                "database",
                ACTION,
                f"no database at {path}",
                "ccweb-store migrate   (or start the server: ccweb-store serve)",
            ),
            token_check(settings),
            variables_check(),
        ]
    )


async def run_doctor(store: Store, call: OperatorDoctor) -> DoctorReport:
    """``operator.doctor``: every check, on this store and its settings (``full``: every
    stored JSON value read)."""
    checks = [
        await database_check(store),
        token_check(store.settings),
        variables_check(),
        file_permissions_check(store.settings),
    ]
    if checks[0].status == ACTION:
        checks.append(
            Check.of("data", WARNING, "not checked: the database cannot be read", "fix it first")
        )
        return DoctorReport.of(checks)
    checks.append(await expired_leases_check(store))
    checks.append(await unanswerable_requests_check(store))
    checks.append(await unreadable_rows_check(store, full=call.full))
    return DoctorReport.of(checks)


async def database_check(store: Store) -> Check:
    """The database answers and is at the newest revision."""
    try:
        revision = await store.health()
    except DomainError as exc:
        return Check.of("database", ACTION, exc.message, "check that the database is reachable")
    head = await head_revision()
    if revision != head:
        return Check.of(
            "database",
            ACTION,
            f"{store.dialect} at revision {revision or 'none'}, the newest is {head}",
            "ccweb-store migrate   (serve migrates on start too)",
        )
    return Check.of("database", OK, f"{store.dialect} reachable, at the newest revision {head}")


def token_check(settings: Settings) -> Check:
    """The operator token against the bind address of these settings."""
    token, host = settings.token, settings.host
    make = f"export CCWEB_TOKEN=$({MAKE_TOKEN})"
    if token is None:
        if not settings.host_is_loopback:
            return Check.of(
                "token",
                ACTION,
                f"no CCWEB_TOKEN with the non-loopback bind {host!r}: the server refuses to "
                "start, and without the refusal anyone on the network could act as any "
                "conversation",
                make,
            )
        return Check.of(
            "token",
            WARNING,
            f"no CCWEB_TOKEN: on {host} any local user and any web page the browser opens "
            "can call /rpc and act as any conversation",
            make,
        )
    if len(token) < STRONG_TOKEN_CHARS or len(set(token)) < MIN_DISTINCT:
        return Check.of(
            "token",
            WARNING,
            f"CCWEB_TOKEN is {len(token)} characters with {len(set(token))} distinct ones: "
            f"use a random one of at least {STRONG_TOKEN_CHARS}",
            make,
        )
    return Check.of("token", OK, f"CCWEB_TOKEN set ({len(token)} characters) for {host}")


def variables_check() -> Check:
    """``CCWEB_*`` variables of this process that no setting reads (a misspelt one is
    otherwise ignored without a word), each with the closest real one."""
    misspelt = misspelt_variables(os.environ)
    if not misspelt:
        return Check.of("variables", OK, "every CCWEB_ variable set is one ccweb-store reads")
    return Check.of(
        "variables",
        WARNING,
        f"{len(misspelt)} CCWEB_ variable(s) that ccweb-store does not read: each is ignored",
        "rename each to the setting it means (docs/operations.md lists them), or unset it",
        misspelt,
    )


def file_permissions_check(settings: Settings) -> Check:
    """A SQLite database and its ``-wal``/``-shm`` files: readable or writable by their owner
    only (they hold every conversation). Nothing to check on PostgreSQL."""
    path = database_file(settings.database_url)
    if path is None:
        return Check.of("files", OK, "the database is not a file of this machine")
    shared = []
    for candidate in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            mode = stat.S_IMODE(candidate.stat().st_mode)
        except OSError:
            continue
        if mode & 0o077:
            shared.append((candidate, mode))
    if not shared:
        return Check.of("files", OK, f"{path} is readable by its owner only")
    return Check.of(
        "files",
        WARNING,
        "the database is readable by other users of this machine",
        "chmod 600 " + " ".join(shlex.quote(str(candidate)) for candidate, _ in shared),
        [f"{candidate}: mode {mode:04o}" for candidate, mode in shared],
    )


async def expired_leases_check(store: Store) -> Check:
    """Running runs whose lease has passed: their worker is gone and nobody requeued them."""
    async with store.read_uow() as uow:
        rows = await uow.monitoring.expired_leases(utcnow())
    if not rows:
        return Check.of("leases", OK, "no running run has an expired lease")
    return Check.of(
        "leases",
        ACTION,
        f"{len(rows)} running run(s) whose lease expired: their worker is gone",
        "start the server (it requeues them every CCWEB_LEASE_SWEEP_SECONDS), "
        "or: ccweb-store runs requeue RUN_ID",
        [
            f"{row.run_id} in {row.session_id}, worker {row.worker_id}, lease expired "
            f"{iso(row.lease_expires_at)}"
            for row in rows[:LISTED]
        ],
    )


async def unanswerable_requests_check(store: Store) -> Check:
    """``waiting`` requests with no queued or running run naming them: nothing will answer.
    Each names its source and target alike (``Title (id)``); one that stores no question (no
    original request, no message that carried it) says a retry needs ``--message``."""
    async with store.read_uow() as uow:
        rows = await uow.monitoring.unanswered_waiting_requests()
    if not rows:
        return Check.of(
            "waiting requests", OK, "every waiting request has a run that will answer it"
        )
    retry = "ccweb-store replies retry REQUEST_ID   (asks the target again)"
    if not all(row.question_stored for row in rows):
        retry += (
            "; one that stores no question: ccweb-store replies retry REQUEST_ID "
            '--message "the question"'
        )
    return Check.of(
        "waiting requests",
        ACTION,
        f"{len(rows)} waiting request(s) that no run will ever answer (no queued or running "
        "run in the target names them; imported requests are like this)",
        f'{retry}, or: ccweb-store replies fail REQUEST_ID --reason "…"',
        [
            f"{row.request_id}: "
            f"{conversation_label(row.source_title, row.source_conversation_id)} → "
            f"{conversation_label(row.target_title, row.target_conversation_id)}, "
            f"made {iso(row.created_at)}"
            + (
                ""
                if row.question_stored
                else "; no question stored (no original request, no message that carried "
                "it): a retry asks nothing unless given --message"
            )
            for row in rows[:LISTED]
        ],
    )


async def unreadable_rows_check(store: Store, *, full: bool = False) -> Check:
    """Stored JSON values that break the stored-value rule (``repair-json --dry-run``): the
    first ``QUICK_JSON_ROWS`` of each column, or every one with ``full``."""
    summary = await repair_json(store, dry_run=True, max_rows=None if full else QUICK_JSON_ROWS)
    cut = [counts.column.name for counts in summary.columns if counts.cut]
    if not summary.rows and not cut:
        return Check.of("stored JSON", OK, "every stored JSON value keeps the stored-value rule")
    if not summary.rows:
        return Check.of(
            "stored JSON",
            OK,
            f"the first {QUICK_JSON_ROWS} values of each JSON column keep the stored-value "
            f"rule; {', '.join(cut)} hold more: `ccweb-store doctor --full` reads them all",
        )
    items = [line for row in summary.rows for line in row.lines()]
    return Check.of(
        "stored JSON",
        ACTION,
        f"{len(summary.rows)} row(s) hold JSON values that break the stored-value rule "
        "(reads keep them as text until the rows are rewritten)",
        "ccweb-store repair-json --dry-run && ccweb-store repair-json",
        items[:LISTED],
    )
