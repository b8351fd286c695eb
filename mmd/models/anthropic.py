"""The Anthropic Messages API provider.

Speaks ``POST {base_url}/v1/messages`` with ``stream: true``. mm's messages
map onto Anthropic's shape here: system text goes top-level, tool calls
become ``tool_use`` blocks and tool results ``tool_result`` blocks in a user
message. Finish reasons are reported in the OpenAI vocabulary the turn loop
reads: ``stop``, ``tool_calls``, ``length``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from mmd.models import transport
from mmd.models._http import Accumulator, HttpModel, Retry, decode_json, error_message, excerpt, short
from mmd.models.base import Completion, Lead, Message, ModelError, OnRetry, OnText, ToolSpec
from mmd.untrusted import MAX_ARGUMENTS_BYTES, MAX_DEPTH, check_json

# The API version this module speaks; Anthropic requires it on every request.
ANTHROPIC_VERSION = "2023-06-01"
# Anthropic's stop reasons in the vocabulary Completion.finish_reason uses.
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
}
# Error events worth another attempt when they arrive before any content.
RETRY_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error"})


class AnthropicProvider:
    """A model behind Anthropic's Messages API (or a server that speaks it).

    ``base_url`` is the host, e.g. ``https://api.anthropic.com``. ``api_key``
    is sent as ``x-api-key`` and never shown. ``client`` lets callers share
    a connection pool; it is then theirs to close.

    Errors: ValueError for a base_url that is not http(s).
    """

    def __init__(
        self,
        *,
        name: str,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 300.0,
        max_retries: int = 4,
        headers: dict[str, str] | None = None,
        client: transport.Client | None = None,
        max_tokens: int = 4096,
        retry_base_delay: float = 0.5,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"{name}: base_url must start with http:// or https://, not {base_url!r}")
        self.name = name
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.max_tokens = max_tokens
        sent = {"anthropic-version": ANTHROPIC_VERSION, **(headers or {})}
        if api_key:
            sent["x-api-key"] = api_key
        self._http = HttpModel(
            label=name,
            url=self.base_url + "/v1/messages",
            headers=sent,
            secret=api_key,
            timeout=timeout,
            max_retries=max_retries,
            retry_base_delay=retry_base_delay,
            client=client,
        )

    def __repr__(self) -> str:
        return f"AnthropicProvider(name={self.name!r}, base_url={self.base_url!r}, model={self.model!r})"

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
        """Stream one model step: text deltas to ``on_text``, the whole step returned.

        Errors: ModelError after the retry budget is spent (429, 5xx,
        overloaded, connection failures, timeouts, a stream that broke off
        before any delta), at once for other 4xx answers and invalid JSON,
        and for a stream that broke off after deltas were handed on.
        Cancellation: closes the HTTP stream at once.
        """
        body = request_body(self.model, messages, tools, _limit(self.max_tokens, max_tokens))
        if temperature is not None:
            body["temperature"] = temperature
        return await self._http.post(body, lambda: AnthropicStream(on_text, self.name), on_retry)

    async def aclose(self) -> None:
        """Close the HTTP client if this provider created it."""
        await self._http.aclose()


def request_body(
    model: str, messages: list[Message], tools: list[ToolSpec], max_tokens: int
) -> dict[str, Any]:
    """The JSON body of a streamed Messages API request."""
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "messages": _turns(messages),
        "stream": True,
    }
    system = "\n\n".join(m.content for m in messages if m.role == "system" and m.content)
    if system:
        body["system"] = system
    if tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools
        ]
    return body


def _turns(messages: list[Message]) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    previous = ""
    for message in messages:
        if message.role == "system":
            continue
        if message.role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id or "",
                "content": message.content,
            }
            # Anthropic wants all results of one step in one user message.
            if previous == "tool":
                turns[-1]["content"].append(block)
            else:
                turns.append({"role": "user", "content": [block]})
        elif message.role == "assistant":
            if blocks := _assistant_blocks(message):
                turns.append({"role": "assistant", "content": blocks})
        elif message.role == "user" and previous == "tool":  # a note after a step's results: one turn
            turns[-1]["content"].append({"type": "text", "text": message.content})
        else:
            turns.append({"role": message.role, "content": message.content})
        previous = message.role
    return turns


def _assistant_blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    for call in message.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": _input(call.arguments)})
    return blocks


def _input(arguments: str) -> dict[str, Any]:
    # tool_use input must be an object; a malformed (or too deep, too big) call was
    # already answered by the contract layer, so the history carries an empty one.
    try:
        check_json(arguments, max_depth=MAX_DEPTH, max_bytes=MAX_ARGUMENTS_BYTES)
        value = msgspec.json.decode(arguments)
    except ValueError:  # msgspec.DecodeError, TooDeep, TooLarge
        return {}
    return value if isinstance(value, dict) else {}


class AnthropicStream(Accumulator):
    """Parses Messages API stream events (or one message body)."""

    def feed(self, event: str, data: str) -> bool:
        message = decode_json(data, self.label)
        if not isinstance(message, dict):
            raise ModelError(
                f"{self.label}: the provider sent something other than an event: {excerpt(data)}"
            )
        kind = message.get("type", event)
        if kind == "message_start":
            self._usage(message["message"].get("usage"))
        elif kind == "content_block_start":
            self._block(message["index"], message["content_block"])
        elif kind == "content_block_delta":
            self._delta(message["index"], message["delta"])
        elif kind == "message_delta":
            self._stop(message["delta"].get("stop_reason"))
            self._usage(message.get("usage"))
        elif kind == "error":
            self._error(message)
        return kind == "message_stop"

    def feed_body(self, obj: Any) -> None:
        if not isinstance(obj, dict) or obj.get("type") == "error":
            self._error(obj if isinstance(obj, dict) else {"error": short(obj)})
        for index, block in enumerate(obj.get("content") or []):
            self._block(index, block)
        self._stop(obj.get("stop_reason"))
        self._usage(obj.get("usage"))

    def _block(self, index: int, block: dict[str, Any]) -> None:
        if block["type"] == "text":
            self.add_text(block.get("text") or "")
        elif block["type"] == "tool_use":
            # The input normally streams as partial JSON; the start block's
            # own input stands only when no fragment follows.
            value = block.get("input", {})
            fallback = value if isinstance(value, str) else msgspec.json.encode(value).decode()
            self.start_call(index, block.get("id"), block.get("name"), fallback)

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        if delta["type"] == "text_delta":
            self.add_text(delta.get("text") or "")
        elif delta["type"] == "input_json_delta":
            self.add_arguments(index, delta.get("partial_json") or "")

    def _stop(self, reason: Any) -> None:
        self.finish(FINISH_REASONS.get(reason, reason) if isinstance(reason, str) else reason)

    def _usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self.usage(usage.get("input_tokens"), usage.get("output_tokens"))

    def _error(self, message: dict[str, Any]) -> None:
        error = message.get("error")
        kind = error.get("type", "") if isinstance(error, dict) else ""
        text = error_message(message) or short(error)
        if kind in RETRY_ERRORS and not self.started:
            raise Retry(f"{kind}: {text}", hint="The provider is overloaded; try again later.")
        raise ModelError(f"{self.label}: the provider reported an error: {text}")


def _limit(own: int | None, step: int | None) -> int | None:
    """The step's token limit: the smaller of the provider's and the step's."""
    if step is None:
        return own
    return step if own is None else min(own, step)
