"""The stdio transport's reader (mmd/mcp/stdio.py): a server's stdout, a JSON-RPC message a line."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mmd.mcp import stdio

from ...counting import CountingBuffer


class Stdout:
    def __init__(self, data: bytes, size: int) -> None:
        self.pieces = [data[i : i + size] for i in range(0, len(data), size)]

    async def receive_some(self, most: int) -> bytes:
        return self.pieces.pop(0) if self.pieces else b""


class Proc:
    """A server that wrote *data* and exited."""

    returncode = 0

    def __init__(self, data: bytes, size: int) -> None:
        self.stdout = Stdout(data, size)

    async def wait(self) -> int:
        return self.returncode


class Inbox:
    """The SDK's read stream, as far as the reader uses it."""

    def __init__(self) -> None:
        self.messages: list[Any] = []

    async def __aenter__(self) -> Inbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def send(self, message: Any) -> None:
        self.messages.append(message)


@pytest.mark.parametrize("size", [256, 4096])
async def test_a_long_line_that_comes_in_many_reads_is_searched_once(
    monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    # Only the new bytes of the line under way are searched for its end; the reader used to search the
    # whole buffer again at every read, and a line may grow to MAX_LINE (64 MiB).
    buffers: list[CountingBuffer] = []

    def counting() -> CountingBuffer:
        buffers.append(CountingBuffer())
        return buffers[-1]

    monkeypatch.setattr(stdio, "bytearray", counting, raising=False)
    first = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"text": "a" * 200_000}}).encode()
    second = json.dumps({"jsonrpc": "2.0", "id": 2, "result": {}}).encode()
    data = first + b"\n\n" + second + b"\n"
    inbox = Inbox()
    await stdio._read(Proc(data, size), inbox, None, "server", pytest.fail)
    assert [m.message.id for m in inbox.messages] == [1, 2]
    assert inbox.messages[0].message.result["text"] == "a" * 200_000
    assert sum(buf.searched for buf in buffers) <= 2 * len(data)


async def test_a_line_past_max_line_is_dropped_and_the_next_line_still_read(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(stdio, "MAX_LINE", 10_000)
    data = b'{"jsonrpc": "2.0", "id": 1, "result": {"text": "' + b"a" * 30_000 + b'"}}\n'
    data += json.dumps({"jsonrpc": "2.0", "id": 2, "result": {}}).encode() + b"\n"
    inbox = Inbox()
    await stdio._read(Proc(data, 4096), inbox, None, "server", pytest.fail)
    assert [m.message.id for m in inbox.messages] == [2]
    assert "server: dropped a line longer than 10000 bytes" in caplog.text
