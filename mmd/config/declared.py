"""``tools:`` entries of the agent file: declared tools, one argv command each.

A declared tool turns one command into a typed tool with no shell: the
command is a list. argv[0] is literal. A value replaces its
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

This module declares the entries and computes what a call becomes (its
argv, its arguments' schema): pure functions, used by the load-time checks
(:mod:`mmd.config.declared_check`) and by the tool itself
(:mod:`mmd.tools.declared`).
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

import msgspec

from ..contract import ToolError

# {{name}}, spaces inside the braces allowed.
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
# Names the model can call: what every provider accepts.
_TOOL_NAME = r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"
# Most declared tools in one agent file: OpenAI accepts 128 tools in a request and a model
# chooses worse among many, so 256 is never reached by a real agent; checked before the
# tools are built, it keeps loading a hostile file short.
MAX_TOOLS = 256

ParamType = Literal["string", "integer", "number", "boolean", "array"]
Effects = Literal["read", "write", "destructive"]
Cost = Literal["fast", "seconds", "minutes"]


class ParamSpec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    type: ParamType = "string"  # "array" is an array of strings
    description: str | None = None
    required: bool = False
    enum: list[str | int | float] | None = None
    pattern: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    default: Any = None
    # A value that starts with "-" may fill a whole argv entry (else refused:
    # it could be read as an option by the program).
    allow_dash: bool = False


class VerifySpec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    tool: str
    # String values may hold {{param}} placeholders filled from the write's arguments.
    args: dict[str, Any] = {}


class DeclaredToolSpec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    name: Annotated[str, msgspec.Meta(pattern=_TOOL_NAME, description="a tool name: letters, digits, _ or -")]
    description: Annotated[str, msgspec.Meta(description="a one-line purpose")]
    command: Annotated[
        list[str], msgspec.Meta(min_length=1, description='an argv list like ["./release.sh", "{{version}}"]')
    ]
    parameters: dict[str, ParamSpec] = {}
    example: dict[str, Any] | None = None
    effects: Effects = "write"
    verify: VerifySpec | None = None
    timeout: Annotated[float, msgspec.Meta(gt=0)] | None = None
    cwd: str | None = None  # relative to the agent file's folder; default: the session's directory
    env: dict[str, str] = {}
    cost: Cost = "seconds"
    prerequisite: str | None = None  # a call the model should make first, said in the description
    dry_run: list[str] | None = None  # an argv that shows what the command would do, offered by the ask


def placeholders(entry: str) -> list[str]:
    return PLACEHOLDER.findall(entry)


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
