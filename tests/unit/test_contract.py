"""The typed contract: parsing, coercion and refusal, the answer the model reads, rendering."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mmd import contract, patterns
from mmd.contract import (
    InvalidArguments,
    answer,
    parse_arguments,
    render_description,
    render_schema,
    validate,
)
from mmd.tools.base import ToolError

RELEASE = {
    "type": "object",
    "properties": {
        "version": {"type": "string", "pattern": r"^\d+\.\d+\.\d+$", "description": "Version like 1.4.2"},
        "channel": {"type": "string", "enum": ["stable", "beta"]},
    },
    "required": ["version", "channel"],
}
RELEASE_EXAMPLE = {"version": "1.4.2", "channel": "beta"}


def one(prop: dict[str, Any]) -> dict[str, Any]:
    """A schema with one optional parameter x."""
    return {"type": "object", "properties": {"x": prop}}


def refusal(
    schema: dict[str, Any], args: dict[str, Any], example: dict[str, Any] | None = None
) -> InvalidArguments:
    with pytest.raises(InvalidArguments) as info:
        validate(schema, args, example=example)
    return info.value


# --- parse_arguments ------------------------------------------------------------

PARSED = [
    ("", {}),
    ("  \n", {}),
    ("null", {}),
    ("{}", {}),
    ('{"a": 1, "b": [true, null]}', {"a": 1, "b": [True, None]}),
    # Stringified JSON is unpacked once.
    ('"{\\"version\\": \\"1.4.2\\"}"', {"version": "1.4.2"}),
]


@pytest.mark.parametrize(("raw", "expected"), PARSED)
def test_parse_arguments_accepts(raw: str, expected: dict[str, Any]) -> None:
    assert parse_arguments(raw) == expected


NOT_PARSED = [
    (
        '{"version": "1.4.2" "channel": "beta"}',
        "malformed_json",
        'The arguments are not valid JSON: expecting \',\' delimiter at character 21, just after `{"version": "1.4.2" `.',
    ),
    (
        "{version: 1}",
        "malformed_json",
        "The arguments are not valid JSON: expecting property name enclosed in double quotes at character 2, just after `{`.",
    ),
    (
        "release 1.4.2",
        "malformed_json",
        "The arguments are not valid JSON: expecting value at the very start.",
    ),
    ('{"a": NaN}', "malformed_json", "The arguments are not valid JSON: NaN is not a JSON value."),
    (
        "[1, 2]",
        "not_an_object",
        "The arguments must be a JSON object with one field per parameter, not a list.",
    ),
    ("3", "not_an_object", "The arguments must be a JSON object with one field per parameter, not a number."),
    (
        '"1.4.2"',
        "not_an_object",
        "The arguments must be a JSON object with one field per parameter, not a string.",
    ),
    # Unpacked once only: a string in a string stays a string.
    (
        '"\\"{}\\""',
        "not_an_object",
        "The arguments must be a JSON object with one field per parameter, not a string.",
    ),
    ('{"a": 1, "a": 2}', "duplicate_field", "a is given twice; it is not clear which value is meant."),
]


@pytest.mark.parametrize(("raw", "code", "reason"), NOT_PARSED)
def test_parse_arguments_refuses(raw: str, code: str, reason: str) -> None:
    with pytest.raises(InvalidArguments) as info:
        parse_arguments(raw, example=RELEASE_EXAMPLE)
    assert (info.value.code, info.value.reason) == (code, reason)
    if code != "duplicate_field":
        assert (
            info.value.fix
            == 'Send the arguments as one JSON object, e.g. {"version": "1.4.2", "channel": "beta"}'
        )


# --- validate: lossless coercions -----------------------------------------------

COERCED = [
    ({"type": "integer"}, "3", 3),
    ({"type": "integer"}, "-2", -2),
    ({"type": "integer"}, 7, 7),
    ({"type": "integer"}, 3.0, 3),  # JSON Schema: a zero fraction is an integer
    ({"type": "integer"}, "3.0", 3),
    ({"type": "integer"}, "1e3", 1000),
    ({"type": "number"}, "2.5", 2.5),
    ({"type": "number"}, "3", 3),  # an int stays an int: a declared tool's argv reads "3", not "3.0"
    ({"type": "number"}, -0.5, -0.5),
    ({"type": "boolean"}, "true", True),
    ({"type": "boolean"}, "false", False),
    ({"type": "boolean"}, False, False),
    ({"type": "string"}, "text", "text"),
    ({"type": "string"}, 3, "3"),  # an integer's text is exact
    ({"type": "string"}, -12, "-12"),
    ({"type": "array", "items": {"type": "string"}}, ["a", "b"], ["a", "b"]),
    ({"type": "array", "items": {"type": "string"}}, '["a", "b"]', ["a", "b"]),
    ({"type": "array", "items": {"type": "integer"}}, ["1", 2], [1, 2]),
    ({"type": "array", "items": {"type": "number"}}, [], []),
    ({"type": "object"}, {"k": [1]}, {"k": [1]}),
    ({"type": "object"}, '{"k": 1}', {"k": 1}),
    ({}, ["anything"], ["anything"]),  # no type: passed through
    ({"type": "string", "enum": ["stable", "beta"]}, "beta", "beta"),
    ({"type": "integer", "enum": [1, 2]}, "2", 2),
    ({"type": "string", "pattern": r"^\d+\.\d+\.\d+$"}, "1.4.2", "1.4.2"),
    ({"type": "string", "pattern": r"\d"}, "v1", "v1"),  # unanchored: searched
    ({"type": "string", "pattern": "^(a$|b)"}, "bc", "bc"),
    ({"type": "string", "pattern": "^[$]x$"}, "$x", "$x"),
    ({"type": "string", "pattern": r"^a\$$"}, "a$", "a$"),
    ({"type": "integer", "minimum": 1, "maximum": 8}, 1, 1),
    ({"type": "integer", "minimum": 1, "maximum": 8}, "8", 8),
    ({"type": "string", "minLength": 1, "maxLength": 3}, "abc", "abc"),
]


@pytest.mark.parametrize(("prop", "value", "expected"), COERCED)
def test_validate_converts_losslessly(prop: dict[str, Any], value: Any, expected: Any) -> None:
    out = validate(one(prop), {"x": value})
    assert out == {"x": expected}
    assert type(out["x"]) is type(expected)


DEFAULTS = [
    ({"type": "integer", "default": 4}, {}, {"x": 4}),
    ({"type": "integer", "default": 4}, {"x": None}, {"x": 4}),  # null: not given
    ({"type": "integer"}, {"x": None}, {}),
    ({"type": "integer"}, {}, {}),
]


@pytest.mark.parametrize(("prop", "args", "expected"), DEFAULTS)
def test_validate_fills_defaults(
    prop: dict[str, Any], args: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert validate(one(prop), args) == expected


def test_validate_copies_mutable_defaults() -> None:
    schema = one({"type": "array", "default": []})
    validate(schema, {})["x"].append(1)
    assert validate(schema, {}) == {"x": []}


# --- validate: refusals -----------------------------------------------------------

REFUSED = [
    ({"type": "integer"}, "three", "wrong_type", 'x must be a whole number; got "three".'),
    ({"type": "integer"}, "yes", "wrong_type", 'x must be a whole number; got "yes".'),
    ({"type": "integer"}, 3.5, "wrong_type", "x must be a whole number; got 3.5."),
    ({"type": "integer"}, "3.5", "wrong_type", 'x must be a whole number; got "3.5".'),
    ({"type": "integer"}, " 3", "wrong_type", 'x must be a whole number; got " 3".'),
    ({"type": "integer"}, "+3", "wrong_type", 'x must be a whole number; got "+3".'),
    ({"type": "integer"}, "007", "wrong_type", 'x must be a whole number; got "007".'),
    ({"type": "integer"}, True, "wrong_type", "x must be an integer; got true."),
    ({"type": "integer"}, [3], "wrong_type", "x must be an integer; got [3]."),
    ({"type": "number"}, "1,5", "wrong_type", 'x must be a number; got "1,5".'),
    ({"type": "number"}, "NaN", "wrong_type", 'x must be a number; got "NaN".'),
    ({"type": "number"}, "1e400", "wrong_type", 'x must be a number; got "1e400".'),
    ({"type": "number"}, False, "wrong_type", "x must be a number; got false."),
    ({"type": "boolean"}, "yes", "wrong_type", 'x must be true or false; got "yes".'),
    ({"type": "boolean"}, "True", "wrong_type", 'x must be true or false; got "True".'),
    ({"type": "boolean"}, 1, "wrong_type", "x must be true or false; got 1."),
    ({"type": "string"}, True, "wrong_type", "x must be a string; got true."),
    (
        {"type": "string"},
        1.10,
        "wrong_type",
        "x must be a string; got the number 1.1, whose exact text may be lost: put it in quotes.",
    ),
    (
        {"type": "array", "items": {"type": "string"}},
        "a.py b.py",
        "wrong_type",
        'x must be a list with one item per value; got the single string "a.py b.py".',
    ),
    (
        {"type": "array", "items": {"type": "integer"}},
        [1, "two"],
        "wrong_type",
        'x[1] must be a whole number; got "two".',
    ),
    ({"type": "object"}, "[1]", "wrong_type", 'x must be an object; got "[1]".'),
    (
        {"type": "string", "enum": ["stable", "beta"]},
        "Beta",
        "not_in_enum",
        'x "Beta" is not one of stable, beta. Did you mean beta?',
    ),
    (
        {"type": "string", "enum": ["stable", "beta"]},
        "nightly",
        "not_in_enum",
        'x "nightly" is not one of stable, beta.',
    ),
    (
        {"type": "string", "pattern": r"^\d+\.\d+\.\d+$"},
        "1.4",
        "pattern_mismatch",
        r'x "1.4" does not match the pattern ^\d+\.\d+\.\d+$.',
    ),
    # Python's $ would match before a final newline; the contract's does not.
    (
        {"type": "string", "pattern": r"^\d+\.\d+\.\d+$"},
        "1.4.2\n",
        "pattern_mismatch",
        r'x "1.4.2\n" does not match the pattern ^\d+\.\d+\.\d+$.',
    ),
    (
        {"type": "integer", "minimum": 1, "maximum": 8},
        0,
        "out_of_range",
        "x 0 is out of range: it must be from 1 to 8.",
    ),
    (
        {"type": "integer", "minimum": 1, "maximum": 8},
        "9",
        "out_of_range",
        "x 9 is out of range: it must be from 1 to 8.",
    ),
    (
        {"type": "number", "minimum": 0.5},
        0.25,
        "out_of_range",
        "x 0.25 is out of range: it must be at least 0.5.",
    ),
    ({"type": "integer", "maximum": 8}, 9, "out_of_range", "x 9 is out of range: it must be at most 8."),
    (
        {"type": "string", "minLength": 1},
        "",
        "out_of_range",
        "x is 0 characters long; it must be at least 1 character.",
    ),
    (
        {"type": "string", "maxLength": 3},
        "abcd",
        "out_of_range",
        "x is 4 characters long; it must be at most 3 characters.",
    ),
]


@pytest.mark.parametrize(("prop", "value", "code", "reason"), REFUSED)
def test_validate_refuses(prop: dict[str, Any], value: Any, code: str, reason: str) -> None:
    err = refusal(one(prop), {"x": value})
    assert (err.code, err.field, err.reason, err.cls) == (code, "x", reason, "fix_and_retry")


# A pattern that backtracks: 2**40 ways to fail on HOSTILE. Python's re never finished (the fuzzing
# report's t4: a declared tool's pattern hung the daemon at the model's call).
SLOW = r"^(a|a)+$"
HOSTILE = "a" * 40 + "!"


def test_a_pattern_that_cannot_be_checked_in_time_is_answered() -> None:
    schema = {"type": "object", "properties": {"v": {"type": "string", "pattern": SLOW}}, "required": ["v"]}
    err = refusal(schema, {"v": HOSTILE})
    seconds = f"{patterns.SECONDS:g}"
    assert (err.code, err.field, err.cls) == ("pattern_timeout", "v", "fix_and_retry")
    assert (
        err.reason
        == f"v could not be checked against the pattern {SLOW} in time: the check was stopped after {seconds} s."
    )
    assert (
        err.fix
        == "Send a shorter v; if the check times out again, the tool's pattern is at fault: tell the user."
    )
    text = answer("echo_it", json.dumps({"v": HOSTILE}), err, schema=schema).content
    assert text.startswith(f"echo_it was not run. v could not be checked against the pattern {SLOW} in time")


def test_the_patterns_of_one_call_share_one_deadline() -> None:
    # A thousand items, each of which would use the whole deadline: the call is still answered at once.
    schema = {
        "type": "object",
        "properties": {
            "vs": {"type": "array", "items": {"type": "string", "pattern": SLOW}},
            "w": {"type": "string", "pattern": "^a"},
        },
    }
    with pytest.raises(InvalidArguments) as info:
        validate(schema, {"vs": [HOSTILE] * 1000, "w": "abc"})
    assert [(p.code, p.field) for p in info.value.problems] == [
        ("pattern_timeout", "vs"),
        ("pattern_timeout", "w"),
    ]
    assert info.value.problems[0].reason.startswith(f"vs[0] could not be checked against the pattern {SLOW}")


def test_the_nested_repeat_of_the_fuzzing_report_is_a_mismatch() -> None:
    err = refusal(one({"type": "string", "pattern": "^(a+)+$"}), {"x": "a" * 34 + "!"})
    assert (err.code, err.reason) == (
        "pattern_mismatch",
        f'x "{"a" * 34}!" does not match the pattern ^(a+)+$.',
    )


def test_schema_pattern_refuses_what_would_take_long_to_compile() -> None:
    with pytest.raises(re.error, match="too complex"):
        contract.schema_pattern("^(?:a{1000}){1000}$")


FIXES = [
    ({"type": "integer"}, "three", None, "Send x as an integer."),
    ({"type": "integer"}, "three", {"x": 3}, "Send x as an integer, e.g. 3."),
    (
        {"type": "array", "items": {"type": "string"}},
        "a",
        {"x": ["a.py"]},
        'Send x as a list, e.g. ["a.py"].',
    ),
    ({"type": "string", "enum": ["a", "b"]}, "c", None, "Send x as one of: a, b."),
    ({"type": "string", "pattern": "^v"}, "1", None, "Send x matching ^v."),
    ({"type": "string", "pattern": "^v"}, "1", {"x": "v1"}, 'Send x like "v1".'),
    ({"type": "integer", "minimum": 1, "maximum": 8}, 0, None, "Send a value from 1 to 8 for x."),
    ({"type": "string", "minLength": 2}, "a", None, "Send x with at least 2 characters."),
]


@pytest.mark.parametrize(("prop", "value", "example", "fix"), FIXES)
def test_each_refusal_says_how_to_fix(prop: dict[str, Any], value: Any, example: Any, fix: str) -> None:
    assert refusal(one(prop), {"x": value}, example).fix == fix


@pytest.mark.parametrize(("prop", "value", "example", "fix"), FIXES)
def test_an_example_made_on_demand_words_the_same_fix(
    prop: dict[str, Any], value: Any, example: Any, fix: str
) -> None:
    made: list[int] = []

    def make() -> Any:
        made.append(1)
        return example

    err = refusal(one(prop), {"x": value}, make)  # type: ignore[arg-type]
    assert (err.fix, err.example, len(made)) == (fix, example, 1)


def test_an_example_made_on_demand_is_not_made_for_a_valid_call() -> None:
    """A write tool's example is a shape made from its schema (calls._answer_example): only a refusal quotes
    it, so a valid call, which is nearly every call, does not make it."""

    def make() -> dict[str, Any]:
        raise AssertionError("made for a valid call")

    assert validate(RELEASE, dict(RELEASE_EXAMPLE), example=make) == RELEASE_EXAMPLE
    err = refusal(RELEASE, {"version": "1.4.2"}, lambda: RELEASE_EXAMPLE)  # type: ignore[arg-type]
    assert (err.fix, err.example) == ('Add "channel": "beta".', RELEASE_EXAMPLE)


def test_unknown_field_is_named_with_did_you_mean() -> None:
    err = refusal(RELEASE, {"versoin": "1.4.2", "channel": "beta"}, RELEASE_EXAMPLE)
    assert [(p.code, p.field, p.reason) for p in err.problems] == [
        ("unknown_field", "versoin", "versoin is not a parameter. Did you mean version?"),
        ("missing_required", "version", "version is required but missing."),
    ]
    assert err.fix == 'Use only these fields: version, channel. Add "version": "1.4.2".'


def test_unknown_field_without_a_near_name() -> None:
    err = refusal(RELEASE, {**RELEASE_EXAMPLE, "force": True})
    assert (err.code, err.field, err.reason) == ("unknown_field", "force", "force is not a parameter.")


def test_additional_properties_allowed_pass_through() -> None:
    schema = {**RELEASE, "additionalProperties": True}
    assert validate(schema, {**RELEASE_EXAMPLE, "force": True}) == {**RELEASE_EXAMPLE, "force": True}


def test_missing_required_without_example() -> None:
    err = refusal(RELEASE, {"version": "1.4.2"})
    assert (err.code, err.field, err.reason, err.fix) == (
        "missing_required",
        "channel",
        "channel is required but missing.",
        "Add channel (string).",
    )


def test_every_problem_is_reported_and_field_is_the_first() -> None:
    schema = {
        "type": "object",
        "properties": {
            "count": {"type": "integer"},
            "mode": {"type": "string", "enum": ["fast", "slow"]},
            "path": {"type": "string"},
        },
        "required": ["path"],
    }
    err = refusal(schema, {"count": "three", "mode": "quick", "extra": 1})
    assert [p.code for p in err.problems] == [
        "unknown_field",
        "wrong_type",
        "not_in_enum",
        "missing_required",
    ]
    assert (err.code, err.field) == ("unknown_field", "extra")
    assert err.reason == (
        'extra is not a parameter. count must be a whole number; got "three". '
        'mode "quick" is not one of fast, slow. path is required but missing.'
    )


def test_packed_call_is_refused_naming_both_fields() -> None:
    err = refusal(RELEASE, {"version": "1.4.2 1.4.2, channel beta"}, RELEASE_EXAMPLE)
    assert [(p.code, p.field) for p in err.problems] == [
        ("pattern_mismatch", "version"),
        ("missing_required", "channel"),
    ]


# --- properties: never a crash, never a changed meaning --------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
NUMBER_TEXT = st.one_of(st.integers().map(str), st.floats(allow_nan=False).map(repr), st.text(max_size=8))


@given(st.text())
def test_parse_arguments_returns_a_dict_or_answers(raw: str) -> None:
    try:
        assert isinstance(parse_arguments(raw), dict)
    except InvalidArguments as err:
        assert err.code in {"malformed_json", "not_an_object", "duplicate_field"}


@given(
    st.sampled_from(["integer", "number", "boolean", "string", "array", "object"]), JSON_VALUES | NUMBER_TEXT
)
def test_an_accepted_value_means_what_was_sent(kind: str, sent: Any) -> None:
    try:
        got = validate(one({"type": kind}), {"x": sent})
    except InvalidArguments:
        return
    if sent is None:
        assert got == {}
        return
    value = got["x"]
    if isinstance(sent, str) and not isinstance(value, str):
        assert value == json.loads(sent)  # unquoted, nothing else
    elif isinstance(value, str) and not isinstance(sent, str):
        assert type(sent) is int and value == str(sent)
    else:
        assert value == sent


@given(st.integers(), st.integers(-5, 5), st.integers(-5, 5))
def test_out_of_range_is_refused_never_clamped(value: int, low: int, high: int) -> None:
    schema = one({"type": "integer", "minimum": low, "maximum": high})
    try:
        assert validate(schema, {"x": value}) == {"x": value}
    except InvalidArguments as err:
        assert err.code == "out_of_range"
        assert not low <= value <= high


# --- answer ---------------------------------------------------------------------

SEED_ANSWER = """\
release was not run. version "1.4.2 1.4.2, channel beta" does not match the pattern ^\\d+\\.\\d+\\.\\d+$. \
It seems to hold other parameters too (channel). channel is required but missing.
You sent: release({"version": "1.4.2 1.4.2, channel beta"})
Fix: Give each parameter as its own field. Send version like "1.4.2". Add "channel": "beta".
Parameters:
- version (string): Version like 1.4.2. Required. Pattern: ^\\d+\\.\\d+\\.\\d+$
- channel (string): Required. One of: stable, beta.
Example: release({"version": "1.4.2", "channel": "beta"})"""


def release_answer(raw: str) -> Any:
    try:
        validate(RELEASE, parse_arguments(raw, example=RELEASE_EXAMPLE), example=RELEASE_EXAMPLE)
    except ToolError as err:
        return answer("release", raw, err, schema=RELEASE, example=RELEASE_EXAMPLE)
    raise AssertionError("the call was accepted")


def test_the_packed_hint_looks_only_at_a_short_string() -> None:
    # Each property's search of a long string cost its whole length: 1 MiB × 2,000 properties took 44 s.
    long = '{"version": "' + "1.4.2 channel beta " * 500 + '"}'
    assert "It seems to hold other parameters" not in release_answer(long).content
    assert (
        "It seems to hold other parameters too (channel)"
        in release_answer('{"version": "1.4.2 channel beta"}').content
    )


def test_answer_to_the_seed_packed_call() -> None:
    raw = '{"version": "1.4.2 1.4.2, channel beta"}'
    result = release_answer(raw)
    text, last = result.content.rsplit("\n", 1)
    assert text == SEED_ANSWER
    assert result.ok is False
    fields = json.loads(last)
    assert fields == {
        "ok": False,
        "error": {
            "code": "pattern_mismatch",
            "field": "version",
            "reason": SEED_ANSWER.split("\n")[0].removeprefix("release was not run. "),
            "class": "fix_and_retry",
            "fix": 'Give each parameter as its own field. Send version like "1.4.2". Add "channel": "beta".',
            "example": RELEASE_EXAMPLE,
        },
    }
    # data has the same fields, plus each problem on its own.
    assert result.data == {
        "ok": False,
        "error": {
            **fields["error"],
            "problems": [
                {
                    "code": "pattern_mismatch",
                    "field": "version",
                    "reason": 'version "1.4.2 1.4.2, channel beta" does not match the pattern ^\\d+\\.\\d+\\.\\d+$. '
                    "It seems to hold other parameters too (channel).",
                    "fix": 'Give each parameter as its own field. Send version like "1.4.2".',
                },
                {
                    "code": "missing_required",
                    "field": "channel",
                    "reason": "channel is required but missing.",
                    "fix": 'Add "channel": "beta".',
                },
            ],
        },
    }


QUOTED = [
    '{"version": "1.4.2 1.4.2, channel beta"}',
    '{"version":"1.4.2" ,  "channel":"Beta"}',  # spacing kept as sent
    '{"version": "1.4.2" "channel": "beta"}',  # malformed, quoted all the same
    '"{\\"version\\": 1}"',
]


@pytest.mark.parametrize("raw", QUOTED)
def test_answer_quotes_the_call_exactly(raw: str) -> None:
    assert f"\nYou sent: release({raw})\n" in release_answer(raw).content


def test_answer_cuts_a_long_call_in_the_middle() -> None:
    raw = json.dumps({"version": "1" * 1000, "channel": "beta"})
    line = release_answer(raw).content.split("\n")[1]
    assert line == f"You sent: release({raw[:400]}…[{len(raw) - 600} characters cut]…{raw[-200:]})"


def test_answer_to_malformed_json() -> None:
    lines = release_answer('{"version": "1.4.2" "channel": "beta"}').content.split("\n")
    assert lines[0] == (
        "release was not run. The arguments are not valid JSON: expecting ',' delimiter at character 21, "
        'just after `{"version": "1.4.2" `.'
    )
    assert (
        lines[2] == 'Fix: Send the arguments as one JSON object, e.g. {"version": "1.4.2", "channel": "beta"}'
    )
    assert lines[3] == "Parameters:"


def test_answer_to_a_failed_run_has_no_parameter_list() -> None:
    err = ToolError("not_found", "src/mian.py does not exist.", field="path", fix="Did you mean src/main.py?")
    result = answer("read_file", '{"path": "src/mian.py"}', err, schema=RELEASE, example={"path": "x"})
    assert result.content == (
        "read_file failed. src/mian.py does not exist.\n"
        'You sent: read_file({"path": "src/mian.py"})\n'
        "Fix: Did you mean src/main.py?\n"
        '{"ok": false, "error": {"code": "not_found", "field": "path", "reason": "src/mian.py does not exist.", '
        '"class": "fix_and_retry", "fix": "Did you mean src/main.py?"}}'
    )
    assert result.data == err.fields()


ERROR_CLASSES = [
    ("terminal", "Sending the same call again will not help."),
    ("retry_after", "The same call may work later."),
]


@pytest.mark.parametrize(("cls", "line"), ERROR_CLASSES)
def test_answer_says_what_the_class_means(cls: Any, line: str) -> None:
    result = answer("grep", "{}", ToolError("busy", "Busy.", cls=cls), schema=None, example=None)
    assert result.content.split("\n")[2] == line


# --- rendering ------------------------------------------------------------------

RENDERED = [
    (
        RELEASE,
        False,
        {
            "type": "object",
            "properties": {
                "version": {
                    "type": "string",
                    "description": r"Version like 1.4.2. Required. Pattern: ^\d+\.\d+\.\d+$",
                },
                "channel": {"type": "string", "description": "Required. One of: stable, beta."},
            },
        },
    ),
    (
        RELEASE,
        True,
        {
            "type": "object",
            "properties": {
                "version": {
                    "type": "string",
                    "pattern": r"^\d+\.\d+\.\d+$",
                    "description": r"Version like 1.4.2. Required. Pattern: ^\d+\.\d+\.\d+$",
                },
                "channel": {
                    "type": "string",
                    "enum": ["stable", "beta"],
                    "description": "Required. One of: stable, beta.",
                },
            },
            "required": ["version", "channel"],
            "additionalProperties": False,
        },
    ),
    (
        {
            "type": "object",
            "properties": {
                "hours": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 8,
                    "default": 4,
                    "description": "Window length",
                },
                "files": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
                "name": {"type": "string", "minLength": 1},
                "dry_run": {"type": "boolean", "default": False},
            },
        },
        False,
        {
            "type": "object",
            "properties": {
                "hours": {"type": "integer", "description": "Window length. Default: 4. From 1 to 8."},
                "files": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Optional. Each item: One of: a, b.",
                },
                "name": {"type": "string", "description": "Optional. At least 1 character."},
                "dry_run": {"type": "boolean", "description": "Default: false."},
            },
        },
    ),
]


@pytest.mark.parametrize(("schema", "strict", "expected"), RENDERED)
def test_render_schema(schema: dict[str, Any], strict: bool, expected: dict[str, Any]) -> None:
    assert render_schema(schema, strict=strict) == expected


def test_render_schema_leaves_the_tool_schema_alone() -> None:
    before = json.dumps(RELEASE)
    render_schema(RELEASE)
    assert json.dumps(RELEASE) == before


DESCRIBED = [
    (
        ("Publish a release of the product to one channel",),
        {"effects": "write", "example": RELEASE_EXAMPLE},
        "Publish a release of the product to one channel. Changes files or state. "
        'Example: {"version": "1.4.2", "channel": "beta"}. Give each parameter as its own field.',
    ),
    (
        ("Move the pickup window for one shipment.",),
        {
            "effects": "Writes to the dispatch system and notifies the customer",
            "prerequisite": "shipment_get_pickup",
        },
        "Move the pickup window for one shipment. Writes to the dispatch system and notifies the customer. "
        "Call shipment_get_pickup first. Give each parameter as its own field.",
    ),
    (
        ("Report the status of one service.",),
        {"prerequisite": "Call status_list to find the service names."},
        "Report the status of one service. Call status_list to find the service names. "
        "Give each parameter as its own field.",
    ),
    (
        ("Delete a branch",),
        {"effects": "destructive"},
        "Delete a branch. Destructive: cannot be undone. Give each parameter as its own field.",
    ),
]


@pytest.mark.parametrize(("args", "kwargs", "expected"), DESCRIBED)
def test_render_description(args: tuple[str], kwargs: dict[str, Any], expected: str) -> None:
    assert render_description(*args, **kwargs) == expected


def test_a_string_unpacked_past_the_depth_limit_is_answered_with_its_field():
    schema = {"type": "object", "properties": {"items": {"type": "array"}}}
    packed = "[" * 100 + "]" * 100
    with pytest.raises(InvalidArguments) as caught:
        validate(schema, parse_arguments(json.dumps({"items": packed})))
    assert (caught.value.code, caught.value.field) == ("too_deep", "items")
    assert caught.value.reason == "items is nested too deep: 100 levels; the limit is 64."


def test_shape_example_says_each_parameter_with_no_value_that_would_act():
    schema = {
        "type": "object",
        "properties": {
            "env": {"type": "string", "enum": ["staging", "production"]},
            "commit": {"type": "string", "pattern": "^[0-9a-f]{7,40}$"},
            "count": {"type": "integer", "minimum": 1, "maximum": 5},
            "ratio": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "force": {"type": "boolean"},
            "meta": {"type": "object", "properties": {"note": {"type": "string"}}},
        },
    }
    shape = contract.shape_example(schema)
    assert shape == {
        "env": "<one of: staging, production>",
        "commit": "<commit matching ^[0-9a-f]{7,40}$>",
        "count": "<whole number from 1 to 5>",
        "ratio": "<number>",
        "tags": ["<tags>"],
        "force": "<true or false>",
        "meta": {"note": "<note>"},
    }
    # A model that copies the shape as its call is refused by the contract, never runs anything.
    with pytest.raises(contract.ToolError):
        contract.validate(schema, {"commit": shape["commit"], "count": shape["count"]})


@pytest.mark.parametrize(
    "value",
    [{"b": 1, "a": [1.5, "é ü", None, True]}, "x\u2028y", 3, 1e16, {"z": {"y": 2**70, "x": -0.0}}, [], {}],
)
def test_canonical_json_is_json_dumps_with_sorted_keys_and_no_spaces(value: object) -> None:
    # Idempotency keys and loop detection compare these texts: a kept encoder must write what
    # json.dumps wrote, byte for byte, or a call replayed across an upgrade would not match.
    assert contract.canonical(value) == json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    assert contract.canonical({"b": 2, "a": 1}) == '{"a":1,"b":2}'


@pytest.mark.parametrize(
    "text",
    [
        '\ufeff{"a": 1}',
        '{"a": 1, "a": 2}',
        '{"a": NaN}',
        '{"a": -Infinity}',
        '{"a": 1}',
        "[1]",
        "{bad",
        '"{}"',
    ],
)
def test_the_kept_decoder_reads_what_json_loads_with_the_same_hooks_reads(text: str) -> None:
    # contract._loads decodes with one JSONDecoder made once: the same values, the same refusals.
    def reference() -> Any:
        hooks = {"object_pairs_hook": contract.no_duplicate_keys, "parse_constant": contract._refuse_constant}
        return json.loads(text, **hooks)

    try:
        expected: Any = reference()
    except Exception as exc:  # the kind and text are what is compared
        expected = (type(exc), str(exc))
    try:
        got: Any = contract._loads(text)
    except Exception as exc:
        got = (type(exc), str(exc))
    assert got == expected
