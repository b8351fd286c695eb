"""The OpenAI-compatible chat completions provider.

Speaks ``POST {base_url}/chat/completions`` with ``stream: true``: OpenAI
itself, llama-server, vLLM, Ollama and most hosted gateways. Tool-call
arguments are kept as the raw text the model sent; the tool contract layer
answers malformed JSON, never this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from mmd.models import transport
from mmd.models._http import Accumulator, HttpModel, check_depth, decode_json
from mmd.models.base import Choice, Completion, Lead, Message, OnRetry, OnText, ToolSpec, grown_from
from mmd.models.llama import constrained_choice, constrained_step, timings
from mmd.models.tokens import server_root
from mmd.rpc.messages import packed
from mmd.untrusted import MAX_DOCUMENT_DEPTH


class OpenAIProvider:
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    ``base_url`` ends before ``/chat/completions``, e.g.
    ``http://127.0.0.1:8080/v1``. ``api_key`` is sent as a bearer token and
    never shown. ``client`` lets callers share a connection pool; it is then
    theirs to close. ``cache_prompt`` asks a llama-server to reuse the prompt
    prefix it already processed (a field other servers may refuse).

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
        max_tokens: int | None = None,
        client: transport.Client | None = None,
        retry_base_delay: float = 0.5,
        constrain_calls: bool = False,
        cache_prompt: bool = False,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"{name}: base_url must start with http:// or https://, not {base_url!r}")
        self.name = name
        self.model = model
        self.max_tokens = max_tokens
        self.constrain_calls = constrain_calls
        self.cache_prompt = cache_prompt
        self.base_url = base_url.rstrip("/")
        sent = {**(headers or {})}
        if api_key:
            sent["Authorization"] = f"Bearer {api_key}"
        self._wire = Wire()
        self._said = Wire(said_message)  # the constrained step's messages: past calls as the model wrote them
        self._http = HttpModel(
            label=name,
            url=self.base_url + "/chat/completions",
            headers=sent,
            secret=api_key,
            timeout=timeout,
            max_retries=max_retries,
            retry_base_delay=retry_base_delay,
            client=client,
        )

    def __repr__(self) -> str:
        return f"OpenAIProvider(name={self.name!r}, base_url={self.base_url!r}, model={self.model!r})"

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
        connection failures, timeouts, a stream that broke off before any
        delta), at once for other 4xx answers and invalid JSON, and for a
        stream that broke off after deltas were handed on.
        Cancellation: closes the HTTP stream at once.
        """
        constrained = self.constrain_calls and bool(tools)
        wire = self._said if constrained else self._wire
        body = request_body(self.model, messages, tools, _limit(self.max_tokens, max_tokens), wire)
        if temperature is not None:
            body["temperature"] = temperature
        if self.cache_prompt:
            body["cache_prompt"] = True
        if constrained:
            root = server_root(self.base_url)
            return await constrained_step(
                self._http, root, body, tools, on_text=on_text, on_retry=on_retry, lead=lead
            )
        return await self._http.post(body, lambda: OpenAIStream(on_text, self.name), on_retry)

    async def choose(self, messages: list[Message], options: list[str]) -> Choice:
        """One of *options* (a step constrained to them, greedy); only for a server that takes a grammar.

        Errors: ModelError as for ``complete``; ValueError when this provider constrains nothing.
        """
        if not self.constrain_calls:
            raise ValueError(f"{self.name}: choose needs a server that takes a grammar (constrain_calls)")
        body = request_body(self.model, messages, [])
        body["cache_prompt"] = self.cache_prompt
        return await constrained_choice(self._http, server_root(self.base_url), body, options, options[-1])

    async def aclose(self) -> None:
        """Close the HTTP client if this provider created it."""
        await self._http.aclose()


class Wire:
    """Each message of the last request in its wire form, encoded: a step sends the whole history again, and
    the messages it began with keep theirs (built anew, ~1 µs a message, at every step before; then encoded
    anew, 12 µs a step at 80 messages and 35 at 300). A form is a ``msgspec.Raw``, JSON the request's encoder
    copies as it is. The tools' block is kept the same way while the tools are the same objects."""

    def __init__(self, form: Callable[[Message], dict[str, Any]] | None = None) -> None:
        self.form = form or _message
        self.messages: list[Message] = []
        self.forms: list[msgspec.Raw] = []
        self._tools: tuple[list[ToolSpec], msgspec.Raw] | None = None

    def of(self, messages: list[Message]) -> list[msgspec.Raw]:
        last = self.messages
        if grown_from(messages, last):
            forms = self.forms + [_RAW(packed(self.form(m), _JSON.encode)) for m in messages[len(last) :]]
        else:
            forms = [_RAW(packed(self.form(m), _JSON.encode)) for m in messages]
        self.messages, self.forms = list(messages), forms
        return forms

    def tools_of(self, tools: list[ToolSpec]) -> msgspec.Raw:
        kept = self._tools
        if kept is None or kept[0] != tools:  # compares each tool by identity first, in C
            kept = self._tools = (list(tools), _RAW(packed(tool_forms(tools), _JSON.encode)))
        return kept[1]


_JSON = msgspec.json.Encoder()
_RAW = msgspec.Raw


def tool_forms(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    """The request's ``tools``: each one's name, description and parameters as OpenAI takes them."""
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tools
    ]


def request_body(
    model: str,
    messages: list[Message],
    tools: list[ToolSpec],
    max_tokens: int | None = None,
    wire: Wire | None = None,
) -> dict[str, Any]:
    """The JSON body of a streamed chat completion request (*wire* keeps the messages' and the tools' forms,
    encoded: the body is then for an encoder, its ``messages`` ``msgspec.Raw`` texts)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": wire.of(messages) if wire is not None else [_message(m) for m in messages],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if tools:
        body["tools"] = wire.tools_of(tools) if wire is not None else tool_forms(tools)
    return body


def _message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": message.content}
    if message.role == "assistant" and message.tool_calls:
        calls = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
        return {"role": "assistant", "content": message.content or None, "tool_calls": calls}
    return {"role": message.role, "content": message.content}


def said_message(message: Message) -> dict[str, Any]:
    """A message as a model's own chat template is given it (mmd/models/llama.py): an assistant message whose
    calls were read from its text is that text, not the calls. Qwen's template writes a past call as
    ``<tool_call>`` and one-line JSON; the model wrote it in a fence. Given its own text, llama-server's
    prompt cache holds up to the tool's result, and the next step processes only what is new."""
    if message.role == "assistant" and message.said is not None:
        return {"role": "assistant", "content": message.said}
    return _message(message)


class _Function(msgspec.Struct):
    name: str | None = None
    arguments: str | dict[str, Any] | None = None  # a few servers send an object where OpenAI sends its text


class _CallDelta(msgspec.Struct):
    index: int | msgspec.UnsetType | None = msgspec.UNSET  # missing: the call's place in the list
    id: str | None = None
    function: _Function | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_CallDelta] | None = None


class _StreamChoice(msgspec.Struct):
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | float | None = None
    completion_tokens: int | float | None = None


class _Timings(msgspec.Struct):
    """llama-server's timings, the fields llama.timings reads (a number each, or the event is read untyped)."""

    cache_n: float | None = None
    prompt_n: float | None = None
    prompt_ms: float | None = None
    predicted_n: float | None = None
    predicted_ms: float | None = None


class _Chunk(msgspec.Struct):
    """A chat.completion.chunk of the usual shape; fields not named here are skipped unread, and those named
    are typed down to their numbers: a ``usage`` that was a list of 20 M ``{}`` was built whole (1.8 GB)."""

    choices: list[_StreamChoice] | None = None
    usage: _Usage | None = None
    timings: _Timings | None = None
    error: msgspec.Raw | None = None  # never built here: an error is read untyped (_feed_any)


# One event a token, for a local model: decoded into these, an event's fields are read as attributes, and
# no dict is made for the fields nobody reads (id, model, object, created, logprobs...).
_CHUNK = msgspec.json.Decoder(_Chunk)


class OpenAIStream(Accumulator):
    """Parses chat.completion.chunk events (or one chat.completion body)."""

    def feed(self, event: str, data: str) -> bool:
        if data[:1] != "{" and data.strip() == "[DONE]":  # an event of the answer begins with its brace
            return True
        # check_depth's own first look. An event long enough to hold more values than their limit (a typed
        # decode builds every item of a list, and an object's arguments) was checked whole in a worker thread
        # already (HttpModel._parse_off_loop: OFF_LOOP_BYTES > MAX_VALUES).
        if data.count("[") + data.count("{") > MAX_DOCUMENT_DEPTH:
            check_depth(data, self.label)
        try:
            chunk = _CHUNK.decode(data)
        except msgspec.DecodeError:  # another shape, or no JSON: read as any JSON, as every event once was
            return self._feed_any(data)
        if chunk.error is not None:
            return self._feed_any(data)
        if (usage := chunk.usage) is not None:
            self.usage(usage.prompt_tokens, usage.completion_tokens)
        if chunk.timings is not None:
            self.timings = timings(msgspec.structs.asdict(chunk.timings)) or self.timings
        for choice in chunk.choices or ():
            if choice.index == 0:
                if (delta := choice.delta) is not None:
                    self._typed_delta(delta)
                if choice.finish_reason:  # a str: the struct's type (finish() checks the untyped reason)
                    self.finish_reason = choice.finish_reason
        return False

    def _typed_delta(self, delta: _Delta) -> None:
        # What _choice does with a delta's dict, read from its struct: its types are checked (msgspec).
        if delta.content:
            self.add_text(delta.content)
        if not delta.tool_calls:
            return
        for position, call in enumerate(delta.tool_calls):
            key = position if call.index is msgspec.UNSET or call.index is None else call.index
            function = call.function
            arguments = function.arguments if function is not None else None
            if isinstance(arguments, dict):
                arguments = msgspec.json.encode(arguments).decode()
            self.typed_part(key, call.id, function.name if function is not None else None, arguments)

    def _feed_any(self, data: str) -> bool:
        chunk = self.checked(decode_json(data, self.label))
        # Most events carry neither (a call each, for every token of a local model's stream).
        if (usage := chunk.get("usage")) is not None:
            self._usage(usage)
        if (found := chunk.get("timings")) is not None:
            self.timings = timings(found) or self.timings
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._choice(choice.get("delta") or {}, choice.get("finish_reason"))
        return False

    def feed_body(self, obj: Any) -> None:
        body = self.checked(obj)
        self._usage(body.get("usage"))
        self.timings = timings(body.get("timings")) or self.timings
        choices = body.get("choices") or [{}]
        self._choice(choices[0].get("message") or {}, choices[0].get("finish_reason"))

    def _choice(self, delta: dict[str, Any], finish_reason: str | None) -> None:
        self.add_text(delta.get("content") or "")
        for position, call in enumerate(delta.get("tool_calls") or []):
            # Some servers send whole calls without an index (or a null one): their place
            # in the list is the index then.
            key = call.get("index")
            key = position if key is None else key
            function = call.get("function") or {}
            self.start_call(key, call.get("id"), function.get("name"))
            arguments = function.get("arguments")
            if isinstance(arguments, dict):
                # A few servers send an object where OpenAI sends its JSON text.
                arguments = msgspec.json.encode(arguments).decode()
            if arguments:
                self.add_arguments(key, arguments)
        self.finish(finish_reason)

    def _usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self.usage(usage.get("prompt_tokens"), usage.get("completion_tokens"))


def _limit(own: int | None, step: int | None) -> int | None:
    """The step's token limit: the smaller of the provider's and the step's."""
    if step is None:
        return own
    return step if own is None else min(own, step)
