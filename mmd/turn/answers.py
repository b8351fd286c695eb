"""What a turn ends with: an answer a person can use, and what counts as one.

Small models often end a turn with no words at all: an empty reply, a lone ``{}``
or ``}``, the raw tool call they meant to make, or the error JSON of the last
result. None of that is an answer (other JSON is: it may be what was asked for). :func:`unusable` says why a final text is
not one; the loop (mmd/turn/loop.py) then asks the model once more, without
tools, for a sentence, and when that fails too, :func:`summary` writes one from
what ran in the turn. The turn's status says which happened.
"""

from __future__ import annotations

import re

from ..contract import ToolResult
from . import grounding

# Asked, without tools, after a final reply that is no answer.
ASK_FOR_WORDS = (
    "Your last reply was not an answer in words. In one or two plain sentences, tell the user "
    "what was done and what came of it. Do not call a tool and do not write JSON or code."
)
# Asked instead when no tool ran in the turn: "what was done" there made the 0.5B write "I called the bash
# tool with the command …" about a call it never made (tests/e2e/test_local.py's long session, in CI).
ASK_FOR_WORDS_NOTHING_RAN = (
    "Your last reply was not an answer in words, and no tool has run in this turn. In one or two plain "
    "sentences, answer the user; do not say that a tool ran. Do not call a tool and do not write JSON or code."
)
# mm's answer to a reply that says a call was made when none was (claimed_call); the tool's name goes first.
NOT_CALLED = "no tool was called in this turn, so nothing ran and there is no result. Make the call now."
# mm's answer to an empty reply in a turn where nothing has run; the step is then taken again, tools offered.
EMPTY_REPLY = (
    "Your reply was empty. Do what the user asked: call a tool if it needs one, or answer in plain words."
)
# Why such a reply is no answer.
CLAIMED = "says a tool was called, but no tool ran in this turn"
# The close of mm's answer to a call that already succeeded (mmd/turn/loop.py).
ANSWER_NOW = "Do not call it again; give the user your answer now, in plain words."
# Characters that make no answer on their own.
_PUNCTUATION = set("{}[]()<>\"'`,:;.\\/|-_=* \t\r\n")
# Possessive before the lazy body: "```a" and 16,000 line ends once cost 3.7 s (its group is stripped anyway).
_FENCE = re.compile(r"^```[\w-]*+\s*+(.*?)```$", re.DOTALL)
_CALL_TAG = re.compile(r"</?(tool_call|function_call|tools?)\b", re.IGNORECASE)
# The first characters of a JSON object that names a call or an error, complete or cut short.
_CALL_JSON = re.compile(r'^\s*[\[{]\s*"(name|function|tool|arguments|error|ok)"\s*:')
# A process's status line, which small models echo as their "answer": [exit code 0], {"exit code": 0}.
_STATUS_LINE = re.compile(r'\[exit code -?\d+\]|\{\s*"exit[ _]code"\s*:\s*-?\d+\s*\}', re.IGNORECASE)
# What mm itself tells the model about a failed call: its error object, anywhere in the text, and the first
# line of its answer to an invalid call. A reply that repeats them passes mm's words on, not an answer
# (seen: the 0.5B ended MCP turns with `>` then the error object, or with the whole "You sent: …" answer).
_MM_ERROR = re.compile(r'\{\s*"ok"\s*:\s*false\s*,\s*"error"\s*:')
_MM_INVALID_CALL = re.compile(r"^You sent: [\w.-]+\(")
# The openings of mm's other fixed messages to the model (this module's request for words, the loop and
# repeat answers, refusals, a skill's commands after a failed guess), which small models also ended turns
# with: "Your last reply was not an answer …" (0.5B), "This is not a command the skill … names" (1.5B).
_MM_WORDS = re.compile(
    r"Your last reply was not an answer in words|^Not run again: |^[\w.-]+ was not run: |^Loop: you |"
    r"^Stopped: the model called |^The model gave no answer in words|^This is not a command the skill |"
    r"^The skill [\w.-]+ runs this as "
)
# Characters a small model put before a call it wrote as its "answer" (seen: the 0.5B's `=` and then the same
# read_skill call on every line up to the token limit, status ok). A call after them is still only a call.
_LEADING_JUNK = "=*-_:;.,|>\\/()~ \t\r\n"
# A fenced block's opening line, closed or not (a call cut short by the token limit has no closing fence).
_OPEN_FENCE = re.compile(r"^```[\w-]*[ \t]*\n")
# A short label that opens a reply: "JSON object:", "json_object =", "Here's a json object representing the
# tool response:". Followed by nothing, braces or a call, it introduces no answer (the 1.5B ended three
# contrib/eval turns so, status ok).
_LABEL = re.compile(r"^[^\n:={}\[\]]{1,120}[:=]")
_LABEL_WORDS = 12
# Why a reply cut for repeating the model's instructions is no answer (finish reason "echo", llama.py).
ECHO = "the model's instructions repeated"
# A reply that says, in the first person, that it called, ran or used a tool: "I called the bash tool",
# "I have run `status`", "I executed the command …". The word after the verb names the tool.
_CLAIM = re.compile(
    r"\b(?:I|we)(?:'ve|\s+have)?\s+(?:just\s+|now\s+|already\s+|successfully\s+|then\s+)?"
    r"(?:called|ran|run|executed|invoked|used)\s+(?:the\s+|a\s+)?[`'\"]?([\w.-]+)",
    re.IGNORECASE,
)
# "The bash tool was called", "the status command has been run".
_CLAIM_PASSIVE = re.compile(
    r"\bthe\s+[`'\"]?([\w.-]+)[`'\"]?\s+(?:tool|command)\s+(?:was|has\s+been)\s+(?:called|run|executed|invoked)",
    re.IGNORECASE,
)
# A claim about an earlier turn's call is not a claim about this one.
_EARLIER = re.compile(r"\b(?:earlier|before|previously|last time|in the previous)\b", re.IGNORECASE)
# Longest result text quoted in a summary.
_QUOTE = 300


def mm_words(text: str) -> bool:
    """Whether *text* opens with one of mm's own messages to the model (or holds its error object), or
    repeats a run of words of one of its fixed sentences anywhere."""
    stripped = text.strip()
    if _MM_ERROR.search(stripped) or _MM_INVALID_CALL.match(stripped) or _MM_WORDS.search(stripped):
        return True
    return not _ECHOED.isdisjoint(_shingles(stripped))


# Words in a row that, shared with one of mm's fixed sentences to the model, make a reply an echo of it
# (seen: the 1.5B answered "Call it again with values the user gave, written as the user wrote them. …",
# the refusal's advice less one word, status ok). Six: no answer in words shares six in a row with them.
_RUN = 6


def _shingles(text: str) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", text.lower())
    return {tuple(words[i : i + _RUN]) for i in range(len(words) - _RUN + 1)}


_ECHOED = set().union(
    *map(
        _shingles,
        (
            ASK_FOR_WORDS,
            # Of the sentences about a turn where nothing ran, only what an honest answer would not say
            # ("No tool was called in this turn, I did not run anything" is an answer).
            ASK_FOR_WORDS_NOTHING_RAN.partition("sentences, ")[2],
            NOT_CALLED.partition("nothing ran and ")[2],
            EMPTY_REPLY,
            grounding.NOWHERE,
            grounding.WHAT_NEXT,
            ANSWER_NOW,
        ),
    )
)


def unusable(text: str) -> str | None:
    """Why *text* is not an answer a person can use, or None when it is one."""
    stripped = text.strip()
    if not stripped:
        return "empty"
    if set(stripped) <= _PUNCTUATION:
        return "only punctuation"
    body = fence.group(1).strip() if (fence := _FENCE.match(stripped)) else _OPEN_FENCE.sub("", stripped)
    if set(body) <= _PUNCTUATION:
        return "only punctuation"
    if _STATUS_LINE.search(body) and set(_STATUS_LINE.sub("", body)) <= _PUNCTUATION:
        return "only a tool's status line"
    if _is_call(body):
        return "a tool call or error written as text"
    if (label := _LABEL.match(body)) and len(label.group().split()) <= _LABEL_WORDS:
        rest = body[label.end() :].strip()
        if set(rest) <= _PUNCTUATION or _is_call(rest):
            return "a label with no answer after it"
    if mm_words(body):
        return "mm's own words to the model, repeated"
    return None  # other JSON may be just what was asked for: an answer


def claimed_call(text: str, tools: list[str]) -> str | None:
    """The tool *text* says, in the first person, was called ("I called the bash tool with …"), when it is
    one of *tools* ("the command" stands for ``bash`` where there is one); None when it claims no call.
    Only a reply of a turn in which nothing ran is read so (mmd/turn/loop.py): there it is a call reported
    that was never made, the small models' way of doing what was asked in words only."""
    names = {name.lower(): name for name in tools}
    if "bash" in names:
        names.setdefault("command", names["bash"])
    for sentence in re.split(r"(?<=[.!?])\s+|\n+", text):
        if _EARLIER.search(sentence):
            continue
        for match in (*_CLAIM.finditer(sentence), *_CLAIM_PASSIVE.finditer(sentence)):
            word = match.group(1).lower().rstrip(".-")
            if word in names:
                return names[word]
    return None


def _is_call(text: str) -> bool:
    """Whether *text* holds a call tag, or is call or error JSON after at most some junk characters."""
    return bool(_CALL_TAG.search(text) or _CALL_JSON.match(text.lstrip(_LEADING_JUNK)))


def summary(ran: list[tuple[str, ToolResult]]) -> str | None:
    """A sentence mm writes from the turn's calls when the model gave none; None when no call succeeded."""
    done = [(name, result) for name, result in ran if result.ok]
    if not done:
        return None
    lines = ["The model gave no answer in words. What ran in this turn and succeeded:"]
    for name, result in done:
        lines.append(f"- {name}: {_first_lines(result.content)}")
    return "\n".join(lines)


def last_failure(ran: list[tuple[str, ToolResult]]) -> str:
    """What the turn's last call was answered when it failed, for the person reading why the turn stopped
    (a small model repeats a call the sandbox refuses rather than say what the answer asks of them); ""
    when it succeeded or nothing ran."""
    if not ran or ran[-1][1].ok:
        return ""
    name, result = ran[-1]
    # mm's own note on a failure (a sandbox refusal: what a person can allow) says more than the output's
    # first lines, and comes last.
    notes = [line for line in result.content.splitlines() if line.startswith("[mm: ")]
    said = _first_lines(notes[-1] if notes else result.content, 2 * _QUOTE)
    return f"\nThe last {name} call was answered: {said}"


def _first_lines(content: str, most: int = _QUOTE) -> str:
    text = " ".join([line.strip() for line in content.splitlines() if line.strip()][:3])
    return text if len(text) <= most else text[: most - 1] + "…"
