"""What every model provider speaks: messages in, one completion out.

A provider streams one model step. Text deltas go to a callback as they
arrive; the completed step (text plus tool calls) is returned. The turn loop
in mmd.turn owns everything else: tools, consent, storage.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, Literal, Protocol, runtime_checkable

import msgspec


class ToolCall(msgspec.Struct, kw_only=True, frozen=True):
    id: str
    name: str
    # The arguments exactly as the model sent them: a JSON text that may be
    # malformed. The tool contract parses and answers it, never the provider.
    arguments: str


# Frozen: a message's token count and wire form are kept by identity while a history grows
# (mmd/turn/context.py, mmd/models/openai.py), so a message is replaced, never changed.
class Message(msgspec.Struct, kw_only=True, omit_defaults=True, frozen=True):
    role: str  # system | user | assistant | tool
    content: str = ""
    tool_calls: list[ToolCall] = []
    tool_call_id: str | None = None  # role == "tool": which call this answers
    name: str | None = None  # role == "tool": the tool's name
    # role == "assistant" whose calls were read from its text (mmd/models/recovery.py): that text as the
    # model wrote it. A provider that renders the model's own template shows it so (mmd/models/openai.py):
    # the template would write the call in another form, and the server's prompt cache would end there.
    said: str | None = None


def grown_from(messages: list[Message], last: list[Message]) -> bool:
    """Whether *messages* begin with the very objects of *last* (a history that only grew since), compared
    by identity in C: what is kept per message (its tokens, its wire form) then holds for that prefix."""
    return len(last) <= len(messages) and all(map(operator.is_, last, messages))


class ToolSpec(msgspec.Struct, kw_only=True, frozen=True):  # kept and shared between prompts: never changed
    name: str
    description: str
    parameters: dict[str, Any]  # JSON Schema of the arguments object, as the model reads it
    # The tool's whole schema (required, enum, pattern, lengths kept), for providers that constrain
    # decoding to it (mmd/models/grammar.py); None: parameters is all there is.
    schema: dict[str, Any] | None = None


class Usage(msgspec.Struct, kw_only=True):
    input_tokens: int = 0
    output_tokens: int = 0


class Timings(msgspec.Struct, kw_only=True):
    """Where one step's time went, as llama-server reports it (its ``timings``).

    ``prompt_tokens`` counts the whole prompt; ``cached_tokens`` of them were reused from the
    server's prompt cache and not processed again, so ``prompt_ms`` is the time of the rest.
    """

    prompt_tokens: int = 0
    cached_tokens: int = 0
    prompt_ms: float = 0.0
    gen_tokens: int = 0
    gen_ms: float = 0.0


class Choice(msgspec.Struct, kw_only=True, frozen=True):
    """What a constrained choice picked (Chooser.choose)."""

    option: str
    # The model's probability for the option's first token; None when the server reported none, or when
    # the option is the fallback taken because the model would rather have said something else.
    probability: float | None = None


class Completion(msgspec.Struct, kw_only=True):
    text: str = ""
    tool_calls: list[ToolCall] = []
    finish_reason: str = ""
    usage: Usage = msgspec.field(default_factory=Usage)
    timings: Timings | None = None  # None: the server reported none (only llama-server does)
    dropped_calls: int = 0  # calls past the turn's bound per step, left out (mmd/turn/loop.py)


class ModelError(Exception):
    """A model request failed for good (after retries, or not retryable).

    ``message`` says what happened and what to do next; it never contains
    an API key.
    """

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable


# Called with each text delta as it streams in.
OnText = Callable[[str], None]
# Called before a retry: (attempt number, seconds to wait, reason).
OnRetry = Callable[[int, float, str], None]


# How a constrained step must start (mmd/models/grammar.py); providers that constrain nothing ignore it.
#   "free": words, or one call;  "words": at least a line of words first (the step after a success);
#   "call": exactly one call (the first step of a turn a chosen skill says how to act in: mmd/turn/skillpick.py).
Lead = Literal["free", "words", "call"]


class Provider(Protocol):
    """One configured model endpoint.

    Cancellation: cancelling ``complete`` closes the HTTP stream at once.
    Errors: ModelError after the retry budget is spent or for a request
    that cannot succeed (4xx other than 429, malformed responses).
    """

    name: str  # "provider/model", as shown to the user

    async def complete(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        *,
        on_text: OnText | None = None,
        on_retry: OnRetry | None = None,
        temperature: float | None = None,  # None: the server's default
        max_tokens: int | None = None,  # this step's limit, below the provider's own; None: the provider's
        lead: Lead = "free",  # a provider that constrains decoding: how the step must start (Lead)
    ) -> Completion: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class Chooser(Protocol):
    """A provider that can constrain a step to one of a few words (a llama-server mm controls)."""

    async def choose(self, messages: list[Message], options: list[str]) -> Choice:
        """One of *options*, as the model picks it given *messages*; the last one when the model would
        rather say something else than any of them.

        Errors: ModelError as for ``complete``.
        """
        ...
