"""The host API's OpenRPC document: every ``/rpc`` method of the registry with its params and
result schemas, generated from the same models that validate and answer the calls. Served by
``rpc.discover`` and printed by ``ccweb-store schema --openrpc``; cc-web's Node server (or any
client generator) reads it."""

from __future__ import annotations

import functools
import re
from typing import Any

from ccweb_store import __version__
from ccweb_store.protocol.operation import Operation
from ccweb_store.protocol.registry import METHODS

#: The method that answers the document (reserved by the OpenRPC specification).
DISCOVER = "rpc.discover"
OPENRPC_VERSION = "1.3.2"


def _method(operation: Operation) -> dict[str, Any]:
    schema = operation.input_schema
    required = set(schema.get("required", ()))
    params = [
        {"name": name, "required": name in required, "schema": property_schema}
        for name, property_schema in schema.get("properties", {}).items()
    ]
    summary = " ".join((operation.input.__doc__ or "").strip().split("\n\n", 1)[0].split())
    summary = re.sub(r"^``[^`]+``: ", "", summary).replace("``", "`")
    return {
        "name": operation.name,
        "summary": summary[:1].upper() + summary[1:],
        "paramStructure": "by-name",
        "params": params,
        "result": {"name": "result", "schema": operation.output_schema},
    }


@functools.cache
def document() -> dict[str, Any]:
    """The OpenRPC document of the host API, made once."""
    discover = {
        "name": DISCOVER,
        "summary": "This document.",
        "paramStructure": "by-name",
        "params": [],
        "result": {"name": "document", "schema": {"type": "object"}},
    }
    return {
        "openrpc": OPENRPC_VERSION,
        "info": {
            "title": "ccweb-store host API",
            "version": __version__,
            "description": "JSON-RPC 2.0 over POST /rpc. A domain error is code -32000 with "
            "data.code naming it (docs/errors.md).",
        },
        "methods": [*(_method(operation) for operation in METHODS.values()), discover],
    }
