"""The context budget's arithmetic: what share of a model's window each part of a request may take.

Pure: numbers and texts in, numbers and texts out, no I/O. mmd/turn/context.py acts on them
(counting with mmd/models/tokens.py, rewriting the session); docs/local.md#context-budget says why
each number is what it is.

- A window of ``tokens`` keeps ``answer`` tokens free for the model's reply; the rest is the
  ``room`` the request may fill.
- A tool output may take a quarter of the window (:data:`OUTPUT_SHARE`), cut at
  :data:`CAP_BYTES_PER_TOKEN` bytes a token, then counted and cut again if it is denser.
- When a request passes :data:`STUB_AT` of the room, the oldest tool outputs become one-line stubs
  naming their spill files until it is under :data:`STUB_TO` (the gap means the prompt's prefix —
  and llama-server's prompt cache — changes once every few steps, not at every step); if that is
  not enough, the older messages are summarised into one note.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec

from ..models.base import Message, ToolSpec
from ..models.tokens import Counter

# A tool output may take 1/OUTPUT_SHARE of the window: three such outputs, the system prompt and
# the tools still fit.
OUTPUT_SHARE = 4
# Bytes a token when a share in tokens becomes a byte cap (code and prose run 3.5–4.5; the count
# after the cut catches denser text).
CAP_BYTES_PER_TOKEN = 3
# Old outputs become stubs when the request passes STUB_AT of the room, until it is under STUB_TO.
STUB_AT = 0.75
STUB_TO = 0.5
# Tokens a chat template adds around each message, each tool call, and the tool block (Qwen2.5's
# ChatML measured with llama-server: about 5, 11 and 80; rounded up).
MESSAGE_OVERHEAD = 8
CALL_OVERHEAD = 16
TOOLS_OVERHEAD = 160
# Tokens kept for the answer when the model has no max_tokens: at most this, and an eighth of the window.
DEFAULT_ANSWER = 4096
# The window of a model no server tells and no config names, by provider kind: OpenAI-compatible
# servers commonly serve 32k-token models (Qwen2.5 7B+, Llama 3.1 gateways default lower or higher);
# Anthropic's models have 200k.
DEFAULT_WINDOWS = {"openai": 32_768, "anthropic": 200_000}
FALLBACK_WINDOW = 8_192
# Outputs shorter than this stay: their stub would save next to nothing.
MIN_STUB_BYTES = 400
# Each message's part of the text a summary is asked for, and the summary's length: asked in words,
# kept in bytes (a small model may repeat itself up to its max_tokens: the rest is cut).
TRANSCRIPT_BYTES = 1_500
SUMMARY_WORDS = 150
SUMMARY_BYTES = 1_200
# The current request, quoted in a compaction note when it is among the summarised messages.
REQUEST_BYTES = 4_000

STUB_PREFIX = "[output of "
NOTE_PREFIX = "[mm summarised the earlier part of this session"
_SPILL_END = " — read any range of it with read_file"
_SPILL = re.compile(r"is in (.+?)" + _SPILL_END)


class Window(msgspec.Struct, frozen=True):
    """A model's context window in tokens and the part kept for its answer."""

    tokens: int
    answer: int

    @classmethod
    def of(cls, tokens: int, max_tokens: int | None) -> Window:
        """The window of a model that writes at most *max_tokens* a step (None: unknown)."""
        answer = max_tokens or min(DEFAULT_ANSWER, tokens // 8)
        return cls(tokens=tokens, answer=min(answer, tokens // 2))

    @property
    def room(self) -> int:
        """Tokens a request may take."""
        return self.tokens - self.answer

    @property
    def stub_at(self) -> int:
        return int(self.room * STUB_AT)

    @property
    def stub_to(self) -> int:
        return int(self.room * STUB_TO)

    @property
    def output_tokens(self) -> int:
        """Tokens one tool output may take."""
        return self.tokens // OUTPUT_SHARE

    def output_bytes(self, max_bytes: int) -> int:
        """Bytes of one tool output the model reads: its share of the window, never above *max_bytes*."""
        return max(1, min(max_bytes, self.output_tokens * CAP_BYTES_PER_TOKEN))


class Budget(msgspec.Struct):
    """The window of the turn's model and how its tokens are counted."""

    window: Window
    counter: Counter
    source: str = "default"  # where the window comes from: "server", "config", "catalog" or "default"
    # What mmd/turn/context.py counted at the last step: its messages and each one's tokens (the
    # messages kept, so that an id is never taken for another's), and the tool block's.
    measured: tuple[list[Message], list[int]] = msgspec.field(default_factory=lambda: ([], []))
    tools: tuple[list[ToolSpec], int] | None = None


def window_tokens(
    kind: str, *, config: int | None, server: int | None, catalog: int | None
) -> tuple[int, str]:
    """The window and where it comes from: the smaller of the config's and the server's, else the
    catalog's (a local model whose server did not say), else the default of the provider's kind."""
    known = [(n, source) for n, source in ((config, "config"), (server, "server")) if n]
    if known:
        return min(known)
    if catalog:
        return catalog, "catalog"
    return DEFAULT_WINDOWS.get(kind, FALLBACK_WINDOW), "default"


def cut_bytes(size: int, tokens: int, share: int, overhead: int = 0) -> int:
    """Bytes to keep of a text of *size* bytes and *tokens* tokens so that it takes at most *share*
    tokens: in proportion, a tenth less for uneven density, less the *overhead* bytes a cut adds
    (its marker line) whatever is kept."""
    return max(1, size * share * 9 // (tokens * 10) - overhead)


# -- stubs ---------------------------------------------------------------------


def stubbable(messages: Sequence[Message]) -> list[bool]:
    """Which messages may become stubs: tool outputs long enough and not stubs yet, but the newest
    message (being read now). The oldest go first (:func:`choose_stubs`), so the other results of
    the last step go only when several calls at once printed more than the window holds."""
    end = len(messages) - 1
    return [
        index < end
        and m.role == "tool"
        and not m.content.startswith(STUB_PREFIX)
        and len(m.content.encode()) >= MIN_STUB_BYTES
        for index, m in enumerate(messages)
    ]


def choose_stubs(
    sizes: Sequence[int], allowed: Sequence[bool], total: int, target: int, stub: int
) -> list[int]:
    """The messages to stub, oldest first, until *total* is at most *target* (or none is left).

    *sizes* are the messages' tokens, *stub* a stub's.
    """
    chosen = []
    for index, (size, ok) in enumerate(zip(sizes, allowed, strict=True)):
        if total <= target:
            break
        if ok and size > stub:
            chosen.append(index)
            total -= size - stub
    return chosen


def spill_named(content: str) -> str | None:
    """The spill file a truncation marker in *content* names, if any."""
    # Only up to the marker's last end: "is in " repeated through a tool's output without one once cost a
    # quadratic scan (0.7 s at 30 KB) each time old outputs were stubbed.
    last = content.rfind(_SPILL_END)
    found = _SPILL.search(content, 0, last + len(_SPILL_END)) if last >= 0 else None
    return found.group(1) if found else None


def stub_text(
    name: str | None, call_id: str | None, size: int, path: str | None, lost: str | None = None
) -> str:
    """What replaces an old tool output: one line that says where the whole is (or, *path* None, that it was
    not kept, and *lost* why)."""
    where = f"the whole is in {path} — read_file it if needed" if path else f"the whole was not kept ({lost})"
    return (
        f"{STUB_PREFIX}{name or 'a tool'} call {call_id or '?'}, {size:,} bytes, removed to fit the context "
        f"window; {where}]"
    )


# -- compaction -----------------------------------------------------------------


def compaction_split(roles: Sequence[str], sizes: Sequence[int], keep: int) -> int | None:
    """Where the kept tail of the history starts when the rest is summarised, or None (nothing to).

    The tail starts at a user or assistant message (a tool result never loses its call), takes at
    most *keep* tokens when it can, and holds at least the last such message and what follows.
    """
    starts = [i for i, role in enumerate(roles) if role in ("user", "assistant")]
    if not starts:
        return None
    split, tail = starts[-1], sum(sizes[starts[-1] :])
    for start in reversed(starts[:-1]):
        tail += sum(sizes[start:split])
        if tail > keep:
            break
        split = start
    return split or None


def transcript_line(message: Message) -> str:
    """One message as the summarising model reads it, cut to :data:`TRANSCRIPT_BYTES`."""
    if message.role == "tool":
        head = f"Result of {message.name or 'a tool'}:"
        if message.content.startswith(STUB_PREFIX):  # its spill file's path is no news for a summary
            return f"{head} (a long output, removed earlier)"
    else:
        head = f"{message.role.capitalize()}:"
    calls = "".join(f"\n(calls {c.name} {c.arguments})" for c in message.tool_calls)
    return f"{head} {_cut(message.content + calls, TRANSCRIPT_BYTES)}"


def newest_fitting(sizes: Sequence[int], limit: int) -> int:
    """The first index of the longest run of last items whose sizes sum to at most *limit*."""
    total, start = 0, len(sizes)
    while start > 0 and total + sizes[start - 1] <= limit:
        start -= 1
        total += sizes[start]
    return start


def summary_prompt(lines: Sequence[str]) -> list[Message]:
    """The request for a summary of the transcript *lines*."""
    system = (
        "You summarise a conversation between a user and an assistant that runs tools, so that the "
        f"assistant can go on without it. In at most {SUMMARY_WORDS} words say: what the user asked, "
        "what was done and found (file names, commands, results, errors), and what is still to do. "
        "Plain text, no preamble."
    )
    return [Message(role="system", content=system), Message(role="user", content="\n\n".join(lines))]


def fallback_summary(messages: Sequence[Message]) -> str:
    """A summary mm writes itself when the model gives none: the requests and the calls made."""
    parts = []
    for m in messages:
        if m.role == "user" and not m.content.startswith(NOTE_PREFIX):
            parts.append(f"The user asked: {_cut(m.content, 300)}")
        parts += [f"Called {c.name} {_cut(c.arguments, 200)}" for c in m.tool_calls]
    return "\n".join(parts[-40:]) or "(nothing to summarise)"


def note_text(summary: str, window: int, request: str | None) -> str:
    """The one message that stands for the summarised ones."""
    text = f"{NOTE_PREFIX} to fit the model's context window of {window:,} tokens]\n"
    text += _cut(summary.strip(), SUMMARY_BYTES)
    if request:
        text += f"\n\nThe user's current request: {_cut(request, REQUEST_BYTES)}"
    return text


def pending_request(summarised: Sequence[Message], kept: Sequence[Message]) -> str | None:
    """The request of the running turn when the summary swallows it (the kept part has no user message)."""
    if any(m.role == "user" for m in kept):
        return None
    for m in reversed(summarised):
        if m.role == "user" and not m.content.startswith(NOTE_PREFIX):
            return m.content
    return None


def cannot_fit(model: str, need: int, window: Window, fixed: int) -> str:
    """Why a request is not sent, and what to do instead."""
    return (
        f"the request would take about {need:,} tokens, but {model} has a context window of "
        f"{window.tokens:,} tokens ({window.answer:,} kept for its answer), even after old tool outputs "
        f"were replaced by stubs and older messages summarised; the system prompt and the tool "
        f"descriptions alone take {fixed:,}. Use a model with a larger window (--model), offer fewer "
        "tools (builtins: or tools: in the agent file), shorten the prompt, or start a new session "
        "(mm -p without --continue)."
    )


def _cut(text: str, limit: int) -> str:
    raw = text.encode()
    if len(raw) <= limit:
        return text
    return raw[:limit].decode("utf-8", "ignore") + f" […{len(raw) - limit:,} bytes cut]"
