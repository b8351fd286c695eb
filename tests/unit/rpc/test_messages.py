"""The daemon's encoders and text that is not UTF-8 (mmd/rpc/messages.py: escaped, packed, response,
notification): a name Python's file functions give with surrogate escapes is sent and kept escaped, exact and
printable, where its encoding failed and took the answer or the event with it."""

from __future__ import annotations

import os

import msgspec
import pytest

from mmd.rpc.messages import Response, decode_message, escaped, notification, packed, response

NAME = os.fsdecode(b"caf\xe9")  # 'caf\udce9': how os.listdir gives a Latin-1 name


def test_escaped_writes_each_byte_that_is_not_utf8_as_its_escape_in_every_nested_str():
    value = {NAME: [NAME, ("x", 3, None)], "ok": "é", "raw": b"\xe9"}
    assert escaped(value) == {"caf\\xe9": ["caf\\xe9", ["x", 3, None]], "ok": "é", "raw": b"\xe9"}
    assert escaped("\ud800 lone") == "\\ud800 lone"  # a surrogate that is no escaped byte: its \u form


def test_escaped_reads_structs_as_they_encode():
    class Row(msgspec.Struct):
        name: str
        size: int = 0

    assert escaped([Row(NAME, 2)]) == [{"name": "caf\\xe9", "size": 2}]


@pytest.mark.parametrize("encode", [msgspec.msgpack.encode, msgspec.json.encode], ids=["msgpack", "json"])
def test_packed_is_the_plain_encoding_while_text_is_utf8_and_escapes_where_it_is_not(encode):
    assert packed({"a": "é"}, encode) == encode({"a": "é"})
    with pytest.raises(UnicodeEncodeError):
        encode({"a": NAME})
    assert packed({"a": NAME}, encode) == encode({"a": "caf\\xe9"})


def test_a_response_and_a_notification_with_such_a_name_are_sent_escaped():
    frame = decode_message(response(7, None, {"rows": [{"name": NAME}]}))
    assert isinstance(frame, Response) and frame.result == {"rows": [{"name": "caf\\xe9"}]}
    sent = msgspec.msgpack.decode(notification("session.event", {"path": NAME}))
    assert sent == [2, "session.event", [{"path": "caf\\xe9"}]]
