"""``tools:`` entries of the agent file: declared tools, one argv command each.

A declared tool turns one command into a typed tool with no shell: the
command is a list, argv[0] is literal, and each ``{{param}}`` placeholder is
replaced inside one argv entry. The checks here run when the file is loaded,
so a mistake in the template is an error with its line, not a surprise when
the model first calls the tool.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec

from .loader import did_you_mean

if TYPE_CHECKING:
    from .loader import Document

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


class ParamSpec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
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


class VerifySpec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    tool: str
    # String values may hold {{param}} placeholders filled from the write's arguments.
    args: dict[str, Any] = {}


class DeclaredToolSpec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
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


def check_tool_count(doc: Document) -> None:
    """Refuse more than MAX_TOOLS entries under ``tools:``, before they are checked one by one.

    Errors: ConfigError at the line of the first tool past the limit.
    """
    tools = doc.data.get("tools") if isinstance(doc.data, dict) else None
    if isinstance(tools, list) and len(tools) > MAX_TOOLS:
        raise doc.error(
            ("tools", MAX_TOOLS),
            problem=f"{len(tools):,} tools declared; the limit is {MAX_TOOLS}",
            hint="keep the tools this agent needs and put the others in another agent file (--agent FILE)",
        )


def check_tools(doc: Document, tools: list[DeclaredToolSpec], reserved: tuple[str, ...]) -> None:
    """The load-time checks of declared tools, each error with its line.

    Errors:
        ConfigError: a placeholder not declared, a parameter never used, a
        placeholder in argv[0], a name taken by a built-in (reserved even when
        that built-in is off), a duplicate name, an invalid regex, an example
        or default that does not fit its parameters, an example whose argv
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
    from ..tools.contract import validate
    from ..tools.declared import parameters_schema

    for name, spec in tool.parameters.items():
        where = (*at, "parameters", name)
        if spec.pattern is not None:
            try:
                re.compile(spec.pattern)
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
            _fits(doc, (*at, key), validate, schema, value)
            _builds(doc, (*at, key), tool, validate(schema, value))
    for name, spec in tool.parameters.items():
        if spec.default is not None:
            single = {"type": "object", "properties": {name: schema["properties"][name]}}
            _fits(doc, (*at, "parameters", name, "default"), validate, single, {name: spec.default})


def _fits(doc: Document, where: tuple[Any, ...], validate: Any, schema: dict[str, Any], value: Any) -> None:
    from ..tools.base import ToolError

    if not isinstance(value, dict):
        raise doc.error(where, expected="a map of parameter values", found=type(value).__name__)
    try:
        validate(schema, value)
    except ToolError as err:
        raise doc.error(where, problem=f"does not fit the parameters: {err.reason}") from None


def _builds(doc: Document, where: tuple[Any, ...], tool: DeclaredToolSpec, args: dict[str, Any]) -> None:
    # The model copies the example: one that the argv rules refuse would teach it a refused call.
    from ..tools.base import ToolError
    from ..tools.declared import build_argv

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
