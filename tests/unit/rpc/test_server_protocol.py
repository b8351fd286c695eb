"""mmd.rpc.ServerProtocol, the daemon's side of a connection without I/O: bytes in, actions and bytes out."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from mmd.rpc import (
    PROTOCOL_VERSION,
    Call,
    Fatal,
    Ignored,
    Method,
    Refused,
    RPCError,
    ServerProtocol,
    decode_message,
    decode_notification_arg,
    notification,
    request,
)
from mmd.rpc.messages import Notification, Response
from mmd.rpc.methods import Empty, Handshake, Prompt
from mmd.rpc.results import Done, HandshakeResult


async def _handler(daemon: Any, conn: Any, params: Any) -> Done:
    return Done()


METHODS = {
    "handshake": Method(Handshake, _handler),
    "daemon.status": Method(Empty, _handler),
    "session.prompt": Method(Prompt, _handler),
}
HELLO = request(1, "handshake", {"protocol": PROTOCOL_VERSION, "client": "test"})
WELCOME = HandshakeResult(protocol=PROTOCOL_VERSION, daemon_version="x", pid=1, capabilities=[])


def actions(protocol: ServerProtocol) -> list[Any]:
    out = []
    while (action := protocol.next_action()) is not None:
        out.append(action)
    return out


def handshaken() -> ServerProtocol:
    protocol = ServerProtocol(METHODS)
    protocol.receive(HELLO)
    [call] = actions(protocol)
    protocol.respond(call, WELCOME)
    return protocol


def refusal(action: Any) -> RPCError:
    assert isinstance(action, Refused), action
    reply = decode_message(action.data)
    assert isinstance(reply, Response) and reply.msgid == action.msgid and reply.result is None
    return RPCError.from_wire(reply.error)


def test_the_handshake_runs_inline_and_the_requests_behind_it_find_it_done() -> None:
    protocol = ServerProtocol(METHODS)
    protocol.receive(HELLO + request(2, "daemon.status", {}))
    hello = protocol.next_action()
    assert isinstance(hello, Call) and hello.inline and hello.params == Handshake(protocol=1, client="test")
    assert not protocol.handshaken
    answer = decode_message(protocol.respond(hello, WELCOME))
    assert isinstance(answer, Response) and answer.error is None and answer.result["daemon_version"] == "x"
    assert protocol.handshaken
    status = protocol.next_action()
    assert isinstance(status, Call) and not status.inline and status.msgid == 2
    assert status.params == Empty() and status.handler is _handler
    assert protocol.next_action() is None


def test_a_request_before_the_handshake_is_refused() -> None:
    protocol = ServerProtocol(METHODS)
    protocol.receive(request(5, "daemon.status", {}))
    [refused] = actions(protocol)
    assert refused.msgid == 5 and refusal(refused).code == "handshake_required"


def test_a_failed_handshake_leaves_the_connection_not_handshaken() -> None:
    protocol = ServerProtocol(METHODS)
    protocol.receive(HELLO + request(2, "daemon.status", {}))
    hello = protocol.next_action()
    failed = decode_message(protocol.fail(hello, RPCError("protocol_mismatch", "restart the daemon")))
    assert isinstance(failed, Response) and RPCError.from_wire(failed.error).code == "protocol_mismatch"
    assert refusal(protocol.next_action()).code == "handshake_required"


def test_an_unknown_method_is_refused_with_a_close_match_even_before_the_handshake() -> None:
    for protocol in (ServerProtocol(METHODS), handshaken()):
        protocol.receive(request(3, "session.promt", {}))
        error = refusal(protocol.next_action())
        assert error.code == "unknown_method"
        assert 'did you mean "session.prompt"' in error.message
        assert "daemon.status, handshake, session.prompt" in error.message


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"prompt": 3, "cwd": "/"}, "prompt"),
        ({"cwd": "/"}, "prompt"),
        ({"prompt": "x", "cwd": "/", "colour": "red"}, "colour"),
    ],
)
def test_params_that_do_not_fit_the_struct_are_refused(params: dict[str, Any], needle: str) -> None:
    protocol = handshaken()
    protocol.receive(request(4, "session.prompt", params))
    error = refusal(protocol.next_action())
    assert error.code == "invalid_params" and needle in error.message


def test_two_arguments_are_refused() -> None:
    protocol = handshaken()
    protocol.receive(msgspec.msgpack.encode([0, 6, "daemon.status", [{}, {}]]))
    assert "got 2 arguments" in refusal(protocol.next_action()).message


def test_a_malformed_request_with_a_msgid_is_answered_and_the_connection_goes_on() -> None:
    protocol = handshaken()
    protocol.receive(msgspec.msgpack.encode([0, 77, 12345, []]) + request(8, "daemon.status"))
    refused, call = actions(protocol)
    assert refused.msgid == 77 and refusal(refused).code == "invalid_request"
    assert isinstance(call, Call) and call.msgid == 8


def fatal_message(action: Any) -> str:
    assert isinstance(action, Fatal), action
    note = decode_message(action.data)
    assert isinstance(note, Notification) and note.method == "error"
    sent = decode_notification_arg(note.params)
    assert sent == {"code": "protocol_error", "message": action.message}
    return action.message


def test_bytes_that_are_not_msgpack_close_the_connection_after_the_frames_before_them() -> None:
    protocol = handshaken()
    protocol.receive(request(2, "daemon.status"))
    protocol.receive(b"\xc1garbage")
    call, fatal = actions(protocol)
    assert isinstance(call, Call)
    assert "not msgpack" in fatal_message(fatal) and fatal.message.endswith("closing this connection")
    assert protocol.closed
    protocol.receive(request(3, "daemon.status"))
    assert protocol.next_action() is None


def test_a_request_and_a_bad_byte_in_one_read_answer_the_request_then_close() -> None:
    protocol = ServerProtocol(METHODS)
    protocol.receive(HELLO + request(2, "daemon.status") + b"\xc1")
    hello = protocol.next_action()
    assert isinstance(hello, Call) and hello.msgid == 1
    protocol.respond(hello, WELCOME)
    status, fatal = actions(protocol)
    assert isinstance(status, Call) and status.msgid == 2
    assert "byte 0xc1 at offset 0 is not msgpack" in fatal_message(fatal) and protocol.closed


def test_a_message_without_msgid_closes_the_connection_and_drops_what_follows() -> None:
    protocol = handshaken()
    protocol.receive(msgspec.msgpack.encode({"hello": "world"}) + request(2, "daemon.status"))
    [fatal] = actions(protocol)
    assert "expected [0, msgid, method, params]" in fatal_message(fatal)


def test_an_oversized_frame_is_refused_from_its_header() -> None:
    protocol = ServerProtocol(METHODS, max_frame=1024)
    protocol.receive(b"\xdb\x7f\xff\xff\xff")  # announces a 2 GiB string
    [fatal] = actions(protocol)
    assert "limit of 1024 bytes" in fatal_message(fatal)


def test_a_frame_nested_too_deep_is_refused() -> None:
    protocol = ServerProtocol(METHODS, max_depth=4)
    protocol.receive(b"\x91" * 10 + b"\xc0")
    assert "nested more than 4 levels" in fatal_message(protocol.next_action())


def test_a_request_split_across_reads_waits_for_its_end() -> None:
    protocol = ServerProtocol(METHODS)
    protocol.receive(HELLO[:5])
    assert protocol.next_action() is None
    protocol.receive(HELLO[5:])
    assert isinstance(protocol.next_action(), Call)


def test_notifications_and_responses_from_the_client_are_ignored() -> None:
    protocol = handshaken()
    protocol.receive(notification("hello", {}) + msgspec.msgpack.encode([1, 9, None, "x"]))
    first, second = actions(protocol)
    assert first == Ignored("ignoring notification hello")
    assert second == Ignored("ignoring response to 9: the daemon sends no requests")


def test_answers_encode_result_structs_as_maps_and_errors_as_neovim_reads_them() -> None:
    protocol = handshaken()
    protocol.receive(request(2, "daemon.status"))
    call = protocol.next_action()
    ok = decode_message(protocol.respond(call, Done()))
    assert isinstance(ok, Response) and (ok.msgid, ok.error, ok.result) == (2, None, {})
    failed = decode_message(protocol.fail(call, RPCError("busy", "wait")))
    assert isinstance(failed, Response) and failed.error == [1, "busy: wait"]
