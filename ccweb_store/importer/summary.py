"""What an import did (or, in a dry run, would do): counts, what was skipped and why, and the
values stored otherwise than the source wrote them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccweb_store.store.failures import DatabaseError, refusal_reason


@dataclass
class Counts:
    """How many things were imported, updated, left unchanged or skipped."""

    imported: int = 0
    updated: int = 0
    unchanged: int = 0
    skipped: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "imported": self.imported,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "skipped": self.skipped,
        }


@dataclass
class Skipped:
    """Something left out of the import, and why."""

    path: str
    reason: str

    @classmethod
    def refused(cls, path: Path, exc: DatabaseError) -> Skipped:
        """A file the database refused, with the driver's own message (without the statement
        dump: ``failures.refusal_reason``)."""
        return cls(str(path), f"the database refused it: {refusal_reason(exc)}")


@dataclass
class KeptValue:
    """A value stored otherwise than the source wrote it: kept as its JSON text, or text with
    U+FFFD in place of characters no column holds (``what`` says which, and why)."""

    file: str
    #: The record in the file: ``session abc``, ``message 12 (id m-12)``, ``reply 3 (request r)``.
    record: str
    #: Where in the record: ``metadata.x``, ``extra.title``, ``content``.
    path: str
    what: str

    def as_dict(self) -> dict[str, str]:
        return {"file": self.file, "record": self.record, "path": self.path, "what": self.what}

    def __str__(self) -> str:
        return f"{self.file}: {self.record}: {self.path} {self.what}"


@dataclass
class ImportSummary:
    """What an import did (or, in a dry run, would do)."""

    dry_run: bool
    sessions: Counts = field(default_factory=Counts)
    messages: Counts = field(default_factory=Counts)
    replies: Counts = field(default_factory=Counts)
    original_requests_recovered: int = 0
    skipped: list[Skipped] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    kept_as_text: list[KeptValue] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """False when anything (a file, a message, a reply) was skipped."""
        return not self.skipped

    def as_dict(self) -> dict[str, Any]:
        return {
            "dryRun": self.dry_run,
            "sessions": self.sessions.as_dict(),
            "messages": self.messages.as_dict(),
            "replies": {
                **self.replies.as_dict(),
                "originalRequestRecovered": self.original_requests_recovered,
            },
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.skipped],
            "warnings": list(self.warnings),
            "keptAsText": {
                "count": len(self.kept_as_text),
                "values": [kept.as_dict() for kept in self.kept_as_text],
            },
        }


#: What a progress line says of a session file, by its outcome, in a dry run.
DRY_RUN_WORDS = {"imported": "would import", "updated": "would update"}


def said_of_file(outcome: str, *, dry_run: bool) -> str:
    """What a progress line says of a session file: its outcome (``imported``, ``updated``,
    ``unchanged``, ``skipped``, the word the summary counts it under), in a dry run
    ``would import`` or ``would update`` since nothing was written."""
    return DRY_RUN_WORDS.get(outcome, outcome) if dry_run else outcome


#: Called after each file with (path, what happened); the CLI draws progress with it.
ProgressCallback = Callable[[Path, str], None]
#: Called while a large file is imported a message at a time, with (path, messages written so
#: far, messages in the file).
MessagesCallback = Callable[[Path, int, int], None]
