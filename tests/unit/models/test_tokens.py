"""Token counts and windows (mmd/models/tokens.py), asked of the scripted model server in process, which
answers /props and /tokenize as llama-server does when its script has a context_window.

The real llama-server answers the same questions in tests/e2e/test_local.py's long session.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator

import httpx
import pytest
import trio

from mmd.models import tokens
from mmd.models.scripted import Script, ScriptedServer, prompt_tokens, serve


@pytest.fixture
async def llama(nursery: trio.Nursery) -> AsyncIterator[ScriptedServer]:
    server = await nursery.start(serve, Script(responses=[], context_window=2048))
    yield server


def test_the_estimate_is_utf8_bytes_over_four_rounded_up() -> None:
    assert tokens.estimate("") == 0
    assert tokens.estimate("abcd") == 1
    assert tokens.estimate("abcde") == 2
    assert tokens.estimate("é" * 4) == 2  # 8 bytes
    assert tokens.estimate("abcde", 2) == 3


def test_the_server_root_and_whether_it_may_be_asked() -> None:
    assert tokens.server_root("http://127.0.0.1:8080/v1") == "http://127.0.0.1:8080"
    assert tokens.server_root("http://127.0.0.1:8080/v1/") == "http://127.0.0.1:8080"
    assert tokens.server_root("http://h:1") == "http://h:1"
    assert tokens.on_loopback("http://localhost:1") and tokens.on_loopback("http://[::1]:1")
    assert not tokens.on_loopback("https://api.openai.com") and not tokens.on_loopback("")


async def test_a_llama_server_tells_its_window_and_counts_with_its_tokenizer(llama: ScriptedServer) -> None:
    assert await tokens.llama_window(llama.url) == 2048
    counter = tokens.LlamaCounter(llama.url)
    try:
        assert counter.exact
        assert await counter.count("x" * 10) == 3
        assert await counter.count("") == 0
    finally:
        await counter.aclose()


async def test_a_server_that_is_no_llama_server_has_no_window(nursery: trio.Nursery) -> None:
    plain = await nursery.start(serve, Script(responses=[]))  # no context_window: /props is a 404
    assert await tokens.llama_window(plain.url) is None
    assert await tokens.llama_window("http://127.0.0.1:9") is None  # nothing listens


async def test_each_text_is_counted_once() -> None:
    asked: list[str] = []

    class Recording(tokens.Counter):
        async def _count(self, text: str) -> int | None:
            asked.append(text)
            return len(text)

    counter = Recording()
    assert [await counter.count(t) for t in ("ab", "abc", "ab", "ab")] == [2, 3, 2, 2]
    assert asked == ["ab", "abc"]


async def test_the_counts_kept_are_bounded_in_bytes_and_the_last_counted_stay() -> None:
    # One counter serves the whole daemon: 4,096 texts of any size held 200 MiB of prompts that had ended.
    asked: list[int] = []

    class Recording(tokens.Counter):
        async def _count(self, text: str) -> int | None:
            asked.append(len(text))
            return len(text)

    counter = Recording()
    big = [f"{i:08d}" + "x" * (1 << 20) for i in range(20)]
    for text in big:
        await counter.count(text)
    kept = sum(sys.getsizeof(text) for text in counter._counts)
    assert kept == counter._bytes <= tokens.CACHE_BYTES
    assert list(counter._counts) == big[-len(counter._counts) :] and len(counter._counts) >= 6
    asked.clear()
    for _ in range(3):  # a turn's steps count its messages again: the last ones are still known
        assert [await counter.count(text) for text in big[-6:]] == [len(big[0])] * 6
    assert asked == []
    huge = "y" * (tokens.CACHE_BYTES + 1)  # larger than all the counts kept: counted, not kept
    assert await counter.count(huge) == len(huge) and huge not in counter._counts
    assert big[-1] in counter._counts


async def test_counts_of_another_model_are_dropped() -> None:
    counter = tokens.Counter()
    counter.serving(("/models/a.gguf", 8192))
    await counter.count("abc")
    counter.serving(("/models/a.gguf", 8192))
    assert "abc" in counter._counts
    counter.serving(("/models/b.gguf", 8192))
    assert counter._counts == {} and counter._bytes == 0


async def test_a_tokenizer_that_does_not_answer_counts_two_bytes_a_token_and_asks_again() -> None:
    counter = tokens.LlamaCounter("http://127.0.0.1:9")  # nothing listens
    try:
        assert await counter.count("x" * 10) == 5
        assert counter._counts == {}  # not kept: the next step asks again
    finally:
        await counter.aclose()


async def test_the_scripted_server_refuses_a_request_over_its_window_as_llama_server_does(
    llama: ScriptedServer,
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 9000}]}
    assert prompt_tokens(body) == 2250
    async with httpx.AsyncClient(timeout=10) as http:
        reply = await http.post(f"{llama.url}/v1/chat/completions", json=body)
    assert reply.status_code == 400
    assert "request (2250 tokens) exceeds the available context size (2048 tokens)" in reply.text
    assert llama.steps_used == 0 and [r["path"] for r in llama.requests] == ["/v1/chat/completions"]
