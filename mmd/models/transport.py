"""How mm's model requests reach a server: HTTP/1.1 of its own to this machine, httpx elsewhere.

Most of mm's requests go to a server on this machine: a local model's llama-server, the
scripted model of the tests and benchmarks. For them httpx cost more than everything else
the daemon does in a tool round trip (about half of its CPU per call: request and response
objects, cookie handling, four layers of streams), 40–50 ms of every daemon start and 5 MiB
of its memory. :class:`LoopbackClient` speaks the part of HTTP/1.1 those servers use, on a
kept-alive socket: one request line, a Content-Length body, a response framed by
Content-Length, chunks, or the end of the connection. The socket is read and written directly,
and trio is asked to wait only when it would block: trio's stream layers yield to the scheduler
after every read and write even when nothing had to wait. Requests to any other host keep
httpx (:class:`HttpxClient`, imported on first use): TLS, proxies from the environment,
HTTP/2-capable pools are worth their cost where the network's latency dwarfs it.

Both raise :class:`TransportError` (with ``kind``: ``"url"``, ``"connect"``, ``"timeout"``,
``"protocol"`` or ``"encoding"``) for whatever keeps an answer from arriving; an HTTP error status
is an answer, not an error.

Neither decodes a compressed body. A body's bound (a model step's 64 MiB, :func:`fetch`'s) is only a
bound on what the daemon holds if the bytes counted are the bytes kept: a gzip member of a few MB is
gigabytes decoded, and httpx decodes each chunk of ``gzip, gzip`` whole in one call before any reader
can count it. So both ask for the body as it is (``Accept-Encoding: identity``, whatever the caller's
headers say), read it undecoded (httpx's raw bytes), and refuse an answer that comes with any other
Content-Encoding, before a byte of its body is read: :func:`check_encoding`, kind ``"encoding"``.

- :func:`client_for` ``(url, timeout)``: the client for requests to *url*.
- :func:`is_loopback` ``(url)``: whether *url* is plain HTTP to this machine.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol
from urllib.parse import urlsplit

import msgspec
import trio

from . import tls

# Bytes of a response's status line and headers before it is refused as no HTTP server's.
MAX_HEAD = 64 * 1024
# Bytes asked for per read of a body.
READ_SIZE = 64 * 1024
# Bytes received without a wait after which a read yields to the scheduler anyway.
YIELD_BYTES = 1 << 20
# Seconds a remote server's answer is read on after the reader has what it wanted (the chunked terminator),
# so that the connection goes back to httpx's pool instead of being closed.
DRAIN_SECONDS = 1.0
# A request's deadline is set this many times `timeout` ahead, and moved on once less than `timeout` is
# left: a wait lasts `timeout` seconds at least, 1.5 times at most, and most waits move nothing.
DEADLINE_SLACK = 1.5
# An idle connection is dropped after this many seconds. llama-server (cpp-httplib), uvicorn and
# Node close idle keep-alive connections after 5 s; a client that waits 5 s too sometimes sends its
# next request into a connection the server is closing ("Server disconnected without sending a
# response"), seen here after a tool ran for about 5 s. Under 5, the race cannot happen (and the
# loopback client sends again, on a new connection, a request that got no byte of an answer).
KEEPALIVE = 4.0
# Seconds allowed to open a connection; a dead host should fail fast.
CONNECT_TIMEOUT = 10.0
# Bytes of an answer :func:`fetch` reads whole (llama-server's /props, /tokenize, /health: a few KB to some
# hundreds with a long chat template): past it, a TransportError. An endless body was read into memory.
FETCH_MAX_BYTES = 4 * 1024 * 1024
# The one content coding asked for and taken: none (see the module's docstring).
IDENTITY = "identity"


class TransportError(Exception):
    """No answer arrived: ``kind`` is url, connect, timeout or protocol; the message says why."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Response(Protocol):
    status_code: int
    headers: Any  # a mapping read with lower-case names

    def aiter_bytes(self) -> AsyncIterator[bytes]: ...

    async def end(self, chunks: AsyncIterator[bytes]) -> None:
        """The reader has what it wanted of the body being read by *chunks* (from aiter_bytes): end it,
        keeping the connection for the next request where the rest of the body allows."""


class Client(Protocol):
    def stream(
        self, method: str, url: str, *, content: bytes | None, headers: dict[str, str]
    ) -> contextlib.AbstractAsyncContextManager[Response]: ...

    async def aclose(self) -> None: ...


@functools.lru_cache(maxsize=64)  # asked for every request: a model's few URLs repeat
def is_loopback(url: str) -> bool:
    """Whether *url* is plain HTTP to this machine (127.0.0.0/8, ::1 or localhost)."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        return False
    if parts.hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        return False


@functools.lru_cache(maxsize=64)
def _where(url: str) -> tuple[tuple[str, int], str, str]:
    """The address to connect to, the request target and the Host of the loopback *url*."""
    parts = urlsplit(url)
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    return (parts.hostname or "127.0.0.1", parts.port or 80), target, parts.netloc.rpartition("@")[2]


def check_encoding(status: int, headers: Any, url: str) -> None:
    """Refuse an answer whose body is encoded (a Content-Encoding other than identity): mm asked for none and
    decodes none, so a body's bound is a bound on the bytes held.

    Errors: TransportError ``encoding``, naming the encoding.
    """
    coding = headers.get("content-encoding")
    if coding and any(part.strip().lower() not in ("", IDENTITY) for part in coding.split(",")):
        raise TransportError(
            "encoding",
            f"the server at {url} answered HTTP {status} with its body in Content-Encoding {coding[:60]!r}, "
            f"which mm does not decode: it asks for answers as they are (Accept-Encoding: {IDENTITY})",
        )


def client_for(url: str, timeout: float) -> Client:
    """A client for requests to *url*: :class:`LoopbackClient` for this machine, else :class:`HttpxClient`."""
    return LoopbackClient(timeout) if is_loopback(url) else HttpxClient(url, timeout)


async def fetch(
    client: Client,
    method: str,
    url: str,
    body: bytes | None = None,
    max_bytes: int = FETCH_MAX_BYTES,
    key: str | None = None,
) -> tuple[int, bytes]:
    """One request read to its end: the status and the body, *max_bytes* at most; *key*: an API key, sent as
    a bearer token (a llama-server mm runs asks one).

    Errors: TransportError (``protocol`` for a body past *max_bytes*: the connection is closed).
    """
    headers = {"content-type": "application/json"} if body is not None else {}
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    data = bytearray()
    async with (
        client.stream(method, url, content=body, headers=headers) as response,
        contextlib.aclosing(response.aiter_bytes()) as chunks,
    ):
        async for chunk in chunks:
            data += chunk
            if len(data) > max_bytes:
                raise TransportError("protocol", f"the answer to {method} {url} passed {max_bytes:,} bytes")
    return response.status_code, bytes(data)


# ---------------------------------------------------------------- this machine


class _Conn(msgspec.Struct):
    sock: socket.socket  # non-blocking
    buffer: bytearray = msgspec.field(default_factory=bytearray)
    idle_since: float = 0.0
    unyielded: int = 0  # bytes received since the last wait or checkpoint
    flight: _Flight | None = None  # the request it carries now
    # The end of the last answer's chunked body, left to be read when the connection is next taken
    # (LoopbackResponse.end): "chunks" (the size-0 chunk, trailers, the empty line) or "trailers".
    rest: str = ""
    rest_at: int = 0  # the offset in the buffer up to which the rest was read whole (_rest_ends)
    # The last search of the buffer that found nothing: what for, from where, and the buffer's length
    # then. The next search for it from there goes on where that one stopped (_find), so that a line
    # arriving in many reads is searched once, not again from its start at each.
    unfound: tuple[bytes, int, int] = (b"", -1, 0)


class _Flight(msgspec.Struct):
    """A request in flight (LoopbackClient.stream): the cancel scope whose deadline bounds each of its waits,
    and what the wait under way waits for (the timeout's message)."""

    scope: trio.CancelScope
    waiting_for: str = "no answer"
    # The status line and headers are read: from then on each wait moves the deadline on. Until then it
    # stays where the request set it, so a server that trickles its headers a byte at a time is cut too.
    headed: bool = False


class LoopbackResponse:
    """A response being read from a connection; its body is read once, by :meth:`aiter_bytes`."""

    def __init__(
        self, client: LoopbackClient, conn: _Conn, status: int, headers: dict[str, str], method: str
    ):
        self.status_code = status
        self.headers = headers
        self._client = client
        self._conn = conn
        self._method = method
        self.complete = False  # the body was read to its end and the connection may be reused
        # While _chunked waits at a yield with every chunk before it taken whole: what is left of the body
        # then ("chunks", or "trailers" once the size-0 chunk came), else "".
        self._left = ""
        # The chunk at the buffer's start whose size line was read but not yet all its data: where its
        # data starts and its size (the size line is not read again at each read of the data).
        self._next: tuple[int, int] | None = None

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        if self._method == "HEAD" or self.status_code in (204, 304) or 100 <= self.status_code < 200:
            self.complete = True
            return
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            chunked = self._chunked()
            try:
                async for chunk in chunked:
                    yield chunk
            finally:  # closed early (end): the inner generator goes with it, not left to the collector
                await chunked.aclose()
        elif (length := self.headers.get("content-length")) is not None:
            async for chunk in self._sized(_length(length)):
                yield chunk
        else:
            async for chunk in self._until_close():
                yield chunk
        self.complete = self.headers.get("connection", "").lower() != "close" and (
            "chunked" in self.headers.get("transfer-encoding", "").lower() or "content-length" in self.headers
        )

    async def _sized(self, left: int) -> AsyncIterator[bytes]:
        while left > 0:
            chunk = await self._client.read(self._conn, min(left, READ_SIZE))
            if not chunk:
                raise TransportError("protocol", "the server closed the connection before the body's end")
            left -= len(chunk)
            yield chunk

    async def _until_close(self) -> AsyncIterator[bytes]:
        while chunk := await self._client.read(self._conn, READ_SIZE):
            yield chunk

    async def _chunked(self) -> AsyncIterator[bytes]:
        # Every chunk already whole in the buffer is taken at once and their data yielded together: a
        # local model streams one chunk per token, and several come in one read. A chunk still arriving
        # is read on; one larger than READ_SIZE is streamed in pieces, so that no chunk size makes the
        # buffer grow without the reader seeing its bytes (and refusing an answer that is too big).
        buffer = self._conn.buffer
        while True:
            data, ended, pending = self._whole_chunks()
            if data:
                self._left = "trailers" if ended else "chunks"
                yield data
                self._left = ""
            if ended:
                while await self._client.read_line(self._conn):  # trailers, then the empty line
                    pass
                return
            if pending is not None and pending[1] > READ_SIZE:
                _take(self._conn, pending[0])  # its size line
                self._next = None
                async for piece in self._sized(pending[1]):
                    yield piece
                if await self._client.read_line(self._conn):
                    raise TransportError("protocol", "a chunk of the body does not end where its size says")
                continue
            if pending is None and len(buffer) > MAX_HEAD:
                raise TransportError("protocol", "a line of the chunked body is too long")
            more = await self._client._receive(self._conn)
            if not more:
                raise TransportError("protocol", "the server closed the connection in the middle of the body")
            buffer += more

    async def end(self, chunks: AsyncIterator[bytes]) -> None:
        """End the body without waiting for its end. A chunked body read up to a chunk's end (a model's
        stream after its last event: only the size-0 chunk is still to come, often in a packet of its own)
        leaves the connection kept, its rest read when it is next taken (LoopbackClient._read_rest): waiting for
        it here cost a pass of the loop and a cancel scope every step. Any other body is read on to its end,
        DRAIN_SECONDS at most, as before (the connection is kept if it ends)."""
        if not self._left or self.headers.get("connection", "").lower() == "close":
            with trio.move_on_after(DRAIN_SECONDS):
                async for _ in chunks:
                    pass
            return
        self._conn.rest = self._left
        await chunks.aclose()  # aiter_bytes closes _chunked: no read, no wait

    def _whole_chunks(self) -> tuple[bytes, bool, tuple[int, int] | None]:
        """The data of every chunk whole at the start of the buffer, taken from it; whether the last chunk
        (size 0) came, its size line taken; and where the next chunk's data starts and its size if its
        size line is whole but not its data (None if not even that)."""
        conn = self._conn
        buffer = conn.buffer
        parts: list[bytes] = []
        pos, ended, pending = 0, False, None
        while True:  # pos: the start of the next chunk's size line
            if self._next is not None:  # at the buffer's start: its size line was read
                start, size = self._next
            else:
                # The first search may go on where the last read's stopped (_find); the next ones start
                # past a chunk just taken, where none searched: a find each, no call (a chunk a token).
                end = _find(conn, b"\r\n", pos) if pos == 0 else buffer.find(b"\r\n", pos)
                if end < 0:
                    if pos:  # what _find keeps of a search that found nothing
                        conn.unfound = (b"\r\n", pos, len(buffer))
                    break
                if (size := _chunk_size(buffer[pos:end])) == 0:
                    pos, ended = end + 2, True
                    break
                start = end + 2
            stop = start + size
            if len(buffer) < stop + 2:
                pending = self._next = (start - pos, size)
                break
            if buffer[stop : stop + 2] != b"\r\n":
                raise TransportError("protocol", "a chunk of the body does not end where its size says")
            parts.append(bytes(buffer[start:stop]))
            pos, self._next = stop + 2, None
        _take(conn, pos)
        return b"".join(parts), ended, pending


def _received(conn: _Conn) -> bool:
    """Add to the buffer what the connection has received, without waiting; False if it is closed or broken."""
    try:
        while len(conn.buffer) <= MAX_HEAD:
            if not (more := conn.sock.recv(READ_SIZE)):
                return False
            conn.buffer += more
    except BlockingIOError:
        pass
    except OSError:
        return False
    return True


def _rest_ends(conn: _Conn, open_: bool = True) -> bool | None:
    """Whether the buffer holds the rest of a chunked body (_Conn.rest) and nothing more; None while it may
    still come whole (never once the connection is no longer *open_*)."""
    if not open_:
        return False
    buffer, pos = conn.buffer, conn.rest_at  # the lines before rest_at were read by an earlier call
    if conn.rest == "chunks":
        if (end := _find(conn, b"\r\n")) < 0:
            return None
        if buffer[:end].split(b";", 1)[0].strip() != b"0":  # a chunk of data the reader did not want
            return False
        conn.rest, pos = "trailers", end + 2
    while (end := _find(conn, b"\r\n", pos)) > pos:  # trailers
        pos = end + 2
    conn.rest_at = pos
    if end < 0:
        return None
    return end + 2 == len(buffer)


def _find(conn: _Conn, needle: bytes, start: int = 0) -> int:
    """``conn.buffer.find(needle, start)``, going on where the last search for *needle* from *start* stopped
    if it found nothing: the bytes it searched are not searched again."""
    buffer = conn.buffer
    what, begun, searched = conn.unfound
    at = max(start, searched - len(needle) + 1) if what == needle and begun == start else start
    end = buffer.find(needle, at)
    conn.unfound = (needle, start, len(buffer)) if end < 0 else (b"", -1, 0)
    return end


def _take(conn: _Conn, n: int) -> None:
    """Drop the first *n* bytes of the buffer (what _find knows of the others is kept)."""
    if n:
        del conn.buffer[:n]
        what, begun, searched = conn.unfound
        conn.unfound = (what, begun - n, searched - n) if begun >= n else (b"", -1, 0)


def _chunk_size(line: bytes | bytearray) -> int:
    try:
        size = int(line.split(b";", 1)[0].strip(), 16)
    except ValueError:
        size = -1
    if size < 0:
        raise TransportError("protocol", f"a chunk of the body has no size: {bytes(line[:40])!r}")
    return size


class LoopbackClient:
    """HTTP/1.1 to servers on this machine, one kept-alive connection per server and request in flight.

    ``timeout`` is how long any one read may wait (a model that thinks long answers late): that long at
    least, DEADLINE_SLACK times at most, as the request's one deadline is moved on only when less than
    ``timeout`` is left; it does not bound a whole answer, which streams.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._idle: dict[tuple[str, int], list[_Conn]] = {}

    @contextlib.asynccontextmanager
    async def stream(
        self, method: str, url: str, *, content: bytes | None, headers: dict[str, str]
    ) -> AsyncIterator[LoopbackResponse]:
        # One cancel scope for the request and its answer, not one for each wait: a scope cost more than the
        # wait's pass of the loop, and a local model's answer waits once a token. Each wait moves the
        # scope's deadline on (_wait), so no wait is cut before `timeout` seconds.
        if not is_loopback(url):
            raise TransportError("url", f"{url} is not plain HTTP to this machine")
        address, target, host = _where(url)
        head = _request_head(method, target, host, headers, content)
        with trio.CancelScope(deadline=trio.current_time() + self.timeout * DEADLINE_SLACK) as scope:
            flight = _Flight(scope)
            conn, status, response_headers = await self._send(address, head + (content or b""), flight)
            flight.headed = True
            response = LoopbackResponse(self, conn, status, response_headers, method)
            try:
                check_encoding(status, response_headers, url)
                yield response
            finally:
                conn.flight = None
                if (response.complete and not conn.buffer) or conn.rest:
                    conn.idle_since = time.monotonic()
                    self._idle.setdefault(address, []).append(conn)
                else:  # a body left unread (an abandoned stream, an error): the connection cannot be reused
                    _close(conn)
        if scope.cancelled_caught:
            raise TransportError("timeout", f"{flight.waiting_for} within {self.timeout:g} s")

    async def _send(
        self, address: tuple[str, int], request: bytes, flight: _Flight
    ) -> tuple[_Conn, int, dict[str, str]]:
        # A kept-alive connection the server closed meanwhile fails before any byte of an answer:
        # the request is then sent once more, on a new connection (nothing of it was processed).
        while (conn := self._reuse(address)) is not None:
            conn.flight = flight
            try:
                if conn.rest:
                    await self._read_rest(conn)
                await self._write(conn, request)
                return (conn, *await self._read_head(conn))
            except _Stale:
                _close(conn)
            except BaseException:
                _close(conn)
                raise
        conn = await self._connect(address)
        conn.flight = flight
        try:
            await self._write(conn, request)
            return (conn, *await self._read_head(conn))
        except _Stale:
            _close(conn)
            raise TransportError("protocol", "the server closed the connection without an answer") from None
        except BaseException:
            _close(conn)
            raise

    def _reuse(self, address: tuple[str, int]) -> _Conn | None:
        pool = self._idle.get(address, [])
        now = time.monotonic()
        while pool:
            conn = pool.pop()
            if now - conn.idle_since < KEEPALIVE:
                return conn
            _close(conn)  # expired: the server may close it any moment
        return None

    async def _read_rest(self, conn: _Conn) -> None:
        """Read the rest of the last body the connection carried (_Conn.rest): usually come long since, so
        no wait; else up to DRAIN_SECONDS. _Stale (close it, take another) unless it ends well and nothing
        follows it."""
        if (ended := _rest_ends(conn, _received(conn))) is None:  # not whole yet: a scope to wait in
            with trio.move_on_after(DRAIN_SECONDS):
                while (ended := _rest_ends(conn)) is None:
                    try:
                        more = await self._receive(conn)
                    except TransportError:  # it broke: another connection carries the request
                        break
                    if not more or len(conn.buffer) > MAX_HEAD:
                        break
                    conn.buffer += more
        if not ended:
            raise _Stale()
        _take(conn, len(conn.buffer))
        conn.rest, conn.rest_at = "", 0

    async def _connect(self, address: tuple[str, int]) -> _Conn:
        try:
            with trio.fail_after(min(self.timeout, CONNECT_TIMEOUT)):
                stream = await trio.open_tcp_stream(*address)
        except trio.TooSlowError:
            raise TransportError("timeout", f"no connection to {address[0]}:{address[1]} in time") from None
        except OSError as exc:
            raise TransportError(
                "connect", f"cannot connect to {address[0]}:{address[1]}: {exc.strerror or exc}"
            ) from None
        # The connected socket (trio set TCP_NODELAY), taken out of trio's stream to be used directly.
        sock = socket.socket(fileno=stream.socket.detach())
        sock.setblocking(False)
        return _Conn(sock)

    async def _write(self, conn: _Conn, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[conn.sock.send(view) :]
            except BlockingIOError:
                await self._wait(conn, trio.lowlevel.wait_writable, "the request was not taken")
            except OSError:
                raise _Stale() from None

    async def _wait(self, conn: _Conn, wait: Callable[[socket.socket], Awaitable[None]], what: str) -> None:
        # The request's scope (stream) ends the wait at its deadline, which is kept at least `timeout`
        # seconds ahead: moved on (a registration in trio's deadlines) only once less than that is left.
        flight = conn.flight
        assert flight is not None, "a wait outside LoopbackClient.stream"
        now = trio.current_time()
        if flight.headed and flight.scope.deadline - now < self.timeout:
            flight.scope.deadline = now + self.timeout * DEADLINE_SLACK
        flight.waiting_for = what
        try:
            await wait(conn.sock)
        except trio.ClosedResourceError:
            raise TransportError("protocol", "the connection was closed") from None
        conn.unyielded = 0

    async def _read_head(self, conn: _Conn) -> tuple[int, dict[str, str]]:
        while (end := _find(conn, b"\r\n\r\n")) < 0:
            if len(conn.buffer) > MAX_HEAD:
                raise TransportError("protocol", f"the answer's headers passed {MAX_HEAD:,} bytes")
            chunk = await self._receive(conn)
            if not chunk:
                if conn.buffer:
                    raise TransportError(
                        "protocol", "the server closed the connection in the middle of its headers"
                    )
                raise _Stale()
            conn.buffer += chunk
        head = bytes(conn.buffer[:end]).decode("latin-1")
        _take(conn, end + 4)
        status_line, *lines = head.split("\r\n")
        version, _, rest = status_line.partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise TransportError("protocol", f"not an HTTP/1.1 answer: {status_line[:60]!r}")
        headers: dict[str, str] = {}
        for line in lines:
            name, sep, value = line.partition(":")
            if not sep:
                raise TransportError("protocol", f"a header line without a colon: {line[:60]!r}")
            key = name.strip().lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
        return int(code), headers

    async def read(self, conn: _Conn, most: int) -> bytes:
        if conn.buffer:
            chunk = bytes(conn.buffer[:most])
            _take(conn, len(chunk))
            return chunk
        return await self._receive(conn, most)

    async def read_line(self, conn: _Conn) -> bytes:
        while (end := _find(conn, b"\r\n")) < 0:
            if len(conn.buffer) > MAX_HEAD:
                raise TransportError("protocol", "a line of the chunked body is too long")
            chunk = await self._receive(conn)
            if not chunk:
                raise TransportError("protocol", "the server closed the connection in the middle of the body")
            conn.buffer += chunk
        line = bytes(conn.buffer[:end])
        _take(conn, end + 2)
        return line

    async def _receive(self, conn: _Conn, most: int = READ_SIZE) -> bytes:
        # Waits only when nothing is there; a stream that never makes it wait still yields to the
        # scheduler (and to a cancel) once YIELD_BYTES came.
        while True:
            try:
                chunk = conn.sock.recv(most)
            except BlockingIOError:
                await self._wait(conn, trio.lowlevel.wait_readable, "no answer")
                continue
            except OSError as exc:
                raise TransportError("protocol", f"the connection broke: {exc}") from None
            conn.unyielded += len(chunk)
            if conn.unyielded >= YIELD_BYTES:
                conn.unyielded = 0
                await trio.lowlevel.checkpoint()
            return chunk

    async def aclose(self) -> None:
        for pool in self._idle.values():
            for conn in pool:
                _close(conn)
        self._idle.clear()


class _Stale(Exception):
    """A connection that ended before any byte of an answer."""


def _close(conn: _Conn) -> None:
    trio.lowlevel.notify_closing(conn.sock)  # a task waiting on it gets ClosedResourceError
    conn.sock.close()


def _length(value: str) -> int:
    try:
        length = int(value)
    except ValueError:
        length = -1
    if length < 0:
        raise TransportError("protocol", f"the answer's Content-Length is not a size: {value[:40]!r}")
    return length


def _request_head(method: str, target: str, host: str, headers: dict[str, str], body: bytes | None) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"host: {host}", f"accept-encoding: {IDENTITY}"]
    lines += [
        f"{name}: {value}"
        for name, value in headers.items()
        if name.lower() not in ("host", "content-length", "accept-encoding")
    ]
    if body is not None:
        lines.append(f"content-length: {len(body)}")
    for text in lines:
        if "\r" in text or "\n" in text:
            raise TransportError("url", "a header holds a line break")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")


# ---------------------------------------------------------------- elsewhere


class HttpxClient:
    """httpx for requests beyond this machine (TLS, proxies), imported when the first is made."""

    def __init__(self, url: str, timeout: float) -> None:
        import httpx  # 40–50 ms and 5 MiB: only once a provider beyond this machine is used

        self._httpx = httpx
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT)),
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE),
            verify=tls.context_for(url),
        )

    @contextlib.asynccontextmanager
    async def stream(
        self, method: str, url: str, *, content: bytes | None, headers: dict[str, str]
    ) -> AsyncIterator[Response]:
        # httpx would ask for gzip, deflate (br, zstd) and decode them: the answer's body is asked for and
        # read as it is (see the module's docstring).
        sent = {name: value for name, value in headers.items() if name.lower() != "accept-encoding"}
        sent["accept-encoding"] = IDENTITY
        answered = False
        try:
            async with self._client.stream(method, url, content=content, headers=sent) as response:
                answered = True
                check_encoding(response.status_code, response.headers, url)
                yield _HttpxResponse(response)
        except self._httpx.HTTPError as exc:
            raise _httpx_error(self._httpx, exc) from None
        except (self._httpx.InvalidURL, UnicodeError) as exc:
            if answered:  # not httpx's: a UnicodeError of the reader's
                raise
            # A URL httpx cannot send to: a NUL in it, a host name IDNA refuses (``a..b``, a label over 63).
            raise TransportError("url", f"{type(exc).__name__}: {exc}") from None

    async def aclose(self) -> None:
        await self._client.aclose()


def _httpx_error(httpx: Any, exc: Exception) -> TransportError:
    """The TransportError for an error of httpx's (any ``httpx.HTTPError``)."""
    name = type(exc).__name__
    if isinstance(exc, (httpx.UnsupportedProtocol, httpx.LocalProtocolError)):
        return TransportError("url", f"{name}: {exc}")
    if isinstance(exc, httpx.TimeoutException):
        return TransportError("timeout", f"no answer in time ({name})")
    if isinstance(exc, httpx.TransportError):
        return TransportError("connect", f"{name}: {exc or 'no detail'}")
    # DecodingError (no body is decoded now, but one would be this), TooManyRedirects, any other.
    return TransportError("protocol", f"{name}: {exc or 'no detail'}")


class _HttpxResponse:
    def __init__(self, response: Any) -> None:
        self._response = response
        self.status_code = response.status_code
        self.headers = response.headers

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        # The raw bytes: no decoder runs, whatever the headers say (check_encoding refused an encoded body).
        return self._response.aiter_raw()

    async def end(self, chunks: AsyncIterator[bytes]) -> None:
        # Read on, a second at most, so that httpx keeps the connection.
        with trio.move_on_after(DRAIN_SECONDS):
            async for _ in chunks:
                pass
