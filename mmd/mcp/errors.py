"""What a request to an MCP server can end in, besides an answer: raised by the pool, read by the tools."""

from __future__ import annotations

from typing import Any

# Characters of a server's own text (an error's message, what it says is wrong with an answer) kept in what mm
# says of it: a server writes up to a 64 MiB line, and its error message went whole to the model (twice in
# the answer), the client, the session's store and the log.
MAX_MESSAGE_CHARS = 2000


def cut(text: str) -> str:
    """*text* within MAX_MESSAGE_CHARS, saying how much was cut."""
    if len(text) <= MAX_MESSAGE_CHARS:
        return text
    return f"{text[:MAX_MESSAGE_CHARS]} [… {len(text) - MAX_MESSAGE_CHARS:,} more characters cut]"


class McpUnavailable(Exception):
    """The server could not be reached; the message says why (cut at MAX_MESSAGE_CHARS)."""

    def __init__(self, message: str) -> None:
        super().__init__(cut(message))


class McpCallError(Exception):
    """A request reached no answer or an error answer.

    ``kind``: ``lost`` (the connection dropped while the request was in
    flight), ``timeout``, ``remote`` (a JSON-RPC error; ``code`` and
    ``message`` are the server's, the message cut at MAX_MESSAGE_CHARS) or
    ``invalid`` (an answer that breaks the protocol).
    """

    def __init__(self, kind: str, message: str, *, code: int | None = None, data: Any = None) -> None:
        message = cut(message)
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.code = code
        self.data = data
