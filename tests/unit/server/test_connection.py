"""The daemon's connection pump (mmd.server.connection) over trio memory streams: no socket, no daemon.

A stand-in host gives the connection a method table of test handlers; the test is the client,
writing frames into one end of a stream pair and reading the answers from it.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from mmd.rpc import (
    DEFAULT_MAX_FRAME,
    MAX_REQUEST_VALUES,
    PROTOCOL_VERSION,
    Method,
    Notification,
    Response,
    RPCError,
    Splitter,
    decode_message,
    decode_notification_arg,
    notification,
    request,
    response,
)
from mmd.rpc.messages import PeerResponse
from mmd.rpc.methods import Empty, Handshake, Prompt
from mmd.rpc.results import Done, HandshakeResult
from mmd.server import connection
from mmd.server.connection import Connection

HELLO = request(1, "handshake", {"protocol": PROTOCOL_VERSION, "client": "test"})


class Host:
    """What a connection needs of the daemon: a method table, the frame limit, the log, detach."""

    def __init__(self, methods: dict[str, Method]) -> None:
        self.methods = methods
        self.max_frame = DEFAULT_MAX_FRAME
        self.log_path = Path("/var/empty/mmd.log")
        self.outboxes = connection.Outboxes()
        self.inboxes = connection.Inboxes()
        self.detached: list[Connection] = []

    def detach(self, conn: Connection) -> None:
        self.detached.append(conn)

    def unwritable(self, exc: BaseException) -> str | None:
        return f"the disk is full: {exc}" if isinstance(exc, OSError) and exc.errno == errno.ENOSPC else None


class Peer:
    """The client's end: frames out, decoded messages in."""

    def __init__(self, stream: trio.abc.HalfCloseableStream | trio.StapledStream[Any, Any]) -> None:
        self.stream = stream
        self._splitter = Splitter()
        self._frames: collections.deque[bytes] = collections.deque()

    async def send(self, *frames: bytes) -> None:
        await self.stream.send_all(b"".join(frames))

    async def receive(self) -> Response | Notification | None:
        """The next message, or None once the daemon closed the connection."""
        while not self._frames:
            data = await self.stream.receive_some(65_536)
            if not data:
                return None
            self._frames.extend(self._splitter.feed(data))
        msg = decode_message(self._frames.popleft())
        assert isinstance(msg, Response | Notification), msg
        return msg

    async def response(self) -> Response:
        msg = await self.receive()
        assert isinstance(msg, Response), msg
        return msg

    async def event_seqs(self, n: int | None = None) -> list[int]:
        """The ``seq`` of each notification received, until *n* came (None: until the daemon closed); other
        messages received meanwhile are passed over."""
        seqs: list[int] = []
        while n is None or len(seqs) < n:
            msg = await self.receive()
            if msg is None:
                break
            if isinstance(msg, Notification):
                seqs.append(decode_notification_arg(msg.params)["seq"])
        return seqs

    async def responses(self, n: int) -> dict[int, Response]:
        """The next *n* responses by msgid (requests after the handshake are answered as they end)."""
        replies = [await self.response() for _ in range(n)]
        return {reply.msgid: reply for reply in replies}


async def handshake(daemon: Any, conn: Connection, params: Handshake) -> HandshakeResult:
    conn.client = params.client
    return HandshakeResult(protocol=PROTOCOL_VERSION, daemon_version="test", pid=1, capabilities=[])


async def status(daemon: Any, conn: Connection, params: Empty) -> Done:
    return Done()


def table(**handlers: Method) -> dict[str, Method]:
    return {"handshake": Method(Handshake, handshake), "daemon.status": Method(Empty, status), **handlers}


def socket_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    """Two ends of a real Unix socket, as the daemon's connections are (the writer writes the socket itself)."""
    a, b = trio.socket.socketpair()
    return trio.SocketStream(a), trio.SocketStream(b)


@asynccontextmanager
async def serving(
    methods: dict[str, Method], pair: Any = socket_pair
) -> AsyncIterator[tuple[Peer, Connection, Host]]:
    """A connection served in the background; the peer hangs up when the block ends."""
    client, server = pair()
    host = Host(methods)
    conn = Connection(host, server, peer_pid=4242)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.serve)
        yield Peer(client), conn, host
        await client.aclose()


def error_of(reply: Response) -> tuple[str, str]:
    err = RPCError.from_wire(reply.error)
    return err.code, err.message


async def test_requests_written_behind_the_handshake_find_it_done() -> None:
    async with serving(table()) as (peer, conn, _):
        await peer.send(HELLO, request(2, "daemon.status"), request(3, "daemon.status"))
        welcome = await peer.response()
        assert welcome.msgid == 1 and welcome.result["protocol"] == PROTOCOL_VERSION
        # The handshake runs inline; the requests behind it run concurrently, answered as they end.
        replies = await peer.responses(2)
        assert {msgid: r.error for msgid, r in replies.items()} == {2: None, 3: None}
        assert conn.handshaken and conn.client == "test"


async def test_a_handshake_fed_one_byte_at_a_time_is_answered_once_whole() -> None:
    async with serving(table()) as (peer, conn, _):
        for i in range(len(HELLO)):
            await peer.send(HELLO[i : i + 1])
            await trio.testing.wait_all_tasks_blocked()
            assert conn.handshaken is (i == len(HELLO) - 1)
        assert (await peer.response()).msgid == 1


async def test_a_request_before_the_handshake_is_refused_and_the_connection_goes_on() -> None:
    async with serving(table()) as (peer, _, _):
        await peer.send(request(1, "daemon.status"))
        reply = await peer.response()
        assert reply.msgid == 1 and reply.result is None
        assert error_of(reply)[0] == "handshake_required"
        await peer.send(request(2, "handshake", {"protocol": PROTOCOL_VERSION}), request(3, "daemon.status"))
        assert [(r.msgid, r.error) for r in [await peer.response(), await peer.response()]] == [
            (2, None),
            (3, None),
        ]


async def test_an_unknown_method_is_refused_naming_a_close_one() -> None:
    async with serving(table()) as (peer, _, _):
        await peer.send(HELLO, request(2, "daemon.stats"))
        await peer.response()
        code, message = error_of(await peer.response())
        assert code == "unknown_method" and '"daemon.status"' in message


async def test_requests_run_concurrently_a_slow_one_holds_back_no_other() -> None:
    released = trio.Event()

    async def slow(daemon: Any, conn: Connection, params: Prompt) -> Done:
        await released.wait()
        return Done()

    async def quick(daemon: Any, conn: Connection, params: Empty) -> Done:
        released.set()
        return Done()

    methods = table(**{"session.prompt": Method(Prompt, slow), "daemon.status": Method(Empty, quick)})
    async with serving(methods) as (peer, _, _):
        await peer.send(
            HELLO, request(2, "session.prompt", {"prompt": "hi", "cwd": "/"}), request(3, "daemon.status")
        )
        assert [(await peer.response()).msgid for _ in range(3)] == [1, 3, 2]


async def test_a_handler_that_raises_is_answered_with_internal_error_and_the_connection_goes_on() -> None:
    async def broken(daemon: Any, conn: Connection, params: Empty) -> Done:
        raise ValueError("boom")

    async def refusing(daemon: Any, conn: Connection, params: Empty) -> Done:
        raise RPCError("no_session", "no session matches 3fa2")

    methods = table(**{"daemon.status": Method(Empty, broken), "daemon.stop": Method(Empty, refusing)})
    async with serving(methods) as (peer, _, _):
        await peer.send(HELLO, request(2, "daemon.status"), request(3, "daemon.stop"))
        await peer.response()
        replies = await peer.responses(2)
        code, message = error_of(replies[2])
        assert code == "internal_error"
        assert "daemon.status failed inside the daemon: ValueError('boom')" in message
        assert "/var/empty/mmd.log" in message
        assert error_of(replies[3]) == ("no_session", "no session matches 3fa2")


async def test_a_store_that_cannot_be_written_is_answered_with_what_to_do_not_as_a_bug() -> None:
    async def full(daemon: Any, conn: Connection, params: Empty) -> Done:
        raise OSError(errno.ENOSPC, "No space left on device")

    methods = table(**{"daemon.status": Method(Empty, full)})
    async with serving(methods) as (peer, _, _):
        await peer.send(HELLO, request(2, "daemon.status"), request(3, "daemon.status"))
        await peer.response()
        replies = await peer.responses(2)
        assert error_of(replies[2]) == (
            "store_unwritable",
            "the disk is full: [Errno 28] No space left on device",
        )
        assert error_of(replies[3])[0] == "store_unwritable"  # and the connection goes on


async def test_notifications_and_responses_from_the_client_are_ignored() -> None:
    async with serving(table()) as (peer, _, _):
        await peer.send(
            HELLO, notification("redraw", {"x": 1}), response(7, None, "stray"), request(2, "daemon.status")
        )
        assert [(await peer.response()).msgid for _ in range(2)] == [1, 2]


async def test_bytes_that_cannot_be_split_get_an_error_notification_then_the_connection_closes() -> None:
    async with serving(table()) as (peer, conn, host):
        await peer.send(HELLO)
        assert (await peer.response()).msgid == 1
        # 0xc1 is the one byte msgpack never uses: nothing after it can be framed.
        await peer.send(b"\xc1garbage")
        note = await peer.receive()
        assert isinstance(note, Notification) and note.method == "error"
        assert decode_notification_arg(note.params)["code"] == "protocol_error"
        assert await peer.receive() is None  # then the daemon hangs up
        with trio.fail_after(5):
            while not host.detached:
                await trio.sleep(0.01)
        assert host.detached == [conn] and conn.closed


async def test_a_handshake_and_a_bad_byte_in_one_write_get_the_welcome_then_the_error() -> None:
    async with serving(table()) as (peer, _, _):
        await peer.send(HELLO, b"\xc1")
        welcome = await peer.response()
        assert welcome.msgid == 1 and welcome.error is None
        note = await peer.receive()
        assert isinstance(note, Notification) and note.method == "error"
        assert "0xc1" in decode_notification_arg(note.params)["message"]
        assert await peer.receive() is None


async def test_a_request_received_before_a_hang_up_runs_to_its_end() -> None:
    started, released = trio.Event(), trio.Event()
    finished: list[str] = []

    async def turn(daemon: Any, conn: Connection, params: Prompt) -> Done:
        started.set()
        await released.wait()
        finished.append(params.prompt)
        return Done()

    client, server = trio.testing.memory_stream_pair()
    host = Host(table(**{"session.prompt": Method(Prompt, turn)}))
    conn = Connection(host, server, peer_pid=4242)
    peer = Peer(client)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.serve)
        await peer.send(HELLO, request(2, "session.prompt", {"prompt": "go on", "cwd": "/"}))
        await started.wait()
        await client.aclose()  # the client hangs up mid-request
        await trio.testing.wait_all_tasks_blocked()
        assert host.detached == [] and finished == []  # the request still runs
        released.set()
    assert finished == ["go on"] and host.detached == [conn]


async def test_a_client_too_slow_to_read_is_dropped_and_never_blocks_a_handler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connection, "OUTBOX_FRAMES", 4)
    pushed: list[int] = []

    async def chatty(daemon: Any, conn: Connection, params: Empty) -> Done:
        for i in range(50):  # events of a turn, as fast as they come
            conn.notify("event", {"seq": i})
            pushed.append(i)
        return Done()

    # lockstep: every send_all waits until the client reads, as a full socket buffer would.
    methods = table(**{"daemon.status": Method(Empty, chatty)})
    async with serving(methods, trio.testing.lockstep_stream_pair) as (peer, conn, _):
        await peer.send(HELLO)
        assert (await peer.response()).msgid == 1
        await peer.send(request(2, "daemon.status"))
        await trio.testing.wait_all_tasks_blocked()
        assert len(pushed) == 50  # the handler ran to its end while the client read nothing
        assert conn.closed
        seqs = await peer.event_seqs()
        # What was queued before the outbox filled still arrives, in order; the rest never does.
        assert seqs == list(range(len(seqs))) and 0 < len(seqs) <= 1 + 4


def recorded_writes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The bytes each os.write took from now on (the writer's writes to its socket)."""
    writes: list[bytes] = []
    real_write = os.write

    def write(fd: int, data: Any) -> int:
        n = real_write(fd, data)
        writes.append(bytes(data[:n]))
        return n

    monkeypatch.setattr(connection.os, "write", write)
    return writes


async def test_frames_queued_together_go_out_in_one_write_whole_and_in_order_and_a_hang_up_ends_the_writer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def burst(daemon: Any, conn: Connection, params: Empty) -> Done:
        for i in range(30):  # a tool call's events, queued before the writer runs
            conn.notify("event", {"seq": i, "pad": "x" * (i * 7)})
        return Done()

    async with serving(table(**{"daemon.status": Method(Empty, burst)})) as (peer, conn, host):
        await peer.send(HELLO)
        assert (await peer.response()).msgid == 1
        writes = recorded_writes(monkeypatch)  # the writer writes its socket itself
        await peer.send(request(2, "daemon.status"))
        seqs = await peer.event_seqs(30)
        assert (await peer.response()).msgid == 2
        assert seqs == list(range(30))  # every frame whole, in the order queued
        assert 1 <= len(writes) <= 2  # the 30 events and the reply: not one write each
        await peer.stream.aclose()  # the client hangs up; the next write fails and ends the writer
        conn.notify("event", {"seq": 30})
        with trio.fail_after(5):
            while conn not in host.detached:
                await trio.sleep(0.01)


async def test_a_batch_stops_at_send_batch_bytes_and_the_rest_follows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connection, "SEND_BATCH", 100)
    send, recv = trio.open_memory_channel[bytes | None](10)
    for frame in (b"a" * 60, b"b" * 60, b"c" * 10, None):
        send.send_nowait(frame)
    first, ended = connection._queued(recv.receive_nowait(), recv)
    assert first == [b"a" * 60, b"b" * 60] and not ended  # over 100 bytes: sent, the rest waits
    rest, ended = connection._queued(recv.receive_nowait(), recv)
    assert rest == [b"c" * 10] and ended  # then the end of the outbox


async def test_over_a_real_socket_a_full_buffer_waits_and_a_client_that_never_reads_is_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The writer writes the socket itself and asks trio to wait only when the kernel's buffer is full:
    # then the outbox fills behind it, and the connection is dropped without blocking the handler.
    monkeypatch.setattr(connection, "OUTBOX_FRAMES", 4)

    async def chatty(daemon: Any, conn: Connection, params: Empty) -> Done:
        for i in range(40):
            conn.notify("event", {"seq": i, "pad": "x" * 200_000})  # 8 MB in all: more than any buffer
            await trio.sleep(0)  # let the writer run between them
        return Done()

    async with serving(table(**{"daemon.status": Method(Empty, chatty)})) as (peer, conn, _):
        await peer.send(HELLO)
        assert (await peer.response()).msgid == 1
        writes = recorded_writes(monkeypatch)
        await peer.send(request(2, "daemon.status"))
        with trio.fail_after(10):
            while not conn.closed:
                await trio.sleep(0.01)
        assert 0 < sum(map(len, writes)) < 40 * 200_000  # some went out before the buffer filled, not all
        seqs = await peer.event_seqs()
        assert seqs == list(range(len(seqs))) and 0 < len(seqs) < 40  # in order, then cut


async def test_an_idle_connection_writes_a_frame_in_push_itself_and_what_the_socket_leaves_goes_out_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A tool call's events come milliseconds apart: push writes each to the socket itself, with no
    # wake of the writer task. A frame the socket takes only in part is finished by the writer, and
    # the frames pushed meanwhile queue behind it (no burst rule here: the order rests on that alone).
    monkeypatch.setattr(connection, "BURST", 0.0)
    seen: list[int] = []

    async def events(daemon: Any, conn: Connection, params: Empty) -> Done:
        writes = recorded_writes(monkeypatch)
        conn.notify("event", {"seq": 0})
        seen.append(len(writes))  # written before this handler yielded once
        await trio.sleep(0.01)
        conn.notify("event", {"seq": 1, "pad": "x" * 4_000_000})  # more than the socket's buffer
        for i in range(2, 6):
            conn.notify("event", {"seq": i})
        return Done()

    async with serving(table(**{"daemon.status": Method(Empty, events)})) as (peer, _, _):
        await peer.send(HELLO)
        assert (await peer.response()).msgid == 1
        await peer.send(request(2, "daemon.status"))
        seqs = await peer.event_seqs(6)
        assert seen == [1]
        assert seqs == list(range(6))
        assert (await peer.response()).msgid == 2


async def test_a_push_never_writes_past_a_frame_the_writer_still_holds() -> None:
    # The socket took part of a big frame; the writer holds the rest. The peer then reads, so the socket
    # has room again before the writer runs: a frame pushed now must still queue behind that rest.
    client, server = socket_pair()
    conn = Connection(Host({}), server, peer_pid=4242)
    big, small = b"B" * 3_000_000, b"s" * 10
    conn.push(big)
    received = bytearray()
    with trio.move_on_after(0.2):
        while True:
            received += await client.receive_some(1 << 20)
    assert 0 < len(received) < len(big)  # part of it, and the socket has room now
    conn.push(small)
    with trio.move_on_after(0.05):
        received += await client.receive_some(1 << 20)
    assert set(received) == {ord("B")}  # nothing of the second frame before the first ends
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn._writer)
        while len(received) < len(big) + len(small):
            received += await client.receive_some(1 << 20)
        conn.close_after_flush()
    await client.aclose()
    assert bytes(received) == big + small


async def test_the_events_of_one_commit_go_out_in_one_write_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # A step's message and its first call's record are one commit (mmd/turn/loop.py): its two events are
    # pushed as one frame of bytes, one write with no wake of the writer task (a second push within BURST
    # would have queued for it). No burst rule here: the handshake's answer was written just before.
    monkeypatch.setattr(connection, "BURST", 0.0)
    seen: list[list[bytes]] = []

    async def events(daemon: Any, conn: Connection, params: Empty) -> Done:
        writes = recorded_writes(monkeypatch)
        conn.notify_each("event", [{"seq": 0}, {"seq": 1}, {"seq": 2}])
        seen.append(list(writes))  # before this handler yielded once
        return Done()

    async with serving(table(**{"daemon.status": Method(Empty, events)})) as (peer, _, _):
        await peer.send(HELLO)
        assert (await peer.response()).msgid == 1
        await peer.send(request(2, "daemon.status"))
        assert await peer.event_seqs(3) == [0, 1, 2]
        [written] = seen
        assert len(written) == 1 and written[0].count(b"seq") == 3


async def test_a_client_that_never_reads_is_dropped_once_the_bytes_queued_for_it_pass_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Big answers pipelined by a client that reads nothing (session.show with events): far fewer frames
    # than OUTBOX_FRAMES, so only the bound on bytes stops the daemon holding every one of them.
    monkeypatch.setattr(connection, "OUTBOX_BYTES", 4_000_000)
    pushed: list[int] = []

    async def answers(daemon: Any, conn: Connection, params: Empty) -> Done:
        for i in range(40):  # 40 MB in all, ten times the bound
            conn.notify("event", {"seq": i, "pad": "x" * 1_000_000})
            pushed.append(i)
            await trio.sleep(0)  # let the writer run between them
        return Done()

    async with serving(table(**{"daemon.status": Method(Empty, answers)})) as (peer, conn, host):
        await peer.send(HELLO)
        assert (await peer.response()).msgid == 1
        await peer.send(request(2, "daemon.status"))
        await trio.testing.wait_all_tasks_blocked()
        assert len(pushed) == 40  # the handler ran to its end while the client read nothing
        assert conn.closed and host.detached == [conn]  # dropped: not held open with what was queued
        seqs = await peer.event_seqs()
        assert seqs == list(range(len(seqs))) and len(seqs) < 40  # what the socket took, in order, then cut


async def test_a_frame_over_the_bound_goes_alone_unsent_part_uncopied_and_a_frame_pushed_behind_it_drops_the_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connection, "OUTBOX_BYTES", 1_000_000)
    client, server = socket_pair()
    conn = Connection(Host({}), server, peer_pid=4242)
    big = b"B" * 3_000_000  # one answer larger than the bound: built already, so it is sent
    conn.push(big)
    assert not conn.closed
    rest = conn._out_recv.statistics().current_buffer_used and conn._out_recv.receive_nowait()
    assert isinstance(rest, memoryview) and rest.obj is big  # what the socket left is a view, not a copy
    conn._out_send.send_nowait(rest)  # back in the outbox, still counted
    conn.push(b"s" * 10)  # the client has not read the first: past the bound, it is dropped
    assert conn.closed
    await client.aclose()
    await server.aclose()


async def test_a_client_that_pipelines_many_requests_has_at_most_max_in_flight_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each request is a task: a client that wrote 200 (a million, in a few MB) had as many held at once.
    # Past MAX_IN_FLIGHT its socket is not read until one ends; every request is still answered.
    monkeypatch.setattr(connection, "MAX_IN_FLIGHT", 5)
    running, most = 0, 0
    release = trio.Event()

    async def slow(daemon: Any, conn: Connection, params: Empty) -> Done:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await release.wait()
        running -= 1
        return Done()

    async with serving(table(**{"tools.list": Method(Empty, slow)})) as (peer, _, _):
        await peer.send(HELLO)
        assert (await peer.response()).msgid == 1
        await peer.send(*[request(i, "tools.list") for i in range(2, 202)])
        await trio.testing.wait_all_tasks_blocked()
        assert (running, most) == (5, 5)
        release.set()
        assert sorted(await peer.responses(200)) == list(range(2, 202))
    assert most == 5


async def test_clients_that_never_read_are_bounded_together_the_largest_dropped_first() -> None:
    # A bound per client is no bound on many: eight clients that read nothing, each under its own bound,
    # held eight times it. Past Outboxes.limit the client holding the most is dropped; once every
    # connection ended, nothing is counted as queued.
    host = Host({})
    host.outboxes = connection.Outboxes(limit=4_000_000)
    pairs = [socket_pair() for _ in range(4)]
    conns = [Connection(host, server, peer_pid=4242) for _, server in pairs]

    async def writer(conn: Connection) -> None:
        with contextlib.suppress(trio.BrokenResourceError):  # the peer hangs up with bytes unread
            await conn._writer()

    async with trio.open_nursery() as nursery:
        for conn in conns:
            nursery.start_soon(writer, conn)
        await trio.testing.wait_all_tasks_blocked()
        for size, conn in zip((300_000, 700_000, 500_000, 200_000), conns, strict=True):
            for _ in range(2):  # what the socket buffer does not take is queued
                conn.push(b"x" * size)
        await trio.testing.wait_all_tasks_blocked()
        held = {i: conn._queued_bytes for i, conn in enumerate(conns)}
        assert host.outboxes.queued == sum(held.values()) <= 4_000_000
        assert not any(conn.closed for conn in conns) and max(held, key=held.__getitem__) == 1
        conns[3].push(b"y" * (4_000_001 - host.outboxes.queued))  # past the bound together: the largest goes

        await trio.testing.wait_all_tasks_blocked()
        assert [conn.closed for conn in conns] == [False, True, False, False]
        assert host.outboxes.queued == sum(conn._queued_bytes for conn in conns) <= 4_000_000
        for conn in conns:
            conn.close_after_flush()
        for client, _ in pairs:
            await client.aclose()
    for _, server in pairs:  # serve() closes them: here the writers ran alone
        await server.aclose()
    assert host.outboxes.queued == 0


async def test_an_answer_larger_than_a_client_reads_is_the_error_too_large() -> None:
    # A long session's events in one session.show passed the 16 MiB a client's splitter reads: the client
    # refused the frame ("frame larger than the limit") and the command failed with no way to ask for less.
    async def huge(daemon: Any, conn: Connection, params: Empty) -> Any:
        return {"events": ["x" * 1_000_000] * 17}

    methods = table(**{"session.show": Method(Empty, huge)})
    async with serving(methods) as (peer, _, _):
        await peer.send(HELLO, request(2, "session.show"), request(3, "daemon.status"))
        await peer.response()
        replies = await peer.responses(2)
        code, message = error_of(replies[2])
        assert code == "too_large"
        assert "the answer to session.show is 17,0" in message and "past the 16,777,216" in message
        assert replies[3].error is None  # the connection goes on


def partial_prompt(size: int) -> bytes:
    """All but the last byte of a request whose params hold *size* bytes of text: a frame that stays unfinished."""
    return request(2, "session.prompt", {"prompt": "x" * size})[:-1]


async def test_unfinished_frames_are_bounded_together_the_largest_dropped_first(caplog) -> None:
    # Each client may hold a frame of 16 MiB - 1 under way, then send nothing: 100 such connections held
    # 1.7 GB for as long as they stayed open. Past Inboxes.limit the client holding the most is dropped (and
    # what it held forgotten); the others are served on; a connection that ended counts nothing.
    host = Host(table())
    host.inboxes = connection.Inboxes(limit=3_000_000)
    pairs = [socket_pair() for _ in range(4)]
    conns = [Connection(host, server, peer_pid=4242) for _, server in pairs]
    peers = [Peer(client) for client, _ in pairs]
    async with trio.open_nursery() as nursery:
        for conn in conns:
            nursery.start_soon(conn.serve)
        for peer, size in zip(peers[:3], (500_000, 1_200_000, 900_000), strict=True):
            await peer.send(partial_prompt(size))
            await trio.testing.wait_all_tasks_blocked()
        assert host.inboxes.held == sum(conn.protocol.buffered for conn in conns) > 2_600_000
        assert not any(conn.closed for conn in conns)
        await peers[3].send(partial_prompt(600_000))  # past the bound together: the largest goes
        await trio.testing.wait_all_tasks_blocked()
        assert [conn.closed for conn in conns] == [False, True, False, False]
        assert conns[1].protocol.buffered == 0
        assert await peers[1].receive() is None  # the daemon hung up on it
        assert host.inboxes.held == sum(conn.protocol.buffered for conn in conns) <= 3_000_000
        await peers[0].send(b"x")  # the others are served on: its frame completes, and is answered
        assert (await peers[0].response()).msgid == 2
        for peer in peers:
            await peer.stream.aclose()
    assert host.inboxes.held == 0
    assert "unfinished frame (1,200,0" in caplog.text and "dropping the connection" in caplog.text


async def test_a_response_a_client_sends_is_not_built_and_a_frame_of_too_many_values_is_refused() -> None:
    # The daemon sends no requests, so a response is ignored: its result was decoded untyped first (a 16 MiB
    # frame of {} was 1.2 GB). A frame whose arrays and maps announce more values than a request ever holds
    # is refused at its header, before any of it is buffered.
    wide = b"\x94\x01\x00\xc0\xdd" + (50_000).to_bytes(4, "big") + b"\x80" * 50_000  # [1, 0, nil, [{}…]]
    msg = decode_message(wide, peer=True)
    assert isinstance(msg, PeerResponse) and bytes(msg.result)[:1] == b"\xdd"
    too_many = b"\x94\x01\x00\xc0\xdd" + (MAX_REQUEST_VALUES).to_bytes(4, "big") + b"\x80" * 10
    async with serving(table()) as (peer, _, _):
        await peer.send(HELLO, wide)
        assert (await peer.response()).msgid == 1
        await peer.send(request(2, "daemon.status"))
        assert (await peer.response()).msgid == 2  # the response was ignored, the connection served on
        await peer.send(too_many)
        error = await peer.receive()
        assert isinstance(error, Notification) and error.method == "error"
        message = decode_notification_arg(error.params)["message"]
        assert f"frame of more than {MAX_REQUEST_VALUES:,} values" in message
        assert await peer.receive() is None
