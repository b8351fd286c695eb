"""A model provider in process: canned steps, no HTTP, no server, for the turn loop's unit tests.

It speaks :class:`mmd.models.base.Provider` exactly as the HTTP providers do: text deltas go to
``on_text`` as they "arrive", retries are announced through ``on_retry`` and waited for with
``trio.sleep`` (so a test with ``autojump_clock`` waits no real time), and the completed step is
returned as a :class:`~mmd.models.base.Completion`. Every request is recorded for the test to read.

The end-to-end tier uses the scripted model *server* instead (mmd/models/scripted.py, the
``scripted`` fixture of tests/e2e/conftest.py), which speaks real HTTP to a real daemon.

    provider = ScriptedProvider(call("lookup", key="a"), answer("a is 1"))
"""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass, field
from typing import Any

import trio

from mmd.models.base import (
    Choice,
    Completion,
    Lead,
    Message,
    ModelError,
    OnRetry,
    OnText,
    Timings,
    ToolCall,
    ToolSpec,
    Usage,
)


@dataclass
class Step:
    """One model step: what the model "writes", and how the request goes before it does."""

    text: str = ""
    tool_calls: list[tuple[str, str]] = field(
        default_factory=list
    )  # (name, arguments as the model wrote them)
    chunks: int = 1  # text deltas the text streams as
    retries: list[tuple[float, str]] = field(default_factory=list)  # (wait, reason) of failed attempts first
    delay: float = 0.0  # seconds the model "thinks" before answering
    error: str | None = None  # fail the request for good (a ModelError) instead
    finish_reason: str = ""
    timings: Timings | None = None  # what a llama-server would report about the step


def answer(text: str, **kw: Any) -> Step:
    """A step that answers with *text* and calls no tool: the turn ends."""
    return Step(text=text, finish_reason="stop", **kw)


def call(name: str, arguments: dict[str, Any] | str | None = None, /, **kw: Any) -> Step:
    """A step that calls one tool; *arguments* as a dict (sent as JSON) or verbatim text."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return Step(tool_calls=[(name, args)], finish_reason="tool_calls", **kw)


def calls(*pairs: tuple[str, dict[str, Any]]) -> Step:
    """A step that calls several tools at once."""
    return Step(tool_calls=[(name, json.dumps(args)) for name, args in pairs], finish_reason="tool_calls")


@dataclass
class Request:
    """What the turn sent for one step."""

    messages: list[Message]
    tools: list[str]
    temperature: float | None
    lead: str = "free"  # how a constraining provider would have made the step start


class ScriptedProvider:
    """Replays *steps* in order, one per ``complete``; a request past the last is a ModelError."""

    def __init__(
        self,
        *steps: Step,
        name: str = "test/scripted",
        choices: tuple[str | tuple[str, float | None], ...] = (),
    ) -> None:
        self.name = name
        self.steps = collections.deque(steps)
        self.requests: list[Request] = []
        self.choices = collections.deque(choices)  # what ``choose`` answers, in order
        self.choice_requests: list[tuple[list[Message], list[str]]] = []
        self.closed = False
        self._ids = 0

    async def choose(self, messages: list[Message], options: list[str]) -> Choice:
        """The next scripted choice (a Chooser, like a llama-server mm runs); the last option when none is left.

        A scripted choice is an option (probability 1.0) or an (option, probability) pair."""
        self.choice_requests.append((list(messages), list(options)))
        await trio.sleep(0)
        if not self.choices:
            return Choice(option=options[-1])
        scripted = self.choices.popleft()
        option, probability = scripted if isinstance(scripted, tuple) else (scripted, 1.0)
        return Choice(option=option, probability=probability)

    async def complete(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        *,
        on_text: OnText | None = None,
        on_retry: OnRetry | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        lead: Lead = "free",
    ) -> Completion:
        self.requests.append(Request(list(messages), [t.name for t in tools], temperature, lead))
        if not self.steps:
            raise ModelError(f"{self.name}: the script has no step {len(self.requests)}")
        step = self.steps.popleft()
        for attempt, (wait, reason) in enumerate(step.retries, 1):
            if on_retry is not None:
                on_retry(attempt, wait, reason)
            await trio.sleep(wait)
        await trio.sleep(step.delay)  # a checkpoint even at 0: cancellation lands here
        if step.error is not None:
            raise ModelError(step.error)
        for delta in _split(step.text, step.chunks):
            if on_text is not None:
                on_text(delta)
        return Completion(
            text=step.text,
            tool_calls=[ToolCall(id=self._next_id(), name=n, arguments=a) for n, a in step.tool_calls],
            finish_reason=step.finish_reason,
            usage=Usage(input_tokens=sum(len(m.content) for m in messages), output_tokens=len(step.text)),
            timings=step.timings,
        )

    async def aclose(self) -> None:
        self.closed = True

    def _next_id(self) -> str:
        self._ids += 1
        return f"call_{self._ids}"


def _split(text: str, parts: int) -> list[str]:
    if not text:
        return []
    size = -(-len(text) // max(parts, 1))
    return [text[i : i + size] for i in range(0, len(text), size)]
