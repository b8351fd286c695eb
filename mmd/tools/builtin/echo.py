"""Echo of a child's output to the user, capped so a flood never fills the store."""

from __future__ import annotations

from pathlib import Path

from ..base import ToolContext

# Echoed bytes per tool call; the rest is in the spill file.
ECHO_LIMIT = 256 * 1024


class EchoLimiter:
    """``on_output`` callback that emits tool_output events up to ECHO_LIMIT."""

    def __init__(self, ctx: ToolContext, spill: Path, limit: int = ECHO_LIMIT) -> None:
        self.ctx = ctx
        self.spill = spill
        self.left = limit

    def __call__(self, stream: str, text: str) -> None:
        if self.left <= 0:
            return
        if len(text) >= self.left:
            text = text[: self.left] + f"\n[echo stopped here; the whole output is in {self.spill}]\n"
            self.left = 0
        else:
            self.left -= len(text)
        self.ctx.emit("tool_output", {"call_id": self.ctx.call_id, "stream": stream, "text": text})
