"""Declared tools: a ``tools:`` entry of the agent file run as one argv command, no shell.

The command is a list. argv[0] is literal. A value replaces its
``{{placeholder}}`` inside one entry, so it can never add an argument, chain
a command or redirect output: ``1.4.2; rm -rf ~`` reaches the program as one
odd version string. An array parameter that fills a whole entry becomes one
entry per item. An optional parameter left out removes every entry that
mentions it. Two values are refused rather than passed: a NUL byte (argv
cannot carry it) and a value that would make an argument start with ``-``
(the program could read it as an option): checked on the argument as built,
so an empty value before it or another value after it counts too. A value of
a parameter with ``allow_dash: true``, or a number, may begin an argument
alone.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from ..config.declared import PLACEHOLDER, DeclaredToolSpec, ParamSpec, VerifySpec
from ..procs import run_tool_process
from ..untrusted import MAX_ARGUMENTS_BYTES, MAX_DEPTH, check_json
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


def _no_nul(name: str, text: str) -> str:
    if "\0" in text:
        raise ToolError(
            "nul_byte",
            f"{name} contains a NUL byte, which a command-line argument cannot carry.",
            field=name,
            fix=f"Send {name} without the NUL character.",
        )
    return text


def _dash_exempt(spec: ParamSpec) -> bool:
    # allow_dash: the author wants such values; a number is validated, "-3" is its value.
    return spec.allow_dash or spec.type in ("integer", "number")


def _leading_dash(name: str, reason: str, fix: str) -> ToolError:
    return ToolError("leading_dash", reason, field=name, fix=fix)


def _check_dash(pieces: list[tuple[str | None, str]], params: dict[str, ParamSpec], built: str) -> None:
    """Refuse an argument that starts with "-" unless the author meant it to.

    *pieces* are the entry's parts in order: (None, literal text) or (parameter, its value).
    The argument may start with "-" when the template entry itself starts with a literal
    "-" (the author's option), or when the value that begins it is exempt (allow_dash, a
    number) and no other value follows it in the argument (it would join the option:
    "-v" then "rf" is "-vrf"). Otherwise the parameter that made it so is named: the
    value that begins it, or the empty values that left a literal "-" at its start.
    """
    first = next(i for i, (_, text) in enumerate(pieces) if text)
    name, text = pieces[first]
    empty = [n for n, _ in pieces[:first] if n is not None]  # every piece before is an empty value
    shown = built if len(built) <= 60 else built[:57] + "..."
    if name is None:
        if not empty:
            return  # the template's own option, like --channel={{channel}}
        names = " and ".join(empty)
        raise _leading_dash(
            empty[0],
            f"{names} {'is' if len(empty) == 1 else 'are'} empty, so the argument begins with the "
            f"literal text {text[:20]!r} and would be {shown!r}, which the program could read as an option.",
            f"Give {empty[0]} a value that does not start with '-'.",
        )
    following = [n for n, t in pieces[first + 1 :] if n is not None and n != name and t]
    if _dash_exempt(params[name]) and not following:
        return
    before = f" ({' and '.join(empty)} empty before it)" if empty else ""
    if _dash_exempt(params[name]):
        raise _leading_dash(
            following[0],
            f"{name} ({text!r}) begins the argument and {following[0]} follows it in the same argument, "
            f"which would be {shown!r}: the program could read {following[0]}'s text as part of an option.",
            f"Send {following[0]} empty, or {name} without a leading '-'.",
        )
    raise _leading_dash(
        name,
        f"{name} starts with '-' ({text!r}) and would begin the argument {shown!r}{before}, so the "
        "program could read it as an option.",
        f"Send {name} without the leading '-'"
        + (f", or give {empty[0]} a value so that {name} does not begin the argument." if empty else "."),
    )


def build_argv(template: list[str], params: dict[str, ParamSpec], args: dict[str, Any]) -> list[str]:
    """The argv for validated *args*: one entry per template entry, arrays expanded.

    The leading-dash rule applies to each argument as it is finally built, not to one
    placeholder: with ``{{d}}{{e}}`` and d empty, e's "-rf" would begin it (see _check_dash).

    Errors:
        ToolError: a value with a NUL byte, or an argument that would start with "-" because
        of a value (code ``leading_dash``, naming the parameter).
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
            for item in args[names[0]]:
                text = _no_nul(names[0], str(item))
                if text.startswith("-"):
                    _check_dash([(names[0], text)], params, text)
                argv.append(text)
            continue
        # PLACEHOLDER.split gives literal, name, literal, name, ..., literal.
        parts = PLACEHOLDER.split(entry)
        pieces: list[tuple[str | None, str]] = [
            (part, _no_nul(part, render_value(args[part]))) if i % 2 else (None, part)
            for i, part in enumerate(parts)
            if i % 2 or part
        ]
        built = "".join(text for _, text in pieces)
        if built.startswith("-"):
            _check_dash(pieces, params, built)
        argv.append(built)
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
        # Deeper than a tool's answer nests, or bigger: not this line (and json.loads would recurse).
        check_json(lines[-1], max_depth=MAX_DEPTH, max_bytes=MAX_ARGUMENTS_BYTES)
        data = json.loads(lines[-1])
    except ValueError:  # not JSON, TooDeep, TooLarge
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
        ctx.session_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
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
            pass_env=ctx.pass_env,
        )
        answer = process_answer(result)
        partial = partial_success(result.output)
        if partial is not None and answer.data is not None:
            answer.data["partial"] = partial
        return answer


def declared_tools(specs: list[DeclaredToolSpec], base_dir: Path) -> list[DeclaredTool]:
    return [DeclaredTool(spec, base_dir) for spec in specs]
