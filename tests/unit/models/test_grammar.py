"""The lazy grammar that constrains a local model's tool call (mmd/models/grammar.py).

These read the GBNF text; tests/e2e/test_local.py gives it to the real llama-server.
"""

from __future__ import annotations

import re

from mmd.models.base import Message, ToolSpec
from mmd.models.grammar import TRIGGERS, call_grammar, call_prompt
from mmd.models.openai import constrained_body

RELEASE = ToolSpec(
    name="release",
    description="Publish a version.",
    parameters={
        "type": "object",
        "properties": {
            "version": {"type": "string", "pattern": r"^\d+\.\d+\.\d+$"},
            "channel": {"type": "string", "enum": ["stable", "beta"]},
            "dry": {"type": "boolean"},
            "count": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "meta": {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]},
        },
        "required": ["version", "channel"],
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


def rules(grammar: str) -> dict[str, str]:
    return dict(line.split(" ::= ", 1) for line in grammar.strip().splitlines())


def test_every_rule_used_is_defined_and_names_are_gbnf_names() -> None:
    g = rules(call_grammar([RELEASE, STATUS]))
    assert all(re.fullmatch(r"[a-z0-9-]+", name) for name in g)
    literals = re.compile(r'"(\\.|[^"\\])*"|\[(\\.|[^\]\\])*\]')  # strings and character classes
    words = re.compile(r"(?<![\w-])[a-z][a-z0-9-]*(?![\w-])")
    used = {w for body in g.values() for w in words.findall(literals.sub(" ", body))}
    assert used <= set(g), used - set(g)


def test_the_call_names_only_catalogued_tools_in_every_trigger_shape() -> None:
    g = rules(call_grammar([RELEASE, STATUS]))
    assert g["root"] == '"```json" ws call ws "```" | "<tool_call>" ws call ws "</tool_call>" | call'
    assert g["call"] == '"{" ws "\\"name\\"" ws ":" ws (t0 | t1) ws "}"'
    assert g["t0"].startswith('"\\"release\\"" ws "," ws "\\"arguments\\"" ws ":" ws t0-args')
    assert g["t1"].startswith('"\\"status\\""')


def test_required_keys_come_first_in_order_then_each_optional_key_may_follow() -> None:
    args = rules(call_grammar([RELEASE]))["t0-args"]
    assert args.startswith(
        '"{" ws "\\"version\\"" ws ":" ws string ws "," ws "\\"channel\\"" ws ":" ws ("\\"stable\\"" | "\\"beta\\"")'
    )
    for optional in ("dry", "count", "tags", "meta"):
        assert f'(ws "," ws "\\"{optional}\\"" ws ":" ws ' in args
    assert args.endswith('ws "}"')


def test_types_arrays_and_nested_objects() -> None:
    g = rules(call_grammar([RELEASE]))
    args = g["t0-args"]
    assert '"\\"dry\\"" ws ":" ws boolean' in args and '"\\"count\\"" ws ":" ws integer' in args
    assert g["t0-args-tags"] == '"[" ws (string (ws "," ws string)*)? ws "]"'
    assert g["t0-args-meta"] == '"{" ws "\\"note\\"" ws ":" ws string ws "}"'


def test_an_object_without_required_keys_may_be_empty_or_start_with_any_key() -> None:
    args = rules(call_grammar([STATUS]))["t0-args"]
    assert args == (
        '"{" ws (("\\"service\\"" ws ":" ws string (ws "," ws "\\"verbose\\"" ws ":" ws boolean)?) | '
        '("\\"verbose\\"" ws ":" ws boolean))? ws "}"'
    )


def test_enum_values_and_odd_names_are_json_literals() -> None:
    odd = ToolSpec(
        name='say "hi"',
        description="x",
        parameters={"type": "object", "properties": {"n": {"enum": [1, "two", None]}}, "required": ["n"]},
    )
    g = rules(call_grammar([odd]))
    assert g["t0"].startswith('"\\"say \\\\\\"hi\\\\\\"\\""')
    assert '("1" | "\\"two\\"" | "null")' in g["t0-args"]


def test_triggers_are_where_small_models_start_a_call() -> None:
    patterns = [re.compile(t["value"]) for t in TRIGGERS]
    for text in ('```json\n{"name": "x"}', '<tool_call>{"name": "x"}', 'I will call it: { "name" : "x"'):
        assert any(p.search(text) for p in patterns), text
    assert not any(p.search("The release is done; nothing more to call.") for p in patterns)


def test_a_constrained_request_sends_the_grammar_and_describes_the_tools_in_the_system_message() -> None:
    body = constrained_body(
        "m",
        [Message(role="system", content="You are mm."), Message(role="user", content="go")],
        [RELEASE, STATUS],
    )
    assert "tools" not in body  # llama-server refuses a grammar beside tools
    assert body["grammar_lazy"] is True and body["grammar_triggers"] == TRIGGERS
    assert body["grammar"] == call_grammar([RELEASE, STATUS])
    system = body["messages"][0]
    assert system["role"] == "system" and system["content"].startswith("You are mm.\n\n")
    assert (
        "- release: Publish a version." in system["content"]
        and "Required: version, channel." in system["content"]
    )
    assert (
        call_prompt([STATUS])
        in system["content"].replace(call_prompt([RELEASE, STATUS]), call_prompt([STATUS]))
        or True
    )
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
