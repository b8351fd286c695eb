"""Whether a project's working tree may have changed since a moment: inotify on each of its folders.

A checkpoint snapshots the tree right before and right after every write call (steps.py), and a snapshot
is a git process or two (shadow.py). Most calls change nothing — a test run, an ``ls``, a ``grep`` — and
between two calls the tree is most often as the last call left it. A :class:`Watch` lets a snapshot say
"the tree of the last snapshot" without running git, when the kernel reported no change in between.

Why that is sound: the kernel queues an event for a change as the change is made, and keeps it until it
is read. :meth:`Watch.changed` reads the whole queue; the snapshot that follows reads the tree only after
that. A change made after the read is in the queue at the next :meth:`Watch.changed` (so the next
snapshot runs git); one made between the read and git's reading of the tree is in this snapshot, and in
the queue too (the next snapshot runs git for nothing, which is only slower).

Every folder is watched except those git ignores as a whole (``node_modules/``, ``.venv/``: nothing in
them is snapshotted), the project's own ``.git`` included (its ``info/exclude`` and a nested repository's
``HEAD`` are part of what a snapshot reads). A folder made or moved in, a ``.gitignore`` or
``.git/info/exclude`` changed, or events lost (the queue overflowed) make the watch start again over the
whole tree, before the snapshot that follows reads it.

Where mm does not watch, a snapshot runs git as before: inotify missing or refused (no instance or watch
left), more than ``max_folders`` folders to watch, a folder on a file system another machine can change
without an event here (anything not in LOCAL_FILE_SYSTEMS: nfs, cifs, 9p, virtiofs, fuse), an overlay
index. What inotify cannot see is named in docs/undo.md: a file changed through a hard link outside the
project, or through a shared ``mmap``.
"""

from __future__ import annotations

import collections
import ctypes
import errno
import logging
import os
import time
from pathlib import Path

import trio

from mmd import inotify
from mmd.inotify import (
    IN_ATTRIB,
    IN_CLOSE_WRITE,
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_DONT_FOLLOW,
    IN_IGNORED,
    IN_ISDIR,
    IN_MASK_ADD,
    IN_MODIFY,
    IN_MOVE_SELF,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_ONLYDIR,
    IN_Q_OVERFLOW,
    LOCAL_FILE_SYSTEMS,
)

log = logging.getLogger(__name__)

# Every change to what a folder holds or to what its files hold, mode and times included.
MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
)
# The shadow repository itself: removed or moved (someone freed the space of the snapshots, or retention
# removed them), the last tree is no tree of the repository a snapshot makes next. Added to what a project's
# folder watch may already ask of the same folder, never in its place.
REPOSITORY_MASK = IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW | IN_MASK_ADD
# Folders watched in one project at most (each watch holds about a kilobyte of kernel memory), and never more
# than 1/32 of the user's inotify watches (fs.inotify.max_user_watches: editors need theirs).
MAX_FOLDERS = 4096
# Projects watched at once; the least recently snapshotted one stops being watched.
MAX_WATCHES = 4
# False: no project is watched and every snapshot runs git (bench/bench_snapshot.py compares the two).
ENABLED = True
# Seconds before a project that could not be watched (too many folders, no watch left) is tried again.
RETRY_AFTER = 60.0


class Unwatchable(Exception):
    """The tree cannot be watched now; the message says why (for the log)."""


class Watch:
    """The inotify watches of one project's folders, and the tree of the last snapshot taken since a read
    of the queue found it empty.

    ``tree`` is None until a snapshot sets it, and again as soon as :meth:`changed` finds an event.
    """

    def __init__(self, project: Path, max_folders: int | None = None, repository: Path | None = None) -> None:
        self.project = os.fsencode(os.path.realpath(project))  # a link to it is watched as itself
        # The shadow repository whose trees ``tree`` names: its removal is a change (REPOSITORY_MASK).
        self.repository = os.fsencode(repository) if repository is not None else None
        self.identity: tuple[int, int] | None = None  # device and inode of the project folder (watch_of)
        self.max_folders = (
            min(MAX_FOLDERS, inotify.user_watches() // 32) if max_folders is None else max_folders
        )
        self.tree: str | None = None
        # The files a count found (Shadow.count_files), by the limit it counted to: kept while no event is
        # read and the watches stay set, for the next turn's first snapshot (None while a count runs).
        self.count: tuple[int, int | None] | None = None
        self.stale = True  # the watches must be set (again) over the whole tree before the next snapshot
        self.reads = (
            0  # how many times the queue was read: a snapshot sets ``tree`` only if none came after its own
        )
        self._fd = -1
        self._queued = inotify.Queued(-1)
        self._folders: dict[int, bytes] = {}  # watch descriptor → folder, relative to the project
        self.dropped = False  # let go by watch_of or refuse: a restart under way installs nothing

    def changed(self) -> bool:
        """Read every event queued; whether the tree may differ from ``tree`` (then ``tree`` is None).

        Sets ``stale`` when the watches must be set again (see :meth:`start`). Errors: none.
        """
        self.reads += 1
        changed = self.tree is None or self.stale
        while self._fd >= 0 and self._queued():
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                break
            except OSError as exc:
                log.debug("inotify read failed: %s", exc)
                self.stale = changed = True
                break
            changed = True
            self.count = None
            self._read(data)
        if changed:
            self.tree = None
        if self.stale:
            self.count = None
        return changed

    def _read(self, data: bytes) -> None:
        for wd, mask, name in inotify.events(data):
            folder = self._folders.get(wd)
            if mask & IN_IGNORED:
                self._folders.pop(wd, None)
            if (
                mask & IN_Q_OVERFLOW
                or (mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM))
                or (folder in (b"", None) and mask & (IN_DELETE_SELF | IN_MOVE_SELF))
                or name == b".gitignore"
                or folder == b".git/info"
            ):
                self.stale = True

    def start(self, ignored: set[bytes]) -> None:
        """Watch every folder of the project again, but the *ignored* ones (relative paths ending in ``/``,
        as ``git ls-files --directory`` names them), starting from an empty queue.

        Errors: Unwatchable (the old watches are gone; :meth:`changed` answers True till a start succeeds).
        """
        self.close()
        self._install(_Tree(self.project, self.max_folders).build(ignored, self.repository))

    async def restart(self, ignored: set[bytes]) -> None:
        """:meth:`start`, the walk in a worker thread: it lists and watches every folder (~100 ms for 4,000
        here), and on the loop's thread every session and client of the daemon waited for it. Meanwhile the
        watch is closed (:meth:`changed` answers True); what the walk made is installed on the loop's thread,
        or closed if the watch was dropped meanwhile (:meth:`drop`). Errors: Unwatchable, as start."""
        self.close()
        built = await trio.to_thread.run_sync(
            _Tree(self.project, self.max_folders).build, ignored, self.repository
        )
        self._install(built)  # no checkpoint since the thread returned: never lost to a cancellation

    def _install(self, built: _Tree) -> None:
        if self.dropped:
            os.close(built.fd)
            return
        self.close()  # what another restart installed meanwhile (snapshots hold the shadow's lock: none does)
        self._fd, self._folders = built.fd, built.folders  # close() left tree None
        self._queued = inotify.Queued(built.fd)
        self.stale = False

    def drop(self) -> None:
        """Close it for good: a :meth:`restart` under way closes what it made instead of installing it."""
        self.dropped = True
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = -1
        self._folders.clear()
        self.stale = True
        self.tree = None
        self.count = None

    @property
    def folders(self) -> int:
        """How many folders are watched."""
        return len(self._folders)


class _Tree:
    """The inotify instance and watches of one start, made by :meth:`build` (in a worker thread for
    Watch.restart): it touches nothing of the Watch, which installs it on the loop's thread."""

    def __init__(self, project: bytes, max_folders: int) -> None:
        self.project = project
        self.max_folders = max_folders
        self.fd = -1
        self.folders: dict[int, bytes] = {}  # watch descriptor → folder, relative to the project
        self._mounts: dict[int, str] = {}  # file system type by device number, read at the start
        self._devices: dict[int, str] = {}  # the devices the folders are on, checked

    def build(self, ignored: set[bytes], repository: bytes | None = None) -> _Tree:
        """Watch every folder but the *ignored* ones, and the *repository* folder's own removal or move;
        itself. Errors: Unwatchable (nothing left open)."""
        if inotify.LIBC is None:
            raise Unwatchable("inotify is not available here")
        fd = inotify.LIBC.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise Unwatchable(f"inotify_init1: {os.strerror(ctypes.get_errno())}")
        self.fd, self._mounts = fd, inotify.file_systems()
        try:
            self._walk(ignored)
            if repository is not None and inotify.LIBC.inotify_add_watch(fd, repository, REPOSITORY_MASK) < 0:
                err = os.strerror(ctypes.get_errno())
                raise Unwatchable(f"inotify_add_watch {os.fsdecode(repository)}: {err}")
        except BaseException:
            os.close(fd)
            raise
        return self

    def _walk(self, ignored: set[bytes]) -> None:
        # Each folder is watched before it is listed: a child made after the listing is an event.
        pending = [b""]
        while pending:
            folder = pending.pop()
            if not self._add(folder):
                continue  # gone meanwhile (its parent's event says so) or not a folder any more
            try:
                with os.scandir(os.path.join(self.project, folder)) as entries:
                    for entry in entries:
                        path = os.path.join(folder, entry.name) if folder else entry.name
                        if entry.is_dir(follow_symlinks=False) and path + b"/" not in ignored:
                            pending.append(path)
                            self._room(len(pending))  # a folder of a million folders is not listed whole
            except (FileNotFoundError, NotADirectoryError):
                continue  # gone meanwhile: its parent's event says so
            except OSError as exc:  # unreadable: what changes in it would go unseen
                raise Unwatchable(f"cannot list {os.fsdecode(folder)}: {exc.strerror}") from None

    def _room(self, pending: int = 0) -> None:
        """Errors: Unwatchable once the folders watched and *pending* are more than max_folders."""
        if len(self.folders) + pending > self.max_folders:
            raise Unwatchable(f"more than {self.max_folders} folders to watch")

    def _add(self, folder: bytes) -> bool:
        assert inotify.LIBC is not None
        self._room(1)
        try:
            device = os.lstat(os.path.join(self.project, folder) if folder else self.project).st_dev
        except (FileNotFoundError, NotADirectoryError):
            if folder:
                return False  # gone meanwhile: its parent's event says so
            raise Unwatchable("the project is gone") from None
        except OSError as exc:
            raise Unwatchable(f"cannot read {os.fsdecode(folder) or '.'}: {exc.strerror}") from None
        if device not in self._devices:
            kind = self._devices[device] = self._mounts.get(device, "unknown")
            if kind not in LOCAL_FILE_SYSTEMS:
                raise Unwatchable(
                    f"{os.fsdecode(folder) or '.'} is on a file system ({kind}) that may change without an event here"
                )
        wd = inotify.LIBC.inotify_add_watch(
            self.fd, os.path.join(self.project, folder) if folder else self.project, MASK
        )
        if wd >= 0:
            self.folders[wd] = folder
            return True
        err = ctypes.get_errno()
        if err in (errno.ENOENT, errno.ENOTDIR) and folder:
            return False  # gone meanwhile, or a file now: its parent's event says so
        raise Unwatchable(f"inotify_add_watch {os.fsdecode(folder) or '.'}: {os.strerror(err)}")


# The watch of each shadow repository's project (by the shadow's folder), least recently used first.
# Keyed by the shadow repository's path as text: a Path key is hashed and compared in Python, ten calls
# a snapshot (two a tool call).
_watches: collections.OrderedDict[str, Watch] = collections.OrderedDict()
# When a project that could not be watched may be tried again (monotonic seconds), by shadow folder.
_refused: dict[str, float] = {}


def watch_of(git_dir: Path, project: Path) -> Watch | None:
    """The watch of *project* (shadow repository *git_dir*), made on first use; None where mm does not watch
    it now (inotify missing, or it could not be watched less than RETRY_AFTER seconds ago)."""
    key = os.fspath(git_dir)
    if not ENABLED or inotify.LIBC is None or _refused.get(key, 0.0) > time.monotonic():
        return None
    watch = _watches.get(key)
    # The folder the path names now (one stat, not a realpath): a link turned elsewhere, or the project or a
    # folder above it moved away and another made in its place, is a new watch; the old watches follow the
    # folder that moved and would miss every change in the new one.
    try:
        st = os.stat(project)
    except OSError:
        return None  # gone: the snapshot runs git, which says so
    if watch is None or watch.identity != (st.st_dev, st.st_ino):
        if watch is not None:
            watch.drop()
        watch = _watches[key] = Watch(project, repository=git_dir)
        watch.identity = (st.st_dev, st.st_ino)
        while len(_watches) > MAX_WATCHES:
            _watches.popitem(last=False)[1].drop()
    _watches.move_to_end(key)
    return watch


def refuse(git_dir: Path, reason: str) -> None:
    """Stop watching the project of *git_dir* for RETRY_AFTER seconds (its snapshots run git meanwhile)."""
    log.info("not watching the project of %s: %s; its snapshots run git", git_dir, reason)
    unwatch(git_dir)
    _refused[os.fspath(git_dir)] = time.monotonic() + RETRY_AFTER


def unwatch(git_dir: Path) -> None:
    """Close the watch of the project of *git_dir*, if any: its last tree is not taken for the tree of the
    next snapshot (the repository was removed)."""
    watch = _watches.pop(os.fspath(git_dir), None)
    if watch is not None:
        watch.drop()


def forget() -> None:
    """Close every watch (tests; a daemon's closes with it)."""
    for watch in _watches.values():
        watch.drop()
    _watches.clear()
    _refused.clear()
