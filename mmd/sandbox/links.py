"""Hard links Landlock cannot confine, found before a confined process starts.

Landlock decides on the path a file is opened by. A hard link inside a
writable folder to a file whose other name lies outside is, by its path,
inside: a write through it passes and changes the file outside. A confined
process cannot make such a link (the ruleset handles LANDLOCK_ACCESS_FS_REFER:
linking a file into another folder than its own is refused, EXDEV), but one
made beforehand, by anything unconfined, stays usable. So before each
confined spawn the writable folders (not the temp dir) are walked, and a
regular file with more names than the walk found inside them refuses the
spawn, naming the file.

A walk reads every entry's inode (about 8 µs each here: 60 ms for mm's own
7,000 entries), so each folder's listing is kept and reused while the folder's
ctime is unchanged: a later spawn costs one lstat per folder and per linked
file. The walk stops after MAX_ENTRIES entries: what lies past it is not
checked (docs/security.md says so). bench/bench_sandbox.py measures both.
The listings kept are bounded (MAX_KEPT): a folder found gone loses its
listing and those below it, and past the bound the least recently used go.
A listing dropped only costs listing that folder again at the next walk.
"""

from __future__ import annotations

import collections
import os
import stat
import threading
from collections.abc import Iterable

import msgspec

from mmd import inotify, paths

# Entries walked per spawn at most, all writable folders together.
MAX_ENTRIES = 20_000
# Paths the kept listings hold at most (a path per folder, per subfolder and per linked file it names): four
# walks of MAX_ENTRIES, as many root sets as are watched at once (MAX_QUIETS): about 13 MB (160 bytes a path).
MAX_KEPT = 4 * MAX_ENTRIES


class HardLinkRefused(OSError):
    """A writable folder holds a hard link to a file some of whose names lie outside."""


class _Folder(msgspec.Struct, frozen=True):
    """What one walk of a folder found: kept until the folder's ctime changes."""

    ctime: int  # st_ctime_ns, read before the folder was listed
    entries: int
    subfolders: tuple[str, ...]
    linked: tuple[str, ...]  # regular files with more than one name
    repository: bool = False  # it holds a .git (a folder, a file or a link): mmd/sandbox/gitguard.py


# Folder path → what its last walk found, the least recently used first. A name added, removed or renamed
# in a folder changes the folder's ctime, so a folder whose ctime is unchanged holds the same names: only it
# needs no listing. The ctime, not the mtime: any writer may set a folder's mtime back (utime), and a hard
# link made, then the mtime put back, went unseen where no watch reported it; a ctime cannot be set back. A
# listing whose ctime was racy (paths.racy: a second change in the same tick keeps it) is not kept. The daemon's spawns share it, from several worker threads (under _lock). Changed only
# through _keep and _drop, which count the paths the listings hold (_held, at most MAX_KEPT): a daemon walks
# project after project, and builds make and remove folders, for weeks.
_walked: collections.OrderedDict[str, _Folder] = collections.OrderedDict()
_held = 0
_lock = threading.Lock()


def check_links(
    roots: Iterable[str], max_entries: int = MAX_ENTRIES, *, config: str | None = None
) -> list[str]:
    """Raise HardLinkRefused for the first file under *roots* with a name outside them; else return the
    folders the walk found holding a ``.git`` (for mmd/sandbox/gitguard.py).

    Symbolic links are not followed (Landlock checks where they lead). A folder
    that cannot be read is skipped. A folder walked before is listed again only
    when its mtime changed; the link count of each linked file is read afresh.
    Errors: HardLinkRefused.
    """
    names, counts, repositories = _scan(list(dict.fromkeys(roots)), max_entries)
    refused = [
        (found[0], len(found), counts[key]) for key, found in names.items() if len(found) < counts[key]
    ]
    if refused:
        raise HardLinkRefused(refusal(refused, config))
    return repositories


def repositories(roots: Iterable[str], max_entries: int = MAX_ENTRIES) -> list[str]:
    """The folders under *roots* that hold a ``.git``, as :func:`check_links` finds them (refusing nothing)."""
    return _scan(list(dict.fromkeys(roots)), max_entries)[2]


def settled_repositories(roots: Iterable[str]) -> list[str] | None:
    """The folders under *roots* that hold a ``.git`` as the last walk found them, if no name was made,
    moved or removed beneath them since (the walk's inotify watches are quiet); None when that cannot be
    told without a walk: something changed, or a folder is not on a local file system (no watch), and
    :func:`repositories` walks. Only reads the watches' queue, and None too while a walk holds the lock:
    it never waits on a file system, nor on a thread that does."""
    if not _lock.acquire(blocking=False):
        return None
    try:
        quiet = _quiet_of(tuple(dict.fromkeys(roots)))
        return quiet.repositories if quiet is not None and quiet.passed() else None
    finally:
        _lock.release()


def _scan(
    roots: list[str], max_entries: int
) -> tuple[dict[tuple[int, int], list[str]], dict[tuple[int, int], int], list[str]]:
    with _lock:
        quiet = _quiet_of(tuple(roots))
        if quiet is not None and quiet.passed():
            # No name made, moved or removed since a walk passed: its linked files are all there is to
            # look at, and their link counts are read afresh (a name made for one outside shows only there).
            names, counts = _counted(quiet.linked)
            return names, counts, quiet.repositories
        linked, repositories, complete = _walk(roots, max_entries, quiet)
        names, counts = _counted(linked)
        if quiet is not None:
            passed = all(len(found) == counts[key] for key, found in names.items())
            quiet.settle(linked if complete and passed else None, repositories)
    return names, counts, repositories


def refusal(refused: list[tuple[str, int, int]], config: str | None = None) -> str:
    """What a refused spawn says of the hard links *refused* (each: a name inside, how many of its names are
    inside, how many it has). The model reads it first: it names what the person has to do, since no
    command of the model can run confined to do it (the one named by a package manager's link farm).
    *config*: the daemon's config.yaml (default: the default one)."""
    found = [(_farm(r[0]), r) for r in refused]
    farms = collections.Counter(farm for farm, _ in found)
    farm = max(farms, key=lambda f: (f is not None, farms[f]))  # a farm's, else the first file's
    path, inside, names = next(r for f, r in found if f == farm)
    said = f"the file has {names} names, {inside} of them in the folders this call may write"
    if farm is None:
        more = f" ({len(refused) - 1} more such files, such as {refused[1][0]})" if len(refused) > 1 else ""
        return (
            f"the sandbox cannot confine writes through {path}: it is a hard link ({said}){more}, so a write "
            "through it would change the file under its other names too. Break the link with a copy "
            f"(cp -p {path} {path}.copy && mv {path}.copy {path}) or remove it; or run mm with --sandbox off"
        )
    folder, manager = farm
    # What the person does comes first: a tool's echo, and the turn's end when the model keeps calling, show
    # the first few hundred characters.
    return (
        f"{folder} holds {farms[farm]} hard links into {_STORES[manager]}, which the sandbox cannot confine: the "
        f"person running mm must make it hold copies "
        f"({_COPIES[manager].format(config=config or paths.config_dir() / 'config.yaml')}), or run mm with "
        "--sandbox off. "
        "Tell them so; do not try to fix it with a command: none can run confined here until then. A write "
        f"through one of the links would change that file for every project that shares it ({path}: {said})"
    )


# Package managers that hard-link the files of a store shared by every project into a project's folder, by
# default wherever the store and the project are on one file system.
_STORES = {"uv": "uv's cache", "pnpm": "pnpm's store"}
_COPIES = {
    "uv": '`uv sync --reinstall --link-mode=copy`; `link-mode = "copy"` under [tool.uv] in pyproject.toml '
    "keeps later syncs copying) or let confined calls write uv's cache, which `uv run` locks anyway (its "
    "folder, `uv cache dir`, under sandbox: writable: in {config}",
    "pnpm": "`pnpm config set package-import-method copy --location project && pnpm install --force`) or let "
    "confined calls write pnpm's store (its folder, `pnpm store path`, under sandbox: writable: in {config}",
}


def _farm(path: str) -> tuple[str, str] | None:
    """The folder of a package manager's link farm *path* lies in, and the manager: a virtual environment uv
    made (its pyvenv.cfg names uv), or a node_modules pnpm made (it holds .modules.yaml)."""
    folder = os.path.dirname(path)
    farm = None
    while folder != os.path.dirname(folder):
        if os.path.basename(folder) == "node_modules" and os.path.isfile(
            os.path.join(folder, ".modules.yaml")
        ):
            farm = (folder, "pnpm")  # the outermost: pnpm's own node_modules/.pnpm/… hold more of them
        elif farm is None and _made_by_uv(os.path.join(folder, "pyvenv.cfg")):
            return folder, "uv"
        folder = os.path.dirname(folder)
    return farm


def _made_by_uv(cfg: str) -> bool:
    # Opened without waiting, and read only if a regular file: a FIFO a project holds as pyvenv.cfg hung
    # this thread (the sandbox's spawner) in open(), and with it every confined call and the daemon's stop.
    try:
        fd = os.open(cfg, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "rb") as f:
            head = f.read(4096) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        return False
    return any(line.split(b"=")[0].strip() == b"uv" for line in head.splitlines())


def _walk(roots: list[str], max_entries: int, quiet: _Quiet | None) -> tuple[list[str], list[str], bool]:
    """The regular files with more than one name under *roots*, the folders holding a ``.git``, and whether
    the walk reached every folder (it stops after *max_entries* entries). Each folder is watched (*quiet*)
    before it is listed."""
    linked: list[str] = []
    repositories: list[str] = []
    left = max_entries
    stack = list(roots)
    while stack and left > 0:
        path = stack.pop()
        if quiet is not None:
            quiet.add(path)  # watched before it is listed: a change after the listing is an event
        folder = _folder(path)
        if folder is None:
            continue
        left -= folder.entries
        stack.extend(folder.subfolders)
        linked.extend(folder.linked)
        if folder.repository:
            repositories.append(path)
    return linked, repositories, not stack


def _counted(paths: Iterable[str]) -> tuple[dict[tuple[int, int], list[str]], dict[tuple[int, int], int]]:
    """The names found of each file among *paths* that still has more than one, and its link count now."""
    names: dict[tuple[int, int], list[str]] = {}
    counts: dict[tuple[int, int], int] = {}
    for path in paths:
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_nlink > 1 and stat.S_ISREG(st.st_mode):
            names.setdefault((st.st_dev, st.st_ino), []).append(path)
            counts[(st.st_dev, st.st_ino)] = st.st_nlink
    return names, counts


def _git_objects(parent: str, name: str) -> bool:
    """Whether *parent*/*name* is a git object store (``.git/objects``), which the walk skips.

    ``git clone`` of a path on the same file system hard-links the objects of the repository it
    clones, so nearly every local clone would be refused otherwise. Objects are read-only files
    named by their hash, never written through by git; what a confined write through one could do
    is corrupt the same object of the other repository (docs/security.md says so).
    """
    return name == "objects" and os.path.basename(parent) == ".git"


def _folder(path: str) -> _Folder | None:
    """The walk of *path*: the cached one while its ctime holds, else a new listing."""
    try:
        changed = os.lstat(path).st_ctime_ns
    except OSError:
        _drop(path)
        return None
    cached = _walked.get(path)
    if cached is not None and cached.ctime == changed:
        _walked.move_to_end(path)
        return cached
    subfolders, linked, entries, repository = [], [], 0, False
    try:
        listing = os.scandir(path)
    except OSError:
        return None
    with listing:
        for entry in listing:
            entries += 1
            repository = repository or entry.name == ".git"
            try:
                if entry.is_dir(follow_symlinks=False):
                    if not _git_objects(path, entry.name):
                        subfolders.append(entry.path)
                elif entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_nlink > 1:
                    linked.append(entry.path)
            except OSError:
                continue
    walked = _Folder(changed, entries, tuple(subfolders), tuple(linked), repository)
    if cached is not None:  # a subfolder it no longer holds was removed or moved: its listings are no one's
        for gone in set(cached.subfolders).difference(subfolders):
            _drop(gone)
    if paths.racy(changed):  # listed again next time: a name made now may leave the ctime as it is
        _drop(path, below=False)
    else:
        _keep(path, walked)
    return walked


def _weight(folder: _Folder) -> int:
    return 1 + len(folder.subfolders) + len(folder.linked)


def _keep(path: str, folder: _Folder) -> None:
    """Keep *folder* as *path*'s listing, the most recently used; the least recently used go past MAX_KEPT
    (never the one just kept: the walk that listed it goes on)."""
    global _held
    _drop(path, below=False)
    _walked[path] = folder
    _held += _weight(folder)
    while _held > MAX_KEPT and len(_walked) > 1:
        _drop(next(iter(_walked)), below=False)


def _drop(path: str, *, below: bool = True) -> None:
    """Forget *path*'s listing, and (*below*) those of the folders beneath it that the listings name: the
    folder is gone or moved, and so are they under that path."""
    global _held
    stack = [path]
    while stack:
        folder = _walked.pop(stack.pop(), None)
        if folder is not None:
            _held -= _weight(folder)
            if below:
                stack.extend(folder.subfolders)


def _drop_all() -> None:
    global _held
    _walked.clear()
    _held = 0


# -- skipping the walk while nothing changed ---------------------------------------------------------

# Root sets watched at once (each a set of inotify watches, one per folder).
MAX_QUIETS = 4
# Folders watched for one root set at most; past it (or 1/32 of fs.inotify.max_user_watches) the walk runs
# at every spawn, as without a watch.
MAX_WATCHED = 4096
# What makes a walk's listings stale: a name made, moved or removed in a folder, or a folder itself moved or
# removed. (A second name made for a file *outside* the folders is no event of theirs: the kernel reports a
# link count to watches of the file itself. The files already linked are therefore looked at each time.)
_MASK = (
    inotify.IN_CREATE
    | inotify.IN_MOVED_FROM
    | inotify.IN_MOVED_TO
    | inotify.IN_DELETE
    | inotify.IN_DELETE_SELF
    | inotify.IN_MOVE_SELF
    | inotify.IN_ONLYDIR
    | inotify.IN_DONT_FOLLOW
)


class _Quiet:
    """The inotify watches of every folder a walk of one root set went through.

    A walk that found no refusal and reached every folder leaves the set *settled*; the next check
    reads the queue first, and while it is empty no folder is looked at, only the files the walk found
    linked (their link counts), as the walk would (a warm walk costs one lstat per folder: 2 ms for a
    project with a virtualenv, more with node_modules). An event drops the listing of the folder it came
    from and the next check walks again. Watches are set only on local file systems (LOCAL_FILE_SYSTEMS of
    mmd/inotify.py): elsewhere a change may come without an event.
    """

    def __init__(self) -> None:
        self.settled = False
        self.linked: list[str] = []  # the files with more than one name the settled walk found
        self.repositories: list[str] = []  # the folders holding a .git it found
        self.folders: dict[int, str] = {}  # watch descriptor → folder
        self.paths: set[str] = set()  # the folders watched under the path they had when added
        self.broken = inotify.LIBC is None
        self.limit = min(MAX_WATCHED, inotify.user_watches() // 32)
        self._mounts = inotify.file_systems()
        self._fd = -1 if self.broken else inotify.LIBC.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        self.broken = self.broken or self._fd < 0
        self._queued = inotify.Queued(self._fd)

    def passed(self) -> bool:
        """Read every queued event; True if the set is settled and none came."""
        if self.broken:
            return False
        while self._queued():  # (under _lock: one poll at a time)
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                self.settled = False
                break
            self.settled = False
            self._forget(data)
        return self.settled

    def _forget(self, data: bytes) -> None:
        for wd, mask, name in inotify.events(data):
            folder = self.folders.get(wd)
            if folder is not None:
                _drop(folder, below=False)  # listed again by the next walk
                if mask & (inotify.IN_DELETE | inotify.IN_MOVED_FROM) and name:
                    # A subfolder removed or moved away: the listings beneath its path are no one's now
                    # (this one's new listing cannot tell which subfolders it lost: it is dropped).
                    _drop(os.path.join(folder, os.fsdecode(name)))
                if mask & (inotify.IN_IGNORED | inotify.IN_MOVE_SELF | inotify.IN_DELETE_SELF):
                    # It left its path, and its subfolders with it: their listings go. Another folder may
                    # take its path, or its subfolders': each is watched anew when a walk comes to it.
                    _drop(folder)
                    below = folder + os.sep
                    self.paths = {p for p in self.paths if p != folder and not p.startswith(below)}
            if mask & inotify.IN_IGNORED:
                self.folders.pop(wd, None)
            if mask & inotify.IN_Q_OVERFLOW:
                _drop_all()  # events were lost: every folder is listed and watched again
                self.paths.clear()

    def add(self, folder: str) -> None:
        """Watch *folder* (a walk is about to list it); a failure leaves the set unsettled for good."""
        if self.broken or folder in self.paths:
            return
        try:
            local = self._mounts.get(os.lstat(folder).st_dev) in inotify.LOCAL_FILE_SYSTEMS
        except OSError:
            return  # gone: the walk skips it too
        assert inotify.LIBC is not None
        wd = inotify.LIBC.inotify_add_watch(self._fd, os.fsencode(folder), _MASK) if local else -1
        if wd < 0 or (wd not in self.folders and len(self.folders) >= self.limit):
            self.close()  # a folder that cannot be watched: every check walks, as without the set
            return
        self.folders[wd] = folder
        self.paths.add(folder)

    def settle(self, linked: list[str] | None, repositories: list[str]) -> None:
        """The walk ended: *linked* are the linked files it found if it reached every folder and passed (its
        answer then stands until the next event, their link counts read at each check), None otherwise;
        *repositories* the folders holding a ``.git`` it found."""
        self.settled = linked is not None and not self.broken
        self.linked = linked or []
        self.repositories = repositories

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self.broken, self.settled = -1, True, False
        self.folders.clear()
        self.paths.clear()


_quiets: collections.OrderedDict[tuple[str, ...], _Quiet] = collections.OrderedDict()


def _quiet_of(roots: tuple[str, ...]) -> _Quiet | None:
    """The watch of *roots*, made on first use (the least recently used of MAX_QUIETS is closed)."""
    if not ENABLED:
        return None
    quiet = _quiets.get(roots)
    if quiet is None:
        quiet = _quiets[roots] = _Quiet()
        while len(_quiets) > MAX_QUIETS:
            evicted = _quiets.popitem(last=False)[1]
            # Its queued events drop the listings of the folders changed, removed or moved since (a project
            # deleted after its last call); the others stay, checked by their ctime at the next walk.
            evicted.passed()
            evicted.close()
    _quiets.move_to_end(roots)
    return quiet


def forget() -> None:
    """Close every watch and drop every kept listing (tests)."""
    with _lock:
        for quiet in _quiets.values():
            quiet.close()
        _quiets.clear()
        _drop_all()


# False: every check walks (bench/bench_sandbox.py compares the two).
ENABLED = True
