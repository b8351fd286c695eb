"""SSEDecoder (mmd/models/_http.py): Server-Sent Events bytes in, (event, data) pairs out."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mmd.models._http import SSEDecoder
from mmd.models.base import ModelError

STREAM = (
    b": a comment\r\n"
    b'data: {"a": 1}\r\n\r\n'
    b"event: ping\ndata:no space\ndata:  two spaces\n\n"
    b"id: 7\nretry: 100\n\n"  # no data: no event
    b"data: caf\xc3\xa9 \xe2\x80\xa8 line\n\n"  # U+2028 inside the data is not a line break
    b"data: [DONE]\n\n"
)
EXPECTED = [
    ("message", '{"a": 1}'),
    ("ping", "no space\n two spaces"),
    ("message", "caf\u00e9 \u2028 line"),
    ("message", "[DONE]"),
]


@pytest.mark.parametrize("size", [len(STREAM), 1, 2, 3, 7])
def test_events_come_out_whole_however_the_bytes_are_cut(size: int) -> None:
    decoder = SSEDecoder("test")
    events = []
    for start in range(0, len(STREAM), size):
        events += decoder.feed(STREAM[start : start + size])
    assert events + decoder.close() == EXPECTED


def test_the_last_event_without_its_blank_line_comes_at_close() -> None:
    decoder = SSEDecoder("test")
    assert decoder.feed(b"data: one\n\ndata: two") == [("message", "one")]
    assert decoder.close() == [("message", "two")]


def test_a_line_that_is_no_sse_field_is_refused_with_the_line() -> None:
    decoder = SSEDecoder("test")
    with pytest.raises(ModelError, match="not Server-Sent Events: '<html>'"):
        decoder.feed(b"<html>\n")


def _reference(stream: bytes) -> list[tuple[str, str]]:
    """The events of *stream* read one line at a time, as the SSE rules say (LF or CRLF line ends)."""
    events, name, data = [], "", []
    for raw in stream.split(b"\n"):
        line = raw.removesuffix(b"\r").decode("utf-8", errors="replace")
        if not line:
            if data:
                events.append((name or "message", "\n".join(data)))
            name, data = "", []
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "data":
                data.append(value)
            elif field == "event":
                name = value
    if data:
        events.append((name or "message", "\n".join(data)))
    return events


_BLOCKS = [
    b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n',  # a model's stream: one data line an event
    b"data:no space\n\n",
    b"data: caf\xc3\xa9 \xe2\x80\xa8\n\n",
    b"data: [DONE]\n\n",
    b"event: ping\ndata: x\n\n",
    b"data: two\ndata: lines\n\n",
    b": keep-alive\n\n",
    b"id: 3\nretry: 10\n\n",
    b"\n",
    b"data: crlf\r\n\r\n",
]


@given(
    st.lists(st.sampled_from(_BLOCKS), max_size=12),
    st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=20),
)
def test_whole_events_and_line_by_line_give_what_the_rules_give_however_the_bytes_are_cut(
    blocks: list[bytes], cuts: list[int]
) -> None:
    # The decoder splits a model's plain events whole and reads anything else line by line; both, mixed and
    # cut anywhere, give what reading the stream line by line by the rules gives, each event as soon as
    # its blank line came (every block here ends with one: nothing is left for close).
    stream = b"".join(blocks)
    decoder, events, start, i = SSEDecoder("test"), [], 0, 0
    while start < len(stream):
        size = cuts[i % len(cuts)]
        events += decoder.feed(stream[start : start + size])
        start, i = start + size, i + 1
    assert events == _reference(stream)
    assert decoder.close() == []


@pytest.mark.parametrize(
    ("start", "piece"),
    [
        (b'data: {"choices": [{"delta": {"content": "', b"q" * 256),  # a data line that never ends
        (b"", b'data: {"choices": [{"delta": {"content": "a"}}]}\r'),  # CR alone ends no line here
    ],
)
def test_a_line_under_way_is_searched_once_not_again_at_every_read(start: bytes, piece: bytes) -> None:
    # Only the new bytes of a line under way are searched for its end. The whole line used to be searched
    # again at every read: a server writing one endless line held the event loop for 72 s of CPU before
    # the answer's 64 MB bound refused it.
    decoder = SSEDecoder("test")
    fed = [start, *[piece] * 500]
    assert [event for chunk in fed for event in decoder.feed(chunk)] == []
    assert decoder.searched <= 2 * len(b"".join(fed))
    assert len(decoder.feed(b"\n\n")) == 1  # the line ends at last: one event


def test_a_stream_cut_in_small_pieces_is_searched_a_few_times_over_at_most() -> None:
    stream = b"".join(_BLOCKS) * 50
    decoder, events = SSEDecoder("test"), []
    for start in range(0, len(stream), 7):
        events += decoder.feed(stream[start : start + 7])
    assert events == _reference(stream)
    assert decoder.searched <= 3 * len(stream)
