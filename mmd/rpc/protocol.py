"""The daemon's side of one msgpack-RPC connection, as state without I/O.

As h11 keeps HTTP apart from sockets, :class:`ServerProtocol` reads no
socket, awaits nothing and knows no event loop. The daemon's connection pump
(mmd/server/connection.py) feeds it the bytes it receives, then asks it what
to do until it says "nothing until more bytes":

    protocol.receive(data)
    while (action := protocol.next_action()) is not None:
        ...  # Call: run it; Refused: send its data; Fatal: send, then close; Ignored: log

It splits the stream into frames, decodes each message, keeps the handshake
state, refuses a request before the handshake, an unknown method (with a
close match) and params that do not fit the method's Struct, and encodes the
answers of the calls it handed out.

Ordering: each frame is judged when :meth:`~ServerProtocol.next_action`
reaches it, not when it arrives. A ``handshake`` is a ``Call`` marked
``inline``: the pump runs it to its end and sends its answer (which marks the
connection handshaken) before asking for the next action, so requests written
right behind it find the connection handshaken.
"""

from __future__ import annotations

import collections
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NamedTuple

from .framing import DEFAULT_MAX_DEPTH, DEFAULT_MAX_FRAME, MAX_REQUEST_VALUES, FrameError, Splitter
from .messages import (
    Notification,
    PeerResponse,
    ProtocolError,
    Request,
    RPCError,
    decode_message,
    decode_params,
    notification,
    response,
)

HANDSHAKE = "handshake"


class Method(NamedTuple):
    """One entry of the daemon's method table."""

    params: type  # the Struct its single map argument decodes into
    handler: Callable[..., Awaitable[Any]]  # handler(daemon, connection, params) -> a result Struct


class Call(NamedTuple):
    """A request to run: await ``handler`` and answer with :meth:`ServerProtocol.respond` or ``fail``."""

    msgid: int
    method: str
    params: Any  # decoded into the method's params Struct
    handler: Callable[..., Awaitable[Any]]
    inline: bool  # run it to its end before asking for the next action (the handshake)


class Refused(NamedTuple):
    """A request answered with an error at once, without running anything: send ``data``."""

    msgid: int
    error: RPCError
    data: bytes


class Fatal(NamedTuple):
    """The connection cannot go on: send ``data`` (an ``error`` notification), then close it."""

    message: str
    data: bytes


class Ignored(NamedTuple):
    """A notification or response from the client, which the daemon does not use; ``reason`` is for the log."""

    reason: str


Action = Call | Refused | Fatal | Ignored


class ServerProtocol:
    """The protocol state of one client connection: bytes in, actions and answers out.

    *methods* is the daemon's method table (name -> :class:`Method`).
    """

    def __init__(
        self,
        methods: Mapping[str, Method],
        *,
        max_frame: int = DEFAULT_MAX_FRAME,
        max_depth: int = DEFAULT_MAX_DEPTH,
        max_values: int = MAX_REQUEST_VALUES,
    ) -> None:
        self._methods = methods
        self._splitter = Splitter(max_frame, max_depth, max_values)
        self._frames: collections.deque[bytes] = collections.deque()
        self._fatal: Fatal | None = None  # after the frames already queued
        self.handshaken = False
        self.closed = False  # a Fatal was handed out: nothing follows it

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet form a whole frame."""
        return self._splitter.buffered

    def discard(self) -> None:
        """Forget what was received and not yet handed out (the connection is being dropped): nothing follows."""
        self.closed = True
        self._frames.clear()
        self._splitter.clear()

    def receive(self, data: bytes) -> None:
        """Take bytes read from the client. Bytes that cannot be split make the next actions end in a Fatal."""
        if self.closed or self._fatal is not None:
            return
        try:
            self._frames.extend(self._splitter.feed(data))
        except FrameError as exc:
            self._frames.extend(exc.frames)  # whole before the bad byte: answered first, in order
            self._fatal = _fatal(f"{exc}; closing this connection")

    def next_action(self) -> Action | None:
        """What to do about the next frame received, or None until more bytes come."""
        if self.closed:
            return None
        if self._frames:
            action = self._judge(self._frames.popleft())
        elif self._fatal is not None:
            action = self._fatal
        else:
            return None
        if isinstance(action, Fatal):
            self.closed = True
            self._frames.clear()
        return action

    def respond(self, call: Call, result: Any) -> bytes:
        """The response carrying *result*; a handshake answered so makes the connection handshaken."""
        data = response(call.msgid, None, result)
        if call.method == HANDSHAKE:
            self.handshaken = True
        return data

    def fail(self, call: Call, error: RPCError) -> bytes:
        """The response carrying *error*."""
        return response(call.msgid, error.to_wire(), None)

    def _judge(self, frame: bytes) -> Action:
        try:
            msg = decode_message(frame, peer=True)
        except ProtocolError as exc:
            if exc.msgid is None:
                return _fatal(f"{exc}; expected [0, msgid, method, params]; closing this connection")
            return _refused(exc.msgid, RPCError("invalid_request", str(exc)))
        match msg:
            case Request():
                return self._request(msg)
            case Notification():
                return Ignored(f"ignoring notification {msg.method}")
            case PeerResponse():
                return Ignored(f"ignoring response to {msg.msgid}: the daemon sends no requests")

    def _request(self, req: Request) -> Call | Refused:
        method = self._methods.get(req.method)
        if method is None:
            return _refused(req.msgid, unknown_method(req.method, self._methods))
        if not self.handshaken and req.method != HANDSHAKE:
            return _refused(req.msgid, RPCError("handshake_required", _HANDSHAKE_FIRST))
        try:
            params = decode_params(req.params, method.params)
        except RPCError as exc:
            return _refused(req.msgid, exc)
        return Call(req.msgid, req.method, params, method.handler, inline=req.method == HANDSHAKE)


_HANDSHAKE_FIRST = "call handshake first: [0, id, 'handshake', [{protocol: N}]]"


def unknown_method(name: str, known: Mapping[str, Any]) -> RPCError:
    """``unknown_method``, naming a close match when there is one and every method."""
    import difflib  # on first use: 0.1 MiB and 0.6 ms of every daemon start, for a mistake's hint

    close = difflib.get_close_matches(name, known, n=1)
    hint = f' — did you mean "{close[0]}"?' if close else ""
    return RPCError(
        "unknown_method",
        f'no method "{name}"{hint} Methods: {", ".join(sorted(known))} (see docs/protocol.md)',
    )


def _refused(msgid: int, error: RPCError) -> Refused:
    return Refused(msgid, error, response(msgid, error.to_wire(), None))


def _fatal(message: str) -> Fatal:
    return Fatal(message, notification("error", {"code": "protocol_error", "message": message}))
