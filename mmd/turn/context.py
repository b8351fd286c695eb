"""The context budget at work: every request fits the model's window, and so does the stored session.

- :func:`cap_output` cuts a tool's result to its share of the window before the model (or the
  store) sees it; the whole stays in the call's spill file.
- :func:`fit` runs before each model step: when the request nears the window, the oldest tool
  outputs become one-line stubs naming their spill files, then older messages are summarised by
  the same model into one note (:func:`compact`, which ``session.compact`` also runs when a person
  asks). Both rewrite the stored conversation, so a resumed session fits too. A request that still
  cannot fit is never sent: :class:`ContextFull` ends the turn saying what to do.

The numbers are mmd/turn/budget.py's; tokens are counted by mmd/models/tokens.py.
"""

from __future__ import annotations

import hashlib
import json
import operator
import re
from collections import OrderedDict
from pathlib import Path
from typing import Any, Protocol

import msgspec

from ..contract import ToolResult
from ..models.base import Message, ModelError, ToolSpec, grown_from
from ..rpc.methods import Event
from ..tools.base import Limits
from ..tools.process import cut_text, write_spill
from . import answers, budget
from .budget import Budget
from .plan import TurnSetup

# Tokens a stub line takes, about (its name, id, size and path).
STUB_TOKENS = 64
# Tokens of the summary request besides the transcript (its instructions, the template), and of the
# note besides the summary (the summary itself is held to budget.SUMMARY_WORDS: about 300 tokens).
SUMMARY_OVERHEAD = 200
NOTE_TOKENS = 400
# Times a result is cut again when its count says it is still too dense for its share.
CUT_ROUNDS = 3
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
# The tools' blocks kept between prompts (tools_json): as many as the agents a daemon serves at once, each at
# most this many characters (a block of many MCP tools is written again each turn rather than held).
TOOLS_JSON_KEPT = 8
TOOLS_JSON_MAX_TEXT = 256 * 1024
_TOOLS_JSON: OrderedDict[tuple[int, ...], tuple[tuple[ToolSpec, ...], str]] = OrderedDict()


class ContextFull(ModelError):
    """The request cannot fit the model's window even after stubs and a summary: it is not sent."""


class History(Protocol):
    """What the budget needs of a session (mmd.turn.session.Session is one)."""

    id: str
    dir: Path
    messages: list[Message]

    def emit(self, kind: str, data: dict[str, Any]) -> Event: ...

    def replace_messages(self, messages: list[Message]) -> None: ...


class Measure(msgspec.Struct):
    """A request's tokens: the fixed part (system prompt, tools) and each message's."""

    fixed: int
    sizes: list[int]

    @property
    def total(self) -> int:
        return self.fixed + sum(self.sizes)


# -- counting ---------------------------------------------------------------------


async def measure(setup: TurnSetup, messages: list[Message]) -> Measure:
    """The tokens a request of *messages* takes with the turn's system prompt and tools (estimated
    from each part's count and the template's overheads; each part counted once)."""
    assert setup.budget is not None
    counter = setup.budget.counter
    fixed = await counter.count(setup.system) + budget.MESSAGE_OVERHEAD
    fixed += await _tools_tokens(setup.budget, setup.registry.specs())
    # Each message is counted once: a step measures the whole history, which grows by a call and its
    # result each time. The last step's messages, when they begin this history, keep their counts
    # (compared by identity in C: the Python loop over the history cost ~1 µs a message every step).
    b = setup.budget
    last, counts = b.measured
    if grown_from(messages, last):
        sizes = counts[:]
        for m in messages[len(last) :]:
            sizes.append(await message_tokens(b, m))
    else:  # stubs or a summary replaced some: the rest keep their counts
        known = {id(m): (m, size) for m, size in zip(last, counts, strict=True)}
        sizes = []
        for m in messages:
            hit = known.get(id(m))
            sizes.append(hit[1] if hit is not None and hit[0] is m else await message_tokens(b, m))
    b.measured = (list(messages), sizes)
    return Measure(fixed=fixed, sizes=sizes)


async def message_tokens(b: Budget, message: Message) -> int:
    tokens = await b.counter.count(message.content) + budget.MESSAGE_OVERHEAD
    for call in message.tool_calls:
        tokens += await b.counter.count(f"{call.name} {call.arguments}") + budget.CALL_OVERHEAD
    return tokens


async def _tools_tokens(b: Budget, specs: list[ToolSpec]) -> int:
    if not specs:
        return 0
    if b.tools is not None and len(b.tools[0]) == len(specs) and all(map(operator.is_, b.tools[0], specs)):
        return b.tools[1]  # the same tools as the last step: the JSON is not written again
    tokens = await b.counter.count(tools_json(specs)) + budget.TOOLS_OVERHEAD
    b.tools = (list(specs), tokens)
    return tokens


def tools_json(specs: list[ToolSpec]) -> str:
    """The tools' block as the model's request carries it, written once for as long as the same specs come.

    The registry keeps each tool's rendered spec between prompts (mmd/tools/registry.py), so a prompt with
    the tools of an earlier one has the same objects, and the same text here: the counter then finds its
    count without hashing a new string. Writing the built-ins' block was 6 % of a prompt's instructions.
    An entry holds its specs: no identity it is known by can become another object's while it is kept.
    """
    key = tuple(map(id, specs))
    if (kept := _TOOLS_JSON.get(key)) is not None:
        _TOOLS_JSON.move_to_end(key)
        return kept[1]
    block = [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in specs
    ]
    text = json.dumps(block, ensure_ascii=False)
    if len(text) <= TOOLS_JSON_MAX_TEXT:
        _TOOLS_JSON[key] = (tuple(specs), text)
        if len(_TOOLS_JSON) > TOOLS_JSON_KEPT:
            _TOOLS_JSON.popitem(last=False)
    return text


# -- one tool output --------------------------------------------------------------------


async def cap_output(result: ToolResult, b: Budget | None, limits: Limits, spill: Path) -> ToolResult:
    """*result* within its share of the window; when cut, the whole is in its spill file.

    A process or MCP tool's output already kept its whole in *spill* (``data.output_file``); any
    other tool's (read_file, grep…) is written there now.
    """
    if b is None:
        return result
    share, whole = b.window.output_tokens, result.content
    limit = b.window.output_bytes(limits.max_bytes)
    data = dict(result.data or {})
    name = str(data.get("output_file") or spill)
    lost = data.get("output_not_kept")  # the output was cut already, and its whole could not be kept
    text = whole
    for _ in range(CUT_ROUNDS):
        # Bytes alone: a line budget (bash's) would cut read_file's lines, which cost no more than bytes.
        text = cut_text(whole, max_bytes=limit, max_lines=limit, spill_name=name, lost=lost)
        tokens = await b.counter.count(text)
        if tokens <= share:
            break
        size = len(text.encode())
        limit = budget.cut_bytes(size, tokens, share, overhead=max(0, size - limit))
    if text == whole:
        return result
    if "output_file" not in data and lost is None:
        if (lost := write_spill(spill, whole)) is not None:  # the model is told why no file holds the whole
            text = cut_text(whole, max_bytes=limit, max_lines=limit, spill_name=name, lost=lost)
            data["output_not_kept"] = lost
        else:
            data["output_file"] = name
    return ToolResult(ok=result.ok, content=text, data={**data, "cut_to_window": True})


# -- before each model step ------------------------------------------------------------


async def fit(history: History, setup: TurnSetup) -> None:
    """Make the next request fit the window: stubs, then a summary; else ContextFull.

    Errors: ContextFull when even that is not enough (nothing is sent).
    """
    b = setup.budget
    if b is None:
        return
    m = await measure(setup, history.messages)
    if m.total <= b.window.stub_at:
        return
    m = await stub_outputs(history, setup, m, target=b.window.stub_to)
    if m.total > b.window.stub_at:
        m = await _compact(history, setup, m, by="auto")
    if m.total > b.window.room:
        raise ContextFull(budget.cannot_fit(setup.model_name, m.total, b.window, m.fixed))


async def stub_outputs(history: History, setup: TurnSetup, m: Measure, *, target: int) -> Measure:
    """Replace the oldest tool outputs by stubs until the request is at most *target* tokens."""
    messages = history.messages
    chosen = budget.choose_stubs(m.sizes, budget.stubbable(messages), m.total, target, STUB_TOKENS)
    if not chosen:
        return m
    replaced, records = list(messages), []
    for index in chosen:
        replaced[index], record = _stub(history.dir, messages[index])
        records.append(record)
    history.replace_messages(replaced)
    after = await measure(setup, history.messages)
    history.emit(
        "context_stubbed",
        {"stubbed": records, "before": m.total, "after": after.total, "window": _window(setup)},
    )
    return after


def _stub(folder: Path, message: Message) -> tuple[Message, dict[str, Any]]:
    size = len(message.content.encode())
    path, lost = budget.spill_named(message.content), None
    if path is None:
        path, lost = _keep(folder, message)
    content = budget.stub_text(message.name, message.tool_call_id, size, path, lost)
    record = {"call_id": message.tool_call_id, "name": message.name, "bytes": size, "file": path}
    return Message(role="tool", tool_call_id=message.tool_call_id, name=message.name, content=content), record


def _keep(folder: Path, message: Message) -> tuple[str | None, str | None]:
    """Write a whole tool output that was never cut to a file of its own: its path, or None and why it could
    not be (a full disk): the stub says the output is gone then, and the request fits all the same."""
    call = _UNSAFE.sub("_", message.tool_call_id or "call")[:64]
    digest = hashlib.sha256(message.content.encode()).hexdigest()[:8]
    path = folder / f"output-{call}-{digest}.log"
    if not path.exists() and (lost := write_spill(path, message.content)) is not None:
        return None, lost  # no file is left: a part would read as the whole
    return str(path), None


# -- summaries ---------------------------------------------------------------------------


async def compact(history: History, setup: TurnSetup, *, by: str = "user") -> dict[str, Any]:
    """Summarise the whole conversation into one note (what ``session.compact`` does).

    Returns the ``context_compacted`` event's data (``summarised: 0`` when there was nothing).
    """
    before = await measure(setup, history.messages)
    if not history.messages:
        return _record(by, before.total, before.total, 0, "none", setup)
    return await _summarise_into_note(history, setup, len(history.messages), before, by=by)


async def _compact(history: History, setup: TurnSetup, m: Measure, *, by: str) -> Measure:
    assert setup.budget is not None
    keep = max(0, setup.budget.window.stub_to - m.fixed - NOTE_TOKENS)
    split = budget.compaction_split([x.role for x in history.messages], m.sizes, keep)
    if split is None:
        return m
    await _summarise_into_note(history, setup, split, m, by=by)
    return await measure(setup, history.messages)


async def _summarise_into_note(
    history: History, setup: TurnSetup, split: int, before: Measure, *, by: str
) -> dict[str, Any]:
    assert setup.budget is not None
    older, kept = history.messages[:split], history.messages[split:]
    summary, source = await _summary(setup, older)
    request = budget.pending_request(older, kept) if by == "auto" else None
    note = Message(role="user", content=budget.note_text(summary, setup.budget.window.tokens, request))
    history.replace_messages([note, *kept])
    after = await measure(setup, history.messages)
    record = _record(by, before.total, after.total, len(older), source, setup)
    history.emit("context_compacted", record)
    return record


# A summary is asked for in at most 150 words; a small model that goes on is cut here, not at its step limit.
SUMMARY_TOKENS = 300


async def _summary(setup: TurnSetup, older: list[Message]) -> tuple[str, str]:
    """A summary of *older* by the turn's model ("model"), or the one mm writes ("mm") when it gives none."""
    assert setup.budget is not None
    lines = [budget.transcript_line(m) for m in older]
    sizes = [await setup.budget.counter.count(line) + budget.MESSAGE_OVERHEAD for line in lines]
    start = budget.newest_fitting(sizes, setup.budget.window.room - SUMMARY_OVERHEAD)
    try:
        completion = await setup.provider.complete(
            budget.summary_prompt(lines[start:]), [], temperature=setup.temperature, max_tokens=SUMMARY_TOKENS
        )
    except ModelError:
        return budget.fallback_summary(older), "mm"
    if answers.unusable(completion.text) is not None:
        return budget.fallback_summary(older), "mm"
    return completion.text, "model"


def _record(
    by: str, before: int, after: int, summarised: int, source: str, setup: TurnSetup
) -> dict[str, Any]:
    return {
        "by": by,
        "before": before,
        "after": after,
        "summarised": summarised,
        "summary": source,
        "window": _window(setup),
    }


def _window(setup: TurnSetup) -> int:
    return setup.budget.window.tokens if setup.budget else 0
