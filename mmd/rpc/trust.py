"""Is this folder, socket or peer the user's own? The checks shared by mmd and its clients.

On a shared machine, ``/tmp`` and every folder other users can write are theirs to prepare: another
user can create ``/tmp/mm-<uid>`` before you, bind a socket in it and read every prompt a client
sends, or plant a symbolic link where mm will open a file. So, as OpenSSH does with its key files,
mm trusts a folder only when it belongs to the user (or root) and no one else can write it, a socket
file only when it is the user's, and a peer only when the kernel says (``SO_PEERCRED``) it runs as
the user. Anything else is refused with a message that says what is wrong and how to fix it.

Only the standard library is used: the thin client imports this module.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import stat
import struct
from pathlib import Path

# struct ucred from <sys/socket.h>: pid_t pid, uid_t uid, gid_t gid (uid_t and gid_t are unsigned).
_UCRED = struct.Struct("iII")

# Root may own a folder on the way (``/run/mm`` made by an administrator): root can read everything anyway.
ROOT_UID = 0

# What to do when the socket's place cannot be trusted: the daemon's and the client's messages end so.
SOCKET_FIX = "or set MM_SOCKET (or XDG_RUNTIME_DIR) to a path in a folder only you can write"

# The same for mm's state folder (store, sessions, logs).
STATE_FIX = "or set XDG_STATE_HOME (mmd --state-dir) to a folder only you can write"


class UnsafePath(PermissionError):
    """A folder, file or peer of mm's that another user could control; the message says how to fix it."""


class UnusablePath(UnsafePath):
    """A folder of mm's cannot be made or looked into: a file is in the way, the disk is read-only, no
    permission. An :class:`UnsafePath`, so that every place that reports one reports this too: the message
    names the folder, why, and what to do."""


def unusable(path: Path, exc: OSError, fix: str) -> UnusablePath:
    """The error to raise for *exc*, met making or reading the folder *path*: what is in the way, and *fix*."""
    if exc.errno == errno.ENOTDIR or (exc.errno == errno.EEXIST and not path.is_dir()):
        blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), path)
        return UnusablePath(
            f"cannot make the folder {path}: {blocker} is a file, not a folder; move it away, {fix}"
        )
    why = exc.strerror or str(exc)
    return UnusablePath(f"cannot make or use the folder {path} ({why}): make it writable, {fix}")


def _me(uid: int | None) -> int:
    return os.getuid() if uid is None else uid


def check_dir(path: Path, *, uid: int | None = None, fix: str = SOCKET_FIX) -> os.stat_result:
    """Check that *path* is a folder of *uid* (default: this process's) that no one else can write.

    A symbolic link is followed only when it belongs to *uid* or root. Returns the folder's stat.

    Errors:
        FileNotFoundError: *path* does not exist.
        UnsafePath: another user owns it or its link, others can write it, or it is not a folder;
        the message ends with *fix*.
    """
    me = _me(uid)
    try:
        link = path.lstat()
    except FileNotFoundError:
        raise
    except OSError as exc:  # a file on the way (ENOTDIR), a folder on the way you may not enter (EACCES)
        raise unusable(path, exc, fix) from None
    if stat.S_ISLNK(link.st_mode) and link.st_uid not in (me, ROOT_UID):
        raise UnsafePath(
            f"{path} is a symbolic link made by uid {link.st_uid}, not you ({me}): "
            f"someone else created it; remove it, {fix}"
        )
    try:
        st = path.stat() if stat.S_ISLNK(link.st_mode) else link
    except FileNotFoundError:
        raise UnsafePath(f"{path} is a symbolic link to nothing; remove it, {fix}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{path} is not a folder; remove it, {fix}")
    if st.st_uid not in (me, ROOT_UID):
        raise UnsafePath(
            f"{path} belongs to uid {st.st_uid}, not you ({me}): someone else created it; remove it, {fix}"
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        raise UnsafePath(
            f"{path} can be written by other users (mode {mode:04o}): anyone could put their own "
            f"files or socket there; make it private with `chmod 700 {path}`, {fix}"
        )
    return st


def ensure_private_dir(path: Path, *, uid: int | None = None, fix: str = SOCKET_FIX) -> None:
    """Create *path* (mode 0700) or check an existing one with :func:`check_dir`; tighten it to 0700.

    A folder of the user's that others could read (0755) is made 0700; one others could write is
    refused, since they may already have put something in it.

    Errors:
        UnsafePath: as :func:`check_dir`; UnusablePath: the folder cannot be created.
    """
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    except OSError as exc:  # a file on the way, a read-only disk, a folder you may not write
        raise unusable(path, exc, fix) from None
    st = check_dir(path, uid=uid, fix=fix)
    if st.st_uid == _me(uid) and stat.S_IMODE(st.st_mode) != 0o700 and not path.is_symlink():
        path.chmod(0o700)


def check_socket_file(path: Path, *, uid: int | None = None) -> bool:
    """Whether a socket (or other file) exists at *path*; when one does, check it belongs to *uid*.

    A symbolic link to it may also belong to root. A link to nothing is checked and reported absent.

    Errors:
        UnsafePath: the file, or a link to it, belongs to another user.
    """
    me = _me(uid)
    try:
        owner = path.lstat().st_uid
        if owner in (me, ROOT_UID):
            owner = path.stat().st_uid
    except FileNotFoundError:
        return False
    if owner != me:
        raise UnsafePath(
            f"{path} belongs to uid {owner}, not you ({me}): someone else created it; "
            f"remove it (`rm {path}`), {SOCKET_FIX}"
        )
    return True


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a connected Unix socket, from the kernel."""
    return _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))


def check_peer(sock: socket.socket, path: Path, *, uid: int | None = None) -> None:
    """Check that the process listening on *path*, connected through *sock*, runs as *uid*.

    Call it before anything is sent: a process of another user must learn nothing.

    Errors:
        UnsafePath: the peer runs as another user.
    """
    me = _me(uid)
    pid, peer, _ = peer_credentials(sock)
    if peer != me:
        raise UnsafePath(
            f"the process answering on {path} (pid {pid}) runs as uid {peer}, not you ({me}): it is not "
            f"your mmd, so nothing was sent to it; remove {path}, {SOCKET_FIX}"
        )
    # A sandboxed turn may write the temp dir, and so the socket's folder when it lies there (/tmp/mm-<uid>,
    # without XDG_RUNTIME_DIR): one of its commands could put a socket of its own in the daemon's place. It
    # runs as you, but with no_new_privs, as every process of a sandboxed turn does: mmd never does unless
    # its starter did (then this client does too, and cannot tell). A listener that cannot be told (gone:
    # one that listened, forked and exited leaves its socket to a child) is refused the same way.
    if not in_temp_dir(path) or no_new_privs(os.getpid()):
        return
    confined = peer_no_new_privs(sock, pid)
    if confined is None:
        raise UnsafePath(
            f"the process that listens on {path} (pid {pid}) is gone or cannot be read, so it cannot be told "
            f"from a command of a sandboxed turn: it is not your mmd, so nothing was sent to it; remove "
            f"{path}, {SOCKET_FIX}"
        )
    if confined:
        raise UnsafePath(
            f"the process answering on {path} (pid {pid}) runs with no_new_privs, as a command of a "
            f"sandboxed turn does, and you do not: it is not your mmd, so nothing was sent to it; stop it "
            f"(kill {pid}) and remove {path}, {SOCKET_FIX}"
        )


def in_temp_dir(path: Path) -> bool:
    """Whether *path* lies in a temp dir a sandboxed turn may write: the daemon's (tempfile.gettempdir: $TMPDIR,
    $TEMP, $TMP, else /tmp, /var/tmp, /usr/tmp), any of them (tempfile itself is 3 ms of every client's start)."""
    real = os.path.realpath(path)
    named = [os.environ.get(name) for name in ("TMPDIR", "TEMP", "TMP")]
    folders = {os.path.realpath(f) for f in (*named, "/tmp", "/var/tmp", "/usr/tmp") if f}
    return any(os.path.commonpath([real, folder]) == folder for folder in folders)


def no_new_privs(pid: int) -> bool:
    """Whether process *pid* runs with no_new_privs, as every process of a sandboxed turn does; False for a
    process that is gone or whose status cannot be read: ask it of this process, or of one you keep alive
    (a peer: :func:`peer_no_new_privs`). Errors: none."""
    return _status_says(_status(pid)) is True


# SO_PEERPIDFD (Linux 6.5; socket names it from Python 3.13): a pidfd of the process at the other end of a
# Unix socket, as it connected (or listened). Before 6.5 the option is unknown (ENOPROTOOPT). 77 is its number
# wherever Linux uses the generic ones: not on SPARC and PA-RISC, where it is not asked.
SO_PEERPIDFD: int | None = getattr(
    socket, "SO_PEERPIDFD", None if os.uname().machine.startswith(("sparc", "parisc")) else 77
)


def peer_no_new_privs(sock: socket.socket, pid: int) -> bool | None:
    """Whether the process at the other end of *sock* (*pid*, from :func:`peer_credentials`: the one that
    connected, or listened) runs with no_new_privs; None when that cannot be told: it is gone, or its status
    cannot be read. A caller takes None as "confined": a sandboxed command can connect, fork and exit, and
    leave the connection to its child, and a pid read after its process is gone may be another process's.

    Where the kernel gives the peer's pidfd, the status read is known to be that process's: the pidfd
    still reaches it after the read. Elsewhere a pid recycled between the process's end and the read goes
    unseen (the kernel hands out every other pid first). Errors: none."""
    pidfd = -1  # none: a kernel before 6.5
    if SO_PEERPIDFD is not None:
        try:
            pidfd = sock.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD)
        except OSError as exc:
            if exc.errno == errno.ESRCH:  # the kernel knows the pid, and that its process is gone
                return None
    try:
        said = _status_says(_status(pid))
        if said is not None and pidfd >= 0:
            try:
                signal.pidfd_send_signal(pidfd, 0)
            except ProcessLookupError:  # gone, reaped: the status read may be of a process that took its pid
                return None
            except (
                OSError
            ):  # the call refused here (an old container's seccomp profile, valgrind): as before 6.5
                pass
        return said
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def _status(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            return status.read()
    except OSError:
        return None


def _status_says(text: bytes | None) -> bool | None:
    """The NoNewPrivs flag of a /proc status, None without one."""
    # One search, not a split of each of the file's ~60 lines: every connection asks it.
    at = -1 if text is None else text.find(b"\nNoNewPrivs:")
    if at < 0:
        return None
    assert text is not None
    return text[at + 12 :].split(None, 1)[:1] == [b"1"]


def open_lock(path: Path, *, uid: int | None = None) -> int:
    """Open (creating it 0600) the lock file *path* without following a symbolic link; return its fd.

    Never truncated, never a FIFO's blocking open: a file planted there cannot be clobbered or hang mmd.

    Errors:
        UnsafePath: *path* is a symbolic link, not a regular file, or another user's.
        OSError: it cannot be opened.
    """
    me = _me(uid)
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise UnsafePath(
            f"{path} is a symbolic link: mm does not follow it (it could point at any file of "
            f"yours); remove it (`rm {path}`), {SOCKET_FIX}"
        ) from None
    st = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(st.st_mode):
        problem = f"{path} is not a regular file"
    elif st.st_uid != me:
        problem = f"{path} belongs to uid {st.st_uid}, not you ({me}): someone else created it"
    if problem is not None:
        os.close(fd)
        raise UnsafePath(f"{problem}; remove it (`rm {path}`), {SOCKET_FIX}")
    return fd
