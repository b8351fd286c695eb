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
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mmd import __version__, paths
from mmd.rpc import (
    DEFAULT_MAX_FRAME,
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

from . import spawn
from .spawn import DaemonError, Unresponsive, Untrusted, full_disk

__all__ = ["Client", "DaemonError", "Unresponsive", "Untrusted"]

# Seconds a client waits for the daemon's answer to its handshake. mmd answers it at once, before any slow
# work of its start; a process that accepts and stays silent (a daemon stopped or stuck) would otherwise
# hold every `mm` and editor without a word.
HANDSHAKE_TIMEOUT = 10.0


def not_utf8(text: str) -> bool:
    """Whether *text* holds a surrogate escape: bytes of a name or an argument that are not UTF-8 (a Latin-1
    file name, a word typed under another locale), which no message to the daemon can carry."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def shown(text: str) -> str:
    """*text* with its bytes that are not UTF-8 written as escapes (``caf\\xe9``): printable, and exact."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that is no escaped byte
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


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
        sock = spawn.preconnected(path) or spawn.try_connect(path)
        if sock is None:
            if not autostart:
                raise DaemonError(
                    f"mmd is not running (no daemon answers on {path}); start it with `mm daemon start`"
                )
            sock = spawn.start_daemon(path)
        conn = cls(sock, path)
        conn.handshake(client, check_version)
        return conn

    def handshake(self, client: str, check_version: bool) -> None:
        """Errors: Unresponsive when no answer comes within HANDSHAKE_TIMEOUT; DaemonError."""
        self.sock.settimeout(HANDSHAKE_TIMEOUT)
        try:
            self.daemon = self.call(
                "handshake", {"protocol": PROTOCOL_VERSION, "client": client, "version": __version__}
            )
        except RPCError as exc:
            raise DaemonError(exc.message) from None
        except TimeoutError:
            pid = trust.peer_credentials(self.sock)[0]
            raise Unresponsive(
                f"mmd on {self.path} (pid {pid}) accepted the connection but did not answer within "
                f"{HANDSHAKE_TIMEOUT:g} s: it is stopped or stuck. `mm daemon stop` ends it; then run your "
                f"command again (its log: {paths.state_dir() / 'mmd.log'})",
                pid,
            ) from None
        finally:
            self.sock.settimeout(None)
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
        """Errors: DaemonError when the connection broke or the request is larger than the daemon reads."""
        self._msgid += 1
        try:
            frame = request(self._msgid, method, params)
        except UnicodeEncodeError as exc:  # a path or word that is not UTF-8: said, not a traceback
            raise DaemonError(
                f"{shown(str(exc.object))} is not UTF-8 text, and mm's messages to its daemon carry only UTF-8: "
                "rename the file or folder (`convmv -f latin1 -t utf8 --notest` does it), or run mm elsewhere"
            ) from None
        if len(frame) > DEFAULT_MAX_FRAME:  # the daemon would refuse it and hang up: a broken pipe, said so
            hint = (
                "save it to a file and name the file in the prompt: the model reads what it needs"
                if method == "session.prompt"
                else "ask for less"
            )
            raise DaemonError(
                f"the request ({method}) is {len(frame):,} bytes, past the {DEFAULT_MAX_FRAME:,} mmd reads in "
                f"one message; {hint}"
            )
        try:
            self.sock.sendall(frame)
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
        return self.wait(self.send(method, params))

    def wait(self, msgid: int) -> Any:
        """The result of the request *msgid*, sent before (``send``); notifications read meanwhile are queued.

        Errors: as ``call``.
        """
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

    def read_ready(self) -> None:
        """Read what the socket holds now (it is readable: the call does not wait): responses kept, notifications
        queued. Errors: DaemonError when the connection ended or broke."""
        self._read()

    def _read(self) -> None:
        """Errors: DaemonError when the connection ends or breaks; TimeoutError past a timeout set on it."""
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            raise
        except OSError as exc:  # reset: the daemon died with bytes of ours unread (killed mid-request)
            data, why = b"", f" ({exc.strerror or exc})"
        else:
            why = ""
        if not data:
            state = paths.state_dir()
            raise DaemonError(
                f"mmd closed the connection{why} (it stopped or crashed); its log is in {state / 'mmd.log'}"
                f"{full_disk(state)}; run the command again to start a new daemon"
            )
        error: FrameError | None = None
        try:
            frames = self._splitter.feed(data)
        except FrameError as exc:  # the messages whole before the bad bytes are read first
            frames, error = exc.frames, exc
        self._take(frames)
        if error is not None:
            raise DaemonError(f"mmd sent bytes that are not msgpack-RPC: {error}") from None

    def _take(self, frames: list[bytes]) -> None:
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


def shown_with_events(call: Callable[[str, dict[str, Any]], Any], session_id: str) -> dict[str, Any]:
    """``session.show`` of *session_id* with all its events, asked for page by page through *call*
    (``Client.call``, or one that opens a connection per call). Errors: what *call* raises."""
    shown: dict[str, Any] = call("session.show", {"session_id": session_id, "events": True})
    while shown.pop("more", False) and shown["events"]:
        after = shown["events"][-1]["seq"]
        page = call("session.show", {"session_id": session_id, "events": True, "after_seq": after})
        shown["events"] += page["events"]
        shown["more"] = page.get("more", False)
    return shown
