"""``ccweb-store schema``: the published contract, printed without a server: the host API's
OpenRPC document (what ``rpc.discover`` answers) or the MCP tools as ``tools/list`` lists them,
each with its ``inputSchema`` and ``outputSchema``."""

from __future__ import annotations

from typing import Annotated

import typer

from ccweb_store.cli.common import fail, print_json


def schema(
    openrpc: Annotated[
        bool, typer.Option("--openrpc", help="The host API's OpenRPC document (POST /rpc)")
    ] = False,
    mcp: Annotated[
        bool, typer.Option("--mcp", help="The MCP tools, as tools/list lists them")
    ] = False,
) -> None:
    """Print the published schemas of the API as JSON: --openrpc for the host API (what
    rpc.discover answers), --mcp for the MCP tools (with their inputSchema and outputSchema).

    Example: ccweb-store schema --openrpc > ccweb-store.openrpc.json
    """
    if openrpc == mcp:
        fail("give one of --openrpc (the host API) or --mcp (the tools)")
    if openrpc:
        from ccweb_store.protocol.openrpc import document

        print_json(document())
    else:
        from ccweb_store.protocol.registry import public_tools

        print_json({"tools": public_tools()})
