"""Declared tools: a ``tools:`` entry of the agent file run as one argv command, no shell.

What a call becomes (its argv, with the placeholder and leading-dash rules,
and its arguments' schema) is computed by :mod:`mmd.config.declared`, which
the agent file's load-time checks use too; this module runs it under the
supervisor (:mod:`mmd.tools.process`) and reads a partial-success line.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from ..config.declared import (
    PLACEHOLDER,
    DeclaredToolSpec,
    VerifySpec,
    build_argv,
    parameters_schema,
    render_value,
)
from ..untrusted import MAX_ARGUMENTS_BYTES, MAX_DEPTH, check_json
from .base import Tool, ToolContext, ToolError, ToolResult
from .process import process_answer, run_process

# Default timeout by cost class when the tool names none; "seconds" uses the daemon's.
COST_TIMEOUT = {"fast": 30.0, "minutes": 1800.0}
# Keys of the partial-success line a tool may print last.
PARTIAL_KEYS = frozenset({"done", "failed", "resume"})


def fill_verify_args(verify: VerifySpec, args: dict[str, Any]) -> dict[str, Any]:
    """The verify call's arguments, with {{param}} in string values taken from the write's arguments."""

    def fill(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        whole = PLACEHOLDER.fullmatch(value)
        if whole:  # keep the type of a value that is one placeholder
            return args.get(whole[1])
        return PLACEHOLDER.sub(lambda m: render_value(args.get(m[1], "")), value)

    return {key: fill(value) for key, value in verify.args.items()}


def partial_success(output: str) -> dict[str, Any] | None:
    """The ``{"done": [...], "failed": [...], "resume": ...}`` line a tool printed last, if any."""
    lines = output.rstrip().splitlines()
    if not lines:
        return None
    try:
        # Deeper than a tool's answer nests, or bigger: not this line (and json.loads would recurse).
        check_json(lines[-1], max_depth=MAX_DEPTH, max_bytes=MAX_ARGUMENTS_BYTES)
        data = json.loads(lines[-1])
    except ValueError:  # not JSON, TooDeep, TooLarge
        return None
    if isinstance(data, dict) and data and set(data) <= PARTIAL_KEYS and ("done" in data or "failed" in data):
        return data
    return None


class DeclaredTool(Tool):
    source = "declared"
    idempotent = True  # a repeated call in a session replays the stored first result
    turn_sandboxed = True  # its command and its dry run run under the turn's sandbox

    def __init__(self, spec: DeclaredToolSpec, base_dir: Path) -> None:
        self.spec = spec
        self.name = spec.name
        self.description = spec.description
        self.parameters = parameters_schema(spec)
        self.tier = spec.effects
        # None when the file gives none: the model is never shown "Example: {}".
        self.example = spec.example
        self.prerequisite = spec.prerequisite
        self.verify = spec.verify
        self.has_dry_run = spec.dry_run is not None
        self.cwd = (base_dir / spec.cwd) if spec.cwd else None
        self.base_dir = base_dir

    def argv(self, args: dict[str, Any]) -> list[str]:
        return self._program(build_argv(self.spec.command, self.spec.parameters, args))

    def _program(self, argv: list[str]) -> list[str]:
        # A relative program path is relative to the agent file, like every path in it;
        # a bare name is looked up in PATH.
        program = argv[0]
        if "/" in program and not Path(program).is_absolute():
            program = str((self.base_dir / program).resolve())
        return [program, *argv[1:]]

    def echo(self, args: dict[str, Any]) -> str:
        try:
            return shlex.join(build_argv(self.spec.command, self.spec.parameters, args))
        except ToolError:
            return f"{self.name} {json.dumps(args)}"

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await self._exec(self.argv(args), ctx)

    async def dry_run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if self.spec.dry_run is None:
            return await super().dry_run(args, ctx)
        return await self._exec(self._program(build_argv(self.spec.dry_run, self.spec.parameters, args)), ctx)

    async def _exec(self, argv: list[str], ctx: ToolContext) -> ToolResult:
        timeout = self.spec.timeout or COST_TIMEOUT.get(self.spec.cost, ctx.limits.timeout)
        result = await run_process(argv, ctx, timeout=timeout, cwd=self.cwd, env=self.spec.env)
        answer = process_answer(result, ctx)
        partial = partial_success(result.output)
        if partial is not None and answer.data is not None:
            answer.data["partial"] = partial
        return answer


def declared_tools(specs: list[DeclaredToolSpec], base_dir: Path) -> list[DeclaredTool]:
    return [DeclaredTool(spec, base_dir) for spec in specs]
