"""The ``bash`` tool: the one tool with a shell, by design.

It runs under the supervisor like every child: its own process group, the
session's working directory, a timeout, output streamed as echo events and
truncated for the model with the whole output kept in a spill file.
"""

from __future__ import annotations

import signal
from typing import Any

from ...procs import run_tool_process
from ..base import ToolContext, ToolResult
from .echo import EchoLimiter


class Bash:
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
    example: dict[str, Any] = {"command": "ls -la"}
    source = "builtin"

    def echo(self, args: dict[str, Any]) -> str:
        return f"$ {args.get('command', '')}"

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        ctx.session_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        spill = ctx.session_dir / f"output-{ctx.call_id}.log"
        echo = EchoLimiter(ctx, spill)
        result = await run_tool_process(
            ["bash", "-c", args["command"]],
            cwd=ctx.cwd,
            env=ctx.env(),
            spill_path=spill,
            on_output=echo,
            timeout=float(args.get("timeout") or ctx.limits.timeout),
            grace=ctx.limits.grace,
            max_bytes=ctx.limits.max_bytes,
            max_lines=ctx.limits.max_lines,
            pass_env=ctx.pass_env,
        )
        return process_answer(result)


def process_answer(result: Any) -> ToolResult:
    """What the model reads of a finished process: its output, then how it ended."""
    data: dict[str, Any] = {
        "exit_code": result.exit_code,
        "signal": result.signal,
        "timed_out": result.timed_out,
        "duration": round(result.duration, 3),
    }
    if result.spill_path:
        data["output_file"] = result.spill_path
    if result.spawn_error:
        data["error"] = result.spawn_error
        return ToolResult(ok=False, content=result.spawn_error, data=data)
    if result.timed_out:
        status = f"[timed out after {result.duration:.0f} s; the process group was stopped]"
    elif result.signal:
        status = f"[killed by signal {signal.Signals(result.signal).name}]"
    else:
        status = f"[exit code {result.exit_code}]"
    body = result.output if result.output.endswith("\n") or not result.output else result.output + "\n"
    ok = result.exit_code == 0 and not result.timed_out
    return ToolResult(ok=ok, content=f"{body}{status}", data=data)
