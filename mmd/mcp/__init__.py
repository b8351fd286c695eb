"""MCP servers as tools: configuration, the daemon's shared connections, and the tools.

- ``config``: the ``mcp:`` entries of the agent file and config.yaml, their
  checks, merging, ``${VAR}`` expansion and connection keys. No SDK, no trio.
- ``pool``: :class:`McpPool`, the daemon's connections (one task each in a
  daemon nursery), reconnect with backoff, calls with their errors.
- ``stdio``: the stdio transport over the supervisor (own process group).
- ``tool``: :class:`McpTool` (names, schemas, tiers, results, error classes),
  ``make_tools`` (the allowlist) and ``admit`` (clashes).

The MCP SDK itself is imported only when a server is first used.
"""
