"""Split a msgpack byte stream into whole messages, with no I/O.

msgpack-RPC as Neovim speaks it has no length prefix: messages are msgpack
objects written back to back. msgspec decodes whole objects only, so this
module finds where each object ends by walking the msgpack headers. It never
decodes values, it only skips over them, and it refuses a frame larger than
the configured limit as soon as a header announces it (before buffering it),
a frame nested deeper than its depth limit as soon as the walk gets there
(decoding it would recurse once per level), and one whose arrays and maps
announce more values than its value limit, as soon as their headers do: the
bytes do not bound a decode's memory (a 1-byte ``{}`` is a 64-byte dict, so a
16 MiB frame was 1.2 GB), the count does.
"""

from __future__ import annotations

# Largest frame accepted by default: a prompt with a big buffer attached fits.
DEFAULT_MAX_FRAME = 16 * 1024 * 1024
# Deepest nesting of arrays and maps in a frame. The deepest real frame is a consent ask
# quoting tool arguments at their own limit of 64 levels (mmd/untrusted.py) inside ~5
# levels of envelope; msgspec decodes with one C recursion per level, and Python's limit
# of 1000 frames is near at about 900 levels, so a deeper frame is refused before decoding.
DEFAULT_MAX_DEPTH = 128
# Most values (the frame itself, and every item, key and value of its arrays and maps) in a frame a client
# sends the daemon. A request's params are a Struct of a few fields, its lists capped (4,096 paths at most for
# trust.add, ~20,000 values): 100,000 is far above, and bounds the walk of a frame's headers (one Python step
# a value) to a few tens of milliseconds of the event loop. The daemon's own frames (a page of events) are
# read without this limit: mm wrote them.
MAX_REQUEST_VALUES = 100_000


class FrameError(Exception):
    """The byte stream cannot be split any further: garbage or an oversized frame.

    The connection that produced it must be closed; the bytes after the error
    cannot be trusted to start a message. ``frames`` are the whole frames the
    same :meth:`Splitter.feed` split before it: answer them first, in order.
    """

    def __init__(self, message: str, frames: list[bytes] | None = None) -> None:
        super().__init__(message)
        self.frames = frames if frames is not None else []


# Fixed sizes of headers that are followed by nothing variable:
# byte -> total length of the object, header included.
_FIXED = {
    0xC0: 1,
    0xC2: 1,
    0xC3: 1,  # nil, false, true
    0xCA: 5,
    0xCB: 9,  # float32, float64
    0xCC: 2,
    0xCD: 3,
    0xCE: 5,
    0xCF: 9,  # uint8..64
    0xD0: 2,
    0xD1: 3,
    0xD2: 5,
    0xD3: 9,  # int8..64
    0xD4: 3,
    0xD5: 4,
    0xD6: 6,
    0xD7: 10,
    0xD8: 18,  # fixext 1..16
}
# Headers followed by a big-endian length, then that many bytes:
# byte -> (width of the length field, extra bytes before the payload).
_SIZED = {
    0xC4: (1, 0),
    0xC5: (2, 0),
    0xC6: (4, 0),  # bin8..32
    0xC7: (1, 1),
    0xC8: (2, 1),
    0xC9: (4, 1),  # ext8..32 (one type byte)
    0xD9: (1, 0),
    0xDA: (2, 0),
    0xDB: (4, 0),  # str8..32
}
# Container headers followed by a big-endian count:
# byte -> (width of the count, items per counted element).
_CONTAINERS = {0xDC: (2, 1), 0xDD: (4, 1), 0xDE: (2, 2), 0xDF: (4, 2)}


# Where the walk of a frame stopped for want of bytes, to go on from there when more come: the offset of
# the next header from the frame's start, the objects still to skip, those left in the innermost open
# array or map and in each one around it, the values announced so far (see _scan).
_State = tuple[int, int, int, list[int], int]


class _Incomplete(Exception):
    def __init__(self, need: int, state: _State) -> None:
        self.need = need
        self.state = state


def _scan(
    buf: bytearray, start: int, max_frame: int, max_depth: int, max_values: int, state: _State | None = None
) -> int:
    """Return the end offset of the object that starts at *start*, walking on from *state* if given.

    Raises _Incomplete with the least total buffer length worth waiting for and the state to go on from
    (each header is read once, however many pieces the frame comes in), or FrameError.
    """
    # pending: objects still to skip; remaining: those of the innermost open array or map (at first:
    # the frame itself), outer: those of each one around it (len(outer) are open).
    rel, pending, remaining, outer, values = state if state is not None else (0, 1, 1, [], 1)
    pos, end, limit = start + rel, len(buf), start + max_frame
    while pending:
        if pos >= end:
            raise _Incomplete(pos + pending, (pos - start, pending, remaining, outer, values))
        while not remaining:
            remaining = outer.pop()
        b = buf[pos]
        items = -1  # objects inside, when b starts an array or a map
        if b <= 0x7F or b >= 0xE0:  # positive or negative fixint
            pos += 1
        elif b <= 0x8F:  # fixmap
            pos += 1
            items = 2 * (b & 0x0F)
        elif b <= 0x9F:  # fixarray
            pos += 1
            items = b & 0x0F
        elif b <= 0xBF:  # fixstr
            pos += 1 + (b & 0x1F)
        elif b in _FIXED:
            pos += _FIXED[b]
        elif b in _SIZED:
            width, extra = _SIZED[b]
            if pos + 1 + width > end:  # the header again, once its length has come
                raise _Incomplete(pos + 1 + width, (pos - start, pending, remaining, outer, values))
            size = int.from_bytes(buf[pos + 1 : pos + 1 + width], "big")
            pos += 1 + width + extra + size
        elif b in _CONTAINERS:
            width, per = _CONTAINERS[b]
            if pos + 1 + width > end:
                raise _Incomplete(pos + 1 + width, (pos - start, pending, remaining, outer, values))
            items = per * int.from_bytes(buf[pos + 1 : pos + 1 + width], "big")
            pos += 1 + width
        else:  # 0xC1 is never used by msgpack
            raise FrameError(f"byte 0x{b:02x} at offset {pos - start} is not msgpack")
        remaining -= 1
        pending -= 1
        if items >= 0:  # an array or a map starts, one level deeper than those open
            if len(outer) >= max_depth:
                raise FrameError(f"frame nested more than {max_depth} levels deep; the limit is {max_depth}")
            outer.append(remaining)
            remaining = items
            pending += items
            if (values := values + items) > max_values:
                raise FrameError(f"frame of more than {max_values:,} values; the limit is {max_values:,}")
        if pos + pending > limit:  # every pending object needs at least one more byte
            raise FrameError(f"frame larger than the limit of {max_frame} bytes")
    if pos > end:  # the last string or binary runs past what has arrived
        raise _Incomplete(pos, (pos - start, pending, remaining, outer, values))
    return pos


class Splitter:
    """Accumulates bytes and yields whole msgpack frames.

    Feed it whatever the socket returned; it returns the frames completed so
    far, each as ``bytes`` ready for ``msgspec.msgpack.decode``. A frame that
    arrives in pieces is walked on from where the last piece left it, never
    from its start again: the work is linear in the bytes fed, however they
    are cut.

    Errors:
        FrameError: on a byte that cannot start a msgpack object, on a frame
        whose headers announce more than ``max_frame`` bytes, on one that
        nests arrays and maps more than ``max_depth`` levels deep, or on one
        whose arrays and maps announce more than ``max_values`` values (None:
        no limit but the bytes'); its
        ``frames`` are those completed before the bad byte by the same feed.
        The splitter is unusable afterwards: every later feed raises it again.
    """

    def __init__(
        self,
        max_frame: int = DEFAULT_MAX_FRAME,
        max_depth: int = DEFAULT_MAX_DEPTH,
        max_values: int | None = None,
    ) -> None:
        self.max_frame = max_frame
        self.max_depth = max_depth
        self.max_values = max_frame if max_values is None else max_values  # each value takes a byte at least
        self._buf = bytearray()
        self._need = 0  # skip walking on until the buffer holds this much
        self._state: _State | None = None  # where the walk of the frame at the buffer's start stopped
        self._error: FrameError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held that do not yet form a whole frame."""
        return len(self._buf)

    def clear(self) -> None:
        """Forget the bytes held (a frame under way): the next feed starts a frame."""
        self._buf = bytearray()
        self._need = 0
        self._state = None

    def feed(self, data: bytes) -> list[bytes]:
        if self._error is not None:
            raise FrameError(str(self._error))
        self._buf += data
        if len(self._buf) < self._need:
            return []
        frames: list[bytes] = []
        start = 0
        while start < len(self._buf):
            try:
                stop = _scan(self._buf, start, self.max_frame, self.max_depth, self.max_values, self._state)
            except _Incomplete as inc:
                self._need, self._state = inc.need - start, inc.state
                break
            except FrameError as exc:
                self._error, exc.frames = exc, frames
                self._buf.clear()
                raise
            self._state = None
            frames.append(bytes(self._buf[start:stop]))
            start = stop
        else:
            self._need = 0
        del self._buf[:start]
        return frames
