"""mm's own HTTP/1.1 client for servers on this machine (mmd/models/transport.py), against real sockets.

Each test serves raw bytes from a trio TCP server on 127.0.0.1, so every framing (Content-Length,
chunks, the end of the connection), every broken answer and every kept-alive connection is the
real thing; the provider-level behaviour (SSE, retries) is tested through the scripted model. The tests
of how much of the buffer is searched feed a connection's reads one by one instead, so that the answer
arrives in exactly the pieces they choose.
"""

from __future__ import annotations

import functools
import gzip
import socket
import struct
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from mmd.models import _http, tokens, transport
from mmd.models.base import Message, ModelError
from mmd.models.openai import OpenAIProvider
from mmd.models.transport import LoopbackClient, TransportError

from ...counting import CountingBuffer

Handler = Callable[[trio.SocketStream, bytes], Awaitable[bool]]
MiB = 1024 * 1024


async def read_request(stream: trio.SocketStream, buffer: bytearray) -> bytes | None:
    """One request (head and Content-Length body) from *stream*; None when the client closed it."""
    while b"\r\n\r\n" not in buffer:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return None
        buffer += chunk
    end = buffer.index(b"\r\n\r\n") + 4
    head = bytes(buffer[:end])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    while len(buffer) < end + length:
        buffer += await stream.receive_some(65536)
    request = bytes(buffer[: end + length])
    del buffer[: end + length]
    return request


class Server:
    """Answers each request with ``answer(stream, request)``; keeps the connection while it returns True."""

    def __init__(self, answer: Handler) -> None:
        self.answer = answer
        self.connections = 0
        self.requests: list[bytes] = []
        self.port = 0

    async def serve(self, nursery: trio.Nursery) -> str:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, self.handle, 0, host="127.0.0.1"))
        self.port = listeners[0].socket.getsockname()[1]
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        buffer = bytearray()
        with trio.move_on_after(10):
            while (request := await read_request(stream, buffer)) is not None:
                self.requests.append(request)
                if not await self.answer(stream, request):
                    break
        await stream.aclose()


def sized(body: bytes, status: str = "200 OK", extra: str = "") -> bytes:
    return f"HTTP/1.1 {status}\r\ncontent-length: {len(body)}\r\n{extra}\r\n".encode() + body


async def body_of(client: LoopbackClient, url: str, data: bytes | None = None) -> tuple[int, bytes]:
    return await transport.fetch(client, "POST" if data is not None else "GET", url, data)


def scopes_made(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on, the name of each transport function that opens a cancel scope (itself, or by fail_after,
    move_on_after...), once a scope."""
    made: list[str] = []
    real = trio.CancelScope

    def counted(*args: Any, **kwargs: Any) -> trio.CancelScope:
        frame = sys._getframe(1)
        while frame is not None and frame.f_globals.get("__name__", "").startswith(("trio.", "contextlib")):
            frame = frame.f_back
        if frame is not None and frame.f_globals.get("__name__") == transport.__name__:
            made.append(frame.f_code.co_name)
        return real(*args, **kwargs)

    monkeypatch.setattr(trio, "CancelScope", counted)
    return made


async def test_content_length_and_a_kept_alive_connection(nursery: trio.Nursery) -> None:
    async def answer(stream: trio.SocketStream, request: bytes) -> bool:
        await stream.send_all(sized(b"hello " + request.split(b"\r\n\r\n", 1)[1]))
        return True

    server = Server(answer)
    url = await server.serve(nursery)
    client = LoopbackClient(timeout=5)
    assert await body_of(client, url + "/a", b'{"x": 1}') == (200, b'hello {"x": 1}')
    assert await body_of(client, url + "/b?q=1") == (200, b"hello ")
    assert server.connections == 1  # the second request reused the first connection
    first = server.requests[0].decode()
    assert first.startswith("POST /a HTTP/1.1\r\n") and "content-length: 8\r\n" in first
    assert f"host: 127.0.0.1:{server.port}" in first and "content-type: application/json" in first
    assert server.requests[1].startswith(b"GET /b?q=1 HTTP/1.1\r\n")
    await client.aclose()


async def test_chunks_with_extensions_and_trailers_and_a_streamed_read(nursery: trio.Nursery) -> None:
    async def answer(stream: trio.SocketStream, request: bytes) -> bool:
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n"
        )
        for part in (b"data: one\n\n", b"data: two\n\n"):
            await stream.send_all(b"%x;ext=1\r\n%s\r\n" % (len(part), part))
            await trio.sleep(0.01)
        await stream.send_all(b"0\r\nX-Trailer: t\r\n\r\n")
        return True

    url = await Server(answer).serve(nursery)
    client = LoopbackClient(timeout=5)
    async with client.stream("POST", url, content=b"{}", headers={}) as response:
        assert response.headers["content-type"] == "text/event-stream"
        chunks = [chunk async for chunk in response.aiter_bytes()]
    assert b"".join(chunks) == b"data: one\n\ndata: two\n\n" and len(chunks) >= 2
    assert await body_of(client, url) == (200, b"data: one\n\ndata: two\n\n")
    await client.aclose()


async def test_a_chunk_that_arrives_in_pieces_and_one_that_arrives_with_the_next(
    nursery: trio.Nursery,
) -> None:
    # A chunk read whole from the buffer takes a short way (_chunked); one whose bytes are still coming
    # is read on; both give the same bytes, and a chunk's end must still be where its size says.
    big = b"data: " + b"x" * 5000 + b"\n\n"

    async def answer(stream: trio.SocketStream, request: bytes) -> bool:
        await stream.send_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await stream.send_all(b"%x\r\n%s" % (len(big), big[:100]))
        await trio.sleep(0.02)
        await stream.send_all(big[100:] + b"\r\n" + b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n")
        return True

    url = await Server(answer).serve(nursery)
    client = LoopbackClient(timeout=5)
    assert await body_of(client, url) == (200, big + b"abcdefg")
    await client.aclose()


async def test_a_chunk_larger_than_a_read_is_streamed_in_pieces_not_held(nursery: trio.Nursery) -> None:
    # Chunks whole in the buffer are taken together; a large one (a server may announce any size) is
    # handed on as it arrives, so the reader can refuse an answer that grows too big.
    size = 1 << 20
    release = trio.Event()

    async def answer(stream: trio.SocketStream, request: bytes) -> bool:
        await stream.send_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
        await stream.send_all(b"%x\r\n" % size + b"y" * (size // 2))
        await release.wait()
        await stream.send_all(b"y" * (size // 2) + b"\r\n0\r\n\r\n")
        return True

    url = await Server(answer).serve(nursery)
    client = LoopbackClient(timeout=5)
    got = bytearray()
    async with client.stream("GET", url, content=None, headers={}) as response:
        async for piece in response.aiter_bytes():
            got += piece
            if len(got) >= size // 2:
                release.set()  # half the big chunk came before the server sent the rest
    assert bytes(got) == b"abc" + b"y" * size and release.is_set()
    await client.aclose()


@pytest.mark.parametrize("line", [b"-5", b"zz", b""])
async def test_a_chunk_size_that_is_not_one_is_a_protocol_error(nursery: trio.Nursery, line: bytes) -> None:
    async def answer(stream: trio.SocketStream, request: bytes) -> bool:
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + line + b"\r\nabcde\r\n0\r\n\r\n"
        )
        return False

    url = await Server(answer).serve(nursery)
    with pytest.raises(TransportError, match="no size"):
        await body_of(LoopbackClient(timeout=5), url)


async def test_a_body_to_the_end_of_the_connection_is_not_reused(nursery: trio.Nursery) -> None:
    async def answer(stream: trio.SocketStream, request: bytes) -> bool:
        await stream.send_all(b"HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\n\r\nbroken")
        return False

    server = Server(answer)
    url = await server.serve(nursery)
    client = LoopbackClient(timeout=5)
    assert await body_of(client, url) == (500, b"broken")
    assert await body_of(client, url) == (500, b"broken")
    assert server.connections == 2


async def test_a_connection_the_server_closed_while_idle_is_replaced(nursery: trio.Nursery) -> None:
    # The server answers, then closes at once: the client's pooled connection is dead when reused,
    # and the request goes out again on a new one (the server never saw it on the old).
    async def answer(stream: trio.SocketStream, request: bytes) -> bool:
        await stream.send_all(sized(b"ok"))
        return False

    server = Server(answer)
    url = await server.serve(nursery)
    client = LoopbackClient(timeout=5)
    for _ in range(3):
        assert await body_of(client, url, b"{}") == (200, b"ok")
        await trio.sleep(0.05)
    assert server.connections == 3 and len(server.requests) == 3
    await client.aclose()


async def test_an_idle_connection_past_the_keepalive_is_not_reused(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def answer(stream: trio.SocketStream, request: bytes) -> bool:
        await stream.send_all(sized(b"ok"))
        return True

    monkeypatch.setattr(transport, "KEEPALIVE", 0.1)
    server = Server(answer)
    url = await server.serve(nursery)
    client = LoopbackClient(timeout=5)
    await body_of(client, url)
    await body_of(client, url)
    await trio.sleep(0.2)
    await body_of(client, url)
    assert server.connections == 2
    await client.aclose()


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1.1 answer"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "without a colon"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: -3\r\n\r\n", "not a size"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort", "before the body's end"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", "no size"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabcdef\r\n", "does not end"),
        (b"HTTP/1.1 200 OK\r\n" + b"x-big: " + b"a" * 70_000, "headers passed"),
        (b"HTTP/1.1 200 OK\r\ncontent-", "in the middle of its headers"),
    ],
)
async def test_a_broken_answer_is_a_protocol_error(nursery: trio.Nursery, raw: bytes, says: str) -> None:
    async def answer(stream: trio.SocketStream, request: bytes) -> bool:
        await stream.send_all(raw)
        return False

    url = await Server(answer).serve(nursery)
    with pytest.raises(TransportError) as caught:
        await body_of(LoopbackClient(timeout=5), url)
    assert caught.value.kind == "protocol" and says in str(caught.value)


async def test_no_answer_in_time_is_a_timeout(nursery: trio.Nursery) -> None:
    async def answer(stream: trio.SocketStream, request: bytes) -> bool:
        await trio.sleep_forever()
        return False

    url = await Server(answer).serve(nursery)
    with pytest.raises(TransportError) as caught:
        await body_of(LoopbackClient(timeout=0.2), url)
    assert caught.value.kind == "timeout"


async def test_the_timeout_bounds_each_wait_not_the_whole_answer(nursery: trio.Nursery) -> None:
    # A body that comes a little at a time, never silent for a timeout but three timeouts long in all (twice
    # the request's first deadline), is read whole: the one deadline moves on as the waits go; then a silence
    # past it is a timeout.
    async def answer(stream: trio.SocketStream, request: bytes) -> bool:
        await stream.send_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for i in range(15):
            await trio.sleep(0.1)
            await stream.send_all(b"1\r\n%d\r\n" % (i % 10))
        if b"silent" in request:
            await trio.sleep_forever()
        await stream.send_all(b"0\r\n\r\n")
        return True

    url = await Server(answer).serve(nursery)
    client = LoopbackClient(timeout=0.5)
    assert await body_of(client, url) == (200, b"012345678901234")
    with pytest.raises(TransportError) as caught:
        await body_of(client, url + "/silent")
    assert caught.value.kind == "timeout" and "no answer within 0.5 s" in str(caught.value)
    await client.aclose()


async def test_the_waits_of_one_answer_share_its_one_cancel_scope(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A scope for each wait cost more than the wait's pass of the loop, and a local model's answer waits once
    # a token: the request has one scope (and connecting a new connection its own), whatever its waits.
    async def answer(stream: trio.SocketStream, request: bytes) -> bool:
        await stream.send_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for _ in range(20):
            await trio.sleep(0.01)
            await stream.send_all(b"1\r\nx\r\n")
        await stream.send_all(b"0\r\n\r\n")
        return True

    url = await Server(answer).serve(nursery)
    client = LoopbackClient(timeout=5)
    made = scopes_made(monkeypatch)
    assert await body_of(client, url) == (200, b"x" * 20)
    await client.aclose()
    assert made.count("stream") == 1 and set(made) == {"stream", "_connect"}, made


async def read_hello_and_end(client: LoopbackClient, url: str) -> None:
    """Read the first chunk of *url*'s chunked answer (``hello``) and end the body there, as a model step does
    after its last event."""
    async with client.stream("GET", url, content=None, headers={}) as response:
        chunks = response.aiter_bytes()
        assert await chunks.__anext__() == b"hello"
        await response.end(chunks)


@pytest.mark.parametrize(
    ("first", "rest", "settle"),
    [
        (b"5\r\nhello\r\n", b"0\r\n\r\n", False),  # the size-0 chunk comes later, as a model's often does
        (b"5\r\nhello\r\n", b"0\r\n\r\n", True),  # ... and is there when the next request is made
        (b"5\r\nhello\r\n0\r\nx-trailer: 1\r\n", b"\r\n", False),  # it came with the data; trailers
    ],
)
async def test_a_body_ended_after_a_whole_chunk_keeps_its_connection_without_waiting_for_the_rest(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch, first: bytes, rest: bytes, settle: bool
) -> None:
    # A model's stream is ended after its last event: the rest (the size-0 chunk) is read when the
    # connection is next taken, not waited for then, and the connection carries the next request. A rest
    # already there is read without a cancel scope (one more a step otherwise).
    go_on = trio.Event()

    async def answer(stream: trio.SocketStream, request: bytes) -> bool:
        if b"/first" in request:
            await stream.send_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + first)
            await go_on.wait()  # set once end() returned: had it waited for the rest, never
            await stream.send_all(rest)
        else:
            await stream.send_all(sized(b"next"))
        return True

    server = Server(answer)
    url = await server.serve(nursery)
    client = LoopbackClient(timeout=5)
    await read_hello_and_end(client, url + "/first")
    go_on.set()
    if settle:
        await trio.sleep(0.1)
    made = scopes_made(monkeypatch)
    assert await body_of(client, url + "/second") == (200, b"next")  # the rest read first (waited for)
    assert server.connections == 1
    if settle:
        assert made == ["stream"]
    await client.aclose()


@pytest.mark.parametrize("then", ["more data", "reset"])
async def test_a_body_that_goes_on_after_the_reader_ended_it_costs_its_connection_not_the_next_answer(
    nursery: trio.Nursery, then: str
) -> None:
    # What follows the last chunk the reader wanted is more data, or the connection breaks while the next
    # request waits for the rest: either way that request goes on a new connection and is answered.
    async def answer(stream: trio.SocketStream, request: bytes) -> bool:
        if b"/first" in request:
            await stream.send_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n")
            await trio.sleep(0.05)
            if then == "reset":  # SO_LINGER 0: the close is a reset, which the client's read raises
                stream.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return False
            await stream.send_all(b"5\r\nextra\r\n0\r\n\r\n")
        else:
            await stream.send_all(sized(b"next"))
        return True

    server = Server(answer)
    url = await server.serve(nursery)
    client = LoopbackClient(timeout=5)
    await read_hello_and_end(client, url + "/first")
    assert await body_of(client, url + "/second") == (200, b"next")
    assert server.connections == 2
    await client.aclose()


async def test_nothing_listening_is_a_connect_error() -> None:
    sock = trio.socket.socket()
    await sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # a port nothing listens on
    with pytest.raises(TransportError) as caught:
        await body_of(LoopbackClient(timeout=5), f"http://127.0.0.1:{port}/")
    assert caught.value.kind == "connect"


async def test_a_line_break_in_a_header_is_refused_before_sending() -> None:
    client = LoopbackClient(timeout=5)
    with pytest.raises(TransportError) as caught:
        async with client.stream("GET", "http://127.0.0.1:9/", content=None, headers={"x": "a\r\nevil: 1"}):
            pass
    assert caught.value.kind == "url"


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://127.0.0.1:8080/v1", True),
        ("http://127.3.2.1/v1", True),
        ("http://localhost:11434", True),
        ("http://[::1]:8080/", True),
        ("https://127.0.0.1/v1", False),
        ("http://10.0.0.2/v1", False),
        ("http://api.example.com/v1", False),
        ("http://localhost.example.com/", False),
        ("ftp://127.0.0.1/", False),
    ],
)
def test_what_counts_as_this_machine(url: str, loopback: bool) -> None:
    assert transport.is_loopback(url) is loopback
    kind: Any = transport.LoopbackClient if loopback else transport.HttpxClient
    assert isinstance(transport.client_for(url, 5), kind)


async def test_httpx_errors_come_out_as_transport_errors() -> None:
    client = transport.client_for("http://mm-test.invalid/", 5)
    with pytest.raises(TransportError) as caught:
        await transport.fetch(client, "GET", "http://mm-test.invalid/")
    assert caught.value.kind == "connect"
    # A URL httpx cannot send to: a NUL in it, host names IDNA refuses. Each escaped as an internal error.
    for url in ("gopher://mm-test.invalid/", "http://a\x00b/", "http://a..b/", f"http://{'a' * 64}.com/"):
        with pytest.raises(TransportError) as caught:
            await transport.fetch(client, "GET", url)
        assert caught.value.kind == "url", url
    await client.aclose()


async def test_a_server_on_ipv6_loopback_gets_a_bracketed_host(nursery: trio.Nursery) -> None:
    seen: list[bytes] = []

    async def handle(stream: trio.SocketStream) -> None:
        buffer = bytearray()
        if (request := await read_request(stream, buffer)) is not None:
            seen.append(request)
            await stream.send_all(sized(b"six"))
        await stream.aclose()

    try:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, handle, 0, host="::1"))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    port = listeners[0].socket.getsockname()[1]
    client = LoopbackClient(timeout=5)
    assert await body_of(client, f"http://[::1]:{port}/x") == (200, b"six")
    assert f"host: [::1]:{port}\r\n".encode() in seen[0]
    await client.aclose()


async def test_a_body_read_without_waiting_still_yields_to_a_cancel(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The socket is read directly, and trio is asked to wait only when nothing is there: an answer
    # already in the socket's buffer must still reach a cancel once YIELD_BYTES came.
    monkeypatch.setattr(transport, "YIELD_BYTES", 16 * 1024)
    body = b"x" * (100 * 1024)  # within the socket buffers of both sides

    async def answer(stream: trio.SocketStream, request: bytes) -> bool:
        await stream.send_all(sized(body))
        return False

    url = await Server(answer).serve(nursery)
    client = LoopbackClient(timeout=5)
    got = bytearray()
    async with client.stream("GET", url, content=None, headers={}) as response:
        await trio.sleep(0.2)  # the whole body is in this side's socket buffer now
        with trio.CancelScope() as scope:
            scope.cancel()
            async for chunk in response.aiter_bytes():
                got += chunk
    assert scope.cancelled_caught and len(got) < len(body)
    await client.aclose()


# ---------------------------------------------------------------- how much is searched


def reads_of(monkeypatch: pytest.MonkeyPatch, data: bytes, size: int) -> transport._Conn:
    """A connection whose reads return *data* *size* bytes at a time, then the end; its buffer counts."""
    pieces = [data[i : i + size] for i in range(0, len(data), size)]

    async def receive(self: LoopbackClient, conn: transport._Conn, most: int = transport.READ_SIZE) -> bytes:
        return pieces.pop(0) if pieces else b""

    monkeypatch.setattr(LoopbackClient, "_receive", receive)
    return transport._Conn(socket.socket(), buffer=CountingBuffer())


@pytest.mark.parametrize("size", [1, 16, 1000])
async def test_a_head_that_comes_in_many_reads_is_searched_once(
    monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    # The search for the head's end goes on where the last one stopped; it used to start again at the
    # buffer's start after every read, up to MAX_HEAD.
    head = b"HTTP/1.1 200 OK\r\n" + b"".join(b"x-%d: %s\r\n" % (i, b"v" * 40) for i in range(400)) + b"\r\n"
    conn = reads_of(monkeypatch, head + b"body", size)
    with conn.sock:
        status, headers = await LoopbackClient(timeout=5)._read_head(conn)
    assert status == 200 and len(headers) == 400 and headers["x-399"] == "v" * 40
    reads = -(-len(head) // size)
    assert conn.buffer.searched <= len(head) + 4 * reads  # each read's bytes, and the 3 before them


@pytest.mark.parametrize("size", [1, 16, 1000])
async def test_a_chunked_body_that_comes_in_many_reads_is_searched_once(
    monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    # A long size line, a chunk's data and the trailers, each arriving a few bytes a read: no line is
    # searched again from its start, and a size line is read once however long its data takes to come.
    data = b"d" * 4000
    body = b"%x;%s\r\n%s\r\n0\r\n%s\r\n" % (len(data), b"e" * 20_000, data, b"x-t: 1\r\n" * 300)
    conn = reads_of(monkeypatch, body, size)
    client = LoopbackClient(timeout=5)
    response = transport.LoopbackResponse(client, conn, 200, {"transfer-encoding": "chunked"}, "POST")
    with conn.sock:
        assert b"".join([chunk async for chunk in response.aiter_bytes()]) == data
    assert response.complete and not conn.buffer
    reads = -(-len(body) // size)
    assert conn.buffer.searched <= len(body) + 2 * reads  # each read's bytes, and the one before them


def test_the_rest_of_a_body_that_comes_in_many_reads_is_searched_once() -> None:
    # The size-0 chunk and the trailers of an answer the reader ended early, read when the connection is
    # next taken (_rest_ends, asked after each read): each line is read once.
    rest = b"0\r\n" + b"x-t: 1\r\n" * 500 + b"\r\n"
    with socket.socket() as sock:
        conn = transport._Conn(sock, buffer=CountingBuffer(), rest="chunks")
        said = []
        for i in range(0, len(rest), 8):
            conn.buffer += rest[i : i + 8]
            said.append(transport._rest_ends(conn))
    assert said[-1] is True and set(said[:-1]) == {None}
    assert conn.buffer.searched <= 2 * len(rest)


async def test_an_answer_read_whole_is_bounded_and_its_connection_dropped(nursery: trio.Nursery) -> None:
    # /props, /tokenize and /health are read whole: an endless body was read into the daemon's memory.
    async def endless(stream: trio.SocketStream, request: bytes) -> bool:
        await stream.send_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        chunk = b"x" * 65536
        with trio.move_on_after(10):
            while True:
                await stream.send_all(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        return False

    server = Server(endless)
    url = await server.serve(nursery)
    client = LoopbackClient(timeout=5)
    with pytest.raises(TransportError) as refused:
        await transport.fetch(client, "GET", f"{url}/props", max_bytes=1_000_000)
    assert refused.value.kind == "protocol" and "passed 1,000,000 bytes" in str(refused.value)
    assert client._idle == {}  # not kept: the rest of the body was never read
    await client.aclose()


async def test_a_window_in_an_answer_nested_past_the_limit_is_none(nursery: trio.Nursery) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000  # msgspec recursed into it: a RecursionError out of the turn

    async def props(stream: trio.SocketStream, request: bytes) -> bool:
        await stream.send_all(sized(deep))
        return True

    url = await Server(props).serve(nursery)
    assert await tokens.server_window(url) == (None, True)


def gzip_bomb(size: int, layers: int = 1) -> bytes:
    """*size* zero bytes behind *layers* of gzip: a few KB on the wire."""
    data = b"\0" * size
    for _ in range(layers):
        data = gzip.compress(data, 9)
    return data


def encoded(body: bytes, coding: str, content_type: str = "text/event-stream") -> Handler:
    async def answer(stream: trio.SocketStream, request: bytes) -> bool:
        await stream.send_all(
            sized(body, extra=f"content-type: {content_type}\r\ncontent-encoding: {coding}\r\n")
        )
        return True

    return answer


def client_of(where: str, url: str) -> transport.Client:
    """mm's own client, or httpx as for a server beyond this machine (here on loopback all the same)."""
    return LoopbackClient(timeout=5) if where == "loopback" else transport.HttpxClient(url, 5)


@pytest.mark.parametrize("where", ["loopback", "httpx"])
async def test_a_model_answer_in_a_content_encoding_is_refused_unread(
    nursery: trio.Nursery, where: str
) -> None:
    # Content-Encoding: gzip, gzip: httpx decoded both layers of a chunk in one call, before the 64 MiB bound
    # counted a byte (a remote server's 1 MB was gigabytes in the daemon). Here 8 MiB behind a few KB, the
    # bound set to 1 MiB: the answer is refused for its encoding, unread and not tried again.
    server = Server(encoded(gzip_bomb(8 * MiB, layers=2), "gzip, gzip"))
    url = await server.serve(nursery)
    client = client_of(where, url)
    provider = OpenAIProvider(
        name="remote/test",
        base_url=url + "/v1",
        model="m",
        client=client,
        headers={"Accept-Encoding": "gzip"},
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_http, "MAX_RESPONSE_BYTES", MiB)
        with pytest.raises(ModelError) as refused:
            await provider.complete([Message(role="user", content="hi")], [])
    message = str(refused.value)
    assert (
        "answered HTTP 200 with its body in Content-Encoding 'gzip, gzip', which mm does not decode"
        in message
    )
    assert "send answers uncompressed" in message and not refused.value.retryable
    assert len(server.requests) == 1  # not tried again: it would be answered the same
    head = server.requests[0].split(b"\r\n\r\n")[0].lower()
    assert head.count(b"accept-encoding") == 1 and b"accept-encoding: identity" in head
    await client.aclose()


@pytest.mark.parametrize("where", ["loopback", "httpx"])
@pytest.mark.parametrize("coding", ["gzip", "deflate", "br", "x-unknown", "identity, gzip"])
async def test_an_answer_read_whole_in_a_content_encoding_is_refused(
    nursery: trio.Nursery, where: str, coding: str
) -> None:
    # /props, /tokenize and /health (fetch): the same refusal, whatever the encoding, a broken gzip too (its
    # DecodingError was an internal error out of the turn).
    url = await Server(encoded(b"\x1f\x8b" + b"x" * 18, coding, "application/json")).serve(nursery)
    client = client_of(where, url)
    with pytest.raises(TransportError) as refused:
        await transport.fetch(client, "GET", f"{url}/props")
    assert refused.value.kind == "encoding" and f"Content-Encoding {coding!r}" in str(refused.value)
    await client.aclose()


@pytest.mark.parametrize("where", ["loopback", "httpx"])
async def test_an_answer_in_identity_is_read(nursery: trio.Nursery, where: str) -> None:
    url = await Server(encoded(b'{"ok": 1}', "identity", "application/json")).serve(nursery)
    client = client_of(where, url)
    assert await transport.fetch(client, "GET", f"{url}/props") == (200, b'{"ok": 1}')
    await client.aclose()


def test_every_error_of_httpx_is_a_transport_error() -> None:
    import httpx

    kinds = {
        httpx.DecodingError("bad gzip"): "protocol",
        httpx.TooManyRedirects("loop"): "protocol",
        httpx.RemoteProtocolError("cut"): "connect",
        httpx.ReadTimeout("slow"): "timeout",
        httpx.UnsupportedProtocol("gopher"): "url",
    }
    for error, kind in kinds.items():
        assert transport._httpx_error(httpx, error).kind == kind


async def test_a_server_that_trickles_its_headers_is_cut_at_the_requests_first_deadline(
    nursery: trio.Nursery,
) -> None:
    # Each wait moved the deadline on, so headers sent a byte at a time, never silent for a timeout, held
    # the request for ever. Until the headers are read the deadline stays where the request set it.
    async def answer(stream: trio.SocketStream, request: bytes) -> bool:
        while True:
            await stream.send_all(b"X")
            await trio.sleep(0.05)

    url = await Server(answer).serve(nursery)
    started = trio.current_time()
    with trio.fail_after(10), pytest.raises(TransportError) as caught:  # a hang fails, not the suite
        await body_of(LoopbackClient(timeout=0.3), url)
    assert caught.value.kind == "timeout"
    assert trio.current_time() - started < 0.3 * transport.DEADLINE_SLACK + 1


@pytest.mark.parametrize("where", ["loopback", "httpx"])
async def test_a_stream_that_trickles_bytes_but_no_event_ends_after_the_timeout(
    nursery: trio.Nursery, where: str
) -> None:
    # A model server that sends a byte now and then and never a whole event: each read came in time, and
    # the turn waited for ever with nothing shown. The answer must go on by whole events.
    async def answer(stream: trio.SocketStream, request: bytes) -> bool:
        await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: {")
        while True:
            await trio.sleep(0.05)
            await stream.send_all(b" ")

    url = await Server(answer).serve(nursery)
    client = client_of(where, url)
    provider = OpenAIProvider(
        name="trickle/test", base_url=url + "/v1", model="m", client=client, timeout=0.5, max_retries=0
    )
    started = trio.current_time()
    with trio.fail_after(10), pytest.raises(ModelError) as caught:  # a hang fails, not the suite
        await provider.complete([Message(role="user", content="hi")], [])
    assert "bytes came, but no whole event of the stream for 0.5 s" in str(caught.value)
    assert trio.current_time() - started < 3
    await client.aclose()
