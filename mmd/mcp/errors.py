"""What a request to an MCP server can end in, besides an answer: raised by the pool, read by the tools."""

from __future__ import annotations

from typing import Any


class McpUnavailable(Exception):
    """The server could not be reached; the message says why."""


class McpCallError(Exception):
    """A request reached no answer or an error answer.

    ``kind``: ``lost`` (the connection dropped while the request was in
    flight), ``timeout``, ``remote`` (a JSON-RPC error; ``code`` and
    ``message`` are the server's) or ``invalid`` (an answer that breaks the
    protocol).
    """

    def __init__(self, kind: str, message: str, *, code: int | None = None, data: Any = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.code = code
        self.data = data
