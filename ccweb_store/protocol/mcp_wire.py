"""MCP's protocol versions and its HTTP routing headers, as plain values: which revision a
message announces, and how a header carries a value. No tool, store or server here, so the
stdio bridge (``stdio_bridge``) starts without loading them."""

from __future__ import annotations

import base64
import binascii

LEGACY_VERSIONS = ("2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS = ("2026-07-28",)
#: Newest first, as ``server/discover`` and the unsupported-version error name them.
SUPPORTED_VERSIONS = (*reversed(MODERN_VERSIONS), *reversed(LEGACY_VERSIONS))
LATEST_LEGACY_VERSION = LEGACY_VERSIONS[-1]
#: The one revision whose HTTP POST may carry a JSON-RPC batch (2025-06-18 removed them).
BATCH_VERSION = "2025-03-26"

PROTOCOL_VERSION_HEADER = "mcp-protocol-version"
METHOD_HEADER = "mcp-method"
NAME_HEADER = "mcp-name"
ROUTING_HEADERS = (PROTOCOL_VERSION_HEADER, METHOD_HEADER, NAME_HEADER)
#: The body parameter that ``Mcp-Name`` mirrors, for the methods that have one.
NAMED_PARAMS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}

PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"


def is_modern(message: object, header_version: str | None) -> bool:
    """Whether ``message`` is a 2026-07-28 one: its header or its ``params._meta`` says so."""
    if header_version in MODERN_VERSIONS:
        return True
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and PROTOCOL_VERSION_KEY in meta


BASE64_PREFIX, BASE64_SUFFIX = "=?base64?", "?="


def is_header_safe(value: str) -> bool:
    """Whether ``value`` is visible ASCII, spaces and tabs only, as a header value must be."""
    return all(char == "\t" or " " <= char <= "~" for char in value)


def encode_header_value(value: str) -> str:
    """``value`` as a routing header carries it: as is when it is plain ASCII without edge
    whitespace, else in the ``=?base64?…?=`` form of the UTF-8 bytes."""
    plain = (
        is_header_safe(value)
        and value == value.strip(" \t")
        and not (value.startswith(BASE64_PREFIX) and value.endswith(BASE64_SUFFIX))
    )
    if plain:
        return value
    return BASE64_PREFIX + base64.b64encode(value.encode()).decode("ascii") + BASE64_SUFFIX


def decode_header_value(value: str) -> str | None:
    """The text a routing header carries (``=?base64?…?=`` decoded); ``None`` if malformed."""
    if not (value.startswith(BASE64_PREFIX) and value.endswith(BASE64_SUFFIX)):
        return value
    encoded = value[len(BASE64_PREFIX) : -len(BASE64_SUFFIX)]
    try:
        return base64.b64decode(encoded, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
