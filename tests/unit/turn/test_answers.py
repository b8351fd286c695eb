"""What counts as an answer a person can use (mmd/turn/answers.py)."""

from __future__ import annotations

import pytest

from mmd.contract import ToolResult
from mmd.turn.answers import claimed_call, last_failure, summary, unusable


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("  \n", "empty"),
        ("{}", "only punctuation"),
        ("{}}", "only punctuation"),
        ("```json\n{}\n```", "only punctuation"),
        ('{"name": "release", "arguments": {"version": "2.0.1"}}', "a tool call or error written as text"),
        ('{"name": "release", "arguments": {"version": "2.0', "a tool call or error written as text"),
        ('```json\n{"name": "status"}\n```', "a tool call or error written as text"),
        ('{"ok": false, "error": {"code": "invalid_type"}}', "a tool call or error written as text"),
        ('<tool_call>\n{"name": "status"}\n</tool_call>', "a tool call or error written as text"),
        (
            '>\n{"ok": false, "error": {"code": "unknown_field", "field": "errors"}}\n',
            "a tool call or error written as text",
        ),
        (
            'You sent: status({})\nFix: Add service (string).\n{"ok": false, "error": {"code": "missing"}}',
            "mm's own words to the model, repeated",
        ),
        ("You sent: status({})\nFix: Add service (string).", "mm's own words to the model, repeated"),
        # Cut short by the token limit: no closing fence (seen with the 0.5B, 52 s, status ok).
        (
            '```json\n{"name": "bash", "arguments": {"command": "sudo apt-get update && sudo',
            "a tool call or error written as text",
        ),
        # mm's own messages to the model, echoed back as the "answer" (seen with the 0.5B).
        (
            "Your last reply was not an answer in words. In one or two plain sentences, tell the user what",
            "mm's own words to the model, repeated",
        ),
        (
            "Not run again: this exact bash call already succeeded in this turn.",
            "mm's own words to the model, repeated",
        ),
        (
            'bash was not run: "parser" is the example value for PACKAGE',
            "mm's own words to the model, repeated",
        ),
        ("Loop: you have called bash with {} 3 times", "mm's own words to the model, repeated"),
        # mm's answers in a turn where nothing ran, echoed (their distinctive part).
        ("There is no result. Make the call now.", "mm's own words to the model, repeated"),
        ("Your reply was empty. Do what the user asked.", "mm's own words to the model, repeated"),
        (
            "This is not a command the skill release-ops names. Its commands, run from the working directory:",
            "mm's own words to the model, repeated",
        ),
        # Junk before the call (the 0.5B: `=`, then the same call on every line up to the token limit).
        (
            '=\n{"name": "read_skill", "arguments": {"name": "release-ops"}}\n{"name": "read_skill", "argu',
            "a tool call or error written as text",
        ),
        ('* {"name": "status", "arguments": {"service": "billing"}}', "a tool call or error written as text"),
        # The 0.5B on an MCP turn: `>` and a call of a tool that does not exist, made of mm's repeat answer.
        (
            '>\n{"name": "not run again", "arguments": {"backup": "this backup call already succeeded in',
            "a tool call or error written as text",
        ),
        # The refusal's advice given back as the answer, one word left out (the 1.5B, contrib/eval-ops).
        (
            "Call it again with values the user gave, written as the user wrote them. If what the user asked",
            "mm's own words to the model, repeated",
        ),
        # A label and nothing after it that answers (the 1.5B on contrib/eval, status ok).
        ("json_object =\n", "a label with no answer after it"),
        ("Here's a json object representing the tool response:\n{}\n", "a label with no answer after it"),
        (
            'JSON object: {"function": "status", "arguments": {"service": "billing"}}',
            "a label with no answer after it",
        ),
        ("[exit code 0]", "only a tool's status line"),
        ('{"exit code": 0}\n{"exit code": 0}', "only a tool's status line"),
    ],
)
def test_not_an_answer(text: str, reason: str) -> None:
    assert unusable(text) == reason


@pytest.mark.parametrize(
    "text",
    [
        "Released 2.0.1.",
        "{a} is a set in Python.",
        '{"dependencies": {"trio": "0.27"}}',
        "[1, 2, 3] are the first three.",
        "3",
        "The tests ran: [exit code 0], all 42 passed.",
        'The API answers {"ok": true} when healthy.',
        "You sent the release to the beta channel.",
        "The backup was not run: the database is locked.",
        "```\nls -la\n```\nlists the files.",
        "= 3, as asked.",
        "- the billing service is up.",
        "The checkout service has been scaled to 7 replicas, as the user asked; all ready.",
        "Status: running, healthy.",
        "The answer is: 42.",
        'Config: {"dependencies": {"trio": "0.27"}}',
        "See http://example.com/ for more.",
        "Note that the files are these three: a.py, b.py and c.py, and nothing else in the folder: {}",
        # Honest replies in a turn where nothing ran share words with mm's sentences about it, not six in a row
        # of what only mm says.
        "No tool was called in this turn: I did not run anything.",
        "No tool has run in this turn, so I cannot say how billing is.",
    ],
)
def test_an_answer(text: str) -> None:
    assert unusable(text) is None


def test_summary_names_what_succeeded_and_cuts_long_results() -> None:
    ran = [
        ("status", ToolResult(ok=False, content="no such service")),
        ("release", ToolResult(ok=True, content="released 2.0.1\n\n[exit code 0]\nmore\n" + "x" * 400)),
    ]
    text = summary(ran)
    assert text is not None and text.startswith("The model gave no answer in words.")
    assert "- release: released 2.0.1 [exit code 0] more" in text and "status" not in text
    assert len(text.splitlines()[-1]) < 320


def test_no_summary_without_a_success() -> None:
    assert summary([("status", ToolResult(ok=False, content="down"))]) is None


TOOLS = ["bash", "read_file", "status"]


@pytest.mark.parametrize(
    ("text", "tool"),
    [
        (
            'I called the bash tool with the command "cat data10.txt". The tool was called with a timeout',
            "bash",
        ),
        ("I ran the command ls -la and found three files.", "bash"),  # "the command": bash
        ("The status tool was called and billing is running.", "status"),
        ("I have run `status` for billing: it is up.", "status"),
        ("First I looked. Then we used the read_file tool.", "read_file"),
    ],
)
def test_a_claimed_call(text: str, tool: str) -> None:
    assert claimed_call(text, TOOLS) == tool


@pytest.mark.parametrize(
    "text",
    [
        "I ran into a problem: the file is missing.",  # no tool after the verb
        "I used bash earlier to list the files; there are three.",  # an earlier turn's call
        "Billing is running.",
        "I ran a search for it.",  # no tool of this turn is named
        "I called deploy and it worked.",  # no such tool: nothing to call
    ],
)
def test_no_claimed_call(text: str) -> None:
    assert claimed_call(text, TOOLS) is None


def test_the_command_is_no_tool_without_bash() -> None:
    assert claimed_call("I ran the command ls.", ["status"]) is None


def test_a_loops_end_quotes_the_last_failure_mm_s_note_first() -> None:
    # npm under the sandbox prints its own advice first ("sudo chown -R"); mm's note, last, says what a
    # person can allow: that is what the person reads when the turn stops as a loop.
    npm = (
        "npm error code EACCES\nnpm error path /root/.npm/x\nnpm error   sudo chown -R 0:0 /root/.npm\n"
        "[exit code 1]\n[mm: the sandbox refused writing /root/.npm/x: … A person can allow a folder …]"
    )
    ran = [("bash", ToolResult(ok=True, content="fine")), ("bash", ToolResult(ok=False, content=npm))]
    assert (
        last_failure(ran)
        == "\nThe last bash call was answered: [mm: the sandbox refused writing /root/.npm/x: … A person can allow a folder …]"
    )
    plain = ToolResult(ok=False, content="no such key\nsecond\nthird\nfourth")
    assert (
        last_failure([("lookup", plain)]) == "\nThe last lookup call was answered: no such key second third"
    )
    assert last_failure(ran[:1]) == "" and last_failure([]) == ""


@pytest.mark.parametrize("text", ["```a" + "\n" * 200_000 + "x", "```" + "a" * 200_000])
def test_a_reply_shaped_against_the_fence_reader_is_judged_in_linear_time(text: str) -> None:
    # "```a" and 16,000 line ends once cost 3.7 s of the event loop (a quadratic backtrack).
    assert unusable(text) is None
    assert unusable("```json\n" + "\n" * 200_000 + "```") == "only punctuation"
