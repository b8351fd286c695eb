"""A local process that opens connection after connection, or pipelines without reading: what it may cost.

Any process of the user may reach the daemon's socket, a command a turn runs among them. Whatever it does,
the daemon goes on serving the other clients: it serves at most a quarter of its open-files limit of
clients at once (the next is told ``too_many_clients`` and closed), an accept that fails for want of
descriptors is tried again later, and a request's worth of tasks and queued bytes are bounded per client
and for all clients together (tests/unit/server/test_connection.py).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import time

import pytest

from mmd.rpc import PROTOCOL_VERSION, decode_notification_arg
from mmd.rpc.messages import Notification

from ..conftest import run_mm, socket_of, start_mmd, stop_daemon
from .raw_client import Raw, wait_until
from .serves import assert_daemon_serves

needs_prlimit = pytest.mark.skipif(
    shutil.which("prlimit") is None, reason="prlimit (util-linux) is not installed"
)


def connect_all(home, most: int) -> list[socket.socket]:
    """Up to *most* connections that send nothing, until one is not taken within a second."""
    held: list[socket.socket] = []
    for _ in range(most):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(1.0)
        for _ in range(20):  # the listen queue is full while the daemon cannot accept: wait a little
            try:
                sock.connect(str(socket_of(home)))
                break
            except BlockingIOError:
                time.sleep(0.05)
        else:
            sock.close()
            return held
        held.append(sock)
    return held


@needs_prlimit
def test_connections_that_take_every_descriptor_leave_the_daemon_serving(mm_home):
    # 200 connections against an open-files limit of 96 (lowered once the daemon runs, past its bound on
    # clients): accept failed with EMFILE, the error ended the daemon's accept task and the daemon with it.
    proc = start_mmd(mm_home)
    try:
        subprocess.run(["prlimit", "--pid", str(proc.pid), "--nofile=96:96"], check=True)
        held = connect_all(mm_home, 200)
        try:
            assert len(held) > 60  # the descriptors ran out on the daemon's side
            time.sleep(0.5)
            assert proc.poll() is None, "the daemon died when it ran out of descriptors"
        finally:
            for sock in held:
                sock.close()
        assert_daemon_serves(mm_home)
        log = (mm_home / "state" / "mm" / "mmd.log").read_text()
        assert log.count("cannot accept connections now: Too many open files") == 1
    finally:
        stop_daemon(proc)


@needs_prlimit
def test_past_its_bound_on_clients_a_client_is_told_too_many_clients_and_the_others_go_on(mm_home):
    # An open-files limit of 160: at most 40 clients at once (a quarter), whatever they do.
    proc = start_mmd(mm_home, prefix=["prlimit", "--nofile=160:160"])
    clients = [Raw(mm_home) for _ in range(40)]
    try:
        with Raw(mm_home, handshake=False) as refused:
            message = refused.next()
            assert isinstance(message, Notification) and message.method == "error"
            error = decode_notification_arg(message.params)
            assert error["code"] == "too_many_clients"
            assert error["message"].startswith("40 clients are connected to this mmd, its limit; close some")
            assert refused.next() is None  # closed
        assert clients[0].call("daemon.status")["pid"] == proc.pid
        # The CLI writes its handshake at once: it still reads why, not a reset connection.
        status = run_mm("daemon", "status", cwd=mm_home)
        assert status.returncode != 0
        assert "40 clients are connected to this mmd, its limit; close some" in status.stderr
        clients.pop().close()

        def admitted() -> Raw | None:  # once the daemon saw the hang-up, a place is free again
            raw = Raw(mm_home, handshake=False)
            try:
                raw.call("handshake", {"protocol": PROTOCOL_VERSION, "client": "adversarial"})
            except (OSError, AssertionError):  # refused meanwhile: closed under the handshake
                raw.close()
                return None
            return raw

        with contextlib.closing(wait_until(admitted, "a client admitted after one left")) as one_more:
            assert one_more.call("daemon.status")["pid"] == proc.pid
    finally:
        for client in clients:
            client.close()
    try:
        assert_daemon_serves(mm_home)
    finally:
        stop_daemon(proc)


def test_a_client_that_writes_thousands_of_requests_before_reading_any_is_answered_in_full(mm_home, daemon):
    # MAX_IN_FLIGHT (64) of them run at once and the socket is not read meanwhile: 5,000 requests (fewer than
    # the frames a client may leave unread, OUTBOX_FRAMES) still all get their answer, in whatever order they end.
    with Raw(mm_home) as raw:
        frames = b"".join(raw.frame("session.list", {"limit": 1}) for _ in range(5_000))
        raw.sock.sendall(frames)
        answered: set[int] = set()
        while len(answered) < 5_000:
            message = raw.next()
            assert message is not None, f"closed after {len(answered)} answers"
            assert message.error is None, message.error
            answered.add(message.msgid)
        assert answered == set(range(2, raw.msgid + 1))
    assert_daemon_serves(mm_home)


def daemon_pid(home) -> int | None:
    """The pid the daemon on the test's socket says it has, or None when none answers there within a second."""
    try:
        raw = Raw(home, handshake=False)
    except OSError:
        return None
    with contextlib.closing(raw):
        raw.sock.settimeout(1.0)
        try:
            raw.call("handshake", {"protocol": PROTOCOL_VERSION, "client": "adversarial"})
            return raw.call("daemon.status")["pid"]
        except (OSError, AssertionError):
            return None


@pytest.mark.parametrize("how", ["removed", "replaced", "its folder removed"])
def test_a_socket_file_removed_or_replaced_is_bound_again(mm_home, daemon, how):
    # A cleaner of the temp dir removes old files there; a command of a sandboxed turn may write the temp dir
    # (/tmp/mm-<uid> without XDG_RUNTIME_DIR) and put a socket of its own in the daemon's place. The daemon
    # then had no way in for any client, `mm daemon stop` included, until it was killed.
    path = socket_of(mm_home)
    impostor = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if how == "its folder removed":
            shutil.rmtree(path.parent)
        else:
            path.unlink()
        if how == "replaced":
            impostor.bind(str(path))
            impostor.listen(8)
        assert wait_until(lambda: daemon_pid(mm_home), "the daemon answers on its socket again") == daemon.pid
    finally:
        impostor.close()
    log = (mm_home / "state" / "mm" / "mmd.log").read_text()
    assert f"{path} was removed or replaced: bound it again" in log
    if how == "its folder removed":  # and its lock was taken again: a second daemon does not start
        second = subprocess.run(
            [sys.executable, "-m", "mmd", "--socket", str(path)], capture_output=True, text=True, timeout=30
        )
        assert f"another mmd holds {path}.lock; nothing to do" in second.stderr, second.stderr
    assert_daemon_serves(mm_home)
