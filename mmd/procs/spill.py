"""Spill files: where the whole of an output the model reads cut is kept, and what keeps them from filling a disk.

Every spill file is written here: a process's output as it streams (:class:`Spill`, opened by the
supervisor's output capture when the output is first cut) and a whole text at once (:func:`write_whole`: an
in-daemon tool's result, an output cut to the model's window, an old output replaced by a stub).

A spill never takes the last of its file system: it stops where the free space would fall below
:func:`keep_free` (a tenth of the file system, at most 1 GiB), as journald keeps some of its disk free. A
model that runs ``yes`` in every step of a turn wrote a gigabyte a call until the disk was full, and a full
disk stops what else the user runs, and the store with it. A spill that cannot be written (that rule, a full
disk, a quota, a read-only or failing file system) is abandoned whole — the file removed — and the caller
tells the model why in place of naming the file: the call itself goes on.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

# The free space a spill leaves its file system: a tenth of its size, at most this much.
KEEP_FREE_MAX = 1024 * 1024 * 1024
KEEP_FREE_SHARE = 10
# Written bytes between two looks at the free space: half of the room the last look found, within these.
_LOOK_MIN = 64 * 1024
_LOOK_MAX = 64 * 1024 * 1024


class NoRoom(OSError):
    """Writing on would leave the file system less free space than :func:`keep_free`."""

    def __init__(self, keep: int) -> None:
        super().__init__(errno.ENOSPC, f"the disk would keep less than {size(keep)} free")


def keep_free(stat: os.statvfs_result) -> int:
    """The bytes a spill leaves free on the file system *stat* describes."""
    return min(KEEP_FREE_MAX, stat.f_blocks * stat.f_frsize // KEEP_FREE_SHARE)


def _room(stat: os.statvfs_result) -> tuple[int, int]:
    """The bytes that may be written on the file system *stat* describes (below 0: past the reserve), and
    the reserve."""
    keep = keep_free(stat)
    return stat.f_bavail * stat.f_frsize - keep, keep


def short_of_room(folder: Path) -> int | None:
    """The reserve of the file system that holds *folder* when its free space is below it (what else mm keeps
    there, the undo snapshots, stops then too); None when there is room, or it cannot be told."""
    while not folder.exists() and folder.parent != folder:  # not made yet: where it will be
        folder = folder.parent
    try:
        stat = os.statvfs(folder)
    except OSError:
        return None
    room, keep = _room(stat)
    return keep if room < 0 else None


def reason(exc: OSError) -> str:
    """Why a spill could not be written, for the model: the system's words, without the path."""
    if isinstance(exc, NoRoom):
        return str(exc.strerror)
    words = exc.strerror or str(exc) or type(exc).__name__
    return words[:1].lower() + words[1:]


class Spill:
    """One spill file, made 0600 in a 0700 folder when it is opened, written unbuffered (an error shows at the
    write that met it, not at a later flush), and removed when it is closed unless kept."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.keep = False  # set by the caller: the output was cut, and the file is what the marker names
        self._fd: int | None = None
        self._until_look = 0  # bytes that may be written before the free space is looked at again

    def open(self) -> Spill:
        """Create (or empty) the file and its folder.

        Errors: OSError (NoRoom when the file system is already at its reserve).
        """
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        self._look(0)
        return self

    def write(self, data: bytes) -> None:
        """Append *data*, whole.

        Errors: OSError from the write, NoRoom before a write that would pass the reserve.
        """
        assert self._fd is not None
        if len(data) > self._until_look:
            self._look(len(data))
        self._until_look -= len(data)
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def _look(self, size: int) -> None:
        assert self._fd is not None
        room, keep = _room(os.fstatvfs(self._fd))
        if size > room:
            raise NoRoom(keep)
        self._until_look = max(min(room // 2, _LOOK_MAX), min(_LOOK_MIN, room))

    def close(self) -> None:
        """Close the file, and remove it unless kept. Never raises: a file that cannot be removed stays."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.close(fd)  # no buffer to flush; a network file system may still report a write it lost
        except OSError:
            self.keep = False
        if not self.keep:
            with contextlib.suppress(OSError):
                self.path.unlink(missing_ok=True)


def write_whole(path: Path, data: bytes) -> str | None:
    """Write *data* to the spill file *path*; None once it is there whole, else why not (then no file is left:
    a part would read as the whole)."""
    spill = Spill(path)
    try:
        spill.open().write(data)
    except OSError as exc:
        spill.close()
        return reason(exc)
    spill.keep = True
    spill.close()
    return None if spill.keep else "the file system reported a lost write"


def size(n: int) -> str:
    """*n* bytes for a person: MiB from one on, else bytes."""
    return f"{n / 1024 / 1024:,.0f} MiB" if n >= 1024 * 1024 else f"{n:,} bytes"
