"""Conversation credentials: a signed token that lets an agent act as one conversation only.

A token reads ``ccw1.<conversationId>.<credentialId>.<expiresAt>.<hopCount>.<signature>``:
``expiresAt`` in Unix seconds (0: never), ``hopCount`` the least hop count of the sends made
with it, and ``signature`` the unpadded base64url HMAC-SHA256 of everything before it, keyed
by the server's signing key (``CCWEB_CREDENTIAL_SECRET``, or one the server makes once with
``secrets.token_bytes`` and keeps in ``server_secrets``). Conversation ids and credential ids
hold no ``.``, so the parts split unambiguously.

The signature makes a token unforgeable without the key; the ``conversation_credentials`` row
its id names makes it revocable: every use reads that row (one primary-key lookup), so a
revocation holds from the next request on. Tokens are never stored, and the key is never
logged or printed (only tokens are, by the commands that mint them).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ccweb_store.contract.credentials import (
    CredentialList,
    CredentialTerms,
    ListCredentials,
    MintCredential,
    Minted,
    RevokeCredential,
)
from ccweb_store.contract.objects import Credential
from ccweb_store.domain import errors
from ccweb_store.domain.errors import Conflict, DomainError, NotFound
from ccweb_store.domain.ids import SESSION_ID_PATTERN
from ccweb_store.domain.rows import ConversationCredential, Run
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.store.uow import Store, UnitOfWork

log = logging.getLogger(__name__)

PREFIX = "ccw1"
#: ``server_secrets.name`` of the signing key the server made for itself.
SIGNING_KEY_NAME = "credential_signing_key"
#: The query parameter of ``/mcp`` that carries a token (``Authorization: Bearer`` works too).
QUERY_PARAMETER = "credential"


class CredentialRefused(DomainError):
    """A presented credential does not hold (or one is required and missing)."""

    code = errors.INVALID_CREDENTIAL


@dataclass(frozen=True, slots=True)
class Claims:
    """What a token says, once its signature is checked."""

    conversation_id: str
    credential_id: str
    expires_at: int  # Unix seconds; 0: never
    hop_count: int


def looks_like_token(value: str | None) -> bool:
    """Whether ``value`` is shaped like a conversation credential (not whether it holds)."""
    return value is not None and value.startswith(PREFIX + ".")


def _signature(key: bytes, payload: str) -> str:
    digest = hmac.new(key, payload.encode("ascii"), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def sign(key: bytes, claims: Claims) -> str:
    """The token for ``claims``."""
    payload = ".".join(
        (
            PREFIX,
            claims.conversation_id,
            claims.credential_id,
            str(claims.expires_at),
            str(claims.hop_count),
        )
    )
    return f"{payload}.{_signature(key, payload)}"


def read_token(key: bytes, token: str) -> Claims:
    """The claims of ``token`` if its signature is right; ``CredentialRefused`` otherwise.

    Checks no expiry and no revocation (``authenticate`` does).
    """
    parts = token.split(".")
    malformed = CredentialRefused(
        "malformed conversation credential: expected ccw1.<conversation>.<id>.<expiry>.<hops>"
        ".<signature>; copy the whole token that `ccweb-store conversation-url` printed"
    )
    if len(parts) != 6 or parts[0] != PREFIX:
        raise malformed
    _, conversation_id, credential_id, expires_at, hop_count, signature = parts
    if not (
        SESSION_ID_PATTERN.fullmatch(conversation_id)
        and SESSION_ID_PATTERN.fullmatch(credential_id)
        and expires_at.isascii()
        and expires_at.isdigit()
        and hop_count.isascii()
        and hop_count.isdigit()
        and signature.isascii()
    ):
        raise malformed
    payload = token[: -len(signature) - 1]
    if not hmac.compare_digest(_signature(key, payload), signature):
        raise CredentialRefused(
            "invalid conversation credential: its signature does not match. It was altered, "
            "or signed with another key (CCWEB_CREDENTIAL_SECRET must be the same where it is "
            "minted and where it is used); mint a new one with `ccweb-store conversation-url`"
        )
    return Claims(conversation_id, credential_id, int(expires_at), int(hop_count))


@dataclass(frozen=True, slots=True)
class Binding:
    """Who a credential that holds speaks for."""

    conversation_id: str
    credential_id: str
    hop_count: int
    #: Unix seconds; 0: never. Kept so that an open stream ends at expiry without a read.
    expires_at: int = 0


async def authenticate(store: Store, token: str, *, now: float | None = None) -> Binding:
    """The conversation ``token`` is bound to, if it holds: signed by this server's key, not
    expired, and its row present and not revoked (one primary-key read).

    Raises ``CredentialRefused`` with ``invalid_credential``, ``credential_expired`` or
    ``credential_revoked``, and a message saying what to do.
    """
    key = await existing_signing_key(store)
    if key is None:  # nothing was ever minted here: refuse without making a key
        raise CredentialRefused(
            "this server has minted no conversation credential, so none holds here; mint one "
            "with `ccweb-store conversation-url <conversation>`"
        )
    claims = read_token(key, token)
    binding = Binding(
        claims.conversation_id, claims.credential_id, claims.hop_count, claims.expires_at
    )
    await confirm_still_holds(store, binding, now=now)
    return binding


async def confirm_still_holds(store: Store, binding: Binding, *, now: float | None = None) -> None:
    """Raise ``CredentialRefused`` unless ``binding``'s credential still holds: not past its
    expiry (read from the token, no database access), and its row present and not revoked
    (one primary-key read). An open ``GET /events`` stream asks before every batch it sends
    and at every heartbeat, so it ends with its credential."""
    current = time.time() if now is None else now
    if binding.expires_at and binding.expires_at <= current:
        raise CredentialRefused(
            f"conversation credential {binding.credential_id} expired at "
            f"{_iso_seconds(binding.expires_at)}; mint a new one with "
            f"`ccweb-store conversation-url {binding.conversation_id}`",
            code=errors.CREDENTIAL_EXPIRED,
        )
    async with store.read_uow() as uow:
        row = await uow.credentials.get(binding.credential_id)
    if row is None or row.session_id != binding.conversation_id:
        raise CredentialRefused(
            f"unknown conversation credential {binding.credential_id}: it is not in this "
            "server's database (deleted with its conversation, or minted elsewhere); mint a "
            f"new one with `ccweb-store conversation-url {binding.conversation_id}`"
        )
    if row.revoked_at is not None:
        raise CredentialRefused(
            f"conversation credential {binding.credential_id} was revoked; ask the operator "
            f"for a new one (`ccweb-store conversation-url {binding.conversation_id}`)",
            code=errors.CREDENTIAL_REVOKED,
        )


def _iso_seconds(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def signing_key(store: Store) -> bytes:
    """The key that signs credentials, loaded once per store: ``CCWEB_CREDENTIAL_SECRET``,
    else the one kept in the database, made there on first use."""
    key = await _signing_key(store, make=True)
    assert key is not None
    return key


async def existing_signing_key(store: Store) -> bytes | None:
    """``signing_key``, but None instead of making one when there is none yet: a request that
    is refused writes nothing."""
    return await _signing_key(store, make=False)


async def _signing_key(store: Store, *, make: bool) -> bytes | None:
    if store.credential_key is not None:
        return store.credential_key
    async with store.credential_key_lock:  # one request of this process loads or makes it
        if store.credential_key is None:
            configured = store.settings.credential_secret
            if configured is not None:
                store.credential_key = configured.get_secret_value().encode()
            else:
                stored = await _stored_key(store, make=make)
                if stored is None:
                    return None
                store.credential_key = bytes.fromhex(stored)
    return store.credential_key


async def _stored_key(store: Store, *, make: bool = True) -> str | None:
    """The signing key in ``server_secrets`` (hex); the first caller of all processes makes it."""
    async with store.read_uow() as uow:
        found = await uow.secrets.get(SIGNING_KEY_NAME)
    if found is not None or not make:
        return found
    fresh = secrets.token_bytes(32).hex()
    try:
        async with store.uow() as uow:
            await uow.secrets.add(SIGNING_KEY_NAME, fresh)
            await uow.commit()
    except Conflict:  # another process made it first: use theirs
        async with store.read_uow() as uow:
            found = await uow.secrets.get(SIGNING_KEY_NAME)
        if found is None:
            raise
        return found
    log.info("made a new key for signing conversation credentials (kept in server_secrets)")
    return fresh


def token_of(key: bytes, row: ConversationCredential) -> str:
    """The token of a credential row (the same every time: it is never stored)."""
    expires_at = int(row.expires_at.timestamp()) if row.expires_at is not None else 0
    return sign(key, Claims(row.session_id, row.id, expires_at, row.hop_count))


# --- host API (credential.*) ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MintOptions:
    """A credential to mint: when it expires (None: never) and its label."""

    expires_at: datetime | None
    label: str | None


def mint_options(terms: CredentialTerms) -> MintOptions:
    """When a credential minted on ``terms`` expires, and its label."""
    lifetime, label = terms.expires_in_seconds, terms.label
    expires_at = None
    if lifetime is not None:  # whole seconds, as the token carries it
        expires_at = (utcnow() + timedelta(seconds=lifetime)).replace(microsecond=0)
    return MintOptions(expires_at, label)


async def mint_in(uow: UnitOfWork, key: bytes, run: Run, options: MintOptions) -> Minted:
    """A credential of ``run``'s conversation at its hop count, minted in ``uow`` (a claim's),
    its label naming the run."""
    label = f"{options.label}, run {run.id}" if options.label else f"run {run.id}"
    row = await uow.credentials.add(
        run.session_id, label=label, hop_count=run.hop_count, expires_at=options.expires_at
    )
    return Minted(credential=Credential.of(row), token=token_of(key, row))


async def mint_credential(store: Store, call: MintCredential) -> Minted:
    """``credential.mint``: a new credential of ``sessionId`` and its token.

    ``expiresInSeconds`` (none: it never expires), ``label``, ``hopCount`` (the least hop count
    of the sends made with it; a worker passes its run's). The token is shown only here.

    With ``replaceLabel`` (``conversation-url --client``), the live credentials of the
    conversation with the same label are revoked in the same transaction, so minting a
    client's setup again leaves one credential for it (one without a label replaces none); the
    answer's ``revoked`` lists them.
    """
    session_id, hop_count, replace_label = call.session_id, call.hop_count, call.replace_label
    options = mint_options(call)
    async with store.read_uow() as uow:  # before the key is made: a refusal writes nothing
        await uow.sessions.require(session_id)
    key = await signing_key(store)
    async with store.uow() as uow:
        await uow.sessions.require(session_id)
        replaced: list[ConversationCredential] = []
        if replace_label and options.label is not None:
            replaced = await uow.credentials.revoke_labelled(session_id, options.label, utcnow())
        row = await uow.credentials.add(
            session_id, label=options.label, hop_count=hop_count, expires_at=options.expires_at
        )
        await uow.commit()
    if not replace_label:
        return Minted(credential=Credential.of(row), token=token_of(key, row))
    revoked = [Credential.of(old) for old in replaced]
    return Minted(credential=Credential.of(row), token=token_of(key, row), revoked=revoked)


async def list_credentials(store: Store, query: ListCredentials) -> CredentialList:
    """``credential.list``: newest first, active ones only unless ``includeInactive``."""
    session_id, include_inactive, limit = query.session_id, query.include_inactive, query.limit
    now = utcnow()
    async with store.read_uow() as uow:
        rows = await uow.credentials.list_recent(
            session_id=session_id, active_at=None if include_inactive else now, limit=limit
        )
    return CredentialList(credentials=[Credential.of(row, now=now) for row in rows])


async def revoke_credential(store: Store, call: RevokeCredential) -> Credential:
    """``credential.revoke``: the credential stops working at once; again changes nothing."""
    credential_id = call.credential_id
    async with store.uow() as uow:
        row = await uow.credentials.revoke(credential_id, utcnow())
        if row is None:
            row = await uow.credentials.get(credential_id)
            if row is None:
                raise NotFound(
                    f"conversation credential {credential_id!r} does not exist "
                    "(credential.list shows them)",
                    code=errors.CREDENTIAL_NOT_FOUND,
                )
        await uow.commit()
    return Credential.of(row)


class RedactCredentials(logging.Filter):
    """Blank out ``credential=…`` in log records (uvicorn's access log and httpx's
    request log write the query string)."""

    PATTERN = re.compile(rf"({QUERY_PARAMETER}=)[^&\s\"]*")

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(self._redacted(arg) for arg in record.args)
        if isinstance(record.msg, str):
            record.msg = self.PATTERN.sub(r"\1REDACTED", record.msg)
        return True

    def _redacted(self, arg: object) -> object:
        """``arg``, or its text with tokens blanked out (a URL object's too, as httpx logs)."""
        if isinstance(arg, int | float) or arg is None:
            return arg
        text = str(arg)
        return self.PATTERN.sub(r"\1REDACTED", text) if QUERY_PARAMETER in text else arg
