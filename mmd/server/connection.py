"""One client connection to the daemon: framing, dispatch, and a bounded outbox.

Every byte the daemon sends goes through the outbox, drained by one writer
task, so replies and events never interleave mid-frame and a slow client
never blocks a turn: when its outbox is full the connection is dropped and
the client reconnects and replays what it missed from the store (after_seq).

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
from typing import TYPE_CHECKING, Any

import trio

from ..rpc import (
    FrameError,
    Notification,
    ProtocolError,
    Request,
    Response,
    RPCError,
    Splitter,
    decode_message,
    decode_params,
    notification,
    response,
)

if TYPE_CHECKING:
    from .daemon import Daemon

log = logging.getLogger(__name__)

# Frames queued for one client before it counts as stuck and is dropped.
OUTBOX_FRAMES = 10_000
# Bytes read from the socket at a time.
READ_SIZE = 65_536

_ids = itertools.count(1)


class Connection:
    def __init__(self, daemon: Daemon, stream: trio.SocketStream, peer_pid: int) -> None:
        self.id = next(_ids)
        self.daemon = daemon
        self.stream = stream
        self.peer_pid = peer_pid
        self.client = "unknown"
        self.handshaken = False
        # Sessions this connection gets events for, and whether it answers consent asks there.
        self.subscriptions: dict[str, bool] = {}
        self._out_send, self._out_recv = trio.open_memory_channel[bytes | None](OUTBOX_FRAMES)
        self.closed = False

    def __repr__(self) -> str:
        return f"<connection {self.id} {self.client} pid {self.peer_pid}>"

    # -- sending -----------------------------------------------------------

    def push(self, frame: bytes) -> None:
        """Queue a frame; a client too slow to keep up is dropped, never waited for."""
        if self.closed:
            return
        try:
            self._out_send.send_nowait(frame)
        except trio.WouldBlock:
            log.warning("%r: outbox full, dropping the connection", self)
            self.abort()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.closed = True  # the writer is gone: the peer hung up

    def notify(self, method: str, params: Any) -> None:
        self.push(notification(method, params))

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
        async with self._out_recv:
            async for frame in self._out_recv:
                if frame is None:
                    break
                await self.stream.send_all(frame)
        await self.stream.aclose()

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
            self.daemon.detach(self)
            with trio.CancelScope(shield=True):
                await self.stream.aclose()

    async def _writer_task(self, scope: trio.CancelScope) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await self._writer()
        scope.cancel()

    async def _reader(self, nursery: trio.Nursery) -> None:
        splitter = Splitter(self.daemon.max_frame)
        while not self.closed:
            try:
                data = await self.stream.receive_some(READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            if not data:
                return
            try:
                frames = splitter.feed(data)
            except FrameError as exc:
                self._fatal(f"{exc}; closing this connection")
                return
            for frame in frames:
                if not await self._dispatch(frame, nursery):
                    return

    def _fatal(self, message: str) -> None:
        log.warning("%r: %s", self, message)
        self.notify("error", {"code": "protocol_error", "message": message})
        self.close_after_flush()

    async def _dispatch(self, frame: bytes, nursery: trio.Nursery) -> bool:
        try:
            msg = decode_message(frame)
        except ProtocolError as exc:
            if exc.msgid is None:
                self._fatal(f"{exc}; expected [0, msgid, method, params]; closing this connection")
                return False
            self.push(response(exc.msgid, RPCError("invalid_request", str(exc)).to_wire(), None))
            return True
        match msg:
            case Request() if msg.method == "handshake" or not self.handshaken:
                # Inline, so that order of receipt decides: the requests pipelined behind a
                # handshake find it done, one before it is refused (which awaits nothing).
                await self._handle(msg)
            case Request():
                nursery.start_soon(self._handle, msg)
            case Notification():
                log.info("%r: ignoring notification %s", self, msg.method)
            case Response():
                log.info("%r: ignoring response to %s: the daemon sends no requests", self, msg.msgid)
        return True

    async def _handle(self, req: Request) -> None:
        try:
            result = await self._call(req)
        except RPCError as exc:
            self.push(response(req.msgid, exc.to_wire(), None))
        except Exception as exc:
            log.exception("%r: %s failed", self, req.method)
            err = RPCError(
                "internal_error",
                f"{req.method} failed inside the daemon: {exc!r}; details are in {self.daemon.log_path}",
            )
            self.push(response(req.msgid, err.to_wire(), None))
        else:
            self.push(response(req.msgid, None, result))

    async def _call(self, req: Request) -> Any:
        from ..api import METHODS, unknown_method

        method = METHODS.get(req.method)
        if method is None:
            raise unknown_method(req.method)
        if not self.handshaken and req.method != "handshake":
            raise RPCError(
                "handshake_required", "call handshake first: [0, id, 'handshake', [{protocol: N}]]"
            )
        params = decode_params(req.params, method.params)
        return await method.handler(self.daemon, self, params)
