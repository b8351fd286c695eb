"""A blocking msgpack-RPC connection to mmd, started on demand.

The client must start fast, so this uses plain sockets and imports only the
protocol layer (mmd.rpc, which imports nothing else of the daemon).

It sends nothing until it knows the socket is the user's own mmd: the socket's
folder belongs to the user (or root) and no one else can write it, the socket
file is the user's, and the kernel says (SO_PEERCRED) the process listening
runs as the user. On a shared machine another user could otherwise create
``/tmp/mm-<uid>`` first and read every prompt (see ``mmd.rpc.trust``).
"""

from __future__ import annotations

import collections
import contextlib
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mmd import __version__, paths
from mmd.rpc import (
    PROTOCOL_VERSION,
    FrameError,
    Notification,
    ProtocolError,
    Response,
    RPCError,
    Splitter,
    decode_message,
    decode_notification_arg,
    request,
    trust,
)

# Seconds a client waits for a daemon it started to answer the handshake.
START_TIMEOUT = 20.0


class DaemonError(Exception):
    """The daemon cannot be reached or broke the connection; the message says what to do."""


class Untrusted(DaemonError):
    """The socket, its folder or the process behind it is not the user's own: nothing was sent."""


class Client:
    def __init__(self, sock: socket.socket, path: Path) -> None:
        self.sock = sock
        self.path = path
        self._splitter = Splitter()
        self._msgid = 0
        self.notifications: collections.deque[tuple[str, Any]] = collections.deque()
        self._responses: dict[int, Response] = {}
        self.daemon: dict[str, Any] = {}

    # -- connecting ----------------------------------------------------------

    @classmethod
    def connect(cls, *, autostart: bool = True, check_version: bool = True, client: str = "mm") -> Client:
        """Connect and handshake, starting a daemon first when none answers.

        Errors:
            Untrusted: the socket's folder or file, or the process answering
            on it, belongs to another user (nothing was sent to it).
            DaemonError: no daemon and none could be started, or a daemon of
            another version (restart it with ``mm daemon stop``).
        """
        path = paths.socket_path()
        sock = _try_connect(path)
        if sock is None:
            if not autostart:
                raise DaemonError(
                    f"mmd is not running (no daemon answers on {path}); start it with `mm daemon start`"
                )
            sock = start_daemon(path)
        conn = cls(sock, path)
        conn.handshake(client, check_version)
        return conn

    def handshake(self, client: str, check_version: bool) -> None:
        try:
            self.daemon = self.call(
                "handshake", {"protocol": PROTOCOL_VERSION, "client": client, "version": __version__}
            )
        except RPCError as exc:
            raise DaemonError(exc.message) from None
        theirs = self.daemon.get("daemon_version")
        if check_version and theirs != __version__:
            raise DaemonError(
                f"the running daemon is mm {theirs} (pid {self.daemon.get('pid')}) but this client is mm {__version__}: "
                "restart the daemon with `mm daemon stop`, then run your command again"
            )

    def close(self) -> None:
        self.sock.close()

    # -- messages ------------------------------------------------------------

    def send(self, method: str, params: Any = None) -> int:
        self._msgid += 1
        try:
            self.sock.sendall(request(self._msgid, method, params))
        except OSError as exc:
            raise DaemonError(
                f"lost the connection to mmd ({exc}); see its log with `mm daemon status`"
            ) from None
        return self._msgid

    def call(self, method: str, params: Any = None) -> Any:
        """Send a request and wait for its response; notifications read meanwhile are queued.

        Errors:
            RPCError: the daemon answered with an error.
            DaemonError: the connection broke.
        """
        msgid = self.send(method, params)
        while msgid not in self._responses:
            self._read()
        resp = self._responses.pop(msgid)
        if resp.error is not None:
            raise RPCError.from_wire(resp.error)
        return resp.result

    def next_notification(self, timeout: float | None = None) -> tuple[str, Any]:
        """Block until a notification arrives: (method, its argument).

        Errors: TimeoutError when *timeout* seconds pass first (nothing is lost:
        a partly read message stays buffered for the next call).
        """
        if timeout is None:
            while not self.notifications:
                self._read()
            return self.notifications.popleft()
        deadline = time.monotonic() + timeout
        try:
            while not self.notifications:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                self.sock.settimeout(remaining)
                self._read()
        finally:
            self.sock.settimeout(None)
        return self.notifications.popleft()

    def next_event(self, session_id: str, after_seq: int, timeout: float | None = None) -> dict[str, Any]:
        """The next event of *session_id* newer than *after_seq*; other notifications are passed over.

        Errors: TimeoutError when *timeout* seconds pass first.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            method, ev = self.next_notification(left)
            if method == "event" and ev["session_id"] == session_id and ev["seq"] > after_seq:
                return ev

    def _read(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise DaemonError(
                "mmd closed the connection (it stopped or crashed); its log is in "
                f"{paths.state_dir() / 'mmd.log'}; run the command again to start a new daemon"
            )
        try:
            frames = self._splitter.feed(data)
        except FrameError as exc:
            raise DaemonError(f"mmd sent bytes that are not msgpack-RPC: {exc}") from None
        for frame in frames:
            try:
                msg = decode_message(frame)
            except ProtocolError as exc:
                raise DaemonError(f"mmd sent a malformed message: {exc}") from None
            if isinstance(msg, Response):
                self._responses[msg.msgid] = msg
            elif isinstance(msg, Notification):
                arg = decode_notification_arg(msg.params)
                if msg.method == "error":
                    raise DaemonError(str(arg.get("message", arg)) if isinstance(arg, dict) else str(arg))
                self.notifications.append((msg.method, arg))


def _try_connect(path: Path) -> socket.socket | None:
    """A connection to the user's own daemon on *path*, or None when nothing answers there.

    Errors:
        Untrusted: the folder, the socket file or the listening process is another user's.
        DaemonError: the socket exists but cannot be connected to.
    """
    try:
        trust.check_dir(path.parent)
        if not trust.check_socket_file(path):
            return None
    except FileNotFoundError:
        return None
    except trust.UnsafePath as exc:
        raise Untrusted(str(exc)) from None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
        trust.check_peer(sock, path)
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        return None
    except trust.UnsafePath as exc:
        sock.close()
        raise Untrusted(str(exc)) from None
    except OSError as exc:
        sock.close()
        raise DaemonError(f"cannot connect to {path}: {exc}") from None
    return sock


class _Started:
    """A daemon this client started, not yet answering: the process and where its log starts."""

    def __init__(self, proc: subprocess.Popen[bytes], log_path: Path, offset: int) -> None:
        self.proc, self.log_path, self.offset = proc, log_path, offset


# The daemon started by prestart(), for the connect that follows in this process.
_prestarted: dict[Path, _Started] = {}


def prestart() -> None:
    """Start mmd now if none answers, without waiting: the client's own imports then overlap the daemon's.

    The console script calls it first thing for a prompt (mm/entry.py); ``Client.connect``
    waits for this daemon instead of starting another. Errors: none here: whatever is wrong
    (another user's socket, a daemon that fails) is raised by the connect that follows.
    """
    try:
        path = paths.socket_path()
        sock = _try_connect(path)
    except (DaemonError, OSError):
        return
    if sock is not None:
        sock.close()
        return
    with contextlib.suppress(DaemonError, OSError):
        _prestarted[path] = _spawn_daemon(path)


def start_daemon(path: Path) -> socket.socket:
    """Start mmd detached (own session, no terminal) and wait until it answers.

    Two clients may do this at once: the daemon's socket lock lets one win,
    the other daemon exits, and both clients connect to the winner.

    Errors:
        Untrusted: the state folder (where the log goes) or the socket is not the user's alone.
        DaemonError: mmd exited with an error (its own message is quoted) or did not answer in time.
    """
    started = _prestarted.pop(path, None) or _spawn_daemon(path)
    deadline = time.monotonic() + START_TIMEOUT
    delay = 0.002  # the daemon answers within a few hundred ms: look often, then less
    while time.monotonic() < deadline:
        sock = _try_connect(path)
        if sock is not None:
            return sock
        code = started.proc.poll()
        if code not in (None, 0):
            said = _daemon_said(started.log_path, started.offset)
            log_path = started.log_path
            if said:
                raise DaemonError(f"mmd failed to start (exit code {code}): {said} (log: {log_path})")
            raise DaemonError(f"mmd failed to start (exit code {code}); see {log_path}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.02)
    raise DaemonError(f"mmd did not answer on {path} within {START_TIMEOUT:.0f} s; see {started.log_path}")


def _spawn_daemon(path: Path) -> _Started:
    log_dir = paths.state_dir()
    try:
        trust.ensure_private_dir(log_dir, fix=trust.STATE_FIX)
    except trust.UnsafePath as exc:
        raise Untrusted(str(exc)) from None
    log_path = log_dir / "mmd.log"
    offset = _size(log_path)  # what this daemon writes to its log starts here
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mmd", "--socket", str(path)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
            cwd="/",
        )
    return _Started(proc, log_path, offset)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


# The most of the log read back for the reason a daemon gave up: its last line is near the end.
_SAID_MAX = 64 * 1024


def _daemon_said(log_path: Path, offset: int) -> str:
    """The last line mmd printed as ``mmd: ...`` to its stderr (the log) since *offset*, or ""."""
    try:
        with open(log_path, "rb") as log:
            log.seek(max(offset, _size(log_path) - _SAID_MAX))
            text = log.read(_SAID_MAX).decode("utf-8", "replace")
    except OSError:
        return ""
    said = [line[len("mmd: ") :] for line in text.splitlines() if line.startswith("mmd: ")]
    return said[-1].strip() if said else ""
