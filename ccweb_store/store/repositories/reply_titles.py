"""The reply requests an import left without the title their conversation has: found in
pages by id, and filled where still empty (``importer.reply_titles``)."""

from __future__ import annotations

from typing import Any, NamedTuple

import sqlalchemy as sa

from ccweb_store.domain.rows import ReplyRequest
from ccweb_store.store.repositories.base import REPLIES, SESSIONS, Repository


class UntitledReply(NamedTuple):
    """A request lacking a title its conversation has: the titles to fill (None: keep)."""

    request_id: str
    source_title: str | None
    target_title: str | None
    extra: Any


class ReplyTitleRepository(Repository):
    async def untitled(
        self, *, after: str | None, limit: int
    ) -> tuple[list[UntitledReply], int, str | None]:
        """Read up to ``limit`` requests after ``after`` (by id); of them, those whose
        ``source_title`` or ``target_title`` is NULL while its conversation has a title (not
        blank), with the conversation's title where the request lacks one. Returns them, how
        many requests were read, and the last id read."""
        source, target = SESSIONS.alias("source"), SESSIONS.alias("target")
        stmt = (
            sa.select(
                REPLIES.c.request_id,
                REPLIES.c.source_title,
                REPLIES.c.target_title,
                REPLIES.c.extra,
                source.c.title,
                target.c.title,
            )
            .outerjoin(source, source.c.id == REPLIES.c.source_conversation_id)
            .outerjoin(target, target.c.id == REPLIES.c.target_conversation_id)
            .order_by(REPLIES.c.request_id)
            .limit(limit)
        )
        if after is not None:
            stmt = stmt.where(REPLIES.c.request_id > after)
        rows = (await self._execute(stmt)).all()
        found = []
        for request_id, source_title, target_title, extra, source_now, target_now in rows:
            fill_source = source_now if source_title is None and _titled(source_now) else None
            fill_target = target_now if target_title is None and _titled(target_now) else None
            if fill_source is not None or fill_target is not None:
                found.append(UntitledReply(request_id, fill_source, fill_target, extra))
        return found, len(rows), (rows[-1][0] if rows else None)

    async def fill_titles(
        self, request_id: str, titles: dict[str, str], extra: dict[str, Any] | None
    ) -> bool:
        """Set the title columns ``titles`` (column → title) and ``extra`` of a request whose
        those columns are still NULL; whether it did."""
        stmt = (
            sa.update(REPLIES)
            .where(
                REPLIES.c.request_id == request_id,
                *(REPLIES.c[column].is_(None) for column in titles),
            )
            .values(**titles, extra=extra)
        )
        return (await self._update_returning(ReplyRequest, stmt)) is not None


def _titled(title: str | None) -> bool:
    return title is not None and bool(title.strip())
