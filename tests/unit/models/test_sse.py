"""SSEDecoder (mmd/models/_http.py): Server-Sent Events bytes in, (event, data) pairs out."""

from __future__ import annotations

import pytest

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
