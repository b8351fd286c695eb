"""Tool calls written as text (mmd.models.recovery), on the shapes local models really write.

The fixtures in tests/fixtures/recovery/ are outputs of the kind Qwen2.5-Coder
0.5B/1.5B give behind llama.cpp's stock chat templates, which return no
structured tool_calls: the call sits in the content.
"""

from __future__ import annotations

import json

import pytest

from mmd.models.base import Completion, ToolCall
from mmd.models.recovery import HeldText, default_enabled, recover, recover_completion

from ... import paths
from ...counting import Counted

FIXTURES = paths.FIXTURES / "recovery"
TOOLS = ["bash", "read_file", "write_file", "edit_file", "list_files", "grep"]


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def calls_of(calls: list[ToolCall]) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in calls]


# --- outputs captured from the real 0.5B model (tests/fixtures/recovery/captured/README.md) ---------

EVAL_TOOLS = ["release", "pkgtest", "status"]


def captured(name: str) -> str:
    return (FIXTURES / "captured" / name).read_text()


def test_captured_bare_call():
    text, calls = recover(captured("bare_call.txt"), EVAL_TOOLS)
    assert calls_of(calls) == [("release", {"version": "1.4.2", "channel": "beta"})]
    assert text == ""


def test_captured_skill_name_is_a_call_only_when_skills_are_recoverable():
    text = captured("skill_called_as_tool.txt")
    assert recover(text, ["bash", "read_skill"]) == (text, [])
    _, calls = recover(text, ["bash", "read_skill", "release-ops"])
    assert calls_of(calls) == [("release-ops", {"version": "1.4.2"})]


@pytest.mark.parametrize("name", ["unclosed_object.txt", "invented_tool_and_echoed_error.txt"])
def test_captured_outputs_that_are_no_call_stay_text(name):
    text = captured(name)
    assert recover(text, [*EVAL_TOOLS, "bash", "read_skill", "release-ops"]) == (text, [])


def test_captured_runaway_runs_each_distinct_call_once():
    text, calls = recover(captured("runaway_until_token_limit.txt"), EVAL_TOOLS)
    assert calls_of(calls) == [
        ("pkgtest", {"package": "parser"}),
        ("status", {"service": "search"}),
        ("status", {"service": "parser"}),
    ]
    assert text.rstrip().endswith('{"name":')  # the cut-off tail stays text


def test_captured_call_then_invented_result():
    text, calls = recover(captured("call_then_invented_result.txt"), EVAL_TOOLS)
    assert calls_of(calls) == [("pkgtest", {"package": "greet"})]
    assert text == '{"response": "greet: 42 tests passed."}'


# --- hand-written shapes --------------------------------------------------------------------------


def test_fenced_json_with_prose_around_it():
    text, calls = recover(fixture("fenced_json_prose.txt"), TOOLS)
    assert calls_of(calls) == [("read_file", {"path": "README.md"})]
    assert text == (
        "To find out what is in the README, I will read the file using the `read_file` tool.\n\n"
        "This will return the contents of the README.md file."
    )
    assert calls[0].id.startswith("rc_")


def test_fenced_json_alone_leaves_no_text():
    text, calls = recover(fixture("fenced_json_bare.txt"), TOOLS)
    assert calls_of(calls) == [("grep", {"pattern": "TODO", "path": "src"})]
    assert text == ""


def test_two_fenced_calls_in_order_with_distinct_ids():
    text, calls = recover(fixture("two_calls.txt"), TOOLS)
    assert calls_of(calls) == [
        ("list_files", {"path": "."}),
        ("grep", {"pattern": "def main", "path": "."}),
    ]
    assert calls[0].id != calls[1].id
    assert text == "Sure! First I will list the files, then I will search for the function."


def test_a_call_repeated_in_one_message_runs_once():
    # Qwen2.5-Coder-0.5B, stock template, after a tool result: it wrote the call again,
    # then the examples of the other tools, over and over until its token limit.
    repeated = '{"name": "grep", "arguments": {"pattern": "x"}}\n'
    other = '{"name": "list_files", "arguments": {"path": "src"}}\n'
    text, calls = recover(repeated + (other + repeated) * 20, TOOLS)
    assert text == ""
    assert calls_of(calls) == [("grep", {"pattern": "x"}), ("list_files", {"path": "src"})]


def test_qwen_hermes_tool_call_tags():
    text, calls = recover(fixture("tool_call_tags.txt"), TOOLS)
    assert calls_of(calls) == [("read_file", {"path": "setup.py"})]
    assert text == ""
    text, calls = recover(fixture("tool_call_tags_two.txt"), TOOLS)
    assert calls_of(calls) == [("read_file", {"path": "a.txt"}), ("read_file", {"path": "b.txt"})]
    assert text == "I'll check both files."


def test_stringified_arguments_are_unpacked():
    _, [call] = recover(fixture("stringified_arguments.txt"), TOOLS)
    assert call.name == "read_file"
    assert json.loads(call.arguments) == {"path": "pyproject.toml"}


def test_parameters_key_and_bare_object_in_prose():
    _, calls = recover(fixture("parameters_key.txt"), TOOLS)
    assert calls_of(calls) == [("grep", {"pattern": "import os", "path": "."})]
    text, calls = recover(fixture("bare_object_in_prose.txt"), TOOLS)
    assert calls_of(calls) == [("read_file", {"path": "config.yaml"})]
    assert text == "I need to look at the configuration first.  Then I can answer."


@pytest.mark.parametrize(
    "name",
    [
        "package_json.txt",  # a package.json block: no tool is called "my-app", and it has no arguments
        "package_json_tool_name.txt",  # named like a tool, but a manifest: version/main, no arguments
        "unknown_name.txt",  # a call of a tool the catalogue does not hold
        "python_block.txt",  # code that mentions a call is not a call
    ],
)
def test_false_positives_are_left_alone(name):
    original = fixture(name)
    assert recover(original, TOOLS) == (original, [])


def test_a_call_missing_its_last_brace_is_read():
    text, [call] = recover(fixture("malformed.txt"), TOOLS)
    assert (text, call.name, call.arguments) == ("", "read_file", '{"path": "README.md"}')


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (
            '{"name": "grep", "arguments": {"pattern": "x"}}}',
            [("grep", '{"pattern": "x"}')],
        ),  # a brace too many
        ('{"name": "grep", "arguments": {"pattern": "x"', [("grep", '{"pattern": "x"}')]),  # two missing
        (
            '{"name": "grep", "arguments": {"pattern": "a"}}\n{"name": "grep", "arguments": {"pattern": "b"}}',
            [("grep", '{"pattern": "a"}'), ("grep", '{"pattern": "b"}')],
        ),  # two calls in one block
        (
            '{"name": "grep", "arguments": {"pattern": "a"}},\n{"name": "read_file", "arguments": {"path": "b"}}',
            [("grep", '{"pattern": "a"}'), ("read_file", '{"path": "b"}')],
        ),
    ],
)
def test_unbalanced_blocks_and_several_calls_in_one_block_are_read(block, expected):
    for written in (f"```json\n{block}\n```", f"<tool_call>{block}</tool_call>"):
        _, calls = recover(written, TOOLS)
        assert [(c.name, c.arguments) for c in calls] == expected, written


@pytest.mark.parametrize(
    "block",
    [
        '{"name": "grep", "arguments": {"pattern": "x}',  # cut off inside a string
        '{"name": "grep", "arguments": {"pattern": "x"], "y": 1}',  # brackets that do not pair
        '{"name": "grep", "arguments": {"pattern": "a"}, {"name": "grep"}}',  # which call is meant?
    ],
)
def test_a_call_that_cannot_be_read_goes_to_the_contract_to_be_answered(block):
    _, [call] = recover(f"```json\n{block}\n```", TOOLS)
    assert call.name == "grep" and call.arguments == block  # not JSON of an object: answered, quoted back


def test_a_runaway_of_many_calls_in_one_block_is_not_run_but_answered():
    block = "\n".join(json.dumps({"name": "grep", "arguments": {"pattern": f"p{i}"}}) for i in range(12))
    _, [call] = recover(f"```json\n{block}\n```", TOOLS)
    assert call.name == "grep" and call.arguments == block


@pytest.mark.parametrize(
    ("reply", "command"),
    [
        ("./actions/pkgtest greet", "./actions/pkgtest greet"),
        ("`./actions/pkgtest parser`", "./actions/pkgtest parser"),
        ("```bash\n./actions/release 1.4.2 beta\n```", "./actions/release 1.4.2 beta"),
        ("```sh\n$ ls -la\n```", "ls -la"),
        ("$ git status", "git status"),
    ],
)
def test_a_reply_that_is_only_a_shell_command_is_a_bash_call(reply, command):
    text, [call] = recover(reply, TOOLS)
    assert (text, call.name, json.loads(call.arguments)) == ("", "bash", {"command": command})


@pytest.mark.parametrize(
    "reply",
    [
        "Run ./actions/pkgtest greet to test it.",  # prose around it
        "The tests passed.",
        "```python\nprint(1)\n```",
        "```bash\na\nb\nc\nd\n```",  # a script, not a command
        "./",
    ],
)
def test_prose_or_other_code_is_not_a_shell_command(reply):
    assert recover(reply, TOOLS) == (reply, [])
    assert recover("./actions/pkgtest greet", ["read_file"]) == ("./actions/pkgtest greet", [])  # no bash


def test_an_unreadable_block_of_an_unknown_tool_or_no_call_stays_text():
    for block in ('{"name": "nope", "arguments": {"x": 1}', '{"version": "1.0"', "[1, 2"):
        written = f"```json\n{block}\n```"
        assert recover(written, TOOLS) == (written, [])


def test_only_tools_of_the_catalogue():
    original = fixture("fenced_json_prose.txt")
    assert recover(original, ["grep"]) == (original, [])
    assert recover(original, []) == (original, [])


def test_arguments_that_are_not_json_go_to_the_contract_verbatim():
    _, [call] = recover('<tool_call>{"name": "read_file", "arguments": "path=README.md"}</tool_call>', TOOLS)
    assert call.arguments == "path=README.md"  # the contract answers it as malformed, quoting it back


def test_openai_shape_written_out():
    text = '```json\n{"type": "function", "function": {"name": "bash", "arguments": "{\\"command\\": \\"ls\\"}"}}\n```'
    _, calls = recover(text, TOOLS)
    assert calls_of(calls) == [("bash", {"command": "ls"})]


def test_completion_with_structured_calls_is_what_the_session_skips():
    completion = Completion(text=fixture("fenced_json_bare.txt"), finish_reason="stop")
    recovered = recover_completion(completion, TOOLS)
    assert recovered.text == "" and [c.name for c in recovered.tool_calls] == ["grep"]
    plain = Completion(text="The answer is 42.")
    assert recover_completion(plain, TOOLS) is plain


@pytest.mark.parametrize(
    ("kind", "url", "on"),
    [
        ("openai", "http://127.0.0.1:8080/v1", True),
        ("openai", "http://localhost:11434/v1", True),
        ("openai", "http://[::1]:8080/v1", True),
        ("openai", "https://api.openai.com/v1", False),
        ("openai", "http://192.168.1.5:8080/v1", False),
        ("anthropic", "http://127.0.0.1:8080", False),
    ],
)
def test_default_on_for_local_openai_endpoints(kind, url, on):
    assert default_enabled(kind, url) is on


# -- the text of a step that is a call is not shown as if it were the answer ---------------------------------


def held(deltas: list[str], *, was_call: bool) -> list[str]:
    shown: list[str] = []
    gate = HeldText(shown.append)
    for delta in deltas:
        gate.feed(delta)
    gate.finish(was_call=was_call)
    return shown


@pytest.mark.parametrize(
    "deltas",
    [
        ["<tool", '_call>\n{"name": "bash", "arguments": {}}\n</tool_call>'],
        ["\n ", '{"name"', ': "bash", "arguments": {}}'],
        ["``", '`json\n{"name": "bash", "arguments": {}}\n```'],
    ],
)
def test_a_step_that_starts_like_a_call_is_held_and_dropped_when_it_was_one(deltas: list[str]) -> None:
    assert held(deltas, was_call=True) == []
    assert "".join(held(deltas, was_call=False)) == "".join(deltas)  # not a call after all: shown whole


def test_words_stream_as_they_come_even_when_a_call_follows_them() -> None:
    shown: list[str] = []
    gate = HeldText(shown.append)
    gate.feed("  ")
    assert shown == []
    gate.feed("Released")
    assert shown == ["  Released"]
    gate.feed(' 1.4.2. <tool_call>{"name": "x"}')
    assert shown == ["  Released", ' 1.4.2. <tool_call>{"name": "x"}']
    gate.finish(was_call=True)
    assert len(shown) == 2


@pytest.mark.parametrize("text", ["<b>bold</b>", "`ls` lists files", "{{placeholder}} is x"])
def test_text_that_only_begins_with_a_call_character_streams(text: str) -> None:
    if text.startswith("{"):  # a brace may open a call: held, then shown because it was none
        assert held([text], was_call=False) == [text]
    else:
        shown: list[str] = []
        HeldText(shown.append).feed(text)
        assert shown == [text]


@pytest.mark.parametrize("start", ["{", "\n\n   \n"])
def test_a_long_held_step_is_not_rebuilt_at_every_delta(monkeypatch: pytest.MonkeyPatch, start: str) -> None:
    # A step held as a call (or blank so far) keeps its deltas as they came; it used to be joined and
    # stripped again at each one, on the daemon's event loop: quadratic in a long step's deltas.
    monkeypatch.setattr(Counted, "built", 0)
    deltas = [Counted(start), *[Counted('"x": 1, ' if start == "{" else " \n")] * 3000]
    assert "".join(held(deltas, was_call=False)) == "".join(deltas)
    assert Counted.built <= 2 * len("".join(deltas))


@pytest.mark.parametrize(
    "text",
    [
        "<tool_call>" + " " * 200_000,  # cubic before: 14 s at 3,200 blanks
        "<tool_call>a" * 20_000,
        "```" + " " * 100_000 + "\n" + " " * 100_000,  # cubic before: 7 s at 3,200
        "```bash\n" + " " * 200_000,
        "```" + "\n" * 200_000,
    ],
)
def test_a_reply_shaped_against_the_readers_is_read_in_linear_time_and_stays_text(text: str) -> None:
    """A reply is the model's (a server's, up to 2 MiB): no pattern may backtrack over what it repeats."""
    assert recover(text, ["bash", "lookup"]) == (text, [])


def test_the_blanks_around_a_call_are_still_no_part_of_it() -> None:
    tagged = '<tool_call>\n  {"name": "lookup", "arguments": {"q": 1}}  \n\t</tool_call>'
    fenced = '```json  \n{"name": "lookup", "arguments": {"q": 1}}\n   ```'
    for text in (tagged, fenced):
        left, [call] = recover(text, ["lookup"])
        assert (call.name, call.arguments, left.strip()) == ("lookup", '{"q": 1}', "")


def test_many_calls_among_many_fences_are_sorted_out_in_linear_time() -> None:
    # Each fence was looked up in every call's span: 4,000 tagged calls and 8,000 fences took 1.5 s (quadratic).
    tagged = '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>' * 8_000
    _, calls = recover(tagged + "```json\n```\n" * 16_000, ["lookup"])
    assert calls and all(call.name == "lookup" for call in calls)
    bare = '{"name": "lookup", "arguments": {}} ' * 8_000 + "```\n```\n" * 16_000
    assert recover(bare, ["lookup"])[1]


def test_objects_nested_around_a_long_list_are_decoded_a_bounded_number_of_times() -> None:
    # Each of 127 nested objects that is no call was decoded whole again: 12 s for a 2 MiB reply.
    text = '{"a":' * 127 + "[" + "1.5," * 400_000 + "1]" + "}" * 127
    assert recover(text, ["lookup"]) == (text, [])
    call = '{"name": "lookup", "arguments": {"q": 1}}'
    assert [c.name for c in recover(call + " " + text, ["lookup"])[1]] == ["lookup"]
