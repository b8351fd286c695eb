"""Declared tools at unit level: argv building, load-time checks, the schema the model reads.

The injection property runs 10,000 arbitrary values through build_argv and
checks each lands, literally, inside its own argv entry; a smaller one runs a
real child and compares the argv it received.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mmd import contract
from mmd.config import ConfigError, load_agent_file
from mmd.config.declared import DeclaredToolSpec, VerifySpec
from mmd.tools.base import Limits, ToolContext, ToolError
from mmd.tools.builtin import BUILTIN_TOOLS
from mmd.tools.declared import (
    DeclaredTool,
    build_argv,
    declared_tools,
    fill_verify_args,
    parameters_schema,
    partial_success,
)
from mmd.tools.registry import Registry

from ...budget import examples
from ...paths import ROOT

RELEASE_TEAM = ROOT / "contrib" / "release-team"


def spec(command: list[str], parameters: dict[str, Any], **fields: Any) -> DeclaredToolSpec:
    return msgspec.convert(
        {"name": "t", "description": "A test tool.", "command": command, "parameters": parameters, **fields},
        DeclaredToolSpec,
    )


def argv_for(command: list[str], parameters: dict[str, Any], args: dict[str, Any]) -> list[str]:
    """The argv the tool would run for *args*, after the contract (coercion, defaults), as calls.py does."""
    s = spec(command, parameters)
    validated = contract.validate(parameters_schema(s), args)
    return build_argv(s.command, s.parameters, validated)


# --- build_argv -------------------------------------------------------------------

ARGV_CASES = [
    pytest.param(
        ["./deploy", "--channel={{channel}}"],
        {"channel": {}},
        {"channel": "beta"},
        ["./deploy", "--channel=beta"],
        id="placeholder-inside-an-entry",
    ),
    pytest.param(
        ["ssh", "{{user}}@{{host}}:{{port}}"],
        {"user": {}, "host": {}, "port": {"type": "integer"}},
        {"user": "ann", "host": "example.org", "port": 22},
        ["ssh", "ann@example.org:22"],
        id="several-in-one-entry",
    ),
    pytest.param(["p", "{{ name }}"], {"name": {}}, {"name": "x"}, ["p", "x"], id="spaces-inside-the-braces"),
    pytest.param(
        ["p", "--tag={{tag}}", "{{tag}}", "x{{tag}}{{other}}", "{{other}}", "end"],
        {"tag": {}, "other": {}},
        {"other": "o"},
        ["p", "o", "end"],
        id="optional-left-out-removes-every-entry-mentioning-it",
    ),
    pytest.param(
        ["p", "--level={{level}}"],
        {"level": {"type": "integer", "default": 3}},
        {},
        ["p", "--level=3"],
        id="default-fills-it",
    ),
    pytest.param(
        ["p", "{{files}}", "end"],
        {"files": {"type": "array"}},
        {"files": ["a", "b c", "; rm -rf ~"]},
        ["p", "a", "b c", "; rm -rf ~", "end"],
        id="array-one-entry-per-item",
    ),
    pytest.param(
        ["p", "{{files}}", "end"],
        {"files": {"type": "array"}},
        {"files": []},
        ["p", "end"],
        id="empty-array-none",
    ),
    pytest.param(
        ["p", "{{files}}"],
        {"files": {"type": "array"}},
        {"files": [3, "x"]},
        ["p", "3", "x"],
        id="array-int-item",
    ),
    pytest.param(
        ["p", "{{on}}", "--off={{off}}"],
        {"on": {"type": "boolean"}, "off": {"type": "boolean"}},
        {"on": True, "off": "false"},
        ["p", "true", "--off=false"],
        id="booleans-as-json-text",
    ),
    pytest.param(
        ["p", "{{n}}", "{{x}}", "{{y}}"],
        {"n": {"type": "integer"}, "x": {"type": "number"}, "y": {"type": "number"}},
        {"n": "3", "x": 2.5, "y": "2.5"},
        ["p", "3", "2.5", "2.5"],
        id="numbers-as-json-text",
    ),
    pytest.param(
        ["p", "{{n}}"],
        {"n": {"type": "integer"}},
        {"n": "3.0"},
        ["p", "3"],
        id="integral-float-is-an-integer",
    ),
    pytest.param(
        ["p", "{{n}}", "{{x}}"],
        {"n": {"type": "integer"}, "x": {"type": "number"}},
        {"n": -5, "x": "-0.5"},
        ["p", "-5", "-0.5"],
        id="negative-numbers-allowed",
    ),
    pytest.param(
        ["p", "--name={{name}}", "x{{name}}"],
        {"name": {}},
        {"name": "-rf"},
        ["p", "--name=-rf", "x-rf"],
        id="leading-dash-inside-a-longer-entry",
    ),
    pytest.param(
        ["p", "{{name}}"], {"name": {"allow_dash": True}}, {"name": "-rf"}, ["p", "-rf"], id="allow-dash"
    ),
    pytest.param(
        ["p", "{{files}}"],
        {"files": {"type": "array", "allow_dash": True}},
        {"files": ["-a", "--b"]},
        ["p", "-a", "--b"],
        id="allow-dash-array",
    ),
    pytest.param(
        ["p", "{{a}}", "{{b}}"],
        {"a": {}, "b": {}},
        {"a": "{{b}}", "b": "$(id) `id` 'q' \"dq\"\nline2"},
        ["p", "{{b}}", "$(id) `id` 'q' \"dq\"\nline2"],
        id="a-value-is-never-a-template",
    ),
    pytest.param(["p", "{{s}}"], {"s": {}}, {"s": ""}, ["p", ""], id="empty-string-kept-as-an-entry"),
]


@pytest.mark.parametrize(("command", "parameters", "args", "expected"), ARGV_CASES)
def test_build_argv(
    command: list[str], parameters: dict[str, Any], args: dict[str, Any], expected: list[str]
) -> None:
    assert argv_for(command, parameters, args) == expected


REFUSED = [
    pytest.param(["p", "{{s}}"], {"s": {}}, {"s": "a\0b"}, "nul_byte", id="nul-whole"),
    pytest.param(["p", "--s={{s}}"], {"s": {}}, {"s": "a\0b"}, "nul_byte", id="nul-inside"),
    pytest.param(["p", "{{s}}"], {"s": {"allow_dash": True}}, {"s": "\0"}, "nul_byte", id="nul-allow-dash"),
    pytest.param(
        ["p", "{{f}}"], {"f": {"type": "array"}}, {"f": ["ok", "a\0"]}, "nul_byte", id="nul-in-item"
    ),
    pytest.param(["p", "{{s}}"], {"s": {}}, {"s": "-rf"}, "leading_dash", id="dash-whole"),
    pytest.param(["p", "{{ s }}"], {"s": {}}, {"s": "--all"}, "leading_dash", id="dash-whole-spaced"),
    pytest.param(
        ["p", "{{f}}"], {"f": {"type": "array"}}, {"f": ["ok", "-x"]}, "leading_dash", id="dash-item"
    ),
    # A value that begins a longer entry still begins the argument: -rf.txt is an option.
    pytest.param(["p", "{{s}}.txt"], {"s": {}}, {"s": "-rf"}, "leading_dash", id="dash-begins-entry"),
    # The argument as built counts, not the first placeholder: an empty value before moves the start.
    pytest.param(
        ["p", "{{d}}{{e}}"],
        {"e": {}, "d": {}},
        {"d": "", "e": "--force"},
        "leading_dash",
        id="dash-after-empty",
    ),
    pytest.param(
        ["p", "{{d}}-{{e}}"],
        {"d": {}, "e": {}},
        {"d": "", "e": "x"},
        "leading_dash",
        id="empty-leaves-literal-dash",
    ),
    # A number may begin an argument, but nothing of the model's may join it: -1rf is options.
    pytest.param(
        ["p", "{{e}}{{n}}{{e}}"],
        {"e": {}, "n": {"type": "integer"}},
        {"n": -1, "e": ""},
        None,
        id="negative-number-alone-passes",
    ),
    pytest.param(
        ["p", "{{n}}{{e}}"],
        {"e": {}, "n": {"type": "integer"}},
        {"n": -1, "e": "rf"},
        "leading_dash",
        id="num-joined",
    ),
]


@pytest.mark.parametrize(("command", "parameters", "args", "code"), REFUSED)
def test_build_argv_refuses(
    command: list[str], parameters: dict[str, Any], args: dict[str, Any], code: str | None
) -> None:
    if code is None:  # a case beside the refusals that must pass
        assert argv_for(command, parameters, args)[1].startswith("-")
        return
    with pytest.raises(ToolError) as info:
        argv_for(command, parameters, args)
    err = info.value
    name = next(iter(parameters))
    assert err.code == code and err.field == name
    assert err.cls == "fix_and_retry" and err.fix and name in err.reason
    assert ("NUL" if code == "nul_byte" else "option") in err.reason


# --- the injection property ---------------------------------------------------------

TEMPLATE = ["prog", "{{a}}", "--b={{b}}", "x{{a}}y{{b}}", "{{items}}"]
TEMPLATE_PARAMS = {
    "a": {"required": True, "allow_dash": True},
    "b": {"required": True},  # never fills a whole entry: a leading "-" is fine
    "items": {"type": "array", "allow_dash": True},
}
NASTY = [
    "; rm -rf ~",
    "$(rm -rf ~)",
    "`id`",
    "'",
    '"',
    "\"'; echo pwned; '\"",
    "a\nb",
    "\r\n",
    "-rf",
    "--output=/etc/passwd",
    "-",
    "--",
    "",
    " ",
    "*",
    "~",
    "$HOME",
    "${IFS}",
    "a b c",
    "> /tmp/x",
    "| cat",
    "&& reboot",
    "{{a}}",
    "{{b}}",
    "{{items}}",
    "{{ a }}",
    "\\",
    "\\{{b}}",
    "ünïcødé ✓ 🚀",
    "\u202etxt.exe",
    "\t",
    "%s%n",
]
# Any text but NUL (argv cannot carry it; refused separately), or one of the nasty strings.
# characters() without NUL rather than text().filter(): the same values, generated faster.
# codec="utf-8" keeps lone surrogates out, as st.text() does (the contract refuses them).
values = st.text(st.characters(codec="utf-8", exclude_characters="\0")) | st.sampled_from(NASTY)


def fill_literally(entry: str, fills: dict[str, str]) -> str:
    """*entry* with each ``{{name}}`` replaced by its value, by plain str.replace.

    Each placeholder first becomes a NUL-marked token (values hold no NUL), so a
    value that itself reads like a placeholder is never filled a second time.
    """
    for i, name in enumerate(fills):
        entry = entry.replace("{{" + name + "}}", f"\0{i}\0")
    for i, value in enumerate(fills.values()):
        entry = entry.replace(f"\0{i}\0", value)
    return entry


TEMPLATE_SPEC = spec(TEMPLATE, TEMPLATE_PARAMS)
TEMPLATE_SCHEMA = parameters_schema(TEMPLATE_SPEC)


@settings(max_examples=examples(10_000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=values, b=values, items=st.lists(values, max_size=3))
def test_a_value_stays_inside_its_own_entry(a: str, b: str, items: list[str]) -> None:
    args = contract.validate(TEMPLATE_SCHEMA, {"a": a, "b": b, "items": items})
    argv = build_argv(TEMPLATE_SPEC.command, TEMPLATE_SPEC.parameters, args)
    expected = [fill_literally(entry, {"a": a, "b": b}) for entry in TEMPLATE[:-1]] + items
    assert len(argv) == len(TEMPLATE) + len(items) - 1
    assert argv == expected
    assert argv[:4] == ["prog", a, "--b=" + b, "x" + a + "y" + b]


# --- a real child receives exactly that argv ------------------------------------------

ECHO_ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))"
# argv[0] and the -c code are literal entries; -I -S only make the child start faster.
CHILD_TEMPLATE = [
    sys.executable,
    "-I",
    "-S",
    "-c",
    ECHO_ARGV,
    "{{a}}",
    "--b={{b}}",
    "x{{a}}y{{b}}",
    "{{items}}",
]
LITERAL = 5  # entries of CHILD_TEMPLATE before the first placeholder
small = st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=40) | st.sampled_from(NASTY)


def child_tool(tmp: Path) -> tuple[DeclaredTool, ToolContext]:
    tool = DeclaredTool(spec(CHILD_TEMPLATE, TEMPLATE_PARAMS, effects="read"), tmp)
    ctx = ToolContext(
        session_id="s-test",
        call_id="c1",
        cwd=tmp,
        session_dir=tmp / "session",
        limits=Limits(timeout=60, max_bytes=1_000_000, max_lines=100_000),
    )
    return tool, ctx


def test_real_child_receives_build_argv(tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("child")
    tool, ctx = child_tool(tmp)

    @settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(a=small, b=small, items=st.lists(small, max_size=4))
    def check(a: str, b: str, items: list[str]) -> None:
        args = contract.validate(tool.parameters, {"a": a, "b": b, "items": items})
        argv = tool.argv(args)
        assert argv[:LITERAL] == CHILD_TEMPLATE[:LITERAL]  # the program and the -c code are literal
        result = trio.run(tool.run, args, ctx)
        assert result.ok, result.content
        received = json.loads(result.content.splitlines()[0])
        assert received == argv[LITERAL:]
        assert received == [a, "--b=" + b, "x" + a + "y" + b, *items]

    check()


def test_nul_is_refused_before_anything_runs(tmp_path: Path) -> None:
    tool, ctx = child_tool(tmp_path)
    args = contract.validate(tool.parameters, {"a": "1.4.2\0; rm -rf ~", "b": "x"})
    with pytest.raises(ToolError) as info:
        trio.run(tool.run, args, ctx)
    assert info.value.code == "nul_byte" and info.value.field == "a"
    assert "NUL byte" in info.value.reason
    assert not (ctx.session_dir / "output-c1.log").exists()  # no process was started


@pytest.mark.parametrize(
    "raw",
    [
        '{"service": "bill\\udd00ing"}',  # the escape
        '"{\\"service\\": \\"bill\\\\udd00ing\\"}"',  # in stringified JSON, unpacked once
        '{"service": "bill\udd00ing"}',  # the character itself, already in the text
    ],
)
def test_lone_surrogate_escape_is_refused_by_the_contract(raw: str) -> None:
    # json.loads turns "\udd00" into a str that no argv (nor the event store) can encode. Only a text with a
    # \u escape or with characters past ASCII is looked at for one: each kind is.
    with pytest.raises(contract.InvalidArguments) as info:
        contract.parse_arguments(raw)
    assert info.value.code == "malformed_json"
    assert "\\udd00" in info.value.reason and "lone surrogate" in info.value.reason
    # A surrogate pair is one character, and fine.
    assert contract.parse_arguments('{"s": "\\ud83d\\ude80"}') == {"s": "\U0001f680"}


def test_relative_program_is_resolved_against_the_agent_folder(tmp_path: Path) -> None:
    relative = DeclaredTool(spec(["./scripts/release", "{{v}}"], {"v": {}}), tmp_path)
    assert relative.argv({"v": "1"}) == [str(tmp_path / "scripts" / "release"), "1"]
    bare = DeclaredTool(spec(["python3", "{{v}}"], {"v": {}}), tmp_path)
    assert bare.argv({"v": "1"}) == ["python3", "1"]  # looked up in PATH
    absolute = DeclaredTool(spec(["/bin/echo", "{{v}}"], {"v": {}}), tmp_path)
    assert absolute.argv({"v": "1"}) == ["/bin/echo", "1"]


# --- load-time errors ---------------------------------------------------------------

# Each text marks the line the error must name with "# <-".
LOAD_ERRORS = [
    pytest.param(
        """
tools:
  - name: deploy
    description: Deploy.
    command:
      - ./deploy
      - "--channel={{chanel}}"  # <-
    parameters:
      channel: {type: string}
""",
        "tools[0].command[1]",
        ["placeholder {{chanel}} is not a declared parameter", 'did you mean "channel"?'],
        id="placeholder-not-declared",
    ),
    pytest.param(
        """
tools:
  - name: deploy
    description: Deploy.
    command: ["./deploy", "{{channel}}"]
    parameters:
      channel: {type: string}
      force: {type: boolean}  # <-
""",
        "tools[0].parameters.force",
        ["declared but never used in command"],
        id="parameter-never-used",
    ),
    pytest.param(
        """
tools:
  - name: run
    description: Run a program.
    command:
      - "{{program}}"  # <-
      - "--quiet"
    parameters:
      program: {type: string}
""",
        "tools[0].command[0]",
        ["the program must be literal"],
        id="placeholder-in-argv0",
    ),
    pytest.param(
        """
tools:
  - name: bash  # <-
    description: Not the built-in.
    command: ["./x"]
""",
        "tools[0].name",
        ['"bash" is the name of a built-in tool'],
        id="builtin-name",
    ),
    pytest.param(
        """
builtins: [read_file]
tools:
  - name: grep  # <-
    description: grep is off, but its name is still reserved.
    command: ["./x"]
""",
        "tools[0].name",
        ['"grep" is the name of a built-in tool (reserved even when that built-in is off)'],
        id="builtin-name-reserved-when-off",
    ),
    pytest.param(
        """
tools:
  - name: status
    description: One.
    command: ["./a"]
  - name: status  # <-
    description: Two.
    command: ["./b"]
""",
        "tools[1].name",
        ['"status" is declared twice; the first is tools[0]'],
        id="duplicate-name",
    ),
    pytest.param(
        """
tools:
  - name: release
    description: Release.
    command: ["./release", "{{version}}"]
    parameters:
      version:
        type: string
        pattern: '^[0-9+$'  # <-
""",
        "tools[0].parameters.version.pattern",
        ["invalid regular expression"],
        id="invalid-regex",
    ),
    pytest.param(
        """
tools:
  - name: lint
    description: Lint files.
    command:
      - ./lint
      - "--files={{files}}"  # <-
    parameters:
      files: {type: array}
""",
        "tools[0].command[1]",
        ["array parameter files must fill a whole entry"],
        id="array-not-a-whole-entry",
    ),
    pytest.param(
        """
tools:
  - name: lint
    description: Lint files.
    command:
      - ./lint
      - " {{files}} "  # <-
    parameters:
      files: {type: array}
""",
        "tools[0].command[1]",
        ["array parameter files must fill a whole entry"],
        id="array-with-spaces-around-is-not-a-whole-entry",
    ),
    pytest.param(
        """
tools:
  - name: release
    description: Release.
    command: ["./release", "{{version}}", "{{channel}}"]
    parameters:
      version: {type: string, required: true, pattern: '^\\d+\\.\\d+\\.\\d+$'}
      channel: {type: string, required: true, enum: [stable, beta]}
    example: {version: "1.4", channel: beta}  # <-
""",
        "tools[0].example",
        ["does not fit the parameters", "version", "pattern"],
        id="example-does-not-fit",
    ),
    pytest.param(  # t5 of the fuzzing report: this example hung the daemon when the file was loaded
        """
tools:
  - name: echo_it
    description: Echo a value.
    command: ["echo", "{{v}}"]
    parameters:
      v: {type: string, required: true, pattern: '^(a|a)+$'}
    example: {v: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!"}  # <-
    effects: read
""",
        "tools[0].example",
        [
            "does not fit the parameters: v could not be checked against the pattern ^(a|a)+$ in time",
            "simplify the pattern: a repeat inside a repeat, such as (a+)+ or (a|a)*, can take forever",
        ],
        id="example-whose-pattern-backtracks",
    ),
    pytest.param(  # the report's own pattern: regex finds at once that it does not match
        """
tools:
  - name: echo_it
    description: Echo a value.
    command: ["echo", "{{v}}"]
    parameters:
      v: {type: string, required: true, pattern: '^(a+)+$'}
    example: {v: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!"}  # <-
    effects: read
""",
        "tools[0].example",
        [
            'does not fit the parameters: v "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!" does not match the pattern'
        ],
        id="example-that-does-not-match-a-nested-repeat",
    ),
    pytest.param(  # regex would build a million items compiling it
        """
tools:
  - name: echo_it
    description: Echo a value.
    command: ["echo", "{{v}}"]
    parameters:
      v:
        type: string
        pattern: '^(?:a{1000}){1000}$'  # <-
""",
        "tools[0].parameters.v.pattern",
        ["invalid regular expression: too complex: compiled, it would unroll into more than 10,000 items"],
        id="regex-too-complex",
    ),
    pytest.param(
        """
tools:
  - name: release
    description: Release.
    command: ["./release", "{{channel}}"]
    parameters:
      channel: {type: string, enum: [stable, beta]}
    example: {chanel: beta}  # <-
""",
        "tools[0].example",
        ["does not fit the parameters", "chanel is not a parameter"],
        id="example-with-unknown-field",
    ),
    pytest.param(
        """
tools:
  - name: rm
    description: Remove.
    command: ["./rm", "{{target}}"]
    parameters:
      target: {type: string}
    example: {target: "-rf"}  # <-
""",
        "tools[0].example",
        ["would be refused when the tool runs", "target starts with '-'"],
        id="example-refused-by-the-dash-rule",
    ),
    pytest.param(
        """
tools:
  - name: ls
    description: List.
    command:
      - ./ls
      - "{{flags}}{{path}}"  # <-
    parameters:
      flags: {type: string, allow_dash: true, enum: ["-l", "-a"]}
      path: {type: string}
""",
        "tools[0].command[1]",
        ["{{flags}} has allow_dash and may begin this entry, and {{path}} follows it", "entry of its own"],
        id="allow-dash-value-joined-by-another",
    ),
    pytest.param(
        """
tools:
  - name: build
    description: Build.
    command: ["./build", "--jobs={{jobs}}"]
    parameters:
      jobs:
        type: integer
        maximum: 8
        default: 16  # <-
""",
        "tools[0].parameters.jobs.default",
        ["does not fit the parameters", "out of range"],
        id="default-does-not-fit",
    ),
    pytest.param(
        """
tools:
  - name: release
    description: Release.
    command: ["./release"]
    verify:
      tool: stauts  # <-
  - name: status
    description: Status.
    command: ["./status"]
    effects: read
""",
        "tools[0].verify.tool",
        ['no declared tool named "stauts"', 'did you mean "status"?'],
        id="verify-unknown-tool",
    ),
    pytest.param(
        """
tools:
  - name: release
    description: Release.
    command: ["./release"]
    verify: {tool: publish}  # <-
  - name: publish
    description: Publish.
    command: ["./publish"]
""",
        "tools[0].verify.tool",
        ['"publish" has effects: write; a verification must be a read'],
        id="verify-names-a-write-tool",
    ),
    pytest.param(
        """
tools:
  - name: release
    description: Release.
    command: ["./release", "{{version}}"]
    parameters:
      version: {type: string}
    verify:
      tool: status
      args:
        service: "{{verison}}"  # <-
  - name: status
    description: Status.
    command: ["./status", "{{service}}"]
    parameters:
      service: {type: string}
    effects: read
""",
        "tools[0].verify.args.service",
        ["placeholder {{verison}} is not a parameter of release", 'did you mean "version"?'],
        id="verify-placeholder-not-a-parameter",
    ),
]


@pytest.mark.parametrize(("text", "field", "says"), LOAD_ERRORS)
def test_load_time_error_names_file_line_and_field(
    tmp_path: Path, text: str, field: str, says: list[str]
) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(text.lstrip("\n"))
    line = next(n for n, row in enumerate(path.read_text().splitlines(), 1) if "# <-" in row)
    with pytest.raises(ConfigError) as info:
        load_agent_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}:{line}: {field}: "), message
    for part in says:
        assert part in message, message


def test_every_builtin_name_is_reserved(tmp_path: Path) -> None:
    for name in BUILTIN_TOOLS:
        path = tmp_path / f"{name}.yaml"
        path.write_text(f"builtins: []\ntools:\n  - name: {name}\n    description: x\n    command: [./x]\n")
        with pytest.raises(ConfigError, match=f"{path}:3: tools\\[0\\].name: "):
            load_agent_file(path)


def test_contrib_release_team_loads() -> None:
    agent = load_agent_file(RELEASE_TEAM / "agent.yaml")
    assert [t.name for t in agent.tools] == ["release", "pkgtest", "status"]
    assert agent.tools[0].verify == VerifySpec(tool="status", args={"service": "release"})


# --- the schema the model reads ----------------------------------------------------------


def keywords(value: Any) -> set[str]:
    """Every key anywhere in a JSON value."""
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in keywords(v)}
    if isinstance(value, list):
        return {k for v in value for k in keywords(v)}
    return set()


def release_spec(agent_path: Path) -> Any:
    agent = load_agent_file(agent_path)
    registry = Registry(declared_tools(agent.tools, agent_path.parent), strict=agent.schema == "strict")
    return {s.name: s for s in registry.specs()}


def test_the_schema_the_model_reads_has_no_keywords_that_end_the_turn() -> None:
    specs = release_spec(RELEASE_TEAM / "agent.yaml")
    release = specs["release"]
    params = release.parameters
    assert not keywords(params) & {"required", "enum", "pattern", "additionalProperties", "default"}
    assert params["properties"]["version"] == {
        "type": "string",
        "description": "Version like 1.4.2. Required. Pattern: ^\\d+\\.\\d+\\.\\d+$",
    }
    assert params["properties"]["channel"] == {
        "type": "string",
        "description": "Required. One of: stable, beta.",
    }
    assert release.description == (
        "Publish a release of the product to one channel. Changes files or state. "
        'Example: {"version": "1.4.2", "channel": "beta"}. Give each parameter as its own field.'
    )
    # A read tool says no side effects sentence of the write tiers; every one ends the same way.
    assert "Changes files" not in specs["status"].description
    for s in specs.values():
        assert s.description.endswith("Give each parameter as its own field.")


def test_strict_schema_keeps_the_keywords(tmp_path: Path) -> None:
    agent_dir = tmp_path / "release-team"
    shutil.copytree(RELEASE_TEAM, agent_dir)
    path = agent_dir / "agent.yaml"
    path.write_text(path.read_text() + "schema: strict\n")
    params = release_spec(path)["release"].parameters
    assert params["required"] == ["version", "channel"]
    assert params["additionalProperties"] is False
    assert params["properties"]["channel"]["enum"] == ["stable", "beta"]
    assert params["properties"]["version"]["pattern"] == "^\\d+\\.\\d+\\.\\d+$"
    assert "Required." in params["properties"]["channel"]["description"]


def test_destructive_tier_wording_and_prerequisite(tmp_path: Path) -> None:
    s = spec(
        ["./drop", "{{table}}"], {"table": {"required": True}}, effects="destructive", prerequisite="status"
    )
    [rendered] = Registry(declared_tools([s], tmp_path)).specs()
    assert rendered.description == (
        "A test tool. Destructive: cannot be undone. Call status first. Give each parameter as its own field."
    )


# --- partial success and verify arguments -------------------------------------------------

PARTIAL = [
    (
        'wrote 1\nwrote 2\n{"done": [1, 2], "failed": [3], "resume": "x"}\n',
        {"done": [1, 2], "failed": [3], "resume": "x"},
    ),
    ('{"done": ["a"]}', {"done": ["a"]}),
    ('{"failed": [3]}\n\n  \n', {"failed": [3]}),
    ('{"done": [1], "failed": [2], "extra": 1}', None),
    ('{"resume": "x"}', None),
    ("{}", None),
    ("[1, 2]", None),
    ('{"done": [1]}\nthen more output', None),
    ("not json", None),
    ("", None),
]


@pytest.mark.parametrize(("output", "expected"), PARTIAL)
def test_partial_success(output: str, expected: dict[str, Any] | None) -> None:
    assert partial_success(output) == expected


def test_fill_verify_args_keeps_types() -> None:
    verify = VerifySpec(
        tool="status",
        args={
            "service": "release",
            "version": "{{version}}",
            "count": "{{n}}",
            "flag": "{{ flag }}",
            "label": "v{{version}}-{{n}}-{{flag}}",
            "fixed": 3,
            "gone": "{{missing}}",
            "around": "[{{missing}}]",
        },
    )
    filled = fill_verify_args(verify, {"version": "1.4.2", "n": 3, "flag": True})
    assert filled == {
        "service": "release",
        "version": "1.4.2",
        "count": 3,
        "flag": True,
        "label": "v1.4.2-3-true",
        "fixed": 3,
        "gone": None,
        "around": "[]",
    }
    assert type(filled["count"]) is int and type(filled["flag"]) is bool
