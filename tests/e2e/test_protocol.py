"""The daemon's side of the protocol, over a real Unix socket, with an in-process daemon.

That docs/protocol.md names every method, struct, field and error code is in tests/unit/rpc/test_docs.py."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from mmd import __version__
from mmd.api import METHODS
from mmd.models import scripted
from mmd.rpc import PROTOCOL_VERSION, RPCError, Splitter, decode_message, decode_notification_arg, request
from mmd.rpc.messages import Notification, Response
from mmd.server.daemon import Daemon
from mmd.server.transport import AlreadyRunning

from .conftest import socket_of, write_config

OPEN: list[RawClient] = []


async def close_clients() -> None:
    while OPEN:
        await OPEN.pop().stream.aclose()


class RawClient:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.splitter = Splitter()
        self.pending: list[Any] = []
        self.msgid = 0

    @classmethod
    async def open(cls, path: Path, handshake: bool = True) -> RawClient:
        client = cls(await trio.open_unix_socket(str(path)))
        OPEN.append(client)
        if handshake:
            result = await client.call("handshake", {"protocol": PROTOCOL_VERSION, "client": "test"})
            assert result["error"] is None
        return client

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def next(self) -> Any:
        while not self.pending:
            data = await self.stream.receive_some(65536)
            if not data:
                return None
            self.pending += [decode_message(f) for f in self.splitter.feed(data)]
        return self.pending.pop(0)

    async def call(self, method: str, params: Any = None) -> dict[str, Any]:
        self.msgid += 1
        await self.send_raw(request(self.msgid, method, params))
        while True:
            msg = await self.next()
            assert msg is not None, "connection closed"
            if isinstance(msg, Response) and msg.msgid == self.msgid:
                return {"error": msg.error, "result": msg.result}

    async def events_until(self, kind: str) -> list[dict[str, Any]]:
        events = []
        while True:
            msg = await self.next()
            assert msg is not None
            if isinstance(msg, Notification) and msg.method == "event":
                ev = decode_notification_arg(msg.params)
                events.append(ev)
                if ev["kind"] == kind:
                    return events


@pytest.fixture
async def live(mm_home, nursery):
    """An in-process daemon with an in-process scripted model; yields (daemon, start_script)."""
    servers = []

    async def use_script(steps: list[dict[str, Any]]) -> Any:
        server = await nursery.start(scripted.serve, scripted.Script.from_obj({"responses": steps}))
        servers.append(server)
        write_config(
            mm_home,
            {
                "providers": {"s": {"kind": "openai", "base_url": f"{server.url}/v1"}},
                "default_model": "s/scripted",
            },
        )
        return server

    daemon = Daemon(
        methods=METHODS,
        socket_path=socket_of(mm_home),
        state_dir=mm_home / "state" / "mm",
        config_path=mm_home / "config" / "mm" / "config.yaml",
    )
    await nursery.start(daemon.serve)
    yield daemon, use_script
    await close_clients()
    daemon.request_stop("test over")
    await daemon.stopped.wait()


async def test_socket_and_directory_are_private(live, mm_home):
    sock = socket_of(mm_home)
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600
    assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700


async def test_handshake_returns_versions(live, mm_home):
    client = await RawClient.open(socket_of(mm_home), handshake=False)
    reply = await client.call("handshake", {"protocol": PROTOCOL_VERSION, "client": "t", "version": "x"})
    assert reply["error"] is None
    assert reply["result"]["daemon_version"] == __version__
    assert reply["result"]["pid"] == os.getpid()


async def test_handshake_mismatch_says_restart_the_daemon(live, mm_home):
    client = await RawClient.open(socket_of(mm_home), handshake=False)
    reply = await client.call("handshake", {"protocol": PROTOCOL_VERSION + 1})
    assert code(reply) == "protocol_mismatch"
    assert "restart the daemon" in RPCError.from_wire(reply["error"]).message


async def test_methods_need_the_handshake_first(live, mm_home):
    client = await RawClient.open(socket_of(mm_home), handshake=False)
    reply = await client.call("daemon.status")
    assert code(reply) == "handshake_required"


async def test_unknown_method_suggests_a_close_one(live, mm_home):
    client = await RawClient.open(socket_of(mm_home))
    reply = await client.call("session.promt", {})
    assert code(reply) == "unknown_method"
    assert '"session.prompt"' in RPCError.from_wire(reply["error"]).message


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"prompt": 3, "cwd": "/"}, "prompt"),
        ({"cwd": "/"}, "prompt"),
        ({"prompt": "x", "cwd": "/", "colour": "red"}, "colour"),
    ],
)
async def test_params_of_the_wrong_type_are_answered(live, mm_home, params, needle):
    client = await RawClient.open(socket_of(mm_home))
    reply = await client.call("session.prompt", params)
    assert code(reply) == "invalid_params"
    assert needle in RPCError.from_wire(reply["error"]).message
    # The connection still works.
    assert (await client.call("daemon.status"))["error"] is None


async def test_garbage_closes_only_that_connection(live, mm_home):
    bystander = await RawClient.open(socket_of(mm_home))
    bad = await RawClient.open(socket_of(mm_home))
    await bad.send_raw(b"\xc1garbage")
    note = await bad.next()
    assert isinstance(note, Notification) and note.method == "error"
    assert "not msgpack" in decode_notification_arg(note.params)["message"]
    assert await bad.next() is None  # closed
    assert (await bystander.call("daemon.status"))["error"] is None


async def test_malformed_request_with_msgid_is_answered(live, mm_home):
    client = await RawClient.open(socket_of(mm_home))
    await client.send_raw(msgspec.msgpack.encode([0, 77, 12345, []]))
    reply = await client.next()
    assert (
        isinstance(reply, Response)
        and reply.msgid == 77
        and RPCError.from_wire(reply.error).code == "invalid_request"
    )


async def test_non_message_without_msgid_closes_the_connection(live, mm_home):
    client = await RawClient.open(socket_of(mm_home))
    await client.send_raw(msgspec.msgpack.encode({"hello": "world"}))
    note = await client.next()
    assert isinstance(note, Notification) and note.method == "error"
    assert await client.next() is None


async def test_oversized_frame_is_refused(live, mm_home):
    client = await RawClient.open(socket_of(mm_home))
    await client.send_raw(b"\xdb\x7f\xff\xff\xff")  # announces a 2 GiB string
    note = await client.next()
    assert "limit" in decode_notification_arg(note.params)["message"]
    assert await client.next() is None


async def test_peer_of_another_uid_is_refused(live, mm_home):
    daemon, _ = live
    real = daemon.peer_credentials
    daemon.peer_credentials = lambda sock: (real(sock)[0], os.getuid() + 1, os.getgid())
    client = await RawClient.open(socket_of(mm_home), handshake=False)
    note = await client.next()
    assert isinstance(note, Notification)
    err = decode_notification_arg(note.params)
    assert err["code"] == "peer_refused"
    assert await client.next() is None
    daemon.peer_credentials = real
    assert (await (await RawClient.open(socket_of(mm_home))).call("daemon.status"))["error"] is None


async def test_second_daemon_on_the_same_socket_refuses(live, mm_home):
    other = Daemon(methods=METHODS, socket_path=socket_of(mm_home), state_dir=mm_home / "other-state")
    with pytest.raises(AlreadyRunning):
        await other.serve()


async def test_a_daemon_served_in_this_process_leaves_it_no_subreaper(mm_home, nursery):
    """A daemon is the reaper of its orphans while it serves. Served in a test's process, it left the process
    a subreaper after it stopped: the daemon a later test's `mm` started on demand, orphaned when that `mm`
    exited, came back to the test's process, and stayed a zombie once stopped (the supervisor's tests then
    found a child that was none of theirs)."""
    import ctypes

    def subreaper() -> bool:
        flag = ctypes.c_int(-1)
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.prctl(37, ctypes.byref(flag), 0, 0, 0) == 0  # PR_GET_CHILD_SUBREAPER
        return bool(flag.value)

    daemon = Daemon(methods=METHODS, socket_path=socket_of(mm_home), state_dir=mm_home / "state" / "mm")
    await nursery.start(daemon.serve)
    assert subreaper()
    daemon.request_stop("test over")
    await daemon.stopped.wait()
    await trio.testing.wait_all_tasks_blocked()
    assert not subreaper()


async def test_stale_socket_is_removed_when_nothing_answers(mm_home, nursery):
    sock_path = socket_of(mm_home)
    sock_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    import socket

    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(sock_path))
    stale.close()  # the file stays, nothing listens
    daemon = Daemon(methods=METHODS, socket_path=sock_path, state_dir=mm_home / "state" / "mm")
    await nursery.start(daemon.serve)
    assert (await (await RawClient.open(sock_path)).call("daemon.status"))["error"] is None
    await close_clients()
    daemon.request_stop("test over")
    await daemon.stopped.wait()


async def test_reconnect_and_replay_after_a_sequence_number(live, mm_home):
    _, use_script = live
    await use_script([{"text": "alpha beta gamma"}])
    first = await RawClient.open(socket_of(mm_home))
    started = (await first.call("session.prompt", {"prompt": "hi", "cwd": str(mm_home / "work")}))["result"]
    events = await first.events_until("turn_ended")
    await first.stream.aclose()
    middle = events[2]["seq"]
    second = await RawClient.open(socket_of(mm_home))
    replay = await second.call(
        "session.subscribe", {"session_id": started["session_id"], "after_seq": middle}
    )
    replayed = replay["result"]["events"]
    assert [e["seq"] for e in replayed] == [e["seq"] for e in events if e["seq"] > middle]
    assert [e["kind"] for e in replayed] == [e["kind"] for e in events if e["seq"] > middle]
    assert replay["result"]["running"] is False


async def test_busy_session_refuses_a_second_prompt(live, mm_home):
    _, use_script = live
    await use_script([{"text": "slow", "delay": 5}])
    client = await RawClient.open(socket_of(mm_home))
    started = (await client.call("session.prompt", {"prompt": "a", "cwd": str(mm_home / "work")}))["result"]
    again = await client.call(
        "session.prompt", {"prompt": "b", "cwd": "/", "session_id": started["session_id"]}
    )
    assert code(again) == "busy"
    await client.call("session.cancel", {"session_id": started["session_id"]})
    ended = (await client.events_until("turn_ended"))[-1]
    assert ended["data"]["status"] == "cancelled"


async def test_events_are_committed_before_they_are_sent(live, mm_home):
    daemon, use_script = live
    await use_script([{"text": "x y"}])
    client = await RawClient.open(socket_of(mm_home))
    started = (await client.call("session.prompt", {"prompt": "a", "cwd": str(mm_home / "work")}))["result"]
    for ev in await client.events_until("turn_ended"):
        stored = daemon.store.events_after(started["session_id"], ev["seq"] - 1, limit=1)
        assert stored and stored[0].kind == ev["kind"]


def code(reply: dict[str, Any]) -> str:
    return RPCError.from_wire(reply["error"]).code


async def test_eval_load_checks_a_fixture_for_the_client(live, mm_home):
    client = await RawClient.open(socket_of(mm_home))
    contrib = _root() / "contrib" / "eval"
    reply = await client.call("eval.load", {"path": str(contrib)})
    assert reply["error"] is None
    assert reply["result"]["root"] == str(contrib) and list(reply["result"]["modes"]) == [
        "declared",
        "skill",
        "mcp",
    ]
    missing = await client.call("eval.load", {"path": str(mm_home)})
    assert (
        code(missing) == "config_error"
        and "no eval.yaml here" in RPCError.from_wire(missing["error"]).message
    )
    relative = await client.call("eval.load", {"path": "contrib/eval"})
    assert code(relative) == "invalid_params"


def _root() -> Path:
    """The checkout: the folder above this test that holds pyproject.toml."""
    return next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
