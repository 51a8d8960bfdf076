"""The wire contract of both APIs, MCP's tools and the host's ``/rpc``: per call, one pydantic
model of what comes in (``base.Input``) and one of what goes out (``base.Output``), by area
(``sessions``, ``messages``, ``runs``, ``replies``, ``credentials``, ``events``, ``prompts``,
``operator``, ``tools``) and the objects they share (``objects``). The registry that pairs
each with its handler is ``protocol.registry``; the published schemas (MCP's ``inputSchema``
and ``outputSchema``, the host API's OpenRPC document) are generated from these models."""
