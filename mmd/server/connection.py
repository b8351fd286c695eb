"""One client connection to the daemon: a trio pump over the protocol state, and a bounded outbox.

The protocol itself (framing, the handshake, what each frame asks for) is
:class:`mmd.rpc.ServerProtocol`, which does no I/O; this module reads the
socket into it, runs the calls it hands out, and writes what it answers.

Every byte the daemon sends goes through the outbox, drained by one writer
task, so replies and events never interleave mid-frame and a slow client
never blocks a turn: when its outbox is full (OUTBOX_FRAMES frames, or
OUTBOX_BYTES bytes) the connection is dropped at once, what it still held
discarded, and the client reconnects and replays what it missed from the
store (after_seq).

A malformed message that still carries a msgid is answered with an error.
Anything that cannot be split or decoded closes this connection only, after
an ``error`` notification that says why.

Requests run concurrently, each in its own task, except ``handshake`` (and
whatever comes before it, which is only refused): it runs before the next
frame is read, so requests written right behind it (in the same ``send``)
find the connection handshaken. A request the daemon has
received runs to its end even when the client hangs up before the answer: a
``session.prompt`` sent just before a hang-up still runs its turn, as a turn
goes on when its client disconnects mid-turn.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import trio

from ..rpc import (
    DEFAULT_MAX_FRAME,
    Call,
    Fatal,
    Ignored,
    Method,
    Refused,
    RPCError,
    ServerProtocol,
    notification,
)

log = logging.getLogger(__name__)

# Frames queued for one client before it counts as stuck and is dropped.
OUTBOX_FRAMES = 10_000
# Bytes queued for one client (what the writer still holds included) before it counts as stuck and is dropped.
# Frames alone did not bound it: a client that pipelined 200 session.show requests for a session with a
# 2 MB answer and read nothing held 1.5 GiB of the daemon. 64 MiB is four frames at the frame limit (16 MiB):
# more than any client that reads ever falls behind by (a turn's events come a few KB at a time, and a
# replay is one answer), and what a client that stopped reading may cost the daemon at most. A frame
# larger than this goes through when nothing is queued before it: it is built already, and one answer is
# not a client falling behind.
OUTBOX_BYTES = 64 * 1024 * 1024
# Bytes queued for all clients together (Outboxes): a bound per client is no bound on many clients, and a
# process can open hundreds of connections that read nothing (a command a turn runs among them). Past it,
# the client with the most queued is dropped.
TOTAL_OUTBOX_BYTES = 256 * 1024 * 1024
# Bytes of frames not yet whole held for all clients together (Inboxes). One client's is bounded by the frame
# limit (16 MiB), but a client may send 16 MiB − 1 and then nothing: 100 such connections held 1.7 GB for as
# long as they stayed open. Four frames at the limit at once is more than real clients ever send together (a
# prompt with a big buffer attached is read in well under a second); past it, the client holding the most is
# dropped.
TOTAL_INBOX_BYTES = 64 * 1024 * 1024
# Requests of one client running at once. Each is a task, and a client may pipeline a million requests in
# a few megabytes (tools.list, 20 bytes each): past this many, its socket is not read until one ends, so the
# client waits (its writes block) and the daemon holds no more.
MAX_IN_FLIGHT = 64
# Bytes read from the socket at a time.
READ_SIZE = 65_536
# The largest frame a client reads (its splitter refuses more): an answer past it is an error instead.
MAX_FRAME = DEFAULT_MAX_FRAME

_ids = itertools.count(1)


# Bytes the writer joins into one send at most (a frame larger than this goes alone).
SEND_BATCH = 262_144
# A frame pushed within this many seconds of the last one written straight to the socket is queued for the
# writer instead, which sends the burst (a replay, a handler's many events) in one write.
BURST = 0.000_2


# A frame, or the part of one the socket did not take (a view of it: the rest of a big answer is not copied).
Frame = bytes | memoryview


def _too_large(method: str, size: int) -> RPCError:
    return RPCError(
        "too_large",
        f"the answer to {method} is {size:,} bytes, past the {MAX_FRAME:,} a client reads in one message; "
        "ask for less (session.show pages its events: after_seq)",
    )


def _queued(first: Frame | None, outbox: trio.MemoryReceiveChannel[Frame | None]) -> tuple[list[Frame], bool]:
    """*first* and the frames queued behind it, up to SEND_BATCH bytes; True when the end (None) came."""
    frames: list[Frame] = []
    size = 0
    frame = first
    while frame is not None:
        frames.append(frame)
        size += len(frame)
        if size >= SEND_BATCH:
            return frames, False
        try:
            frame = outbox.receive_nowait()
        except trio.WouldBlock:
            return frames, False
        except (trio.EndOfChannel, trio.ClosedResourceError):
            return frames, True
    return frames, True


class Outboxes:
    """The bytes queued for all of a daemon's clients, bounded together (TOTAL_OUTBOX_BYTES): one that would
    take them past the bound makes room by dropping the clients with the most queued, itself too maybe."""

    def __init__(self, limit: int = TOTAL_OUTBOX_BYTES) -> None:
        self.limit = limit
        self.queued = 0
        self._holding: set[Connection] = set()  # the connections with bytes queued

    def add(self, conn: Connection, size: int) -> None:
        conn._queued_bytes += size
        self.queued += size
        self._holding.add(conn)

    def remove(self, conn: Connection, size: int) -> None:
        size = min(size, conn._queued_bytes)  # a dropped connection's were taken off at once
        conn._queued_bytes -= size
        self.queued -= size
        if not conn._queued_bytes:
            self._holding.discard(conn)

    def make_room(self, size: int) -> None:
        """Drop the clients with the most queued until *size* bytes more fit (or no client holds any)."""
        while self.queued + size > self.limit and self._holding:
            hog = max(self._holding, key=lambda conn: conn._queued_bytes)
            hog._drop(f"the clients' outboxes over {self.limit:,} bytes together, this one's the largest")


class Inboxes:
    """The bytes of unfinished frames held for all of a daemon's clients, bounded together (TOTAL_INBOX_BYTES):
    past the bound, the clients holding the most are dropped (itself too maybe), what they held discarded."""

    def __init__(self, limit: int = TOTAL_INBOX_BYTES) -> None:
        self.limit = limit
        self.held = 0
        self._holding: dict[Connection, int] = {}  # the connections with a frame under way, and its bytes

    def hold(self, conn: Connection, size: int) -> None:
        """*conn* now holds *size* bytes of a frame under way (0: none); drop the largest holders while the
        total is past the bound."""
        self.held += size - self._holding.pop(conn, 0)
        if size:
            self._holding[conn] = size
        while self.held > self.limit and self._holding:
            hog = max(self._holding, key=self._holding.__getitem__)
            held = self._holding[hog]
            self.hold(hog, 0)
            hog._drop(
                f"its unfinished frame ({held:,} bytes) the largest of the clients' unfinished frames, over "
                f"{self.limit:,} bytes together"
            )
            hog.protocol.discard()


class Host(Protocol):
    """What a connection needs of the daemon that accepted it (mmd.server.daemon.Daemon)."""

    methods: Mapping[str, Method]  # handlers are called with (the daemon, this connection, params)
    max_frame: int
    log_path: Path
    outboxes: Outboxes  # the bound on what all its connections queue together
    inboxes: Inboxes  # the bound on the unfinished frames all its connections hold together

    def detach(self, conn: Connection) -> None: ...

    def unwritable(self, exc: BaseException) -> str | None:
        """What to tell the client when *exc* is the store's disk failing (full...), not a bug."""


class Connection:
    def __init__(
        self, daemon: Host, stream: trio.SocketStream, peer_pid: int, *, confined: bool = True
    ) -> None:
        self.id = next(_ids)
        self.daemon = daemon
        self.stream = stream
        self.peer_pid = peer_pid
        # The client runs with no_new_privs (a sandboxed command, most likely), or could not be told not to:
        # judged once, as it connected (Daemon._serve_client).
        self.confined = confined
        self.client = "unknown"
        self.protocol = ServerProtocol(daemon.methods, max_frame=daemon.max_frame)
        # Sessions this connection gets events for, and whether it answers consent asks there.
        self.subscriptions: dict[str, bool] = {}
        self._out_send, self._out_recv = trio.open_memory_channel[Frame | None](OUTBOX_FRAMES)
        self._queued_bytes = 0  # in the outbox and held by the writer, until written (Outboxes counts it)
        self._outboxes = daemon.outboxes
        self._inboxes = daemon.inboxes
        self._partial = 0  # bytes of a frame under way, as Inboxes last counted them
        self._slots = trio.Semaphore(MAX_IN_FLIGHT)  # requests running at once
        self._writing = trio.CancelScope()  # cancelled to drop a client too slow to read
        self.closed = False
        # The writer holds or awaits frames: a push then queues behind them, never past them.
        self._busy = False
        self._last_direct = -1.0  # time.perf_counter() of the last frame written by push itself
        sock = getattr(stream, "socket", None)  # None: not a socket (the tests' memory streams)
        self._sock = sock if isinstance(sock, trio.socket.SocketType) else None

    def __repr__(self) -> str:
        return f"<connection {self.id} {self.client} pid {self.peer_pid}>"

    @property
    def handshaken(self) -> bool:
        return self.protocol.handshaken

    # -- sending -----------------------------------------------------------

    def push(self, frame: bytes) -> None:
        """Send or queue a frame; a client too slow to keep up is dropped, never waited for.

        With nothing queued or being written, the frame is written to the socket right here: a tool
        call's events come milliseconds apart, and waking the writer task for each cost two passes of
        the event loop a call. What the socket does not take at once, and any frame of a burst, goes to
        the writer, which sends it in order.
        """
        if self.closed:
            return
        if not self._busy and self._sock is not None:
            now = time.perf_counter()
            if now - self._last_direct >= BURST:
                self._last_direct = now
                if not (frame := self._write_now(frame)):
                    return
        self._busy = True
        if self._queued_bytes and self._queued_bytes + len(frame) > OUTBOX_BYTES:
            self._drop(f"outbox over {OUTBOX_BYTES:,} bytes")
            return
        if self._outboxes.queued + len(frame) > self._outboxes.limit:
            self._outboxes.make_room(len(frame))
            if self.closed:  # this one was the largest
                return
        try:
            self._out_send.send_nowait(frame)
        except trio.WouldBlock:
            self._drop(f"outbox full ({OUTBOX_FRAMES:,} frames)")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.closed = True  # the writer is gone: the peer hung up
        else:
            self._outboxes.add(self, len(frame))

    def _drop(self, why: str) -> None:
        """Drop a client too slow to read: what is queued for it is discarded and its socket closed now (it
        reconnects and replays from the store), not held for as long as it stays connected reading nothing."""
        log.warning("%r: %s, dropping the connection", self, why)
        self.abort()
        self._writing.cancel()
        self._outboxes.remove(self, self._queued_bytes)  # discarded now, whenever the writer ends

    def notify(self, method: str, params: Any) -> None:
        self.push(notification(method, params))

    def notify_each(self, method: str, each: list[Any]) -> None:
        """One notification for each of *each*, in one frame of bytes: one write, where a second push
        within BURST would go through the writer task."""
        self.push(b"".join([notification(method, params) for params in each]))

    def _write_now(self, frame: bytes) -> Frame:
        """What of *frame* the socket did not take at once (empty when it took it all)."""
        assert self._sock is not None
        fd = self._sock.fileno()  # -1 once closed
        if fd < 0:
            return frame
        try:
            sent = os.write(fd, frame)
        except BlockingIOError:
            return frame
        except OSError:  # the peer hung up (EPIPE, ECONNRESET): the writer finds it out and ends
            return frame
        return memoryview(frame)[sent:] if sent else frame

    def close_after_flush(self) -> None:
        """Send what is queued, then close (used after a fatal protocol error)."""
        if not self.closed:
            self.closed = True
            try:
                self._out_send.send_nowait(None)
            except trio.WouldBlock:
                self.abort()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    def abort(self) -> None:
        self.closed = True
        self._out_send.close()

    async def _writer(self) -> None:
        # The frames queued by the time the writer runs go out in one send: a tool call's events
        # (its call, its result, the next step's start) are queued together, and one syscall each
        # cost the daemon more than the rest of their way to the client.
        try:
            async with self._out_recv:
                async for frame in self._out_recv:
                    frames, last = _queued(frame, self._out_recv)
                    if frames:
                        await self._send(frames[0] if len(frames) == 1 else b"".join(frames))
                        self._outboxes.remove(self, sum(map(len, frames)))
                    if last:
                        break
                    if not self._out_recv.statistics().current_buffer_used:
                        self._busy = False  # all sent: the next push may write itself
        finally:  # what is still queued is never sent (its channel is closed): no longer held
            self._outboxes.remove(self, self._queued_bytes)
        await self.stream.aclose()

    async def _send(self, data: Frame) -> None:
        # Written to the socket directly: trio's send_all yields to the scheduler after every send, one
        # pass of the event loop more for each batch of a turn's events, although the client's socket
        # buffer nearly always takes them at once. trio waits here only when it is full.
        sock = getattr(self.stream, "socket", None)
        if sock is None:  # not a socket (the tests' memory streams)
            await self.stream.send_all(data)
            return
        view = memoryview(data)
        while view:
            fd = sock.fileno()  # -1 once closed: never a descriptor reused meanwhile
            if fd < 0:
                raise trio.ClosedResourceError("the connection was closed")
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                await trio.lowlevel.wait_writable(fd)
            except OSError as exc:  # the peer hung up (EPIPE, ECONNRESET)
                raise trio.BrokenResourceError(str(exc)) from None

    # -- receiving ---------------------------------------------------------

    async def serve(self) -> None:
        """Run until the peer hangs up or the connection is dropped.

        Requests already received run to their end first (their answers go
        nowhere when the peer is gone).

        Cancellation: cancels this connection's pending requests; turns they
        started keep running in the daemon.
        """
        try:
            async with trio.open_nursery() as nursery:
                async with trio.open_nursery() as requests:
                    with trio.CancelScope() as reading:
                        # A writer that stops (the peer is gone or too slow) stops the
                        # reading, never the requests already received.
                        nursery.start_soon(self._writer_task, reading)
                        await self._reader(requests)
                # Let queued replies go out, then stop.
                self.close_after_flush()
        finally:
            self.closed = True
            if self._partial:
                self._partial = 0
                self._inboxes.hold(self, 0)
            self.daemon.detach(self)
            with trio.CancelScope(shield=True):
                await self.stream.aclose()

    async def _writer_task(self, scope: trio.CancelScope) -> None:
        with self._writing, contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await self._writer()
        scope.cancel()

    async def _reader(self, nursery: trio.Nursery) -> None:
        while not self.closed:
            try:
                data = await self.stream.receive_some(READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            if not data:
                return
            self.protocol.receive(data)
            if (partial := self.protocol.buffered) or self._partial:  # counted together (Inboxes)
                self._partial = partial
                self._inboxes.hold(self, partial)
            if not await self._act(nursery):
                return

    async def _act(self, nursery: trio.Nursery) -> bool:
        """Do what the frames received so far ask for; False when the connection must close."""
        while (action := self.protocol.next_action()) is not None:
            match action:
                case Call(inline=True):
                    # Inline, so that order of receipt decides: the requests pipelined behind a
                    # handshake find it done.
                    await self._run(action)
                case Call():
                    await self._slots.acquire()  # at MAX_IN_FLIGHT, the socket is not read meanwhile
                    nursery.start_soon(self._run_in_slot, action)
                case Refused():
                    self.push(action.data)
                case Ignored():
                    log.info("%r: %s", self, action.reason)
                case Fatal():
                    log.warning("%r: %s", self, action.message)
                    self.push(action.data)
                    self.close_after_flush()
                    return False
        return True

    async def _run_in_slot(self, call: Call) -> None:
        try:
            await self._run(call)
        finally:
            self._slots.release()

    async def _run(self, call: Call) -> None:
        try:
            result = await call.handler(self.daemon, self, call.params)
        except RPCError as exc:
            self.push(self.protocol.fail(call, exc))
        except Exception as exc:
            if (reason := self.daemon.unwritable(exc)) is not None:  # a full disk, say: not a bug
                log.error("%r: %s failed: %s (%r)", self, call.method, reason, exc)
                err = RPCError("store_unwritable", reason)
            else:
                log.exception("%r: %s failed", self, call.method)
                err = RPCError(
                    "internal_error",
                    f"{call.method} failed inside the daemon: {exc!r}; details are in {self.daemon.log_path}",
                )
            self.push(self.protocol.fail(call, err))
        else:
            frame = self.protocol.respond(call, result)
            if len(frame) > MAX_FRAME:  # a frame no client reads (its splitter refuses it): say so instead
                log.warning(
                    "%r: the answer to %s is %d bytes, past %d", self, call.method, len(frame), MAX_FRAME
                )
                frame = self.protocol.fail(call, _too_large(call.method, len(frame)))
            self.push(frame)
