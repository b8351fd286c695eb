"""Declared tools: a ``tools:`` entry of the agent file run as one argv command, no shell.

The command is a list. argv[0] is literal. A value replaces its
``{{placeholder}}`` inside one entry, so it can never add an argument, chain
a command or redirect output: ``1.4.2; rm -rf ~`` reaches the program as one
odd version string. An array parameter that fills a whole entry becomes one
entry per item. An optional parameter left out removes every entry that
mentions it. Two values are refused rather than passed: a NUL byte (argv
cannot carry it) and a string starting with ``-`` that would begin an entry
(the program could read it as an option) unless the parameter says
``allow_dash: true``.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from ..config.tools import PLACEHOLDER, DeclaredToolSpec, ParamSpec, VerifySpec
from ..procs import run_tool_process
from .base import ToolContext, ToolError, ToolResult
from .builtin.bash import process_answer
from .builtin.echo import EchoLimiter

# Default timeout by cost class when the tool names none; "seconds" uses the daemon's.
COST_TIMEOUT = {"fast": 30.0, "minutes": 1800.0}
# Keys of the partial-success line a tool may print last.
PARTIAL_KEYS = frozenset({"done", "failed", "resume"})


def parameters_schema(spec: DeclaredToolSpec) -> dict[str, Any]:
    """The full JSON Schema of a declared tool's arguments (before rendering for the model)."""
    props: dict[str, Any] = {}
    for name, p in spec.parameters.items():
        prop: dict[str, Any] = (
            {"type": "array", "items": {"type": "string"}} if p.type == "array" else {"type": p.type}
        )
        for key in ("description", "enum", "pattern", "minimum", "maximum", "default"):
            value = getattr(p, key)
            if value is not None:
                prop[key] = value
        props[name] = prop
    return {
        "type": "object",
        "properties": props,
        "required": [name for name, p in spec.parameters.items() if p.required],
        "additionalProperties": False,
    }


def render_value(value: Any) -> str:
    """How a validated value is written into argv: JSON's spelling for booleans and numbers."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    return str(value)


def _checked(name: str, spec: ParamSpec, text: str, *, at_start: bool) -> str:
    if "\0" in text:
        raise ToolError(
            "nul_byte",
            f"{name} contains a NUL byte, which a command-line argument cannot carry.",
            field=name,
            fix=f"Send {name} without the NUL character.",
        )
    if at_start and text.startswith("-") and not spec.allow_dash and spec.type in ("string", "array"):
        raise ToolError(
            "leading_dash",
            f"{name} starts with '-' ({text!r}) and would begin an argument, so the program could read it "
            "as an option.",
            field=name,
            fix=f"Send {name} without the leading '-'.",
        )
    return text


def build_argv(template: list[str], params: dict[str, ParamSpec], args: dict[str, Any]) -> list[str]:
    """The argv for validated *args*: one entry per template entry, arrays expanded.

    Errors:
        ToolError: a value with a NUL byte, or a leading "-" at the start of an entry.
    """
    argv: list[str] = []
    for entry in template:
        names = PLACEHOLDER.findall(entry)
        if not names:
            argv.append(entry)
            continue
        if any(args.get(name) is None for name in names):
            continue  # an optional parameter left out removes its entry
        if PLACEHOLDER.fullmatch(entry) and params[names[0]].type == "array":
            argv += [
                _checked(names[0], params[names[0]], str(item), at_start=True) for item in args[names[0]]
            ]
            continue
        first = PLACEHOLDER.match(entry)  # the value that begins the entry, if one does
        texts = {
            name: _checked(
                name, params[name], render_value(args[name]), at_start=bool(first) and name == first[1]
            )
            for name in names
        }
        argv.append(PLACEHOLDER.sub(lambda m, texts=texts: texts[m[1]], entry))
    return argv


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
        data = json.loads(lines[-1])
    except ValueError:
        return None
    if isinstance(data, dict) and data and set(data) <= PARTIAL_KEYS and ("done" in data or "failed" in data):
        return data
    return None


class DeclaredTool:
    source = "declared"
    idempotent = True  # a repeated call in a session replays the stored first result

    def __init__(self, spec: DeclaredToolSpec, base_dir: Path) -> None:
        self.spec = spec
        self.name = spec.name
        self.description = spec.description
        self.parameters = parameters_schema(spec)
        self.tier = spec.effects
        # None when the file gives none: the model is never shown "Example: {}".
        self.example: dict[str, Any] | None = spec.example
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
        assert self.spec.dry_run is not None
        return await self._exec(self._program(build_argv(self.spec.dry_run, self.spec.parameters, args)), ctx)

    async def _exec(self, argv: list[str], ctx: ToolContext) -> ToolResult:
        ctx.session_dir.mkdir(parents=True, exist_ok=True)
        spill = ctx.session_dir / f"output-{ctx.call_id}.log"
        timeout = self.spec.timeout or COST_TIMEOUT.get(self.spec.cost, ctx.limits.timeout)
        result = await run_tool_process(
            argv,
            cwd=self.cwd or ctx.cwd,
            env={**self.spec.env, **ctx.env()},
            spill_path=spill,
            on_output=EchoLimiter(ctx, spill),
            timeout=timeout,
            grace=ctx.limits.grace,
            max_bytes=ctx.limits.max_bytes,
            max_lines=ctx.limits.max_lines,
        )
        answer = process_answer(result)
        partial = partial_success(result.output)
        if partial is not None and answer.data is not None:
            answer.data["partial"] = partial
        return answer


def declared_tools(specs: list[DeclaredToolSpec], base_dir: Path) -> list[DeclaredTool]:
    return [DeclaredTool(spec, base_dir) for spec in specs]
