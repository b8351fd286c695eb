"""The load-time checks of the agent file's ``tools:`` entries (mmd/config/declared.py).

They run when the file is loaded, so a mistake in the template is an error
with its line, not a surprise when the model first calls the tool.
"""

from __future__ import annotations

import re
from typing import Any

from ..contract import InvalidArguments, ToolError, schema_pattern, validate
from .declared import (
    MAX_TOOLS,
    PLACEHOLDER,
    DeclaredToolSpec,
    ParamSpec,
    build_argv,
    parameters_schema,
    placeholders,
)
from .loader import Document, did_you_mean


def check_tool_count(doc: Document) -> None:
    """Refuse more than MAX_TOOLS entries under ``tools:``, before they are checked one by one.

    Errors: ConfigError at the line of the first tool past the limit.
    """
    hint = "keep the tools this agent needs and put the others in another agent file (--agent FILE)"
    doc.refuse_past("tools", MAX_TOOLS, "tools declared", hint)


def check_tools(doc: Document, tools: list[DeclaredToolSpec], reserved: tuple[str, ...]) -> None:
    """The load-time checks of declared tools, each error with its line.

    Errors:
        ConfigError: a placeholder not declared, a parameter never used, a
        placeholder in argv[0], a name taken by a built-in (reserved even when
        that built-in is off), a duplicate name, an invalid regex or one too
        complex (mmd/patterns.py), an example or default that does not fit its
        parameters or whose pattern check passed its deadline, an example whose argv
        would be refused, an ``allow_dash`` placeholder that may begin an
        entry another placeholder follows, a verify tool that is not a
        declared read tool.
    """
    seen: dict[str, int] = {}
    for index, tool in enumerate(tools):
        at = ("tools", index)
        if tool.name in reserved:
            raise doc.error(
                (*at, "name"),
                problem=f'"{tool.name}" is the name of a built-in tool (reserved even when that built-in is off)',
                hint="choose another name",
            )
        if tool.name in seen:
            raise doc.error(
                (*at, "name"),
                problem=f'"{tool.name}" is declared twice; the first is tools[{seen[tool.name]}]',
                hint="give each tool its own name",
            )
        seen[tool.name] = index
        _check_command(doc, at, tool)
        _check_params(doc, at, tool)
    for index, tool in enumerate(tools):
        if tool.verify is not None:
            _check_verify(doc, ("tools", index, "verify"), tool, tools)


def _check_command(doc: Document, at: tuple[Any, ...], tool: DeclaredToolSpec) -> None:
    for key, argv in (("command", tool.command), ("dry_run", tool.dry_run)):
        if argv is None:
            continue
        if not argv:
            raise doc.error((*at, key), problem="empty", expected="an argv list with the program first")
        if PLACEHOLDER.search(argv[0]):
            raise doc.error(
                (*at, key, 0),
                problem="the program must be literal: a placeholder in argv[0] would let the model choose what runs",
                hint="move the placeholder to a later entry",
            )
        for pos, entry in enumerate(argv):
            for name in placeholders(entry):
                if name not in tool.parameters:
                    hint = did_you_mean(name, tool.parameters) or "declare it under parameters"
                    raise doc.error(
                        (*at, key, pos),
                        problem=f"placeholder {{{{{name}}}}} is not a declared parameter",
                        hint=hint,
                    )
                spec = tool.parameters[name]
                if spec.type == "array" and PLACEHOLDER.fullmatch(entry) is None:
                    raise doc.error(
                        (*at, key, pos),
                        problem=f"array parameter {name} must fill a whole entry",
                        hint=f'write "{{{{{name}}}}}" as its own entry: it becomes one argv entry per item',
                    )
            _check_dash_join(doc, (*at, key, pos), entry, tool.parameters)
    used = {name for entry in tool.command for name in placeholders(entry)}
    for name in tool.parameters:
        if name not in used:
            raise doc.error(
                (*at, "parameters", name),
                problem="declared but never used in command",
                hint=f"add {{{{{name}}}}} to an entry of command, or remove the parameter",
            )


def _check_dash_join(doc: Document, where: tuple[Any, ...], entry: str, params: dict[str, ParamSpec]) -> None:
    # A parameter with allow_dash may begin an argument with "-"; a value after it in the
    # same entry would join its option ("-v" then "rf" is "-vrf", past the enum or pattern
    # that held "-v"). Every such value is refused when the tool runs, so the entry can
    # never work as written: say so now. A string value may be empty, so a placeholder
    # after only string placeholders may begin the entry too.
    parts = PLACEHOLDER.split(entry)  # literal, name, literal, name, ..., literal
    can_begin = True
    for i, part in enumerate(parts):
        if i % 2 == 0:
            can_begin = can_begin and not part
            continue
        spec = params.get(part)
        if spec is None:
            return  # reported as an undeclared placeholder
        # A placeholder also before it is empty whenever it begins the entry: it joins nothing.
        earlier = parts[1:i:2]
        later = [p for p in parts[i + 2 :: 2] if p != part and p not in earlier]
        if can_begin and spec.allow_dash and later:
            raise doc.error(
                where,
                problem=f"{{{{{part}}}}} has allow_dash and may begin this entry, and {{{{{later[0]}}}}} "
                f"follows it: {later[0]}'s value would join {part}'s option (-v then rf makes -vrf), so "
                f"every call with a value of {part} starting with '-' would be refused",
                hint=f'put "{{{{{part}}}}}" in an entry of its own, or a literal before it',
            )
        can_begin = can_begin and spec.type == "string"


def _check_params(doc: Document, at: tuple[Any, ...], tool: DeclaredToolSpec) -> None:
    for name, spec in tool.parameters.items():
        where = (*at, "parameters", name)
        if spec.pattern is not None:
            try:
                schema_pattern(spec.pattern)  # as the contract runs it, within mmd.patterns' limits
            except re.error as exc:
                raise doc.error((*where, "pattern"), problem=f"invalid regular expression: {exc}") from None
        if spec.type == "array" and spec.enum is not None:
            raise doc.error((*where, "enum"), problem="enum applies to single values, not to arrays")
        if spec.required and spec.default is not None:
            raise doc.error(
                (*where, "default"), problem="a required parameter has no default", hint="remove one of them"
            )
    schema = parameters_schema(tool)
    for key, value in (("example", tool.example),):
        if value is not None:
            _fits(doc, (*at, key), schema, value)
            _builds(doc, (*at, key), tool, validate(schema, value))
    for name, spec in tool.parameters.items():
        if spec.default is not None:
            single = {"type": "object", "properties": {name: schema["properties"][name]}}
            _fits(doc, (*at, "parameters", name, "default"), single, {name: spec.default})


def _fits(doc: Document, where: tuple[Any, ...], schema: dict[str, Any], value: Any) -> None:
    if not isinstance(value, dict):
        raise doc.error(where, expected="a map of parameter values", found=type(value).__name__)
    try:
        validate(schema, value)
    except ToolError as err:
        problems = err.problems if isinstance(err, InvalidArguments) else []
        slow = any(p.code == "pattern_timeout" for p in problems)  # the pattern backtracks on this value
        hint = "simplify the pattern: a repeat inside a repeat, such as (a+)+ or (a|a)*, can take forever"
        raise doc.error(
            where, problem=f"does not fit the parameters: {err.reason}", hint=hint if slow else None
        ) from None


def _builds(doc: Document, where: tuple[Any, ...], tool: DeclaredToolSpec, args: dict[str, Any]) -> None:
    # The model copies the example: one that the argv rules refuse would teach it a refused call.
    for argv in (tool.command, tool.dry_run or []):
        try:
            build_argv(argv, tool.parameters, args)
        except ToolError as err:
            raise doc.error(where, problem=f"would be refused when the tool runs: {err.reason}") from None


def _check_verify(
    doc: Document, at: tuple[Any, ...], tool: DeclaredToolSpec, tools: list[DeclaredToolSpec]
) -> None:
    assert tool.verify is not None
    target = next((t for t in tools if t.name == tool.verify.tool), None)
    if target is None:
        names = [t.name for t in tools if t.effects == "read"]
        hint = did_you_mean(tool.verify.tool, names) or f"declared read tools: {', '.join(names) or 'none'}"
        raise doc.error((*at, "tool"), problem=f'no declared tool named "{tool.verify.tool}"', hint=hint)
    if target.effects != "read":
        raise doc.error(
            (*at, "tool"),
            problem=f'"{target.name}" has effects: {target.effects}; a verification must be a read',
            hint="name a tool with effects: read",
        )
    for key, value in tool.verify.args.items():
        for name in placeholders(value) if isinstance(value, str) else []:
            if name not in tool.parameters:
                raise doc.error(
                    (*at, "args", key),
                    problem=f"placeholder {{{{{name}}}}} is not a parameter of {tool.name}",
                    hint=did_you_mean(name, tool.parameters) or None,
                )
