"""inotify, as mm uses it: the event constants, the event record, libc's two calls (None where there is no
inotify), the file systems on which every change makes an event here, and the user's watch limit.

Shared by mmd/undo/watch.py (a project's snapshots skip git while nothing changed) and
mmd/sandbox/links.py (a confined spawn skips the hard-link walk while nothing changed).
"""

from __future__ import annotations

import ctypes
import os
import select
import struct
from collections.abc import Iterator

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_ISDIR = 0x40000000
IN_MASK_ADD = 0x20000000
EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then len bytes of name
# File systems on which every change is made through this kernel, so that inotify reports it. A network or
# shared one (nfs, cifs, 9p and virtiofs — WSL's /mnt/c, a VM's shared folder —, fuse) can be changed from
# elsewhere without an event: a project with a folder on one is not watched.
LOCAL_FILE_SYSTEMS = frozenset(
    {
        "btrfs",
        "bcachefs",
        "exfat",
        "ext2",
        "ext3",
        "ext4",
        "f2fs",
        "hfsplus",
        "jfs",
        "nilfs2",
        "overlay",
        "ramfs",
        "reiserfs",
        "tmpfs",
        "vfat",
        "xfs",
        "zfs",
    }
)


def user_watches() -> int:
    """fs.inotify.max_user_watches (8192, the old kernels' default, when it cannot be read)."""
    try:
        with open("/proc/sys/fs/inotify/max_user_watches") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 8192  # the old kernels' default


def file_systems() -> dict[int, str]:
    """The type of each mounted file system, by its device number (/proc/self/mountinfo)."""
    found: dict[int, str] = {}
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            for line in f:
                fields = line.split()
                try:
                    major, minor = fields[2].split(b":")
                    kind = fields[fields.index(b"-") + 1]
                    found[os.makedev(int(major), int(minor))] = kind.decode("ascii", "replace")
                except (ValueError, IndexError):
                    continue
    except OSError:
        pass
    return found


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    except (OSError, AttributeError):  # not Linux, or a libc without inotify
        return None
    return libc


LIBC = _libc()


class Queued:
    """Whether an inotify descriptor has events queued, asked without reading: a read of an empty queue
    raises BlockingIOError (1.7 us here, against 0.5 for a poll), and both watches look at an empty queue
    around every call that changes nothing, four times a confined call. Not for two threads at once."""

    def __init__(self, fd: int) -> None:
        self._poll = select.poll()
        if fd >= 0:
            self._poll.register(fd, select.POLLIN)

    def __call__(self) -> bool:
        return bool(self._poll.poll(0))


def events(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """The events one read of an inotify descriptor returned: (watch descriptor, mask, name) each."""
    offset = 0
    while offset + EVENT.size <= len(data):
        wd, mask, _cookie, size = EVENT.unpack_from(data, offset)
        start = offset + EVENT.size
        yield wd, mask, data[start : start + size].rstrip(b"\0")
        offset = start + size
