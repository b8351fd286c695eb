"""OpenAIProvider against the scripted model server over real sockets."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import msgspec
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mmd.models._http import MAX_WAIT, retry_after_seconds
from mmd.models.base import Message, ModelError, Timings, ToolCall, ToolSpec
from mmd.models.openai import OpenAIProvider, Wire, request_body, timings
from mmd.models.scripted import serve

from ...budget import examples

# A fake key: the tests check it never shows up anywhere.
KEY = "sk-test-0123456789abcdef"
HELLO = [Message(role="user", content="hello")]


@pytest.fixture
async def start(nursery: trio.Nursery) -> Any:
    """``await start(*steps, **provider_options)`` → (server, provider)."""
    providers: list[OpenAIProvider] = []

    async def start(*steps: dict[str, Any], **options: Any) -> tuple[Any, OpenAIProvider]:
        server = await nursery.start(serve, list(steps))
        options = {"api_key": KEY, "retry_base_delay": 0.01, **options}
        provider = OpenAIProvider(
            name="scripted/test", base_url=server.url + "/v1", model="scripted", **options
        )
        providers.append(provider)
        return server, provider

    yield start
    for provider in providers:
        await provider.aclose()


class Recorder:
    def __init__(self) -> None:
        self.deltas: list[str] = []
        self.retries: list[tuple[int, float, str]] = []

    def text(self, delta: str) -> None:
        self.deltas.append(delta)

    def retry(self, attempt: int, wait: float, reason: str) -> None:
        self.retries.append((attempt, wait, reason))


async def complete(provider: OpenAIProvider, rec: Recorder, messages: list[Message] = HELLO) -> Any:
    return await provider.complete(messages, [], on_text=rec.text, on_retry=rec.retry)


async def test_text_streams_as_deltas(start: Any) -> None:
    text = "The quick brown fox jumps over the lazy dog."
    _, provider = await start({"text": text, "usage": {"input_tokens": 7, "output_tokens": 9}})
    rec = Recorder()
    result = await complete(provider, rec)
    assert "".join(rec.deltas) == text
    assert len(rec.deltas) > 1
    assert result.text == text
    assert result.finish_reason == "stop"
    assert (result.usage.input_tokens, result.usage.output_tokens) == (7, 9)
    assert result.tool_calls == []


async def test_consecutive_requests_reuse_one_connection(start: Any) -> None:
    # The end of a stream (its chunked terminator, often a packet of its own) is read when the connection is
    # next taken, not waited for after the last event: keep-alive holds, each answer read to its end.
    server, provider = await start(*({"text": f"answer {i}"} for i in range(5)))
    for _ in range(5):
        await complete(provider, Recorder())
    assert {r["connection"] for r in server.requests} == {server.requests[0]["connection"]}
    assert all(r["t_responded"] is not None for r in server.requests[:-1])


async def test_an_idle_connection_is_dropped_before_servers_drop_it(
    start: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # llama-server closes a connection idle for 5 s; the client must never reuse one that old.
    from mmd.models import transport

    assert transport.KEEPALIVE < 5
    monkeypatch.setattr(transport, "KEEPALIVE", 0.2)
    server, provider = await start({"text": "a"}, {"text": "b"}, {"text": "c"})
    await complete(provider, Recorder())
    await complete(provider, Recorder())  # at once: the same connection
    await trio.sleep(0.5)
    await complete(provider, Recorder())  # after the expiry: a new one
    first, second, third = (r["connection"] for r in server.requests)
    assert first == second != third


async def test_one_tool_call(start: Any) -> None:
    call = {"name": "bash", "arguments": {"command": "ls -la"}, "id": "call_abc"}
    _, provider = await start({"tool_calls": [call]})
    result = await complete(provider, Recorder())
    assert result.tool_calls == [ToolCall(id="call_abc", name="bash", arguments='{"command":"ls -la"}')]
    assert result.finish_reason == "tool_calls"


async def test_several_tool_calls_in_one_response(start: Any) -> None:
    calls = [
        {"name": "bash", "arguments": {"command": "ls"}},
        {"name": "read_file", "arguments": {"path": "a.txt"}},
    ]
    _, provider = await start({"text": "Two things.", "tool_calls": calls})
    result = await complete(provider, Recorder())
    assert result.text == "Two things."
    assert [(c.name, c.arguments) for c in result.tool_calls] == [
        ("bash", '{"command":"ls"}'),
        ("read_file", '{"path":"a.txt"}'),
    ]
    assert len({c.id for c in result.tool_calls}) == 2


async def test_malformed_arguments_pass_through_verbatim(start: Any) -> None:
    broken = '{"command": "ls, "path": }'
    _, provider = await start({"tool_calls": [{"name": "bash", "arguments": broken}]})
    result = await complete(provider, Recorder())
    assert result.tool_calls[0].arguments == broken


async def test_429_honours_retry_after(start: Any) -> None:
    server, provider = await start({"status": 429, "retry_after": 1}, {"text": "ok"})
    rec = Recorder()
    result = await complete(provider, rec)
    assert result.text == "ok"
    assert len(server.requests) == 2
    [(attempt, wait, reason)] = rec.retries
    assert (attempt, wait) == (1, 1.0)
    assert "429" in reason


async def test_500_then_success(start: Any) -> None:
    server, provider = await start({"status": 500}, {"text": "recovered"})
    rec = Recorder()
    result = await complete(provider, rec)
    assert result.text == "recovered"
    assert rec.deltas == ["recovered"]
    assert len(server.requests) == 2
    [(attempt, wait, reason)] = rec.retries
    assert attempt == 1
    assert 0 < wait <= 0.01
    assert "HTTP 500" in reason


async def test_retries_exhausted(start: Any) -> None:
    server, provider = await start(*[{"status": 503}] * 3, max_retries=2)
    rec = Recorder()
    with pytest.raises(ModelError) as info:
        await complete(provider, rec)
    assert len(server.requests) == 3
    assert [r[0] for r in rec.retries] == [1, 2]
    assert info.value.retryable
    assert info.value.status == 503
    assert "gave up after 3 attempts" in str(info.value)


async def test_400_is_not_retried(start: Any) -> None:
    body = {"error": {"message": "The model `gpt-9` does not exist", "type": "invalid_request_error"}}
    server, provider = await start({"status": 400, "body": body}, {"text": "never"})
    rec = Recorder()
    with pytest.raises(ModelError) as info:
        await complete(provider, rec)
    assert len(server.requests) == 1
    assert rec.retries == []
    assert info.value.status == 400
    assert not info.value.retryable
    assert "The model `gpt-9` does not exist" in str(info.value)
    assert "config.yaml" in str(info.value)


async def test_invalid_json_body(start: Any) -> None:
    server, provider = await start({"raw": "<html>Bad gateway</html>"})
    with pytest.raises(ModelError, match="invalid JSON") as info:
        await complete(provider, Recorder())
    assert "<html>Bad gateway" in str(info.value)
    assert len(server.requests) == 1


async def test_invalid_json_chunk(start: Any) -> None:
    raw = 'data: {"choices": [{"delta": {"content": "hi"}}]}\n\ndata: {oops\n\n'
    _, provider = await start({"raw": raw, "content_type": "text/event-stream"})
    rec = Recorder()
    with pytest.raises(ModelError, match="invalid JSON") as info:
        await complete(provider, rec)
    assert "{oops" in str(info.value)
    assert rec.deltas == ["hi"]


async def test_chunk_of_unexpected_shape(start: Any) -> None:
    raw = 'data: {"choices": [{"index": 0, "delta": {"content": ["not", "a", "string"]}}]}\n\n'
    _, provider = await start({"raw": raw, "content_type": "text/event-stream"})
    with pytest.raises(ModelError, match="unexpected shape"):
        await complete(provider, Recorder())


async def test_whole_json_answer_is_accepted(start: Any) -> None:
    # A server that ignores stream=true answers with one chat.completion.
    raw = '{"choices": [{"message": {"content": "whole"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 3}}'
    _, provider = await start({"raw": raw})
    rec = Recorder()
    result = await complete(provider, rec)
    assert (result.text, rec.deltas, result.usage.input_tokens) == ("whole", ["whole"], 3)


async def test_break_before_any_delta_is_retried(start: Any) -> None:
    # The first event is the role chunk: no text has been handed on yet.
    server, provider = await start({"text": "lost answer", "break_after": 1}, {"text": "second try"})
    rec = Recorder()
    result = await complete(provider, rec)
    assert result.text == "second try"
    assert "".join(rec.deltas) == "second try"
    assert len(server.requests) == 2
    assert len(rec.retries) == 1


async def test_break_after_text_raises(start: Any) -> None:
    server, provider = await start({"text": "one two three four", "break_after": 3}, {"text": "never"})
    rec = Recorder()
    with pytest.raises(ModelError, match="broke off after 8 characters") as info:
        await complete(provider, rec)
    assert "--continue" in str(info.value)
    assert rec.deltas == ["one ", "two "]
    assert len(server.requests) == 1


async def test_timeout_is_a_model_error(start: Any) -> None:
    server, provider = await start({"delay": 5, "text": "late"}, timeout=0.2, max_retries=0)
    with pytest.raises(ModelError, match=r"no answer within 0\.2 s"):
        await complete(provider, Recorder())
    with trio.fail_after(5):  # the server may record the request after the client gave up (a loaded machine)
        while not (server.requests and server.requests[0]["client_closed"]):
            await trio.sleep(0.01)


async def test_cancellation_closes_the_stream(start: Any) -> None:
    words = " ".join(f"word{i}" for i in range(50))
    server, provider = await start({"text": words, "chunk_delay": 0.2})
    with trio.CancelScope() as scope:
        await provider.complete(HELLO, [], on_text=lambda _: scope.cancel())
    assert scope.cancelled_caught
    with trio.fail_after(5):
        while not server.requests[0]["client_closed"]:
            await trio.sleep(0.01)
    assert server.requests[0]["t_responded"] is None


async def test_connection_refused_is_retried_then_fails() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    provider = OpenAIProvider(
        name="dead/model",
        base_url=f"http://127.0.0.1:{port}/v1",
        model="m",
        max_retries=1,
        retry_base_delay=0.01,
    )
    rec = Recorder()
    try:
        with pytest.raises(ModelError, match="connection failed") as info:
            await complete(provider, rec)
    finally:
        await provider.aclose()
    assert info.value.retryable
    assert len(rec.retries) == 1


async def test_request_shape(start: Any) -> None:
    server, provider = await start({"text": "done"})
    call = ToolCall(id="call_1", name="bash", arguments='{"command": "ls"}')
    messages = [
        Message(role="system", content="Be brief."),
        Message(role="user", content="list files"),
        Message(role="assistant", tool_calls=[call]),
        Message(role="tool", content="a.txt", tool_call_id="call_1", name="bash"),
    ]
    schema = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
    tools = [ToolSpec(name="bash", description="Run a command.", parameters=schema)]
    await provider.complete(messages, tools)
    [request] = server.requests
    assert request["path"] == "/v1/chat/completions"
    body = request["body"]
    assert body["model"] == "scripted"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "bash", "description": "Run a command.", "parameters": schema},
        }
    ]
    assert request["headers"]["authorization"] == "<redacted>"


async def test_no_tools_key_without_tools(start: Any) -> None:
    server, provider = await start({"text": "hi"})
    await provider.complete(HELLO, [])
    assert "tools" not in server.requests[0]["body"]
    assert "max_tokens" not in server.requests[0]["body"]  # not configured: the server's own limit


async def test_max_tokens_is_sent_when_configured(start: Any) -> None:
    server, provider = await start({"text": "hi"}, max_tokens=1024)
    await provider.complete(HELLO, [])
    assert server.requests[0]["body"]["max_tokens"] == 1024


async def test_llama_server_timings_come_back_with_the_completion(start: Any) -> None:
    # As llama-server sends them: in the last chunk of a stream (the usage chunk), and in a whole body.
    sent = {"cache_n": 400, "prompt_n": 100, "prompt_ms": 250.5, "predicted_n": 20, "predicted_ms": 800.0}
    raw = '{"choices": [{"message": {"content": "whole"}}], "timings": {"prompt_n": 7, "prompt_ms": 9}}'
    _, provider = await start({"text": "hi", "timings": sent}, {"raw": raw}, {"text": "no timings"})
    streamed, whole, plain = [await complete(provider, Recorder()) for _ in range(3)]
    assert streamed.timings == Timings(
        prompt_tokens=500, cached_tokens=400, prompt_ms=250.5, gen_tokens=20, gen_ms=800.0
    )
    assert whole.timings == Timings(prompt_tokens=7, prompt_ms=9.0)  # an older build: no cache_n
    assert plain.timings is None


def test_timings_of_a_strange_shape_count_as_zero() -> None:
    assert timings(None) is None and timings([1, 2]) is None
    odd = {"prompt_n": "12", "cache_n": -3, "prompt_ms": float("nan"), "predicted_n": True, "predicted_ms": 5}
    assert timings(odd) == Timings(gen_ms=5.0)


async def test_cache_prompt_is_sent_only_when_asked(start: Any) -> None:
    server, cached = await start({"text": "a"}, {"text": "b"}, cache_prompt=True)
    await cached.complete(HELLO, [])
    await cached.complete(HELLO, [ToolSpec(name="t", description="d", parameters={"type": "object"})])
    assert [r["body"]["cache_prompt"] for r in server.requests] == [True, True]
    server, plain = await start({"text": "c"})
    await plain.complete(HELLO, [])
    assert "cache_prompt" not in server.requests[0]["body"]  # OpenAI itself does not know the field


async def test_temperature_is_sent_only_when_given(start: Any) -> None:
    server, provider = await start({"text": "a"}, {"text": "b"})
    await provider.complete(HELLO, [], temperature=0.0)
    await provider.complete(HELLO, [])
    assert server.requests[0]["body"]["temperature"] == 0.0
    assert "temperature" not in server.requests[1]["body"]


def test_model_refs_give_each_provider_its_token_limit(tmp_path: Any) -> None:
    from mmd.config import load_user_config
    from mmd.models.factory import LOCAL_MAX_TOKENS, ModelRef

    path = tmp_path / "config.yaml"
    path.write_text(
        "providers:\n"
        "  llama: {kind: openai, base_url: 'http://127.0.0.1:8080/v1'}\n"
        "  big: {kind: openai, base_url: 'http://127.0.0.1:8081/v1', max_tokens: 300}\n"
        "  claude: {kind: anthropic, base_url: 'https://api.anthropic.com'}\n"
    )
    config = load_user_config(path)
    assert ModelRef.parse(config, "llama/m", tmp_path).build().max_tokens is None
    assert ModelRef.parse(config, "big/m", tmp_path).build().max_tokens == 300
    assert ModelRef.parse(config, "claude/m", tmp_path).build().max_tokens == 4096
    local = ModelRef.parse(config, "local/qwen2.5-coder-0.5b", tmp_path)
    assert local.max_tokens == LOCAL_MAX_TOKENS == 1024
    # Only the llama-server mm runs itself is asked to reuse its prompt cache.
    assert local.build(base_url="http://127.0.0.1:1/v1").cache_prompt  # type: ignore[attr-defined]
    assert not ModelRef.parse(config, "llama/m", tmp_path).build().cache_prompt  # type: ignore[attr-defined]


async def test_api_key_never_shown(start: Any) -> None:
    echo = {"error": {"message": f"Incorrect API key provided: {KEY}"}}
    server, provider = await start({"status": 401, "body": echo})
    assert KEY not in repr(provider)
    with pytest.raises(ModelError) as info:
        await complete(provider, Recorder())
    assert KEY not in str(info.value)
    assert "<redacted>" in str(info.value)
    assert "API key" in str(info.value)
    async with httpx.AsyncClient() as client:
        listing = await client.get(server.url + "/_mm/requests")
    assert KEY not in listing.text
    assert listing.json()[0]["headers"]["authorization"] == "<redacted>"


def test_base_url_must_be_http() -> None:
    with pytest.raises(ValueError, match="base_url"):
        OpenAIProvider(name="x/y", base_url="127.0.0.1:8080/v1", model="y")


def test_retry_after_forms() -> None:
    now = 1_000_000.0
    date = format_datetime(datetime.fromtimestamp(now, UTC) + timedelta(seconds=30), usegmt=True)
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({"retry-after": date}, now=now) == 30.0
    assert retry_after_seconds({"retry-after": "86400"}) == MAX_WAIT
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None


@settings(max_examples=25, deadline=None)
@given(text=st.text(min_size=1, max_size=200))
async def test_any_text_arrives_unchanged(text: str) -> None:
    # Covers line separators such as U+2028 inside JSON strings and \r.
    async with trio.open_nursery() as nursery:
        server = await nursery.start(serve, [{"text": text}])
        provider = OpenAIProvider(name="scripted/test", base_url=server.url + "/v1", model="scripted")
        rec = Recorder()
        try:
            result = await complete(provider, rec)
        finally:
            await provider.aclose()
        nursery.cancel_scope.cancel()
    assert result.text == text
    assert "".join(rec.deltas) == text


async def test_an_answer_past_the_size_limits_is_refused_not_kept(start: Any) -> None:
    from mmd.models._http import MAX_ANSWER_CHARS

    body = '{"choices": [{"message": {"content": "' + "x" * (MAX_ANSWER_CHARS + 1) + '"}}]}'
    _, provider = await start({"raw": body})
    with pytest.raises(ModelError, match=f"passed {MAX_ANSWER_CHARS:,} characters of text and tool-call"):
        await complete(provider, Recorder())
    deep = '{"choices": [{"message": {"content": ' + "[" * 2000 + "]" * 2000 + "}}]}"
    _, provider = await start({"raw": "data: " + deep + "\n\n", "content_type": "text/event-stream"})
    with pytest.raises(ModelError, match="answer is nested too deep: 2,004 levels; the limit is 128"):
        await complete(provider, Recorder())


async def test_an_answer_of_countless_calls_is_refused_as_the_size_limit_says(start: Any) -> None:
    # A call with empty arguments counted nothing toward the limit: one step could carry millions of them,
    # each then checked, stored and answered. Each call now counts its name, id and 16 characters.
    from mmd.models._http import CALL_CHARS, MAX_ANSWER_CHARS

    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": ""}}
        for i in range(MAX_ANSWER_CHARS // (CALL_CHARS + 8) + 1)
    ]
    body = json.dumps({"choices": [{"message": {"content": "", "tool_calls": calls}}]})
    _, provider = await start({"raw": body})
    with pytest.raises(ModelError, match=f"passed {MAX_ANSWER_CHARS:,} characters of text and tool-call"):
        await complete(provider, Recorder())
    _, provider = await start({"raw": json.dumps({"choices": [{"message": {"tool_calls": calls[:1000]}}]})})
    assert len((await complete(provider, Recorder())).tool_calls) == 1000


# -- each message's wire form, kept while the history grows ----------------------------------------

_ROLES = st.sampled_from(["user", "assistant", "tool"])
_MESSAGES = st.builds(
    lambda role, text, calls: Message(
        role=role,
        content=text,
        tool_calls=[ToolCall(id=f"c{i}", name="bash", arguments=a) for i, a in enumerate(calls)]
        if role == "assistant"
        else [],
        tool_call_id="c0" if role == "tool" else None,
    ),
    _ROLES,
    st.text(max_size=20),
    st.lists(st.text(max_size=10), max_size=2),
)


@given(st.lists(st.tuples(st.sampled_from(["append", "replace", "drop"]), _MESSAGES), max_size=30))
@settings(max_examples=200, deadline=None)
def test_the_wire_forms_are_those_of_the_messages_sent_whatever_the_history_became(ops) -> None:
    # A history grows by appends; stubs and summaries replace or drop messages in it.
    wire, history = Wire(), []
    for op, message in ops:
        if op == "append" or not history:
            history = [*history, message]
        elif op == "replace":
            history = [*history[:-1], message] if len(history) == 1 else [history[0], message, *history[2:]]
        else:
            history = history[1:]
        sent = [msgspec.json.decode(form) for form in wire.of(history)]
        assert sent == request_body("m", history, [])["messages"]


def test_a_growing_history_converts_only_its_new_messages() -> None:
    wire = Wire()
    first = [Message(role="system", content="s"), Message(role="user", content="u")]
    before = wire.of(first)
    grown = [*first, Message(role="assistant", content="a")]
    after = wire.of(grown)
    assert all(a is b for a, b in zip(before, after[:2], strict=True))
    assert msgspec.json.decode(after[2]) == {"role": "assistant", "content": "a"}


def test_the_encoded_forms_send_the_same_body_and_the_tools_block_is_kept_while_the_tools_are() -> None:
    wire = Wire()
    history = [Message(role="system", content="s"), Message(role="user", content='ü \u2028 "q"')]
    tools = [ToolSpec(name="bash", description="d", parameters={"type": "object", "properties": {}})]
    plain = msgspec.json.encode(request_body("m", history, tools))
    kept = request_body("m", history, tools, wire=wire)
    assert msgspec.json.encode(kept) == plain  # byte for byte what the dicts encode to
    assert request_body("m", history, tools, wire=wire)["tools"] is kept["tools"]
    other = [ToolSpec(name="bash", description="other", parameters={"type": "object", "properties": {}})]
    again = request_body("m", history, other, wire=wire)
    assert msgspec.json.decode(again["tools"])[0]["function"]["description"] == "other"


# -- the stream's events read into structs, as they were read as any JSON ------------------------------

_TEXT = st.text(max_size=4)
_ODD = st.sampled_from([None, True, False, -1, 0, 2, 0.0, "", "x", ["a"], {}])


def _shapes(odd: bool) -> st.SearchStrategy[Any]:
    """Chunk events of the usual shape, each field of its usual type; with *odd*, any field may hold any of
    the odd values instead (the reading falls back then)."""

    def field(usual: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(usual, _ODD) if odd else usual

    function = st.fixed_dictionaries(
        {},
        optional={
            "name": field(st.one_of(st.none(), _TEXT)),
            "arguments": field(
                st.one_of(st.none(), _TEXT, st.dictionaries(_TEXT, st.integers(), max_size=2))
            ),
        },
    )
    call = st.fixed_dictionaries(
        {},
        optional={
            "index": field(st.one_of(st.none(), st.integers(0, 2))),
            "id": field(st.one_of(st.none(), _TEXT)),
            "type": st.just("function"),
            "function": field(st.one_of(st.none(), function)),
        },
    )
    delta = st.fixed_dictionaries(
        {},
        optional={
            "role": st.just("assistant"),
            "content": field(st.one_of(st.none(), _TEXT)),
            "tool_calls": field(
                st.one_of(st.none(), st.lists(call, max_size=2))
            ),  # two: index and position differ
            "reasoning_content": _TEXT,
        },
    )
    choice = st.fixed_dictionaries(
        {"delta": field(st.one_of(st.none(), delta))},
        optional={
            "index": field(st.sampled_from([0, 0, 1])),
            "finish_reason": field(st.one_of(st.none(), st.sampled_from(["stop", "tool_calls", "length"]))),
            "logprobs": st.none(),
        },
    )
    return st.fixed_dictionaries(
        {"object": st.just("chat.completion.chunk"), "choices": field(st.lists(choice, max_size=2))},
        optional={
            "usage": st.one_of(st.none(), st.fixed_dictionaries({"prompt_tokens": st.integers(0, 9)}), _ODD),
            "timings": st.one_of(st.none(), st.fixed_dictionaries({"prompt_n": st.integers(0, 9)}), _ODD),
            "error": st.one_of(st.none(), _TEXT) if odd else st.none(),
        },
    )


_EVENT = st.one_of(_shapes(odd=False), _shapes(odd=True), _ODD)


def _fed(stream: Any, events: list[str], feed: Any) -> list[Any]:
    """What each event did (None, or the kind of error it raised), and what the stream holds after."""
    outcomes = []
    for data in events:
        try:
            feed(stream, data)
            outcomes.append(None)
        except (
            AttributeError,
            KeyError,
            IndexError,
            TypeError,
            ModelError,
        ) as exc:  # as HttpModel._parse reads
            outcomes.append(type(exc).__name__)
    calls = [(key, c.id, c.name, c.parts, c.fallback) for key, c in sorted(stream._calls.items(), key=repr)]
    state = (stream._text, calls, stream.finish_reason, stream.input_tokens, stream.timings, stream.chars)
    return [outcomes, state]


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_EVENT, min_size=1, max_size=3))
def test_events_read_into_structs_do_what_they_did_read_as_any_json(events: list[Any]) -> None:
    # The usual chunk is decoded into structs; any other shape falls back to the reading as any JSON. Over
    # events of every shape, odd values included, both give the same text, calls, errors and counts.
    from mmd.models.openai import OpenAIStream

    texts = [msgspec.json.encode(e).decode() for e in events]
    typed = _fed(OpenAIStream(None, "m"), texts, lambda s, d: s.feed("message", d))
    as_any = _fed(OpenAIStream(None, "m"), texts, lambda s, d: s._feed_any(d))
    assert typed == as_any


def test_a_calls_fragments_count_the_same_toward_the_size_read_either_way() -> None:
    # The struct path takes each fragment in one call (Accumulator.typed_part): id, name and arguments
    # count toward the answer's size as start_call and add_arguments count them; a repeated id does not.
    from mmd.models.openai import OpenAIStream

    first = {"index": 0, "id": "call_7", "function": {"name": "read_file", "arguments": '{"pa'}}
    again = {"index": 0, "id": "call_7", "function": {"name": "read_file", "arguments": 'th": "a"}'}}
    other = {"index": 1, "id": "x", "function": {"arguments": {"k": 1}}}  # arguments as an object
    events = [msgspec.json.encode(_calls(c, finish=None)).decode() for c in (first, again, other)]
    typed, as_any = OpenAIStream(None, "m"), OpenAIStream(None, "m")
    for data in events:
        typed.feed("message", data)
        as_any._feed_any(data)
    # each call 16, then its id, its name and its arguments' characters
    assert typed.chars == as_any.chars == (16 + 6 + 9 + 4 + 9) + (16 + 1 + 7)
    assert typed.completion() == as_any.completion()


def _sse(*chunks: Any) -> dict[str, Any]:
    """A scripted step whose answer is these chunks, streamed as they are."""
    return {"raw": "".join(f"data: {json.dumps(c)}\n\n" for c in chunks), "content_type": "text/event-stream"}


def _calls(*calls: dict[str, Any], finish: Any = "tool_calls") -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"tool_calls": list(calls)}, "finish_reason": finish}]}


READ = {"name": "read_file", "arguments": "{}"}


@pytest.mark.parametrize(
    "step",
    [
        _sse(
            _calls({"index": "z", "function": READ}, {"index": 1, "function": READ})
        ),  # indexes of two types
        _sse(_calls({"index": 0, "id": "a", "function": {**READ, "name": 7}})),  # a name that is a number
        _sse(_calls({"index": 0, "id": 5, "function": READ})),  # an id that is a number
        _sse({"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": ["x"]}]}),
        {"raw": json.dumps({"choices": [{"message": {"tool_calls": [{"id": 5, "function": {"name": 7}}]}}]})},
    ],
    ids=["index str beside int", "name int", "id int", "finish_reason list", "whole body name int"],
)
async def test_a_value_of_the_wrong_type_where_the_answer_depends_on_it_is_a_malformed_answer(
    start: Any, step: dict[str, Any]
) -> None:
    _, provider = await start(step)
    with pytest.raises(ModelError, match="the provider sent an answer of an unexpected shape"):
        await complete(provider, Recorder())


async def test_a_null_index_beside_a_number_is_the_calls_place_in_the_list(start: Any) -> None:
    null_first = _calls(
        {"index": None, "id": "a", "function": READ}, {"index": 1, "id": "b", "function": READ}
    )
    _, provider = await start(_sse(null_first))
    result = await complete(provider, Recorder())
    assert [(c.id, c.name) for c in result.tool_calls] == [("a", "read_file"), ("b", "read_file")]


async def test_token_counts_that_are_no_counts_are_dropped_and_the_step_can_be_stored(start: Any) -> None:
    # Only informational: dropped, never clamped to an invented number, and never an OverflowError where
    # the step's event is encoded (msgpack holds 64-bit integers).
    done = {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}
    huge = {**done, "usage": {"prompt_tokens": 10**40, "completion_tokens": -5}}
    weird = {**done, "usage": {"prompt_tokens": 3, "completion_tokens": 1e300}}
    timed = {**done, "timings": {"prompt_n": 10**400, "cache_n": 10**40, "predicted_n": 4, "predicted_ms": 9}}
    _, provider = await start(_sse(huge), _sse(weird), _sse(timed))
    first, second, third = [await complete(provider, Recorder()) for _ in range(3)]
    assert (first.usage.input_tokens, first.usage.output_tokens) == (0, 0)
    assert (second.usage.input_tokens, second.usage.output_tokens) == (3, 0)
    assert third.timings == Timings(gen_tokens=4, gen_ms=9.0)
    for result in (first, second, third):
        msgspec.msgpack.encode(result)
