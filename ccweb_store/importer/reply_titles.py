"""``repair-json``'s title repair: a reply request without ``source_title`` or
``target_title`` (imported from a cc-web entry that had no ``sourceTitle``/``targetTitle``,
before ``import-json`` filled them in) gets the title its conversation has now, as the
importer gives such an entry. ``extra["$absent"]`` then lists the field (unless ``extra``
keeps the entry's own value for it, a ``null``), so ``export-json`` leaves it out again, as
the entry was. Requests are read a batch at a time by id, each batch in one transaction; a
request is written only if its title is still NULL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ccweb_store.importer.legacy_replies import ABSENT_KEY
from ccweb_store.store.uow import Store

#: Requests read (and written) per transaction.
BATCH_ROWS = 500
#: Title column → the reply entry's field.
TITLE_FIELDS = {"source_title": "sourceTitle", "target_title": "targetTitle"}


@dataclass(frozen=True)
class FilledTitles:
    """A request that got (in a dry run: would get) its conversations' titles."""

    request_id: str
    titles: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        return {
            "requestId": self.request_id,
            **{TITLE_FIELDS[k]: v for k, v in self.titles.items()},
        }

    def line(self) -> str:
        """``reply_requests r-1: sourceTitle 'Alice (frontend)' from its conversation``."""
        filled = ", ".join(f"{TITLE_FIELDS[k]} {v!r}" for k, v in self.titles.items())
        return f"reply_requests {self.request_id}: {filled} from its conversation"


@dataclass
class TitleRepair:
    """What the title repair read and filled."""

    rows_read: int = 0
    filled: list[FilledTitles] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "rowsRead": self.rows_read,
            "rowsFilled": len(self.filled),
            "rows": [filled.as_dict() for filled in self.filled],
        }


def extra_with_absent(extra: Any, titles: dict[str, str]) -> dict[str, Any] | None:
    """``reply_requests.extra`` once ``titles`` are filled: each filled field listed in
    ``$absent`` unless ``extra`` keeps the entry's own value of it."""
    kept = dict(extra) if isinstance(extra, dict) else {}
    absent = list(kept.get(ABSENT_KEY) or [])
    for column in titles:
        name = TITLE_FIELDS[column]
        if name not in kept and name not in absent:
            absent.append(name)
    if absent:
        kept[ABSENT_KEY] = absent
    return kept or None


async def repair_reply_titles(
    store: Store, *, dry_run: bool, batch_rows: int = BATCH_ROWS
) -> TitleRepair:
    """Fill (with ``dry_run``: only find) the titles reply requests lack and their
    conversations have."""
    repair = TitleRepair()
    after: str | None = None
    while True:
        async with store.read_uow() if dry_run else store.uow() as uow:
            found, read, last = await uow.reply_titles.untitled(after=after, limit=batch_rows)
            for reply in found:
                titles = {
                    column: title
                    for column, title in (
                        ("source_title", reply.source_title),
                        ("target_title", reply.target_title),
                    )
                    if title is not None
                }
                extra = extra_with_absent(reply.extra, titles)
                if dry_run or await uow.reply_titles.fill_titles(reply.request_id, titles, extra):
                    repair.filled.append(FilledTitles(reply.request_id, titles))
            if not dry_run:
                await uow.commit()
        repair.rows_read += read
        if last is None or read < batch_rows:
            return repair
        after = last
