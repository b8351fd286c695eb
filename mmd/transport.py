"""The daemon's Unix socket: binding it safely, one daemon per socket, peer checks.

Binding follows three rules. The directory is private (0700) and the socket
is 0600 from the moment it exists (bound under a restrictive umask). One
daemon per socket: a lock file next to the socket is held for the daemon's
life, so two daemons started at once cannot both bind. A socket file left by
a dead daemon is removed only after a connect attempt shows nothing answers.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import stat
import struct
from pathlib import Path

# struct ucred from <sys/socket.h>: pid_t pid, uid_t uid, gid_t gid.
_UCRED = struct.Struct("3i")


class AlreadyRunning(Exception):
    """Another daemon holds this socket (its lock, or it answers on it)."""


def ensure_private_dir(path: Path) -> None:
    """Create *path* with mode 0700 or check an existing one is ours and private.

    Errors:
        PermissionError: the directory belongs to another user.
    """
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.getuid():
        raise PermissionError(
            f"{path} belongs to uid {st.st_uid}, not to you; set MM_SOCKET to a path of yours"
        )
    if stat.S_IMODE(st.st_mode) != 0o700:
        path.chmod(0o700)


def _answers(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    else:
        return True
    finally:
        probe.close()


def lock_socket(path: Path) -> int:
    """Take the lock that makes this process the only daemon for *path*.

    Returns the lock file descriptor, to keep open for the daemon's life.

    Errors:
        AlreadyRunning: another process holds the lock.
    """
    ensure_private_dir(path.parent)
    fd = os.open(str(path) + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
            raise AlreadyRunning(f"another mmd holds {path}.lock") from None
        raise
    return fd


def bind_unix(path: Path, backlog: int = 64) -> socket.socket:
    """Bind and listen on *path* (socket mode 0600), removing a stale socket first.

    Call with the lock of :func:`lock_socket` held.

    Errors:
        AlreadyRunning: something answers on *path* already (a daemon that
        does not use the lock, e.g. one started by systemd).
    """
    if path.exists() or path.is_symlink():
        if _answers(path):
            raise AlreadyRunning(f"a daemon already answers on {path}")
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    except BaseException:
        sock.close()
        raise
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(backlog)
    return sock


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a Unix socket."""
    return _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))


def remove_socket(path: Path) -> None:
    """Remove the socket file at shutdown.

    Safe while the lock is held: no other daemon can have bound *path* since.
    """
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
