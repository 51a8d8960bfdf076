"""The ``credential.*`` calls: mint, list and revoke a conversation's credentials; and a
credential's terms, which ``run.claim`` takes too (``mintCredential``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

from ccweb_store.contract.base import (
    ConversationId,
    Input,
    Output,
    PageSize,
    Text,
    between,
    omitted,
)
from ccweb_store.contract.objects import Credential
from ccweb_store.domain.arguments import CENTURY_SECONDS, INT32_MAX

CenturySeconds = Annotated[int, AfterValidator(between(1, CENTURY_SECONDS, " (100 years)"))]


class CredentialTerms(Input):
    """A credential to mint: its lifetime (none: it never expires) and its label; also
    ``run.claim``'s ``mintCredential``."""

    expires_in_seconds: CenturySeconds | None = None
    label: str | None = None


class MintCredential(CredentialTerms):
    """``credential.mint``: a new credential of a conversation, at ``hopCount`` (the least hop
    count of the sends made with it)."""

    session_id: ConversationId
    hop_count: Annotated[int, AfterValidator(between(0, INT32_MAX))] = 0
    #: Revoke the conversation's live credentials of the same label in the same transaction:
    #: minting a client's setup again leaves one credential for it.
    replace_label: bool = False


class ListCredentials(Input):
    """``credential.list``: newest first, active ones only unless ``includeInactive``."""

    session_id: ConversationId | None = None
    include_inactive: bool = False
    limit: PageSize = 50


class RevokeCredential(Input):
    """``credential.revoke``: the credential stops working at once."""

    credential_id: Text


class Minted(Output):
    """``credential.mint``'s answer (and a claim's ``credential``): the credential, its token
    (shown only here) and, when the mint replaced a label's credentials, those it revoked."""

    credential: Credential
    token: str
    revoked: list[Credential] = omitted()


class CredentialList(Output):
    """``credential.list``'s answer: each credential active or not as of its reading."""

    credentials: list[Credential]
