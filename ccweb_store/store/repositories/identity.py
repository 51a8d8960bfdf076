"""The database's own identity (``database_identity``) and the copy it holds
(``copy_marker``): read the id, make one when there is none, read and write the marker."""

from __future__ import annotations

import uuid

import sqlalchemy as sa

from ccweb_store.domain.rows import CopyMarker
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.store.models import Base
from ccweb_store.store.repositories.base import Repository

IDENTITY = Base.metadata.tables["database_identity"]
MARKER = Base.metadata.tables["copy_marker"]

#: ``copy_marker.name`` of the one marker a database holds.
MARKER_NAME = "copy"
#: ``copy_marker.state``: the copy is being written (or was interrupted) / finished and verified.
IN_PROGRESS = "in progress"
DONE = "done"


class IdentityRepository(Repository):
    async def database_id(self) -> str | None:
        """This database's id, or None when it has none (its row was removed)."""
        value = (
            await self._execute(sa.select(IDENTITY.c.id).order_by(IDENTITY.c.id).limit(1))
        ).scalar()
        return None if value is None else str(value)

    async def make_database_id(self) -> str:
        """Give a database that has no id a new random one, and return it."""
        made = str(uuid.uuid4())
        await self._execute(sa.insert(IDENTITY).values(id=made, created_at=utcnow()))
        return made

    async def copy_marker(self) -> CopyMarker | None:
        """The copy this database holds, or None when no ``copy`` wrote into it."""
        return await self._first(CopyMarker, sa.select(MARKER).where(MARKER.c.name == MARKER_NAME))

    async def start_copy(self, source_id: str, source_url: str) -> None:
        """Mark this database as receiving a copy of ``source_id`` (replacing any marker)."""
        await self._execute(sa.delete(MARKER).where(MARKER.c.name == MARKER_NAME))
        await self._execute(
            sa.insert(MARKER).values(
                name=MARKER_NAME,
                source_id=source_id,
                source_url=source_url,
                state=IN_PROGRESS,
                started_at=utcnow(),
                finished_at=None,
            )
        )

    async def finish_copy(self) -> None:
        """Mark the copy this database holds as finished and verified."""
        await self._execute(
            sa.update(MARKER)
            .where(MARKER.c.name == MARKER_NAME)
            .values(state=DONE, finished_at=utcnow())
        )
