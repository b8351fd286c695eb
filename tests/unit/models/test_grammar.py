"""The grammar of one step of a local model (mmd/models/grammar.py), read as llama.cpp reads it.

tests/unit/gbnf.py parses the GBNF the way llama.cpp's parser does and says whether a whole text is
one the grammar lets the model write: a call of a catalogued tool with arguments its schema allows
(bare, in a ```json fence or in a <tool_call> tag), or words that do not start like a call.
tests/e2e/test_local.py gives the grammar to the real llama-server.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from mmd.models.base import ToolSpec
from mmd.models.grammar import call_grammar, pattern_rule

from .. import gbnf

RELEASE = ToolSpec(
    name="release",
    description="Publish a version.",
    # What the model reads: the pattern and the enum said in words; the schema keeps them.
    parameters={
        "type": "object",
        "properties": {
            "version": {"type": "string", "description": "Like 2.0.1."},
            "channel": {"type": "string", "description": "One of: stable, beta."},
            "notes": {"type": "string"},
            "dry": {"type": "boolean"},
        },
        "required": ["version", "channel"],
    },
    schema={
        "type": "object",
        "properties": {
            "version": {"type": "string", "pattern": r"^\d+\.\d+\.\d+$"},
            "channel": {"type": "string", "enum": ["stable", "beta"]},
            "notes": {"type": "string"},
            "dry": {"type": "boolean"},
        },
        "required": ["version", "channel"],
    },
)
SCALE = ToolSpec(
    name="scale",
    description="Run a number of replicas of a service.",
    parameters={
        "type": "object",
        "properties": {"service": {"type": "string"}, "replicas": {"type": "integer"}},
        "required": ["service", "replicas"],
    },
)
LABEL = ToolSpec(
    name="label",
    description="Tag a service.",
    parameters={
        "type": "object",
        "properties": {"service": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["service", "tags"],
    },
)
DEPLOY = ToolSpec(
    name="deploy",
    description="Deploy a service to a host.",
    parameters={
        "type": "object",
        "properties": {
            "service": {"type": "string"},
            "target": {
                "type": "object",
                "properties": {"host": {"type": "string"}, "port": {"type": "integer"}},
                "required": ["host"],
            },
        },
        "required": ["service", "target"],
    },
)
STATUS = ToolSpec(
    name="status",
    description="Say how a service is.",
    parameters={
        "type": "object",
        "properties": {"service": {"type": "string"}, "verbose": {"type": "boolean"}},
    },
)
RENAME = ToolSpec(
    name="rename",
    description="Give the project a short name.",
    parameters={
        "type": "object",
        "properties": {"name": {"type": "string", "minLength": 2, "maxLength": 5}},
        "required": ["name"],
    },
)
ODD = ToolSpec(
    name='say "hi" \\ café',  # a name JSON must escape
    description="Greet.",
    parameters={"type": "object", "properties": {}},
)
TOOLS = (RELEASE, SCALE, LABEL, DEPLOY, STATUS, RENAME, ODD)


def grammar(tools: tuple[ToolSpec, ...] = TOOLS) -> gbnf.Grammar:
    return _parse(call_grammar(list(tools)))


@functools.cache
def _parse(text: str) -> gbnf.Grammar:
    return gbnf.parse(text)


def accepts(text: str, tools: tuple[ToolSpec, ...] = TOOLS) -> bool:
    return grammar(tools).accepts(text)


def call(name: str, arguments: Any, **dumps: Any) -> str:
    return json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False, **dumps)


def fenced(text: str) -> str:
    return f"```json\n{text}\n```"


def tagged(text: str) -> str:
    return f"<tool_call>\n{text}\n</tool_call>"


SHAPES: dict[str, Callable[[str], str]] = {"bare": lambda text: text, "fenced": fenced, "tagged": tagged}


# -- the grammar as text --------------------------------------------------------------------------------


def test_the_grammar_is_one_llama_cpp_reads_with_every_rule_defined_once() -> None:
    text = call_grammar(list(TOOLS))
    written = grammar().written  # gbnf.parse refuses an undefined rule, as llama.cpp does
    assert len(written) == len(set(written)) == len(text.strip().splitlines())
    assert "root" in written
    assert all(re.fullmatch(r"[a-z0-9-]+", name) for name in written)


@pytest.mark.parametrize("tool", TOOLS, ids=lambda tool: tool.name)
def test_the_grammar_of_each_tool_alone_is_one_llama_cpp_reads(tool: ToolSpec) -> None:
    assert grammar((tool,)).accepts("pong")


def test_the_same_tools_give_the_same_grammar() -> None:
    assert call_grammar(list(TOOLS)) == call_grammar(list(TOOLS))


# -- calls --------------------------------------------------------------------------------------------------

VALID_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("release", {"version": "2.0.1", "channel": "stable"}),
    ("release", {"version": "10.20.300", "channel": "beta", "notes": 'Fixes "quoted" bugs\nand more'}),
    ("release", {"version": "1.0.0", "channel": "beta", "dry": True}),
    ("release", {"version": "1.0.0", "channel": "stable", "notes": "", "dry": False}),
    ("scale", {"service": "web", "replicas": 3}),
    ("scale", {"service": "web", "replicas": -1}),
    ("label", {"service": "web", "tags": []}),
    ("label", {"service": "web", "tags": ["a", "b c", "ü"]}),
    ("deploy", {"service": "api", "target": {"host": "h1"}}),
    ("deploy", {"service": "api", "target": {"host": "h1", "port": 8080}}),
    ("status", {}),
    ("status", {"service": "db"}),
    ("status", {"verbose": True}),
    ("status", {"service": "db", "verbose": False}),
    ("rename", {"name": "ab"}),
    ("rename", {"name": "abcde"}),
    ("rename", {"name": 'a"\\b'}),  # escapes count as the one character they stand for
    (ODD.name, {}),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("name", "arguments"), VALID_CALLS)
def test_a_valid_call_is_accepted_bare_fenced_and_tagged(
    name: str, arguments: dict[str, Any], shape: str
) -> None:
    assert accepts(SHAPES[shape](call(name, arguments)))


@pytest.mark.parametrize("shape", SHAPES)
def test_a_call_is_one_line_as_the_chat_template_writes_one_and_may_follow_a_newline(shape: str) -> None:
    """The call's JSON has json.dumps' spacing, which Qwen's template gives a past call: 8 of 28 tokens of a
    pretty-printed call fewer for the model to write, and its next prompt can be cached up to the call."""
    arguments = {"service": "api", "target": {"host": "h1", "port": 80}}
    assert accepts(SHAPES[shape](call("deploy", arguments)))
    assert accepts("\n" + SHAPES[shape](call("deploy", arguments)))
    assert accepts(SHAPES[shape](call("label", {"service": "web", "tags": ["a", "b"]})))
    assert not accepts(SHAPES[shape](call("deploy", arguments, indent=2)))
    assert not accepts(SHAPES[shape](call("scale", {"service": "web", "replicas": 3}, separators=(",", ":"))))


def test_the_schema_is_followed_where_there_is_one_and_the_parameters_where_not() -> None:
    # RELEASE's parameters say nothing of the version's form; its schema does.
    assert not accepts(call("release", {"version": "soon", "channel": "stable"}))
    assert not accepts(call("scale", {"service": "web"}))  # SCALE has parameters only


def test_required_keys_come_first_in_the_schema_order_then_optional_ones_in_order() -> None:
    assert not accepts(call("release", {"channel": "stable", "version": "2.0.1"}))
    assert not accepts(call("release", {"notes": "x", "version": "2.0.1", "channel": "stable"}))
    assert not accepts(call("release", {"version": "2.0.1", "channel": "stable", "dry": True, "notes": "x"}))
    assert not accepts(call("status", {"verbose": True, "service": "db"}))


CALLS_REFUSED: dict[str, str] = {
    "unknown tool": call("restart", {"service": "web"}),
    "a tool name differing in case": call("Scale", {"service": "web", "replicas": 3}),
    "missing required key": call("release", {"version": "2.0.1"}),
    "missing nested required key": call("deploy", {"service": "api", "target": {"port": 80}}),
    "string for integer": call("scale", {"service": "web", "replicas": "seven"}),
    "quoted integer": call("scale", {"service": "web", "replicas": "7"}),
    "fraction for integer": call("scale", {"service": "web", "replicas": 3.5}),
    "integer for string": call("scale", {"service": 7, "replicas": 3}),
    "quoted boolean": call("status", {"verbose": "true"}),
    "nested wrong type": call("deploy", {"service": "api", "target": {"host": "h1", "port": "80"}}),
    "string for array": call("label", {"service": "web", "tags": "a"}),
    "integer in array of strings": call("label", {"service": "web", "tags": ["a", 1]}),
    "value not in the enum": call("release", {"version": "2.0.1", "channel": "nightly"}),
    "unknown key": call("scale", {"service": "web", "replicas": 3, "force": True}),
    "unknown key, no required ones": call("status", {"colour": "red"}),
    "unknown nested key": call("deploy", {"service": "api", "target": {"host": "h1", "user": "root"}}),
    "key for a tool without any": call(ODD.name, {"x": 1}),
    "version 1.4": call("release", {"version": "1.4", "channel": "stable"}),
    "version 1.4.2.1": call("release", {"version": "1.4.2.1", "channel": "stable"}),
    "version v1.4.2": call("release", {"version": "v1.4.2", "channel": "stable"}),
    "name shorter than minLength": call("rename", {"name": "a"}),
    "name longer than maxLength": call("rename", {"name": "abcdef"}),
    "tool name unescaped": '{"name": "say "hi" \\ café", "arguments": {}}',
    "arguments as a JSON string": call("scale", json.dumps({"service": "web", "replicas": 3})),
    "arguments before the name": '{"arguments": {"service": "web", "replicas": 3}, "name": "scale"}',
    "a call cut short": call("scale", {"service": "web", "replicas": 3})[:-1],
    "a fence not closed": "```json\n" + call("scale", {"service": "web", "replicas": 3}),
    "a tag not closed": "<tool_call>\n" + call("scale", {"service": "web", "replicas": 3}),
    "a second call": call("status", {}) + "\n" + call("status", {}),
    "a second fenced call": fenced(call("status", {})) + "\n" + fenced(call("status", {})),
    "words after a tagged call": tagged(call("status", {})) + "\nDone.",
    "words after a bare call": call("status", {}) + " Done.",
    "prose starting with {": '{"answer": 42}',
    "prose starting with { and words": "{ is a brace.",
    "```json fence around other JSON": fenced('{"answer": 42}'),
    "```json fence around words": "```json\nnot json\n```",
    "<tool_call> tag around words": "<tool_call>\nhello\n</tool_call>",
}


@pytest.mark.parametrize("text", CALLS_REFUSED.values(), ids=CALLS_REFUSED.keys())
def test_a_step_that_starts_like_a_call_must_be_exactly_one_valid_call(text: str) -> None:
    assert not accepts(text)


# -- words --------------------------------------------------------------------------------------------------

PROSE = {
    "one word": "pong",
    "a sentence": "The capital of France is Paris.",
    "lines": "Two steps:\n\n1. build\n2. test\n",
    "a python fence": "Like this:\n```python\nprint({'a': 1})\n```",
    "starting with a python fence": "```python\nprint('hi')\n```",
    "starting with a bare fence": "```\nls -l\n```",
    "an empty step": "",
    "a leading newline": "\nParis.",
    "leading spaces": "   Paris.",
    "inline code first": "`ls` lists files.",
    "a brace later": "Use {} for an empty dict.",
    "a call written later": 'I would call {"name": "status", "arguments": {}} here.',
    "an angle bracket first": "<3 thanks",
    "a tag later": "Call it as <tool_call>...</tool_call> next time.",
    "unicode": "Grüße, 世界! 🎉",
}


@pytest.mark.parametrize("text", PROSE.values(), ids=PROSE.keys())
def test_an_answer_in_words_is_free(text: str) -> None:
    assert accepts(text)


@pytest.mark.parametrize(
    "text",
    ["```javascript\nconsole.log(1)\n```", "```jsx\n<App />\n```", "<table><tr><td>1</td></tr></table>"],
)
def test_an_answer_that_starts_like_another_fence_or_tag_is_free(text: str) -> None:
    assert accepts(text)


# -- what the grammar must never let through -----------------------------------------------------------------


def _one_string_tool(schema: dict[str, Any]) -> tuple[ToolSpec, ...]:
    return (
        ToolSpec(
            name="t",
            description="",
            parameters={"type": "object", "properties": {"v": schema}, "required": ["v"]},
        ),
    )


@pytest.mark.parametrize(
    ("pattern", "value"),
    [(r"^a\sb$", "a\tb"), (r"^[ -~]+$", 'a"b'), (r"^[ -~]+$", "a\\q"), (r"^[A-z]+$", "a\\q")],
)
def test_a_pattern_never_lets_a_string_hold_what_json_must_escape(pattern: str, value: str) -> None:
    text = '{"name": "t", "arguments": {"v": "' + value + '"}}'  # the value written raw, unescaped
    with pytest.raises(ValueError):
        json.loads(text)
    assert not accepts(text, _one_string_tool({"type": "string", "pattern": pattern}))


@pytest.mark.parametrize(("first", "second"), [("name", "Name"), ("dry_run", "dry-run")])
def test_keys_that_differ_only_in_case_or_punctuation_keep_their_own_schemas(first: str, second: str) -> None:
    tool = ToolSpec(
        name="t",
        description="",
        parameters={
            "type": "object",
            "properties": {
                first: {"type": "string", "maxLength": 3},
                second: {"type": "array", "items": {"type": "integer"}},
            },
            "required": [first, second],
        },
    )
    assert accepts(call("t", {first: "abc", second: [1]}), (tool,))


# -- patterns -----------------------------------------------------------------------------------------------


def pattern_grammar(pattern: str) -> gbnf.Grammar:
    """The characters of a JSON string matching *pattern* as rule ``pattern``, beside grammar.py's own rules."""
    rule = pattern_rule(pattern)
    assert rule is not None, pattern
    return gbnf.parse(f"pattern ::= {rule}\n" + call_grammar([SCALE]))


# Samples hold no character JSON escapes, so the JSON text of each is the sample itself. JSON Schema's
# regexes are ECMA-262's, where \d and \w are ASCII: compared with re.ASCII.
PATTERNS = {
    r"^[a-z][a-z0-9-]*$": ["web", "web-2", "a", "a-", "", "2web", "Web", "web_2", "web 2", "-web", "wéb"],
    r"^\d+\.\d+\.\d+$": [
        "1.2.3",
        "10.20.300",
        "01.2.3",
        "1.2",
        "1.2.3.4",
        "a.b.c",
        "1..3",
        "",
        "1.2.3 ",
        "v1.2.3",
    ],
    r"^(stable|beta)$": ["stable", "beta", "stablebeta", "", "Stable", "bet", "stable "],
    r"^[0-9a-f]{7,40}$": ["abc1234", "a" * 40, "0" * 7, "a" * 41, "abc123", "ABC1234", "abc123g", ""],
    r"^[^/]+$": ["a", "a b", "-", "é", "a/b", "/", "a/", ""],
    r"^(?:v)?\d{1,3}$": ["v1", "123", "v", "1234", "vv1", ""],
    r"^[A-Z]{2}-\d{4}$": ["AB-1234", "A-1234", "AB-123", "ab-1234", "AB1234"],
    r"^[a-z]+(-[a-z]+)*$": ["a", "a-b-c", "a-", "-a", "a--b", ""],
    r"^\w+@[\w.-]+\.[a-z]{2,}$": ["me@x.org", "a_b@x-y.co", "me@x", "@x.org", "me@x.o"],
    r"^.{2,4}$": ["ab", "abcd", "a", "abcde", "é€"],
    r"^x?y*z+$": ["z", "xz", "xyyz", "x", "yx z", ""],
    r"^\.\-\+\*\?\(\)\[\]\{\}\|\^\$\/$": [".-+*?()[]{}|^$/", ".-+*?()[]{}|^$"],
    r"^[\d\w.-]+$": ["a.b-c_1", "a b", "a/b"],
    r"^[^\d]+$": ["abc", "a1", ""],
}


@pytest.mark.parametrize(("pattern", "samples"), PATTERNS.items(), ids=PATTERNS.keys())
def test_a_pattern_is_said_in_the_grammar_as_the_regex_means_it(pattern: str, samples: list[str]) -> None:
    said = pattern_grammar(pattern)
    for sample in samples:
        assert json.dumps(sample, ensure_ascii=False)[1:-1] == sample
        expected = re.fullmatch(pattern, sample, re.ASCII) is not None
        assert said.accepts(sample, rule="pattern") == expected, sample


def test_an_escaped_caret_first_in_a_class_is_a_caret() -> None:
    said = pattern_grammar(r"^[\^a]+$")
    for sample in ["^", "a", "^a", "b", "^b"]:
        expected = re.fullmatch(r"^[\^a]+$", sample) is not None
        assert said.accepts(sample, rule="pattern") == expected, sample


def test_a_string_with_a_pattern_in_a_call() -> None:
    tools = _one_string_tool({"type": "string", "pattern": r"^[a-z][a-z0-9-]*$", "maxLength": 3})
    assert accepts(
        call("t", {"v": "web-server-2"}), tools
    )  # the pattern says it; the length is the contract's
    assert not accepts(call("t", {"v": "Web"}), tools)


def test_a_pattern_the_grammar_cannot_say_leaves_the_string_to_its_length() -> None:
    tools = _one_string_tool({"type": "string", "pattern": r"^(?=x).*$", "minLength": 2})
    assert accepts(call("t", {"v": "yz"}), tools)
    assert not accepts(call("t", {"v": "x"}), tools)


REFUSED_PATTERNS = {
    "unanchored": r"\d+",
    "anchored at the start only": r"^\d+",
    "anchored at the end only": r"\d+$",
    "an escaped dollar at the end": r"^\d+\$",
    "look-ahead": r"^(?=x).*$",
    "look-behind": r"^(?<=x)y$",
    "named group": r"^(?P<n>a)$",
    "inline flag": r"^(?i)abc$",
    "back-reference": r"^(a)\1$",
    "word boundary": r"^\bfoo$",
    "a class holding a quote": r'^["a]+$',
    "a class holding a backslash": r"^[\\a]+$",
    "a quote": r'^a"b$',
    "unicode property": r"^\p{L}+$",
    "lazy star": r"^.*?$",
    "lazy plus": r"^a+?$",
    "possessive": r"^a++$",
    "{,n}": r"^a{,3}$",
    "four digits of repetition": r"^a{1000}$",
    "maximum below minimum": r"^a{3,2}$",
    "dollar inside": r"^a$b$",
    "unclosed group": r"^(ab$",
    "unclosed class": r"^[ab$",
    "empty class": r"^[]$",
}


@pytest.mark.parametrize("pattern", REFUSED_PATTERNS.values(), ids=REFUSED_PATTERNS.keys())
def test_what_pattern_rule_cannot_say_it_refuses(pattern: str) -> None:
    assert pattern_rule(pattern) is None


@pytest.mark.parametrize("pattern", [r"^a|b$", r"^\d+|auto$"])
def test_a_pattern_anchored_only_in_its_outer_branches_is_refused(pattern: str) -> None:
    assert pattern_rule(pattern) is None


@pytest.mark.parametrize(
    "pattern",
    [
        r"^(a|)*$",  # left recursion through a group that may be empty
        r"^([A-Za-z0-9_-]{1,64}/){0,32}[A-Za-z0-9_-]{1,64}$",  # 64 rules 32 times: past 2000
        r"^[]a]+$",  # a ] first in a class: GBNF's class ends there
    ],
)
def test_what_pattern_rule_says_llama_cpp_reads(pattern: str) -> None:
    tools = _one_string_tool({"type": "string", "pattern": pattern})
    grammar(tools)


# -- the recogniser itself (tests/unit/gbnf.py) -------------------------------------------------------------

SYNTAX = r"""
# a comment
root ::= greeting ("," [ \t]* name)? "!"{1,3} |
  "x" [^a-c\n]+ | digits
greeting ::= ( "hi"
  | "h\x65llo" | "caf\u00e9" )   # escapes
name ::= [A-Z] [a-z\-]* ("." [a-z]{2})?
digits ::= [0-9]{2} [0-9]{0,2} "\"\\" ("a"{2,})?
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("hi!", True),
        ("hello, Anne-marie!!", True),
        ("café,\tBo.xy!!!", True),
        ("hi!!!!", False),
        ("hi, anne!", False),
        ("hi", False),
        ("xdz", True),
        ("xa", False),
        ("x\n", False),
        ('12"\\', True),
        ('1234"\\aaa', True),
        ('12345"\\', False),
        ('12"\\a', False),
    ],
)
def test_the_recogniser_reads_llama_cpp_syntax(text: str, expected: bool) -> None:
    assert gbnf.parse(SYNTAX).accepts(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        'root ::= "a\\q"\n',  # unknown escape
        'root ::= "\\x4"\n',  # short hex escape
        "root ::= a\n",  # undefined rule
        'root ::= "a"\n  "b"\n',  # a newline inside a rule, outside parentheses
        "root ::= *\n",  # a quantifier with nothing before it
        'root ::= "a" "b\n',  # unclosed literal
        'root = "a"\n',
        'root ::= x\nx ::= x "a" | "b"\n',  # left recursion
        'root ::= ("a"{1,100}){1,100}\n',  # past llama.cpp's 2000 rules
    ],
)
def test_the_recogniser_refuses_what_llama_cpp_refuses(text: str) -> None:
    with pytest.raises(gbnf.GrammarError):
        gbnf.parse(text)


# -- the step after a success, and schemas of odd shapes ------------------------------------------------------


def test_after_a_success_the_step_opens_with_words_and_is_free_after_them() -> None:
    g = gbnf.parse(call_grammar(list(TOOLS), lead="words"))
    for text in [
        "Released 1.4.2 to beta.",
        "Files:\n  a.py\n  b.py",
        "Done: `a.py` changed, x < 5.",
        "Here it is:\n```\noutput\n```",
        "Released. Next:\n" + call("status", {}),  # words, then a call: recovery reads it
    ]:
        assert g.accepts(text), text
    for text in ["", call("status", {}), fenced(call("status", {})), "<tool_call>", "`a.py` done"]:
        assert not g.accepts(text), text


def test_a_step_that_must_act_is_one_valid_call_in_any_of_the_three_forms_and_nothing_else() -> None:
    g = gbnf.parse(call_grammar(list(TOOLS), lead="call"))
    right = call("release", {"version": "1.4.2", "channel": "beta"})
    for text in [right, fenced(right), f"<tool_call>\n{right}\n</tool_call>", "\n  " + right]:
        assert g.accepts(text), text
    for text in [
        "",
        "Released 1.4.2 to beta.",  # words: the step must act
        "I will run it:\n" + right,  # words before the call
        call("release", {"version": "1.4", "channel": "beta"}),  # the pattern is not met
        call("release", {"version": "1.4.2", "channel": "beta"}) + "\nDone.",  # words after the call
        call("nope", {}),
    ]:
        assert not g.accepts(text), text


@pytest.mark.parametrize("required", [None, True, "service", [["service"]], [{"x": 1}]])
def test_a_required_of_the_wrong_shape_is_read_as_none(required: Any) -> None:
    nested = {"type": "object", "properties": {"service": {"type": "string"}}, "required": required}
    tool = ToolSpec(
        name="t",
        description="",
        parameters={"type": "object", "properties": {"opts": nested}, "required": ["opts"]},
    )
    assert accepts(call("t", {"opts": {"service": "a"}}), (tool,))
    assert accepts(call("t", {"opts": {}}), (tool,))


def test_an_open_ended_object_or_a_required_key_without_a_property_takes_any_keys() -> None:
    for schema in (
        {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": True},
        {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}},
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]},
    ):
        tool = ToolSpec(name="t", description="", parameters=schema)
        assert accepts(call("t", {"a": "x", "b": "y"}), (tool,)), schema


def test_many_optional_keys_are_said_in_any_order_and_the_grammar_stays_small() -> None:
    props = {f"k{i}": {"type": "string", "enum": [f"v{j}" for j in range(10)]} for i in range(100)}
    tool = ToolSpec(name="t", description="", parameters={"type": "object", "properties": props})
    text = call_grammar([tool])
    assert len(text) < 64 * 1024  # linear in the keys: said in every order, it would be ~100 times more
    assert accepts(call("t", {"k90": "v3", "k2": "v9"}), (tool,))
    assert not accepts(call("t", {"k90": "nope"}), (tool,))


def test_a_schema_too_big_to_say_is_any_object() -> None:
    props = {f"k{i}": {"type": "string", "enum": [f"value-{i}-{j}" for j in range(400)]} for i in range(40)}
    tool = ToolSpec(name="t", description="", parameters={"type": "object", "properties": props})
    text = call_grammar([tool])
    assert len(text) < 20_000  # said as any object; the contract checks the values
    assert accepts(call("t", {"k1": "anything", "other": 1}), (tool,))
