"""The scripted model server in process, driven by a plain HTTP client on loopback.

Run as a process, as the end-to-end tier starts it: tests/e2e/test_scripted.py.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from mmd.models import scripted
from mmd.models.scripted import Position, Script, ScriptError, load_script, serve


@pytest.fixture
async def client() -> Any:
    async with httpx.AsyncClient(timeout=10) as client:
        yield client


def sse_data(text: str) -> list[Any]:
    """The decoded ``data:`` payloads of an SSE body ([DONE] kept as a string)."""
    out = []
    for line in text.splitlines():
        if line.startswith("data: "):
            payload = line.removeprefix("data: ")
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


# ---------------------------------------------------------------- scripts


def test_load_yaml_json_and_bare_list(tmp_path: Path) -> None:
    yaml_file = tmp_path / "s.yaml"
    yaml_file.write_text(
        "responses:\n  - text: hello\n  - tool_calls: [{name: bash, arguments: {command: ls}}]\n"
    )
    json_file = tmp_path / "s.json"
    json_file.write_text(json.dumps([{"status": 429, "retry_after": 1}, {"raw": "x"}]))
    script = load_script(yaml_file)
    assert [s.text for s in script.responses] == ["hello", ""]
    assert script.responses[1].tool_calls[0].arguments == {"command": "ls"}
    other = load_script(json_file)
    assert (other.responses[0].status, other.responses[0].retry_after, other.responses[1].raw) == (
        429,
        1.0,
        "x",
    )
    assert Script.from_obj([]).responses == []


@pytest.mark.parametrize(
    ("obj", "where"),
    [
        ({"responses": [{"text": "a"}, {"txet": "b"}]}, "txet"),
        ([{"status": "soon"}], "status"),
        ([{"delay": -1}], "delay"),
        ({"steps": []}, "steps"),
    ],
)
def test_bad_script_says_where(obj: Any, where: str) -> None:
    with pytest.raises(ScriptError, match=where):
        Script.from_obj(obj)


def test_unparsable_file(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("responses: [text: {")
    with pytest.raises(ScriptError, match="not valid YAML"):
        load_script(path)


def test_a_script_mm_cannot_read_safely_is_refused_before_it_is_read(tmp_path: Path, monkeypatch) -> None:
    # An agent file names its script: a cloned repository's may name a FIFO (the read waited for a writer
    # that never comes), a link to /dev/zero (read without end), a huge file or bytes that are not text.
    os.mkfifo(tmp_path / "pipe.json")
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    for name, kind in (("pipe.json", "a named pipe"), ("zero.json", "a character device")):
        with pytest.raises(OSError, match=f"not a regular file but {kind}"):
            load_script(tmp_path / name)
    monkeypatch.setattr(scripted, "MAX_SCRIPT_BYTES", 10)
    (tmp_path / "big.json").write_text('[{"text": "hello"}]')
    with pytest.raises(ScriptError, match=r"big\.json: over 10 bytes, the most a script may hold"):
        load_script(tmp_path / "big.json")
    monkeypatch.setattr(scripted, "MAX_SCRIPT_BYTES", 1000)
    (tmp_path / "latin.yaml").write_bytes(b"- text: caf\xe9\n")
    with pytest.raises(ScriptError, match=r"latin\.yaml: not UTF-8 text \(byte 11\)"):
        load_script(tmp_path / "latin.yaml")


async def test_refuses_non_loopback_hosts() -> None:
    for host in ("0.0.0.0", "192.168.1.10", "example.com"):
        with pytest.raises(ValueError, match="loopback"):
            await serve([], host=host)


# ---------------------------------------------------------------- HTTP


async def test_health_models_and_unknown_paths(nursery: trio.Nursery, client: httpx.AsyncClient) -> None:
    server = await nursery.start(serve, [])
    assert server.url == f"http://127.0.0.1:{server.port}"
    assert (await client.get(server.url + "/health")).json() == {"status": "ok"}
    models = (await client.get(server.url + "/v1/models")).json()
    assert [m["id"] for m in models["data"]] == ["scripted"]
    assert (await client.get(server.url + "/nowhere")).status_code == 404
    assert (await client.get(server.url + "/v1/chat/completions")).status_code == 405


async def test_openai_stream_shape(nursery: trio.Nursery, client: httpx.AsyncClient) -> None:
    step = {
        "text": "Hi there",
        "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}, "id": "call_x"}],
    }
    server = await nursery.start(serve, [step])
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    response = await client.post(server.url + "/v1/chat/completions", json=body)
    assert response.headers["content-type"] == "text/event-stream"
    chunks = sse_data(response.text)
    assert chunks[-1] == "[DONE]"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks[:-1])
    deltas = [c["choices"][0]["delta"] for c in chunks[:-2]]
    assert "".join(d.get("content") or "" for d in deltas) == "Hi there"
    calls = [tc for d in deltas for tc in d.get("tool_calls", [])]
    assert calls[0] == {
        "index": 0,
        "id": "call_x",
        "type": "function",
        "function": {"name": "bash", "arguments": ""},
    }
    assert "".join(tc["function"]["arguments"] for tc in calls) == '{"command":"ls"}'
    assert chunks[-3]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-2]["choices"] == []
    assert chunks[-2]["usage"]["completion_tokens"] > 0


async def test_a_new_server_goes_on_from_another_ones_position(
    nursery: trio.Nursery, client: httpx.AsyncClient
) -> None:
    steps = [{"tool_calls": [{"name": "a"}]}, {"text": "second"}, {"tool_calls": [{"name": "c"}]}]
    first = await nursery.start(serve, steps)
    await client.post(first.url + "/v1/chat/completions", json=CHAT)
    await client.post(first.url + "/v1/chat/completions", json=CHAT)
    assert first.position == Position(step=2, call=2)
    second = await nursery.start(functools.partial(serve, steps, position=first.position))
    answer = (await client.post(second.url + "/v1/chat/completions", json=CHAT)).json()
    [call] = answer["choices"][0]["message"]["tool_calls"]
    assert (call["id"], call["function"]["name"]) == ("call_2", "c")  # ids never repeat in a session
    assert second.steps_used == 3 and second.position == Position(step=3, call=3)


async def test_openai_whole_answer(nursery: trio.Nursery, client: httpx.AsyncClient) -> None:
    server = await nursery.start(serve, [{"text": "plain", "usage": {"input_tokens": 3, "output_tokens": 1}}])
    answer = (await client.post(server.url + "/v1/chat/completions", json=CHAT)).json()
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"] == {"role": "assistant", "content": "plain"}
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["usage"] == {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}


async def test_anthropic_stream_shape(nursery: trio.Nursery, client: httpx.AsyncClient) -> None:
    step = {"text": "Hello you", "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]}
    server = await nursery.start(serve, [step])
    response = await client.post(server.url + "/v1/messages", json={**CHAT, "stream": True})
    events = sse_data(response.text)
    names = [
        line.removeprefix("event: ") for line in response.text.splitlines() if line.startswith("event: ")
    ]
    assert names == [e["type"] for e in events]
    assert names[0] == "message_start"
    assert names[-2:] == ["message_delta", "message_stop"]
    text = "".join(e["delta"]["text"] for e in events if e.get("delta", {}).get("type") == "text_delta")
    args = "".join(
        e["delta"]["partial_json"] for e in events if e.get("delta", {}).get("type") == "input_json_delta"
    )
    assert (text, args) == ("Hello you", '{"command":"ls"}')
    starts = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    assert starts == [
        {"type": "text", "text": ""},
        {"type": "tool_use", "id": "call_1", "name": "bash", "input": {}},
    ]
    assert events[-2]["delta"]["stop_reason"] == "tool_use"


async def test_anthropic_whole_message(nursery: trio.Nursery, client: httpx.AsyncClient) -> None:
    server = await nursery.start(serve, [{"tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]}])
    answer = (await client.post(server.url + "/v1/messages", json=CHAT)).json()
    assert answer["type"] == "message"
    assert answer["content"] == [
        {"type": "tool_use", "id": "call_1", "name": "bash", "input": {"command": "ls"}}
    ]
    assert answer["stop_reason"] == "tool_use"


async def test_error_status_with_retry_after(nursery: trio.Nursery, client: httpx.AsyncClient) -> None:
    steps = [{"status": 429, "retry_after": 2}, {"status": 503, "body": {"error": {"message": "down"}}}]
    server = await nursery.start(serve, steps)
    first = await client.post(server.url + "/v1/messages", json=CHAT)
    assert (first.status_code, first.headers["retry-after"]) == (429, "2")
    assert first.json()["error"]["type"] == "rate_limit_error"
    second = await client.post(server.url + "/v1/chat/completions", json=CHAT)
    assert (second.status_code, second.json()) == (503, {"error": {"message": "down"}})


async def test_raw_body_is_verbatim(nursery: trio.Nursery, client: httpx.AsyncClient) -> None:
    server = await nursery.start(serve, [{"raw": "{not json"}])
    response = await client.post(server.url + "/v1/chat/completions", json=CHAT)
    assert (response.status_code, response.text) == (200, "{not json")


async def test_script_exhausted_answers_400(nursery: trio.Nursery, client: httpx.AsyncClient) -> None:
    server = await nursery.start(serve, [{"text": "only one"}])
    assert (await client.post(server.url + "/v1/chat/completions", json=CHAT)).status_code == 200
    for path in ("/v1/chat/completions", "/v1/messages"):
        response = await client.post(server.url + path, json=CHAT)
        assert response.status_code == 400
        assert "script exhausted after 1 responses" in response.text


async def test_break_after_closes_mid_stream(nursery: trio.Nursery, client: httpx.AsyncClient) -> None:
    server = await nursery.start(serve, [{"text": "a b c d", "break_after": 2}])
    received = []
    with pytest.raises(httpx.RemoteProtocolError):
        async with client.stream(
            "POST", server.url + "/v1/chat/completions", json={**CHAT, "stream": True}
        ) as r:
            async for chunk in r.aiter_bytes():
                received.append(chunk)
    assert b"[DONE]" not in b"".join(received)
    assert server.requests[0]["t_responded"] is None


async def test_requests_are_recorded_and_redacted(nursery: trio.Nursery, client: httpx.AsyncClient) -> None:
    server = await nursery.start(serve, [{"text": "ok"}])
    secret = "sk-very-secret"
    headers = {"authorization": f"Bearer {secret}", "x-api-key": secret, "anthropic-version": "2023-06-01"}
    await client.post(server.url + "/v1/messages", json=CHAT, headers=headers)
    await client.get(server.url + "/health")
    listing = await client.get(server.url + "/_mm/requests")
    assert secret not in listing.text
    records = listing.json()
    assert [r["path"] for r in records] == ["/v1/messages", "/health"]
    first = records[0]
    assert first["body"] == CHAT
    assert first["headers"]["authorization"] == first["headers"]["x-api-key"] == "<redacted>"
    assert first["headers"]["anthropic-version"] == "2023-06-01"
    assert first["t_received"] <= first["t_responded"]
    assert first["client_closed"] is False
    assert records == server.requests


async def test_keep_alive_and_concurrent_connections(
    nursery: trio.Nursery, client: httpx.AsyncClient
) -> None:
    server = await nursery.start(serve, [{"text": "slow", "delay": 0.3}, {"text": "fast"}, {"text": "again"}])
    answers: dict[str, str] = {}

    async def ask(name: str) -> None:
        response = await client.post(server.url + "/v1/chat/completions", json=CHAT)
        answers[name] = response.json()["choices"][0]["message"]["content"]

    async with trio.open_nursery() as both:
        both.start_soon(ask, "first")
        while not server.requests:  # so "first" takes the slow step
            await trio.sleep(0.01)
        both.start_soon(ask, "second")
    assert answers == {"first": "slow", "second": "fast"}
    slow, fast = server.requests
    assert slow["connection"] != fast["connection"]
    assert fast["t_responded"] < slow["t_responded"]
    await ask("third")
    assert server.requests[2]["connection"] in {slow["connection"], fast["connection"]}


# ---------------------------------------------------------------- process


async def test_a_failure_inside_the_server_ends_one_connection_not_its_host(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Served inside mmd: an unexpected error must not escape handle_connection into the daemon."""
    from mmd.models import scripted

    server = await nursery.start(serve, [{"text": "a"}, {"text": "b"}])

    async def broken(self: Any, conn: Any) -> bool:
        raise KeyError("a bug")

    with monkeypatch.context() as m:
        m.setattr(scripted.ScriptedServer, "_serve_next", broken)
        async with httpx.AsyncClient() as http:
            with pytest.raises(httpx.HTTPError):
                await http.get(f"{server.url}/health")
    async with httpx.AsyncClient() as http:  # the server still serves
        assert (await http.get(f"{server.url}/health")).status_code == 200
