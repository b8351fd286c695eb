"""Tool calls a model wrote as text, turned back into tool calls.

Small models behind llama.cpp's stock chat templates often return no
structured ``tool_calls`` at all and write the call into the content instead
(Qwen2.5-Coder 0.5B and 1.5B did so 18 times out of 18). :func:`recover`
finds such calls in the shapes those models write:

- a fenced block (```` ```json ````, ```` ```tool_call ````, or no language) holding
  ``{"name": ..., "arguments": {...}}`` or a list of such objects;
- Qwen/Hermes tags: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``;
- a bare JSON object of that shape in the prose;
- when ``bash`` is offered, a reply that is only a shell command (a short ```bash
  fence, or one line starting with ``./`` or ``$ ``) is a bash call.

Refuse rather than guess: only an object whose ``name`` is a tool of the
catalogue, that carries ``arguments`` (or ``parameters``) and nothing else but
``id``/``type``, is a call. A block whose JSON does not parse is read only where
the intent is plain — several calls one after the other, a call missing its last
closing braces or with one too many — and one that starts as a call of a
catalogued tool but cannot be read is answered as unreadable by the contract. A
``package.json`` in a code block, a call naming an
unknown tool, other JSON that does not parse, or JSON nested deeper than
``MAX_DOCUMENT_DEPTH`` (mmd/untrusted.py, checked before decoding) is left as text. The arguments are
not checked here: they go through the tool's contract like any other call.
Arguments sent as a string holding a JSON object are unpacked. The same call
written several times in one message (a small model repeating itself until
its token limit) is run once.
"""

from __future__ import annotations

import bisect
import json
import re
import secrets
import sys
from collections.abc import Callable, Collection
from typing import Any
from urllib.parse import urlsplit

import msgspec

from ..untrusted import (
    MAX_ARGUMENTS_BYTES,
    MAX_DEPTH,
    MAX_DOCUMENT_DEPTH,
    bracket_depths,
    check_json,
    first_value_depth,
)
from .base import Completion, ToolCall

# A fenced code block and its language tag. These three patterns read a model's reply (up to 2 MiB): none
# may backtrack over what a reply can repeat without end. Blanks are taken possessively, the body lazily up
# to the closing fence, what ends the body is cut in Python (_body), and each is run only up to the text's
# last closing mark (_until_last), so an opening mark never scans to the end for nothing. Before, a reply of
# "<tool_call>" and 3,200 blanks took 14 s of the event loop (cubic); "```" and blanks, 7 s at 3,200.
_FENCE = re.compile(r"```[ \t]*+([A-Za-z_][\w-]*+)?[ \t]*+\n(.*?)```", re.DOTALL)
# Languages a fenced call may be tagged with; an untagged fence counts too.
_FENCE_LANGS = frozenset({"", "json", "json5", "tool_call", "tool_calls", "tool_code", "function_call"})
# The built-in shell tool, and a fenced block of shell (a reply that is only a command; see _command_only).
BASH = "bash"
_SHELL_FENCE = re.compile(r"```(?:bash|sh|shell|console)[ \t]*+\n(.*?)```", re.DOTALL)
# Qwen/Hermes tool-call tags.
_TAG = re.compile(r"<tool_call>\s*+(.*?)</tool_call>", re.DOTALL)
# Keys a call object may hold besides its name and arguments.
_ARG_KEYS = ("arguments", "parameters")
_ALLOWED_KEYS = frozenset({"name", *_ARG_KEYS, "id", "type"})
_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
_decoder = json.JSONDecoder()
# How a JSON object starts: anything else after a brace fails to decode at once.
_OBJECT_START = re.compile(r"\{\s*[\"}]")
# An object's first key and its colon: without them a decoder stops before any nesting.
_FIRST_KEY = re.compile(r'\{\s*"(?:[^"\\]|\\.)*+"\s*:')
# Characters scanned for nesting from braces inside strings, over one text (a crafted text
# can make each such scan long); a text that needs more is left as text.
_SCAN_BUDGET = 1_000_000
# Characters the JSON decoder reads over one text, looking for bare calls: a value that is no call is
# decoded again from each brace inside it, so a reply of 127 objects nested around a long list was read
# 127 times (12 s for 2 MiB). About four readings of the largest answer (0.4 s); past it the rest stays text.
_DECODE_BUDGET = 8_000_000


def _until_last(text: str, mark: str) -> int:
    """Where a search for blocks that end with *mark* may stop: past the last *mark* (0: there is none)."""
    last = text.rfind(mark)
    return last + len(mark) if last >= 0 else 0


def _body(text: str) -> str:
    """A fenced block's body as the fence pattern once took it: without the blanks and the one line end
    before the closing fence."""
    text = text.rstrip(" \t")
    return text[:-1] if text.endswith("\n") else text


def recover(text: str, tool_names: Collection[str]) -> tuple[str, list[ToolCall]]:
    """The calls written in *text* for tools of *tool_names*, and the text left around them.

    Returns ``(text, [])`` unchanged when no call is found. Each call gets a
    fresh id (``rc_…``); its arguments are a JSON text, verbatim when the model
    wrote a string that is not a JSON object (the contract then answers it).

    Errors: none; anything that is not a clear call stays text.
    """
    names = set(tool_names)
    if not names or not text.strip():
        return text, []
    calls: list[ToolCall] = []
    spans: list[tuple[int, int]] = []
    for match in _TAG.finditer(text, 0, _until_last(text, "</tool_call>")):
        found = _calls_in(match.group(1).rstrip(), names)
        if found:
            calls.extend(found)
            spans.append(match.span())
    tags = list(spans)  # in the text's order, apart: a fence is looked up among them by bisection
    for match in _FENCE.finditer(text, 0, _until_last(text, "```")):
        if _inside(match.start(), tags) or (match.group(1) or "").lower() not in _FENCE_LANGS:
            continue
        found = _calls_in(_body(match.group(2)), names)
        if found:
            calls.extend(found)
            spans.append(match.span())
    if not calls:
        # A bare object never sits in another block.
        fences = [m.span() for m in _FENCE.finditer(text, 0, _until_last(text, "```"))]
        for start, end, found in _bare_objects(text, names):
            if not _inside(start, fences):
                calls.extend(found)
                spans.append((start, end))
    if not calls and BASH in names:
        command = _command_only(text)
        if command is not None:
            arguments = _dump({"command": command})
            return "", [ToolCall(id=f"rc_{secrets.token_hex(6)}", name=BASH, arguments=arguments)]
    if not calls:
        return text, []
    return _without(text, spans), _distinct(calls)


def _command_only(text: str) -> str | None:
    """The shell command a reply consists of and nothing else, or None.

    Measured with the 0.5B in contrib/eval's skill mode: a third of its replies were the skill's command
    as text — ``./actions/pkgtest greet``, or the same in a ```bash fence — instead of a bash call. Only a
    reply that is *only* that is read as one: a fenced bash/sh block of at most three lines, or one line
    that starts with ``./`` or ``$ ``. The call goes through bash's contract and consent like any other.
    """
    stripped = text.strip()
    fence = _SHELL_FENCE.fullmatch(stripped)
    if fence:
        lines = [line.strip() for line in fence.group(1).strip().splitlines() if line.strip()]
        if 1 <= len(lines) <= 3:
            return "\n".join(line.removeprefix("$ ") for line in lines)
        return None
    single = stripped.strip("`").strip()
    if "\n" in single or len(single) > 300:
        return None
    if single.startswith("$ "):
        return single[2:].strip() or None
    return single if single.startswith("./") and len(single) > 2 else None


def _distinct(calls: list[ToolCall]) -> list[ToolCall]:
    """The calls without repeats: a small model stuck repeating a call wrote it once too often, not twice on purpose."""
    seen: set[tuple[str, str]] = set()
    out = []
    for call in calls:
        key = (call.name, call.arguments)
        if key not in seen:
            seen.add(key)
            out.append(call)
    return out


def default_enabled(kind: str, base_url: str) -> bool:
    """Recovery is on by default for OpenAI-compatible endpoints on this machine, off elsewhere."""
    if kind != "openai":
        return False
    try:
        host = urlsplit(base_url).hostname or ""
    except ValueError:
        return False
    return host.lower() in _LOCAL_HOSTS


def _calls_in(body: str, names: set[str]) -> list[ToolCall]:
    """The calls of one block: a call object, or a list of them; [] unless every item is a call.

    A block that does not parse is read where its intent is plain: several call objects one after the
    other, or one call whose closing brackets are missing or doubled. Failing that, a block that starts as
    a call of a catalogued tool is that call with its text as arguments, which the contract answers as
    unreadable, quoting it back; anything else stays text.
    """
    try:
        check_json(body, max_depth=MAX_DOCUMENT_DEPTH)  # a block nested deeper is no clear call
    except ValueError:
        return []
    try:
        value = json.loads(body)
    except ValueError:
        return _repaired(body, names)
    return _all_calls(value if isinstance(value, list) else [value], names)


def _all_calls(items: list[Any], names: set[str]) -> list[ToolCall]:
    calls = [_call(item, names) for item in items]
    if not calls or any(c is None for c in calls):
        return []
    return [c for c in calls if c is not None]


# Most calls read from objects written one after the other in one block.
_MAX_SEQUENCE = 5
# A block that begins like a call of a named tool: {"name": "release"
_CALL_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"([^"\\]{1,200})"')


def _repaired(body: str, names: set[str]) -> list[ToolCall]:
    if len(body) > MAX_ARGUMENTS_BYTES:
        return []
    for candidate in (_sequence(body), _balanced(body)):
        if candidate:
            calls = _all_calls(candidate, names)
            if calls:
                return calls
    head = _CALL_HEAD.match(body)
    if head and head.group(1) in names:
        return [ToolCall(id=f"rc_{secrets.token_hex(6)}", name=head.group(1), arguments=body.strip())]
    return []


def _sequence(body: str) -> list[Any]:
    """Objects written one after the other (``{…}\n{…}``, or with commas between); [] if any is not."""
    items, pos = [], 0
    while True:
        while pos < len(body) and body[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(body):
            return items if len(items) > 1 else []
        if len(items) >= _MAX_SEQUENCE:
            return []  # a runaway, not an intent: the block is answered as unreadable
        try:  # no deeper than the whole block, which was checked
            value, pos = _decoder.raw_decode(body, pos)
        except ValueError:
            return []
        items.append(value)


def _balanced(body: str) -> list[Any]:
    """The one value *body* holds once missing closing brackets are added or doubled ones dropped; [] if none."""
    text = body.strip()
    opened: list[str] = []
    in_string = escaped = False
    cut = len(text)
    for i, c in enumerate(text):
        if in_string:
            escaped, in_string = (False, True) if escaped else (c == "\\", c != '"')
            continue
        if c == '"':
            in_string = True
        elif c in "{[":
            opened.append("}" if c == "{" else "]")
        elif c in "}]":
            if not opened:  # a closer too many: the value ended before it
                cut = i
                break
            if opened.pop() != c:
                return []
    if in_string:
        return []  # cut off inside a string: what it meant to say is not known
    if cut < len(text) and text[cut:].strip(" \t\r\n}]"):
        return []  # more than stray closers after the value
    repaired = text[:cut] + "".join(reversed(opened))
    try:
        check_json(repaired, max_depth=MAX_DOCUMENT_DEPTH)
        value = json.loads(repaired)
    except ValueError:
        return []
    return value if isinstance(value, list) else [value]


def _call(item: Any, names: set[str]) -> ToolCall | None:
    if not isinstance(item, dict):
        return None
    if item.get("type") == "function" and isinstance(item.get("function"), dict) and len(item) <= 3:
        item = item["function"]  # the OpenAI shape, written out
    if not isinstance(item, dict) or not set(item) <= _ALLOWED_KEYS:
        return None
    name = item.get("name")
    keys = [k for k in _ARG_KEYS if k in item]
    if not isinstance(name, str) or name not in names or len(keys) != 1:
        return None
    args = item[keys[0]]
    if isinstance(args, str):
        try:
            # Too deep or too big: the text is kept as it is, and the contract answers it.
            check_json(args, max_depth=MAX_DEPTH, max_bytes=MAX_ARGUMENTS_BYTES)
            unpacked = json.loads(args)
        except ValueError:
            unpacked = None
        text = _dump(unpacked) if isinstance(unpacked, dict) else args
    elif isinstance(args, dict) or args is None:
        text = _dump(args or {})
    else:
        return None
    return ToolCall(id=f"rc_{secrets.token_hex(6)}", name=name, arguments=text)


def _bare_objects(text: str, names: set[str]) -> list[tuple[int, int, list[ToolCall]]]:
    out = []
    # Where the text opens a bracket: a decoder started at pos can nest no deeper than
    # the brackets after pos, so only a start with more than the limit after it is scanned.
    # A text with few brackets cannot nest deep anywhere; else the depth of the value at each
    # brace outside strings is known from one pass, and a brace inside a string is scanned alone.
    depths = bracket_depths(text) if _deep_possible(text) else None
    scanned = decoded = 0
    pos = text.find("{")
    while pos != -1:
        try:
            if not _OBJECT_START.match(text, pos):
                raise ValueError("not an object")  # as raw_decode would say, before any nesting
            if depths is not None:
                depth = depths.get(pos)
                if depth is None:  # inside a string: a decoder started here reads strings differently
                    if not _FIRST_KEY.match(text, pos):
                        raise ValueError("no key")  # raw_decode fails at once (or reads "{}")
                    depth, stop = first_value_depth(text, pos, stop_past=MAX_DOCUMENT_DEPTH)
                    scanned += stop - pos
                    if scanned > _SCAN_BUDGET:
                        break  # a text built to be scanned again and again: the rest stays text
                if depth > MAX_DOCUMENT_DEPTH:
                    raise ValueError("nested too deep to be a clear call")
            value, end = _decoder.raw_decode(text, pos)
        except ValueError as exc:
            decoded += max(0, getattr(exc, "pos", pos) - pos)
            if decoded > _DECODE_BUDGET:
                break
            pos = text.find("{", pos + 1)
            continue
        decoded += end - pos
        call = _call(value, names)
        if call is not None:
            out.append((pos, end, [call]))
            pos = text.find("{", end)
        elif decoded > _DECODE_BUDGET:
            break
        else:
            pos = text.find("{", pos + 1)
    return out


def _deep_possible(text: str) -> bool:
    return text.count("{") + text.count("[") > MAX_DOCUMENT_DEPTH


def _inside(pos: int, spans: list[tuple[int, int]]) -> bool:
    """Whether *pos* lies in one of *spans* (in the text's order, apart, as a pattern's matches are): a
    bisection, since a reply may hold tens of thousands of each (a look at every span was quadratic)."""
    i = bisect.bisect_right(spans, (pos, sys.maxsize)) - 1
    return i >= 0 and spans[i][0] <= pos < spans[i][1]


def _without(text: str, spans: list[tuple[int, int]]) -> str:
    kept, last = [], 0
    for start, end in sorted(spans):
        kept.append(text[last:start])
        last = end
    kept.append(text[last:])
    joined = "".join(kept)
    return re.sub(r"\n{3,}", "\n\n", joined).strip()


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


# How a step that is a call written as text starts (after blank space); a step that starts otherwise is words.
_CALL_OPENERS = ("{", "<tool_call>", "```")


class HeldText:
    """A step's streamed text, held back while the step starts like a call written as text.

    A step that starts with words streams as it comes. One that starts like a call (``{``,
    ``<tool_call>``, a fence) is held until the step ends, and shown only if no call was read from it:
    the person sees the call run (its ``tool_call`` event), not its JSON printed as if it were the answer.
    """

    def __init__(self, emit: Callable[[str], None]) -> None:
        self._emit = emit
        self._held: list[str] = []
        # The held text without its leading blanks, while it may still start like a call or not: a few
        # characters (a call's opener is at most 11), so a held step costs no rebuild of it a delta.
        self._head = ""
        self._call = False  # it starts like a call: held to its end
        self._streaming = False

    def feed(self, delta: str) -> None:
        if self._streaming:
            self._emit(delta)
            return
        self._held.append(delta)
        if self._call:
            return
        head = self._head = self._head + delta if self._head else delta.lstrip()
        if any(head.startswith(o) for o in _CALL_OPENERS):
            self._call = True
            return
        if not head or any(o.startswith(head) for o in _CALL_OPENERS):
            return  # blank so far, or it may yet start like a call
        self._streaming = True
        self._emit("".join(self._held))
        self._held = []

    def finish(self, *, was_call: bool) -> None:
        """The step ended: what was held is shown unless a call was read from it."""
        text = "".join(self._held)
        if text and not was_call:
            self._emit(text)
        self._held = []


def recover_completion(completion: Completion, tool_names: Collection[str]) -> Completion:
    """*completion* with the calls its text holds as tool calls; unchanged when it holds none."""
    text, calls = recover(completion.text, tool_names)
    if not calls:
        return completion
    return msgspec.structs.replace(completion, text=text, tool_calls=calls)
