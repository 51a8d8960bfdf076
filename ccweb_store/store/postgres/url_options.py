"""The libpq parameters a PostgreSQL URL may carry, as asyncpg's connect arguments.

Managed PostgreSQL services hand out URLs such as ``…/db?sslmode=require``. SQLAlchemy's
asyncpg dialect passes every query parameter to ``asyncpg.connect`` as a keyword, which knows
none of libpq's names, so they are taken off the URL here and given through the engine's
``connect_args`` instead: ``sslmode`` as asyncpg's ``ssl`` (the same six modes, or an
``ssl.SSLContext`` that trusts ``sslrootcert``), ``application_name`` as a server setting.
Any other parameter, and a port outside 1-65535, is refused (``UnusableUrl``) before
anything connects.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL

#: libpq's ``sslmode`` values, which asyncpg's ``ssl`` takes as they are.
SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
#: The modes that check the server's certificate against ``sslrootcert`` (``require`` with a
#: root certificate checks it too, as libpq's does).
CHECKING_MODES = ("require", "verify-ca", "verify-full")
#: The query parameters a PostgreSQL URL may carry.
UNDERSTOOD = ("sslmode", "sslrootcert", "application_name")


class UnusableUrl(ValueError):
    """A PostgreSQL URL ccweb-store cannot connect with; the message says why and what to do."""


def connect_options(url: URL) -> tuple[URL, dict[str, Any]]:
    """``url`` without its query parameters, and the ``connect_args`` they stand for;
    ``UnusableUrl`` for a parameter not in ``UNDERSTOOD``, a bad value or a bad port."""
    if url.port is not None and not 1 <= url.port <= 65535:
        raise UnusableUrl(f"the port {url.port} is not a port: use a number from 1 to 65535")
    query: dict[str, str] = {}
    for name, value in url.query.items():
        if name not in UNDERSTOOD:
            raise UnusableUrl(
                f"the parameter {name!r} is not one ccweb-store understands: a PostgreSQL URL "
                f"may carry only {', '.join(UNDERSTOOD)} (docs/database.md)"
            )
        if not isinstance(value, str):
            raise UnusableUrl(f"the parameter {name!r} is given {len(value)} times: give it once")
        query[name] = value
    arguments: dict[str, Any] = {}
    mode = query.get("sslmode")
    if mode is not None and mode not in SSL_MODES:
        raise UnusableUrl(f"sslmode={mode!r} is not a mode: use one of {', '.join(SSL_MODES)}")
    root = query.get("sslrootcert")
    if root is not None:
        arguments["ssl"] = _trusting(root, mode)
    elif mode is not None:
        arguments["ssl"] = mode
    if "application_name" in query:
        arguments["server_settings"] = {"application_name": query["application_name"]}
    return url.set(query={}), arguments


def _trusting(root: str, mode: str | None) -> ssl.SSLContext:
    """A TLS context that trusts the certificates in the file ``root``: the server's host
    name is checked too under ``verify-full``."""
    if mode not in CHECKING_MODES:
        raise UnusableUrl(
            "sslrootcert is used to check the server's certificate: add "
            "sslmode=verify-full (or verify-ca, or require) to the URL"
        )
    path = Path(root).expanduser()
    if not path.is_file():
        raise UnusableUrl(f"sslrootcert={root!r}: no such file: name the server's CA file")
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(path))
    except (ssl.SSLError, ValueError) as error:
        raise UnusableUrl(
            f"sslrootcert={root!r} holds no certificate ccweb-store can read ({error}): name "
            "the server's CA file in PEM form"
        ) from None
    context.check_hostname = mode == "verify-full"
    return context
