"""AnthropicProvider against the scripted model server over real sockets."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
import trio

from mmd.models.anthropic import AnthropicProvider, request_body
from mmd.models.base import Message, ModelError, ToolCall, ToolSpec
from mmd.models.scripted import serve

# A fake key: the tests check it never shows up anywhere.
KEY = "sk-ant-test-0123456789"
HELLO = [Message(role="user", content="hello")]


@pytest.fixture
async def start(nursery: trio.Nursery) -> Any:
    """``await start(*steps, **provider_options)`` → (server, provider)."""
    providers: list[AnthropicProvider] = []

    async def start(*steps: dict[str, Any], **options: Any) -> tuple[Any, AnthropicProvider]:
        server = await nursery.start(serve, list(steps))
        options = {"api_key": KEY, "retry_base_delay": 0.01, **options}
        provider = AnthropicProvider(
            name="anthropic/test", base_url=server.url, model="claude-test", **options
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


async def complete(provider: AnthropicProvider, rec: Recorder, messages: list[Message] = HELLO) -> Any:
    return await provider.complete(messages, [], on_text=rec.text, on_retry=rec.retry)


def sse(*events: dict[str, Any]) -> str:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


async def test_text_streams_as_deltas(start: Any) -> None:
    text = "Pack my box with five dozen liquor jugs."
    _, provider = await start({"text": text, "usage": {"input_tokens": 12, "output_tokens": 8}})
    rec = Recorder()
    result = await complete(provider, rec)
    assert "".join(rec.deltas) == text
    assert len(rec.deltas) > 1
    assert result.text == text
    assert result.finish_reason == "stop"
    assert (result.usage.input_tokens, result.usage.output_tokens) == (12, 8)


async def test_text_and_tool_use_blocks(start: Any) -> None:
    calls = [
        {"name": "bash", "arguments": {"command": "ls"}, "id": "toolu_1"},
        {"name": "read_file", "arguments": {"path": "notes.md"}},
    ]
    _, provider = await start({"text": "Let me look.", "tool_calls": calls})
    rec = Recorder()
    result = await complete(provider, rec)
    assert "".join(rec.deltas) == result.text == "Let me look."
    assert result.tool_calls[0] == ToolCall(id="toolu_1", name="bash", arguments='{"command":"ls"}')
    assert (result.tool_calls[1].name, result.tool_calls[1].arguments) == ("read_file", '{"path":"notes.md"}')
    assert result.tool_calls[1].id
    assert result.finish_reason == "tool_calls"


async def test_malformed_input_json_passes_through_verbatim(start: Any) -> None:
    broken = '{"command": "ls" "oops"'
    _, provider = await start({"tool_calls": [{"name": "bash", "arguments": broken}]})
    result = await complete(provider, Recorder())
    assert result.tool_calls[0].arguments == broken


async def test_tool_use_without_input_deltas(start: Any) -> None:
    events = sse(
        {"type": "message_start", "message": {"usage": {"input_tokens": 4}}},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "t1", "name": "now", "input": {}},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 3}},
        {"type": "message_stop"},
    )
    _, provider = await start({"raw": events, "content_type": "text/event-stream"})
    result = await complete(provider, Recorder())
    assert result.tool_calls == [ToolCall(id="t1", name="now", arguments="{}")]
    assert (result.usage.input_tokens, result.usage.output_tokens) == (4, 3)


async def test_whole_message_body(start: Any) -> None:
    # A non-streamed answer: the provider reads it when a server ignores stream=true.
    raw = json.dumps(
        {
            "type": "message",
            "content": [
                {"type": "text", "text": "Sure."},
                {"type": "tool_use", "id": "t9", "name": "bash", "input": {"command": "pwd"}},
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 5, "output_tokens": 6},
        }
    )
    _, provider = await start({"raw": raw})
    rec = Recorder()
    result = await complete(provider, rec)
    assert rec.deltas == ["Sure."]
    assert result.tool_calls == [ToolCall(id="t9", name="bash", arguments='{"command":"pwd"}')]
    assert result.finish_reason == "tool_calls"


async def test_request_shape(start: Any) -> None:
    server, provider = await start({"text": "done"})
    messages = [
        Message(role="system", content="You help."),
        Message(role="system", content="Be brief."),
        Message(role="user", content="look around"),
        Message(
            role="assistant",
            content="Looking.",
            tool_calls=[
                ToolCall(id="c1", name="bash", arguments='{"command": "ls"}'),
                ToolCall(id="c2", name="bash", arguments='{"command": '),
            ],
        ),
        Message(role="tool", content="a.txt", tool_call_id="c1", name="bash"),
        Message(role="tool", content="error: arguments are not JSON", tool_call_id="c2", name="bash"),
        Message(role="user", content="thanks"),
    ]
    schema = {"type": "object", "properties": {"command": {"type": "string"}}}
    await provider.complete(
        messages, [ToolSpec(name="bash", description="Run a command.", parameters=schema)], temperature=0.2
    )
    [request] = server.requests
    assert request["path"] == "/v1/messages"
    body = request["body"]
    assert body["model"] == "claude-test"
    assert body["max_tokens"] == 4096
    assert body["temperature"] == 0.2
    assert body["stream"] is True
    assert body["system"] == "You help.\n\nBe brief."
    assert body["messages"] == [
        {"role": "user", "content": "look around"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "c1", "name": "bash", "input": {"command": "ls"}},
                {"type": "tool_use", "id": "c2", "name": "bash", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "a.txt"},
                {"type": "tool_result", "tool_use_id": "c2", "content": "error: arguments are not JSON"},
                {"type": "text", "text": "thanks"},  # a user message after the results joins their turn
            ],
        },
    ]
    assert body["tools"] == [{"name": "bash", "description": "Run a command.", "input_schema": schema}]
    assert request["headers"]["x-api-key"] == "<redacted>"
    assert request["headers"]["anthropic-version"] == "2023-06-01"
    assert KEY not in json.dumps(server.requests)


async def test_no_system_or_tools_keys_when_absent(start: Any) -> None:
    server, provider = await start({"text": "hi"})
    await provider.complete(HELLO, [])
    assert "system" not in server.requests[0]["body"]
    assert "tools" not in server.requests[0]["body"]


async def test_429_honours_retry_after(start: Any) -> None:
    server, provider = await start({"status": 429, "retry_after": 1}, {"text": "ok"})
    rec = Recorder()
    result = await complete(provider, rec)
    assert result.text == "ok"
    assert len(server.requests) == 2
    [(attempt, wait, reason)] = rec.retries
    assert (attempt, wait) == (1, 1.0)
    assert "HTTP 429" in reason


async def test_overloaded_then_success(start: Any) -> None:
    overloaded = sse({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    server, provider = await start(
        {"status": 529},
        {"raw": overloaded, "content_type": "text/event-stream"},
        {"text": "at last"},
    )
    rec = Recorder()
    result = await complete(provider, rec)
    assert result.text == "at last"
    assert len(server.requests) == 3
    assert [r[0] for r in rec.retries] == [1, 2]
    assert "HTTP 529" in rec.retries[0][2]
    assert "Overloaded" in rec.retries[1][2]


async def test_401_is_not_retried(start: Any) -> None:
    server, provider = await start({"status": 401}, {"text": "never"})
    rec = Recorder()
    with pytest.raises(ModelError, match="API key") as info:
        await complete(provider, rec)
    assert info.value.status == 401
    assert len(server.requests) == 1
    assert rec.retries == []
    assert KEY not in str(info.value)
    assert KEY not in repr(provider)


async def test_invalid_json_event(start: Any) -> None:
    raw = "event: message_start\ndata: {not json}\n\n"
    server, provider = await start({"raw": raw, "content_type": "text/event-stream"})
    with pytest.raises(ModelError, match="invalid JSON"):
        await complete(provider, Recorder())
    assert len(server.requests) == 1


async def test_break_before_any_delta_is_retried(start: Any) -> None:
    # message_start and ping carry no content.
    server, provider = await start({"text": "lost", "break_after": 2}, {"text": "kept answer"})
    rec = Recorder()
    result = await complete(provider, rec)
    assert result.text == "".join(rec.deltas) == "kept answer"
    assert len(server.requests) == 2


async def test_break_after_text_raises(start: Any) -> None:
    # message_start, ping, content_block_start, then two text deltas.
    server, provider = await start({"text": "alpha beta gamma", "break_after": 5})
    rec = Recorder()
    with pytest.raises(ModelError, match="broke off after 11 characters") as info:
        await complete(provider, rec)
    assert "--continue" in str(info.value)
    assert rec.deltas == ["alpha ", "beta "]
    assert len(server.requests) == 1


async def test_cancellation_closes_the_stream(start: Any) -> None:
    words = " ".join(f"w{i}" for i in range(50))
    server, provider = await start({"text": words, "chunk_delay": 0.2})
    with trio.CancelScope() as scope:
        await provider.complete(HELLO, [], on_text=lambda _: scope.cancel())
    assert scope.cancelled_caught
    with trio.fail_after(5):
        while not server.requests[0]["client_closed"]:
            await trio.sleep(0.01)
    assert server.requests[0]["t_responded"] is None


def _tool_use(index: Any, **block: Any) -> dict[str, Any]:
    use = {"type": "tool_use", "id": "t1", "name": "now", "input": {}, **block}
    return {"type": "content_block_start", "index": index, "content_block": use}


def _events(*middle: dict[str, Any], stop: Any = "tool_use", usage: Any = None) -> dict[str, Any]:
    events = sse(
        {"type": "message_start", "message": {"usage": usage or {"input_tokens": 4}}},
        *middle,
        {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 3}},
        {"type": "message_stop"},
    )
    return {"raw": events, "content_type": "text/event-stream"}


@pytest.mark.parametrize(
    "step",
    [
        _events(_tool_use("z"), _tool_use(1, id="t2")),  # block indexes of two types
        _events(_tool_use(0, name=7)),  # a name that is a number
        _events(_tool_use(0, id=["t1"])),  # an id that is a list
        _events(_tool_use(0), stop=5),  # a stop reason that is a number
        {"raw": json.dumps({"type": "message", "content": [{"type": "tool_use", "id": "t", "name": 7}]})},
    ],
    ids=["index str beside int", "name int", "id list", "stop_reason int", "whole body name int"],
)
async def test_a_value_of_the_wrong_type_where_the_answer_depends_on_it_is_a_malformed_answer(
    start: Any, step: dict[str, Any]
) -> None:
    _, provider = await start(step)
    with pytest.raises(ModelError, match="the provider sent an answer of an unexpected shape"):
        await complete(provider, Recorder())


async def test_token_counts_that_are_no_counts_are_dropped_and_the_step_can_be_stored(start: Any) -> None:
    _, provider = await start(_events(_tool_use(0), usage={"input_tokens": 10**40}))
    result = await complete(provider, Recorder())
    assert (result.usage.input_tokens, result.usage.output_tokens) == (0, 3)
    msgspec.msgpack.encode(result)  # as the step's event is stored: 10**40 was an OverflowError there


def test_a_note_after_a_steps_results_joins_their_user_turn() -> None:
    # The turn tells the model of calls left out of a step (mmd/turn/loop.py) in a user message after the
    # step's results: one user turn holding the results, then the text.
    messages = [
        Message(role="user", content="go"),
        Message(role="assistant", content="", tool_calls=[ToolCall(id="t1", name="now", arguments="{}")]),
        Message(role="tool", content="noon", tool_call_id="t1"),
        Message(role="user", content="[mm] note"),
    ]
    turns = request_body("m", messages, [], 100)["messages"]
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert turns[-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "noon"},
        {"type": "text", "text": "[mm] note"},
    ]
