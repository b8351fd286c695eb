"""The MCP transports' HTTP client reads no answer's body past its bound (mmd/mcp/http.py), against a real
HTTP server on 127.0.0.1 that streams a body of its choosing."""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from mmd import __version__
from mmd.mcp import pool
from mmd.mcp.http import answer_refused, answer_too_large, bounded_client

MiB = 1024 * 1024
# What the hostile server writes at most: a client that reads it all (no bound) gets it whole and fails the
# tests; one that stops closes the connection long before.
SERVED = 48 * MiB
PIECE = b"x" * 65536


class _Server:
    """A one-thread HTTP/1.1 server: each request is answered with the chunks of ``chunks(request)``, chunked,
    as ``content_type`` (a text, or what it gives for the request)."""

    def __init__(self, content_type: Any, chunks: Any, encoding: str = "") -> None:
        self.content_type, self.chunks, self.encoding = content_type, chunks, encoding
        self.sent = 0  # body bytes written, all connections together
        self.heads: list[bytes] = []  # each request's head
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}/mcp"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                if not (data := conn.recv(65536)):
                    return
                head += data
            head_text = head.decode("latin-1").lower()
            length = (
                int(head_text.split("content-length:")[1].split("\r\n")[0])
                if "content-length:" in head_text
                else 0
            )
            body = head.split(b"\r\n\r\n", 1)[1]
            while len(body) < length:
                body += conn.recv(65536)
            request = head.split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n" + body
            self.heads.append(request.split(b"\r\n\r\n", 1)[0])
            kind = self.content_type(request) if callable(self.content_type) else self.content_type
            coded = f"Content-Encoding: {self.encoding}\r\n" if self.encoding else ""
            start = f"HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\n{coded}Transfer-Encoding: chunked\r\n\r\n"
            try:
                conn.sendall(start.encode())
                for chunk in self.chunks(request):
                    conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.sent += len(chunk)
                conn.sendall(b"0\r\n\r\n")
            except OSError:  # the client stopped reading and closed: what the bound does
                return

    def close(self) -> None:
        self._listener.close()


def _endless_json(_request: bytes) -> Iterator[bytes]:
    yield b'{"jsonrpc": "2.0", "id": 0, "result": "'
    for _ in range(SERVED // len(PIECE)):
        yield PIECE


@pytest.fixture
def servers() -> Iterator[list[_Server]]:
    made: list[_Server] = []
    yield made
    for server in made:
        server.close()


async def test_a_body_past_the_bound_is_refused_and_read_no_further(servers: list[_Server]) -> None:
    server = _Server("application/json", _endless_json)
    servers.append(server)
    async with bounded_client(most=MiB) as client:
        with pytest.raises(answer_too_large()) as refused:
            await client.post(server.url, json={"jsonrpc": "2.0", "id": 0, "method": "initialize"})
    assert "passed 1,048,576 bytes" in str(refused.value) and server.url in str(refused.value)
    await trio.sleep(0.2)  # the server notices the closed connection
    assert server.sent < SERVED // 2


async def test_an_event_stream_is_left_to_the_sdks_bound_of_each_event(servers: list[_Server]) -> None:
    # A stream of events may stay open for hours: no total bound, only the SDK's of each event.
    events = [
        b"event: message\ndata: %s\n\n" % json.dumps({"n": i, "pad": "y" * 900}).encode() for i in range(8)
    ]
    server = _Server("text/event-stream", lambda _request: iter(events))
    servers.append(server)
    async with bounded_client(most=1024) as client:
        answer = await client.post(server.url, json={})
    assert answer.content == b"".join(events)


async def test_an_mcp_server_answering_without_end_fails_its_request_with_the_bound_named(
    servers: list[_Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Through the SDK as the pool connects (pool._http_transport): initialize is answered by a JSON body
    # without end; the request fails with the bound named, the daemon's memory untouched.
    server = _Server("application/json", _endless_json)
    servers.append(server)
    monkeypatch.setattr(pool, "bounded_client", _with_bound(MiB))
    client = await _sdk_client(pool._http_transport(server.url, {}, 10.0))
    with trio.fail_after(20), pytest.raises(Exception) as failed:  # the SDK's own error
        async with client:
            pass
    assert "passed 1,048,576 bytes" in pool.describe(failed.value)
    assert server.sent < SERVED // 2


async def _sdk_client(transport: Any) -> Any:
    """The SDK's client over *transport*, made as the pool makes it (McpConnection._client_context)."""
    await pool.load_sdk()
    from mcp.client.client import Client
    from mcp_types import Implementation

    return Client(
        transport, mode="auto", client_info=Implementation(name="mm", version=__version__), cache=None
    )


def _with_bound(most: int) -> Any:
    def make(headers: Any = None, timeout: Any = None, auth: Any = None) -> Any:
        return bounded_client(headers, timeout, auth, most=most)

    return make


async def test_the_sse_transport_reads_no_posts_answer_past_the_bound(
    servers: list[_Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SSE transport (type: sse) posts each message and reads the POST's answer whole: the endpoint the
    # event stream names answers the initialize POST without end. The POST is cut at the bound; the
    # connection never gets ready, and it fails within its connect timeout.
    def answer(request: bytes) -> Iterator[bytes]:
        if request.startswith(b"GET"):
            yield b"event: endpoint\ndata: /messages?session_id=1\n\n"
            while not stop.is_set():
                stop.wait(0.05)
            return
        yield from _endless_json(request)

    stop = threading.Event()
    server = _Server(lambda r: "text/event-stream" if r.startswith(b"GET") else "application/json", answer)
    servers.append(server)
    monkeypatch.setattr(pool, "bounded_client", _with_bound(MiB))
    client = await _sdk_client(pool._sse_transport(server.url, {}, 5.0))
    try:
        with trio.move_on_after(3), contextlib.suppress(Exception):
            async with client:
                pass
    finally:
        stop.set()
    await trio.sleep(0.2)  # the server notices the closed connection
    assert 0 < server.sent < SERVED // 2


# 8 MiB behind about 8 KB of gzip: the counter saw the 8 KB, and httpx2 decoded the rest after it, into the
# SDK's read of the whole body (3 MB on the wire held 3.3 GB of the daemon).
BOMB = gzip.compress(b'{"jsonrpc": "2.0", "id": 0, "result": "' + b" " * (8 * MiB) + b'"}', 9)


def _bomb(_request: bytes) -> Iterator[bytes]:
    yield BOMB


async def test_an_answer_in_a_content_encoding_is_refused_unread(servers: list[_Server]) -> None:
    server = _Server("application/json", _bomb, encoding="gzip")
    servers.append(server)
    async with bounded_client({"Accept-Encoding": "gzip"}, most=MiB) as client:
        with pytest.raises(answer_refused()) as refused:
            await client.post(server.url, json={"jsonrpc": "2.0", "id": 0, "method": "initialize"})
    assert "in Content-Encoding 'gzip', which mm does not decode" in str(refused.value)
    assert server.url in str(refused.value)
    head = server.heads[0].lower()  # asked for the body as it is, over the agent file's header
    assert head.count(b"accept-encoding") == 1 and b"accept-encoding: identity" in head


@pytest.mark.parametrize("content_type", ["application/json", "text/event-stream"])
async def test_an_mcp_server_answering_in_a_content_encoding_fails_its_request_with_the_encoding_named(
    servers: list[_Server], monkeypatch: pytest.MonkeyPatch, content_type: str
) -> None:
    # Through the SDK as the pool connects: initialize is answered by the bomb, as one JSON document or as
    # an event stream (left to the SDK's bound of each event, which counted decoded bytes too late as well).
    server = _Server(content_type, _bomb, encoding="gzip")
    servers.append(server)
    monkeypatch.setattr(pool, "bounded_client", _with_bound(MiB))
    client = await _sdk_client(pool._http_transport(server.url, {}, 10.0))
    with trio.fail_after(20), pytest.raises(Exception) as failed:  # the SDK's own error
        async with client:
            pass
    assert "in Content-Encoding 'gzip', which mm does not decode" in pool.describe(failed.value)
