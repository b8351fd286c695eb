"""The ``bash`` tool: the one tool with a shell, by design.

It runs under the supervisor like every child: its own process group, the
session's working directory, a timeout, output streamed as echo events and
truncated for the model with the whole output kept in a spill file.
"""

from __future__ import annotations

from typing import Any

from ..base import Tool, ToolContext, ToolResult
from ..process import process_answer, run_process


class Bash(Tool):
    name = "bash"
    description = "Run a shell command in the working directory and return its output and exit code."
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The command line, run by bash -c."},
            "timeout": {
                "type": "integer",
                "minimum": 1,
                "maximum": 3600,
                "description": "Seconds before the command is stopped. Default: the daemon's tool timeout.",
            },
        },
        "required": ["command"],
    }
    tier = "write"
    turn_sandboxed = True
    example: dict[str, Any] = {"command": "ls -la"}

    def echo(self, args: dict[str, Any]) -> str:
        return f"$ {args.get('command', '')}"

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        timeout = float(args.get("timeout") or ctx.limits.timeout)
        return process_answer(await run_process(["bash", "-c", args["command"]], ctx, timeout=timeout), ctx)
