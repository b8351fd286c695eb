"""The framing layer splits any chunking of a msgpack stream into the same whole frames."""

from __future__ import annotations

import itertools

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mmd.rpc import FrameError, Splitter, decode_message, notification, request, response
from mmd.rpc.messages import Notification, ProtocolError, Request, Response

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=20,
)


def feed_in_chunks(data: bytes, cuts: list[int], splitter: Splitter) -> list[bytes]:
    frames: list[bytes] = []
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    for start, stop in itertools.pairwise(points):
        frames += splitter.feed(data[start:stop])
    return frames


@given(st.lists(values, min_size=1, max_size=8), st.lists(st.integers(min_value=0), max_size=20))
def test_any_chunking_gives_the_same_frames(objs, cuts):
    encoded = [msgspec.msgpack.encode(o) for o in objs]
    splitter = Splitter()
    frames = feed_in_chunks(b"".join(encoded), cuts, splitter)
    assert frames == encoded
    assert splitter.buffered == 0


def test_one_byte_at_a_time():
    data = request(7, "session.prompt", {"prompt": "x" * 70_000, "cwd": "/"}) + notification(
        "event", {"a": [1, 2]}
    )
    splitter = Splitter()
    frames = []
    for i in range(len(data)):
        frames += splitter.feed(data[i : i + 1])
    assert len(frames) == 2
    assert isinstance(decode_message(frames[0]), Request)
    assert isinstance(decode_message(frames[1]), Notification)


def test_partial_frame_waits():
    data = response(3, None, {"ok": True})
    splitter = Splitter()
    assert splitter.feed(data[:-1]) == []
    assert splitter.buffered == len(data) - 1
    assert splitter.feed(data[-1:]) == [data]


def test_never_used_byte_is_garbage():
    with pytest.raises(FrameError, match="0xc1"):
        Splitter().feed(b"\xc1")


def test_garbage_after_a_whole_frame_still_yields_the_frame_first():
    splitter = Splitter()
    good = request(1, "handshake", {"protocol": 1})
    assert splitter.feed(good) == [good]
    with pytest.raises(FrameError):
        splitter.feed(b"\x93\xc1")


def test_frames_before_garbage_in_the_same_feed_come_with_the_error_and_the_splitter_stays_broken():
    splitter = Splitter()
    good, other = request(1, "handshake", {"protocol": 1}), notification("event", {"a": 1})
    with pytest.raises(FrameError, match="0xc1") as info:
        splitter.feed(good + other + b"\x93\xc1")
    assert info.value.frames == [good, other]
    with pytest.raises(FrameError, match="0xc1") as again:  # nothing after the bad byte is framed
        splitter.feed(good)
    assert again.value.frames == []


class CountingBuffer(bytearray):
    """A splitter's buffer that counts the bytes read from it: one an index, a slice its length."""

    read = 0

    def __getitem__(self, key):
        got = super().__getitem__(key)
        self.read += len(got) if isinstance(key, slice) else 1
        return got


def tree(depth: int):
    """A binary tree of 2-arrays with short strings for leaves: many headers, few of them pending at once."""
    return "leaf" if depth == 0 else [tree(depth - 1), tree(depth - 1)]


@pytest.mark.parametrize("piece", [1, 16, 256])
def test_a_frame_fed_in_small_pieces_is_walked_once_not_again_from_its_start_each_time(piece):
    # The walk resumes where the last piece left it. It used to restart at the frame's start once the
    # buffer held what the last walk needed, which such a tree reaches every piece: a local client that
    # sent 4 MiB in 256-byte pieces cost the daemon 13 s of CPU on its event loop.
    frame = request(1, "daemon.status", tree(10)) + notification("event", {"a": 1})
    splitter = Splitter()
    splitter._buf = CountingBuffer()
    frames = []
    for i in range(0, len(frame), piece):
        frames += splitter.feed(frame[i : i + piece])
    assert b"".join(frames) == frame and len(frames) == 2
    assert splitter._buf.read <= 2 * len(frame)  # each header read once, each frame copied out once


@pytest.mark.parametrize(
    "header",
    [
        b"\xdb\xff\xff\xff\xff",  # str32 of 4 GiB
        b"\xc6\x7f\xff\xff\xff",  # bin32 of 2 GiB
        b"\xdd\xff\xff\xff\xff",  # array32 of 4 billion items
        b"\xdf\x10\x00\x00\x00",  # map32 of 268 million pairs
    ],
)
def test_oversized_frame_refused_from_its_header(header):
    with pytest.raises(FrameError, match="limit"):
        Splitter(max_frame=1024).feed(header)


def test_frame_at_the_limit_passes_and_one_byte_more_fails():
    payload = msgspec.msgpack.encode("x" * 1000)
    assert Splitter(max_frame=len(payload)).feed(payload) == [payload]
    with pytest.raises(FrameError):
        Splitter(max_frame=len(payload) - 1).feed(payload)


def test_messages_round_trip():
    req = decode_message(request(5, "m", {"k": 1}))
    assert isinstance(req, Request) and (req.msgid, req.method) == (5, "m")
    assert msgspec.msgpack.decode(req.params) == [{"k": 1}]
    resp = decode_message(response(5, {"code": "x", "message": "y"}, None))
    assert isinstance(resp, Response) and resp.error == {"code": "x", "message": "y"}


@pytest.mark.parametrize(
    ("obj", "answerable"),
    [
        ([0, 9, 42, []], True),  # method is not a string: answerable, the msgid is known
        ([0, 9], True),  # too short but still a request
        ([7, 1, "x", []], False),  # unknown message type
        ("hello", False),  # not an array
        ([2, 5, []], False),  # notification with a non-string method
    ],
)
def test_malformed_messages(obj, answerable):
    with pytest.raises(ProtocolError) as info:
        decode_message(msgspec.msgpack.encode(obj))
    assert (info.value.msgid == 9) is answerable


@pytest.mark.parametrize("limit", [1, 5, 128])
def test_a_frame_is_refused_exactly_past_its_depth_limit_however_it_arrives(limit):
    ok = b"\x91" * limit + b"\xc0"
    deep = b"\x81\xa1k" * (limit + 1) + b"\xc0"  # maps count as levels too
    assert Splitter(max_depth=limit).feed(ok) == [ok]
    splitter = Splitter(max_depth=limit)
    with pytest.raises(FrameError, match=f"frame nested more than {limit} levels deep; the limit is {limit}"):
        for i in range(len(deep)):  # one byte at a time: the walk resumes at the same depth
            splitter.feed(deep[i : i + 1])


def test_depth_counts_nesting_not_siblings():
    wide = msgspec.msgpack.encode([[[1]] * 1000, {"a": [[2]]} | {str(i): [i] for i in range(500)}])
    assert Splitter(max_depth=4).feed(wide) == [wide]
