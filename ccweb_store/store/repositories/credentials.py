"""Conversation credentials (``conversation_credentials``) and the server's own secrets
(``server_secrets``): insert, read by key, list, revoke."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.sql.expression import bindparam

from ccweb_store.domain import errors
from ccweb_store.domain.errors import Conflict
from ccweb_store.domain.ids import new_id
from ccweb_store.domain.rows import ConversationCredential
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.store.models import Base
from ccweb_store.store.repositories.base import Repository, prebuilt

CREDENTIALS = Base.metadata.tables["conversation_credentials"]
SECRETS = Base.metadata.tables["server_secrets"]

# Read on every /mcp request that presents a credential: one primary-key lookup.
_GET_CREDENTIAL = prebuilt(
    sa.select(CREDENTIALS).where(CREDENTIALS.c.id == bindparam("credential_id"))
)
_REVOKE_CREDENTIAL = prebuilt(
    sa.update(CREDENTIALS)
    .where(CREDENTIALS.c.id == bindparam("credential_id"), CREDENTIALS.c.revoked_at.is_(None))
    .values(revoked_at=bindparam("p_at"))
    .returning(*CREDENTIALS.c)
)
_GET_SECRET = prebuilt(sa.select(SECRETS.c.value).where(SECRETS.c.name == bindparam("name")))


class CredentialRepository(Repository):
    async def add(
        self,
        session_id: str,
        *,
        label: str | None,
        hop_count: int,
        expires_at: datetime | None,
    ) -> ConversationCredential:
        """A new, active credential of ``session_id`` (which the caller checked exists)."""
        values = {
            "id": new_id("cred"),
            "session_id": session_id,
            "label": label,
            "hop_count": hop_count,
            "created_at": utcnow(),
            "expires_at": expires_at,
            "revoked_at": None,
        }

        def clash() -> Conflict:
            return Conflict("a credential id clashed; mint it again", code=errors.INVALID_STATE)

        return await self._insert(ConversationCredential, values, clash)

    async def get(self, credential_id: str) -> ConversationCredential | None:
        return await self._first(
            ConversationCredential, _GET_CREDENTIAL, {"credential_id": credential_id}
        )

    async def revoke(self, credential_id: str, at: datetime) -> ConversationCredential | None:
        """Revoke an active credential; the row if this call revoked it, else None."""
        return await self._first(
            ConversationCredential, _REVOKE_CREDENTIAL, {"credential_id": credential_id, "p_at": at}
        )

    async def revoke_labelled(
        self, session_id: str, label: str, at: datetime
    ) -> list[ConversationCredential]:
        """Revoke every credential of ``session_id`` called ``label`` that is still live at
        ``at`` (neither revoked nor expired); the rows this call revoked."""
        stmt = (
            sa.update(CREDENTIALS)
            .where(
                CREDENTIALS.c.session_id == session_id,
                CREDENTIALS.c.label == label,
                CREDENTIALS.c.revoked_at.is_(None),
                sa.or_(CREDENTIALS.c.expires_at.is_(None), CREDENTIALS.c.expires_at > at),
            )
            .values(revoked_at=at)
            .returning(*CREDENTIALS.c)
        )
        return await self._all(ConversationCredential, stmt)

    async def list_recent(
        self, *, session_id: str | None, active_at: datetime | None, limit: int
    ) -> list[ConversationCredential]:
        """Newest first; with ``active_at``, only those neither revoked nor expired by then."""
        stmt = sa.select(CREDENTIALS).order_by(
            CREDENTIALS.c.created_at.desc(), CREDENTIALS.c.id.desc()
        )
        if session_id is not None:
            stmt = stmt.where(CREDENTIALS.c.session_id == session_id)
        if active_at is not None:
            stmt = stmt.where(
                CREDENTIALS.c.revoked_at.is_(None),
                sa.or_(CREDENTIALS.c.expires_at.is_(None), CREDENTIALS.c.expires_at > active_at),
            )
        return await self._all(ConversationCredential, stmt.limit(limit))


class SecretRepository(Repository):
    async def get(self, name: str) -> str | None:
        """The secret called ``name``, or None."""
        value = (await self._execute(_GET_SECRET, {"name": name})).scalar()
        return None if value is None else str(value)

    async def add(self, name: str, value: str) -> None:
        """Store a new secret; ``Conflict`` (``invalid_state``) when another writer stored
        one of that name first."""

        def taken() -> Conflict:
            return Conflict(f"secret {name!r} already exists", code=errors.INVALID_STATE)

        await self._insert_unread(
            SECRETS, {"name": name, "value": value, "created_at": utcnow()}, taken
        )
