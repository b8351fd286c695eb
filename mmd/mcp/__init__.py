"""MCP servers as tools: the daemon's shared connections, and the tools they offer.

- ``errors``: what a request can end in besides an answer.
- ``pool``: :class:`McpPool`, the daemon's connections (one task each in a
  daemon nursery), reconnect with backoff, calls with their errors.
- ``stdio``: the stdio transport over the supervisor (own process group).
- ``tool``: :class:`McpTool` (names, schemas, tiers, results, error classes),
  ``make_tools`` (the allowlist) and ``admit`` (clashes).

The ``mcp:`` entries of the agent file and config.yaml are mmd.config.mcp.
The MCP SDK itself is imported only when a server is first used.
"""
