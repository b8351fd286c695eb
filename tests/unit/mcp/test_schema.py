"""The whole inputSchema of an MCP tool, checked with jsonschema (mmd/mcp/schema.py) through the contract."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest

from mmd import contract
from mmd.kept import Kept
from mmd.mcp.schema import (
    MAX_MATCH_WORK,
    MAX_PATTERNS,
    MAX_SCHEMA_BYTES,
    REGEXES_KEPT,
    Patterns,
    SchemaCheck,
    Unusable,
    check_for,
)
from mmd.mcp.tool import normalize_schema

EDIT = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "edits": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "properties": {"oldText": {"type": "string"}, "newText": {"type": "string"}},
                "required": ["oldText", "newText"],
                "additionalProperties": False,
            },
        },
        "count": {"type": "integer", "exclusiveMinimum": 0},
    },
    "required": ["path", "edits"],
}


def check(schema: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """The contract's validate, as the call path runs it for an MCP tool."""
    return contract.validate(normalize_schema(schema), args, full=SchemaCheck(schema))


def problems(schema: dict[str, Any], args: dict[str, Any]) -> list[tuple[str, str | None]]:
    with pytest.raises(contract.InvalidArguments) as info:
        check(schema, args)
    return [(p.code, p.field) for p in info.value.problems]


def test_nested_violations_are_each_found_with_their_json_path():
    found = problems(
        EDIT, {"path": "a", "edits": [{"old": "x", "newText": "y"}, {"oldText": 3, "newText": ""}]}
    )
    assert found == [
        ("missing_required", "edits[0].oldText"),
        ("unknown_field", "edits[0].old"),
        ("wrong_type", "edits[1].oldText"),
    ]
    assert problems(EDIT, {"path": "a", "edits": [], "count": 0}) == [
        ("out_of_range", "edits"),
        ("out_of_range", "count"),
    ]


def test_the_contracts_own_problems_come_first_and_a_field_is_said_once():
    # path: missing (the contract's), count: "x" is not an integer (the contract's; jsonschema's
    # same complaint is left out), edits[0]: jsonschema's.
    found = problems(EDIT, {"count": "x", "edits": [{}]})
    assert found == [
        ("missing_required", "path"),
        ("wrong_type", "count"),
        ("missing_required", "edits[0].oldText"),
        ("missing_required", "edits[0].newText"),
    ]


def test_lossless_coercion_still_applies_before_the_whole_check():
    assert check(EDIT, {"path": "a", "edits": '[{"oldText": "x", "newText": "y"}]', "count": "2"}) == {
        "path": "a",
        "edits": [{"oldText": "x", "newText": "y"}],
        "count": 2,
    }


def test_the_answer_quotes_the_call_and_says_what_each_field_should_be():
    raw = '{"path": "a", "edits": [{"old": "x"}]}'
    with pytest.raises(contract.InvalidArguments) as info:
        check(EDIT, json.loads(raw))
    text = contract.answer("edit_file", raw, info.value, schema=normalize_schema(EDIT)).content
    lines = text.splitlines()
    assert lines[0] == (
        "edit_file was not run. edits[0].oldText is required but missing. edits[0].newText is required "
        "but missing. edits[0].old is not a field here. Did you mean oldText?"
    )
    assert lines[1] == f"You sent: edit_file({raw})"
    assert lines[2] == (
        "Fix: Add edits[0].oldText (a string). Add edits[0].newText (a string). "
        "Use only these fields in edits[0]: oldText, newText."
    )
    data = json.loads(lines[-1])
    assert (data["error"]["code"], data["error"]["field"]) == ("missing_required", "edits[0].oldText")
    assert len(info.value.problems) == 3


def test_oneof_format_and_exclusive_bounds():
    schema = {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date"},
            "target": {
                "oneOf": [
                    {"type": "object", "required": ["host"]},
                    {"type": "object", "required": ["group"]},
                ]
            },
        },
    }
    with pytest.raises(contract.InvalidArguments) as info:
        check(schema, {"when": "soon", "target": {"name": "x"}})
    reasons = [p.reason for p in info.value.problems]
    assert reasons[0] == 'when "soon" is not a valid date.'
    assert reasons[1] == 'target {"name": "x"} does not match exactly one of the 2 shapes the schema allows.'
    assert (
        info.value.problems[1].fix
        == "Send target in exactly one of these shapes: an object with host; an object with group."
    )
    assert check(schema, {"when": "2026-12-02", "target": {"host": "a"}})


def test_the_draft_is_the_schemas_own_else_2020_12():
    # prefixItems means something only from 2020-12; in draft-07 it is an unknown keyword.
    tuple_schema = {
        "type": "object",
        "properties": {"pair": {"type": "array", "prefixItems": [{"type": "string"}]}},
    }
    assert SchemaCheck(tuple_schema).problems({"pair": [1]}) == [
        contract.Problem(
            "wrong_type", "pair[0]", "pair[0] must be a string; got 1.", "Send pair[0] as a string."
        )
    ]
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", **tuple_schema}
    assert SchemaCheck(draft7).dialect == "http://json-schema.org/draft-07/schema#"
    assert SchemaCheck(draft7).problems({"pair": [1]}) == []


def test_a_catastrophic_pattern_runs_in_linear_time():
    schema = {"type": "object", "properties": {"word": {"type": "string", "pattern": "^(a+)+$"}}}
    found = problems(schema, {"word": "a" * 100_000 + "b"})  # Python's re would not finish
    assert found == [("pattern_mismatch", "word")]
    assert check(schema, {"word": "aaa"}) == {"word": "aaa"}


def test_a_pattern_re2_cannot_run_is_left_to_the_server():
    schema = {"type": "object", "properties": {"w": {"type": "string", "pattern": "^(a)\\1$"}}}
    full = SchemaCheck(schema)
    assert contract.validate(normalize_schema(schema), {"w": "zz"}, full=full) == {"w": "zz"}
    assert full.unchecked_patterns == {"^(a)\\1$"}


def test_a_remote_ref_is_never_fetched(monkeypatch):
    def refuse(*args: Any) -> None:
        raise AssertionError("mm tried to connect")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    schema = {"type": "object", "properties": {"spec": {"$ref": "https://example.com/spec.json"}}}
    full = SchemaCheck(schema)
    assert full.problems({"spec": {"x": 1}}) is None  # not checked in full: the call goes to the server
    assert contract.validate(normalize_schema(schema), {"spec": {"x": 1}}, full=full) == {"spec": {"x": 1}}


def test_refs_that_multiply_the_work_or_loop_stop_at_the_budget():
    defs: dict[str, Any] = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2} for i in range(40)}
    defs["d40"] = {"type": "string"}
    bomb = {"type": "object", "$defs": defs, "properties": {"v": {"$ref": "#/$defs/d0"}}}
    assert SchemaCheck(bomb).problems({"v": 1}) is None
    assert SchemaCheck({"type": "object", "$ref": "#"}).problems({"v": 1}) is None


def test_a_huge_or_invalid_schema_is_unusable():
    huge = {"type": "object", "properties": {f"f{i}": {"description": "x" * 1000} for i in range(300)}}
    assert len(json.dumps(huge)) > MAX_SCHEMA_BYTES
    with pytest.raises(Unusable) as info:
        SchemaCheck(huge)
    assert info.value.too_large
    with pytest.raises(Unusable, match=r"not valid JSON Schema at properties\.a") as info:
        SchemaCheck({"type": "object", "properties": {"a": {"type": "strnig"}}})
    assert not info.value.too_large
    with pytest.raises(Unusable, match="not an object"):
        SchemaCheck(["type"])


def test_a_schema_is_built_once_and_an_unusable_one_stays_unusable():
    from mmd.mcp.schema import check_for

    assert check_for(EDIT) is check_for(json.loads(json.dumps(EDIT)))
    bad = {"type": "object", "properties": {"a": {"type": "strnig"}}}
    for _ in range(2):
        with pytest.raises(Unusable, match="not valid JSON Schema"):
            check_for(bad)


def test_a_schema_with_too_many_patterns_is_unusable_and_one_at_the_limit_runs():
    # 14 bytes of text each, and MiBs in RE2 once a long key meets them: the count is bounded, not the text.
    patterns = {f"[a-z]{{1000}}{i:04d}": {} for i in range(MAX_PATTERNS + 1)}
    many = {"type": "object", "properties": {"w": {"type": "string", "pattern": "^[a-z]+$"}}}
    many["patternProperties"] = patterns
    with pytest.raises(Unusable, match=rf"{MAX_PATTERNS + 2} distinct patterns; the limit is {MAX_PATTERNS}"):
        check_for(many)
    # Unusable, its calls are checked by the contract alone (as make_tools does): still answered.
    with pytest.raises(contract.InvalidArguments) as info:
        contract.validate(normalize_schema(many), {"w": "Y"}, full=Patterns())
    assert [(p.code, p.field) for p in info.value.problems] == [("pattern_mismatch", "w")]
    del patterns["[a-z]{1000}0000"], patterns["[a-z]{1000}0001"]
    many["properties"]["w"]["pattern"] = "[a-z]{1000}0002"  # the same pattern twice counts once
    found = check_for(many).problems({"ab" * 100: "x", "w": "y"})
    assert [(p.code, p.field) for p in found or []] == [("pattern_mismatch", "w")]


def test_a_calls_searches_stop_at_the_work_budget_and_the_next_call_has_its_own():
    """RE2 is linear, in the program's size and the text's: 64 patterns of "[a-z]{1000}" over a key of
    3,000 characters held the event loop for 2 s. A call's searches stop at MAX_MATCH_WORK (left to the
    server, as a pattern RE2 cannot run); the count begins again with each call."""
    ran: list[bool | None] = []

    class Counting(SchemaCheck):
        def search(self, pattern: str, value: str) -> bool | None:
            ran.append(found := super().search(pattern, value))
            return found

    schema = {"type": "object", "properties": {"w": {"type": "string", "pattern": "^[a-z]+$"}}}
    schema["patternProperties"] = {f"[a-z]{{1000}}{i:04d}": {} for i in range(MAX_PATTERNS - 1)}
    check = Counting(schema)
    key = "ab" * 1500
    assert check.problems({key: "x"}) == []  # answered: what was not searched is the server's to check
    per_search = check._compile("[a-z]{1000}0000").programsize * (len(key) + 1)
    assert len(ran) == MAX_PATTERNS - 1
    assert sum(found is not None for found in ran) == MAX_MATCH_WORK // per_search >= 1
    ran.clear()
    assert [(p.code, p.field) for p in check.problems({"w": "Y"}) or []] == [("pattern_mismatch", "w")]
    assert len(ran) == MAX_PATTERNS and None not in ran  # its own count: every search made


def test_a_pattern_past_re2s_memory_budget_is_left_to_the_server():
    big = "[^x]{1000}" * 3  # ~24,000 instructions once compiled: ~400 KiB of program
    schema = {"type": "object", "properties": {"w": {"type": "string", "pattern": big}}}
    full = SchemaCheck(schema)
    assert contract.validate(normalize_schema(schema), {"w": "short"}, full=full) == {"w": "short"}
    assert full.unchecked_patterns == {big}


def test_compiled_regexes_are_kept_for_the_whole_process_at_most_regexes_kept():
    check = SchemaCheck(EDIT)
    first = check._compile("^a0$")
    assert check._compile("^a0$") is first  # compiled once while kept
    others = [SchemaCheck(EDIT) for _ in range(4)]
    for i in range(1, REGEXES_KEPT + 1):
        others[i % 4]._compile(f"^a{i}$")
    assert check._compile("^a0$") is not first  # REGEXES_KEPT compiled since: no check keeps its own


def test_the_schema_cache_is_bounded_by_its_schemas_bytes(monkeypatch):
    from mmd.mcp import schema as module

    monkeypatch.setattr(module, "_CACHE", Kept(module.CACHE_SIZE, 64 * 1024))
    for i in range(20):
        module.check_for({"type": "object", "properties": {f"f{i}": {"description": "x" * 10_000}}})
    huge = {"type": "object", "properties": {"f": {"description": "x" * (MAX_SCHEMA_BYTES + 1)}}}
    with pytest.raises(Unusable):
        module.check_for(huge)
    assert 0 < module._CACHE.held <= 64 * 1024
    assert len(module._CACHE) < 10
    assert all(len(key) == 32 for key in module._CACHE)  # a digest: a refused schema's text is not kept
