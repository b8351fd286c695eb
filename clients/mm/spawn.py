"""Reaching mmd, and starting it where none answers: the part of the client a cold ``mm -p`` runs first.

It imports only the standard library, ``mmd.paths`` and ``mmd.rpc.trust``, so that the console script
(mm/entry.py) starts the daemon before it imports click, msgspec and the rest of the client: the
daemon's start-up is the longer of the two, and it no longer waits for the client's imports.

Nothing is sent to a socket until it is known to be the user's own mmd (see mm/connection.py and
``mmd.rpc.trust``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from mmd import paths
from mmd.rpc import trust, unix

# Seconds a client waits for a daemon it started to answer the handshake.
START_TIMEOUT = 20.0


class DaemonError(Exception):
    """The daemon cannot be reached or broke the connection; the message says what to do."""


class Untrusted(DaemonError):
    """The socket, its folder or the process behind it is not the user's own: nothing was sent."""


class Unresponsive(DaemonError):
    """The user's own process accepted the connection and did not answer the handshake: a daemon stopped
    (SIGSTOP, a debugger) or stuck. ``pid`` is the process that listens on the socket (SO_PEERCRED): mmd,
    or under systemd socket activation the service manager that bound it."""

    def __init__(self, message: str, pid: int) -> None:
        super().__init__(message)
        self.pid = pid


def try_connect(path: Path) -> socket.socket | None:
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
        unix.connect(sock, path)
        trust.check_peer(sock, path)
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        return None
    except trust.UnsafePath as exc:
        sock.close()
        raise Untrusted(str(exc)) from None
    except unix.PathTooLong as exc:
        sock.close()
        raise DaemonError(str(exc)) from None
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
# The connection prestart() made to a daemon that answered (its peer checked), for that connect too: a
# second connection cost the daemon an accept, a connection's set-up and its end, each `mm -p`.
_preconnected: dict[Path, socket.socket] = {}


def prestart() -> None:
    """Start mmd now if none answers, without waiting: the client's own imports then overlap the daemon's.

    The console script calls it first thing for a prompt (mm/entry.py); ``Client.connect``
    waits for this daemon instead of starting another, or takes the connection made to the one that
    answered. Errors: none here: whatever is wrong
    (another user's socket, a daemon that fails) is raised by the connect that follows.
    """
    try:
        path = paths.socket_path()
        sock = try_connect(path)
    except (DaemonError, OSError):
        return
    if sock is not None:
        _preconnected[path] = sock
        return
    with contextlib.suppress(DaemonError, OSError):
        _prestarted[path] = _spawn_daemon(path)


def preconnected(path: Path) -> socket.socket | None:
    """The connection :func:`prestart` made to the daemon on *path*, once; None when it made none, or when
    that daemon hung up since (stopped while the prompt was read from a pipe): connect anew."""
    sock = _preconnected.pop(path, None)
    if sock is None:
        return None
    try:
        if sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT):
            return sock  # a daemon says nothing before the handshake; whatever it is, the handshake will tell
    except BlockingIOError:
        return sock  # open, and nothing said: as a connection is before its handshake
    except OSError:
        pass
    sock.close()  # an end of file, or an error: that daemon is gone
    return None


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
        sock = try_connect(path)
        if sock is not None:
            return sock
        code = started.proc.poll()
        if code not in (None, 0):
            said = _daemon_said(started.log_path, started.offset)
            log_path = started.log_path
            if said:
                raise DaemonError(f"mmd failed to start (exit code {code}): {said} (log: {log_path})")
            raise DaemonError(
                f"mmd failed to start (exit code {code}); see {log_path}{full_disk(log_path.parent)}"
            )
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


def full_disk(folder: Path) -> str:
    """A note for a message about a daemon that stopped: that the disk holding *folder* (its state: the store,
    the log) is full, when it is; else "". A daemon on a full disk cannot write why it stopped to its log."""
    try:
        stat = os.statvfs(folder)
    except OSError:
        return ""
    if stat.f_bavail * stat.f_frsize >= FULL_BELOW:
        return ""
    return f"; the disk that holds {folder} is full: free space on it (`df -h {folder}`)"


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


# Free bytes under which the disk of the state folder counts as full (the store's next page would not fit).
FULL_BELOW = 64 * 1024
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
