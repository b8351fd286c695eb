"""The daemon's Unix socket: binding it safely, one daemon per socket, peer checks.

Binding follows four rules. The directory is private (0700) and the socket
is 0600 from the moment it exists (bound under a restrictive umask). The
directory, the lock and a socket file found there must be this user's: one
another user prepared (a squatter in ``/tmp``) is refused with a message
naming MM_SOCKET, never waited on (see ``mmd.rpc.trust``). One daemon per
socket: a lock file next to the socket is held for the daemon's life, so two
daemons started at once cannot both bind. A socket file left by a dead daemon
is removed only after a connect attempt shows nothing answers.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
from pathlib import Path

from ..rpc import trust, unix


class AlreadyRunning(Exception):
    """Another daemon holds this socket (its lock, or it answers on it)."""


def ensure_private_dir(path: Path) -> None:
    """Create *path* with mode 0700, or check an existing one is ours (or root's) and only we can write it.

    Errors:
        trust.UnsafePath: another user owns it, or others can write it; the message names MM_SOCKET.
    """
    trust.ensure_private_dir(path)


def _answers(path: Path) -> bool:
    """Whether a daemon of this user answers on *path*.

    Errors:
        trust.UnsafePath: a process of another user answers there.
    """
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        try:
            unix.connect(probe, path)
        except OSError:
            return False
        trust.check_peer(probe, path)
        return True
    finally:
        probe.close()


def lock_socket(path: Path) -> int:
    """Take the lock that makes this process the only daemon for *path*.

    Returns the lock file descriptor, to keep open for the daemon's life.

    Errors:
        AlreadyRunning: another process holds the lock.
        trust.UnsafePath: the folder, or the lock file, is not this user's (a symbolic link is refused).
    """
    ensure_private_dir(path.parent)
    fd = trust.open_lock(path.with_name(path.name + ".lock"))
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
        trust.UnsafePath: the file at *path* belongs to another user: it is refused, not removed;
        UnusablePath: it is a folder.
    """
    if trust.check_socket_file(path) or path.is_symlink():
        if _answers(path):
            raise AlreadyRunning(f"a daemon already answers on {path}")
        if path.is_dir() and not path.is_symlink():  # not mm's to remove, and unlink() cannot
            raise trust.UnusablePath(
                f"{path} is a folder, where mmd's socket goes: remove it (`rmdir {path}`), {trust.SOCKET_FIX}"
            )
        path.unlink()
    return _bind(path, backlog)


def take_back(path: Path, backlog: int = 64) -> socket.socket:
    """Bind *path* again, for the daemon that holds its lock, whatever is there now: its socket file was
    removed (a cleaner of the temp dir) or replaced (a command of a sandboxed turn may write the temp dir). The
    folder is the user's alone (made again, private, if it went too): only a process of the user's put it there.

    Errors: OSError (the folder cannot be made, the path cannot be bound); trust.UnsafePath.
    """
    ensure_private_dir(path.parent)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return _bind(path, backlog)


def identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at *path*, not following a link; None when there is none."""
    try:
        st = path.lstat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _bind(path: Path, backlog: int) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        unix.bind(sock, path)
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
    return trust.peer_credentials(sock)


def peer_confined(sock: socket.socket, pid: int) -> bool:
    """Whether the process that connected *sock* (*pid*) runs with no_new_privs, as every process of a
    sandboxed turn does — or cannot be told so (gone, unreadable: mmd/rpc/trust.py, peer_no_new_privs)."""
    return trust.peer_no_new_privs(sock, pid) is not False


def remove_socket(path: Path) -> None:
    """Remove the socket file at shutdown.

    Safe while the lock is held: no other daemon can have bound *path* since.
    """
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
