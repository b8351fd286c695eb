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
mtime is unchanged: a later spawn costs one lstat per folder and per linked
file. The walk stops after MAX_ENTRIES entries: what lies past it is not
checked (docs/security.md says so). bench/bench_sandbox.py measures both.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterable

import msgspec

# Entries walked per spawn at most, all writable folders together.
MAX_ENTRIES = 20_000


class HardLinkRefused(OSError):
    """A writable folder holds a hard link to a file some of whose names lie outside."""


class _Folder(msgspec.Struct, frozen=True):
    """What one walk of a folder found: kept until the folder's mtime changes."""

    mtime: int  # st_mtime_ns, read before the folder was listed
    entries: int
    subfolders: tuple[str, ...]
    linked: tuple[str, ...]  # regular files with more than one name


# Folder path → what its last walk found. A name added, removed or renamed in a folder changes
# the folder's mtime, so a folder whose mtime is unchanged holds the same names: only it needs
# no listing. The daemon's spawns share it, from several worker threads.
_walked: dict[str, _Folder] = {}
_lock = threading.Lock()


def check_links(roots: Iterable[str], max_entries: int = MAX_ENTRIES) -> None:
    """Raise HardLinkRefused for the first file under *roots* with a name outside them.

    Symbolic links are not followed (Landlock checks where they lead). A folder
    that cannot be read is skipped. A folder walked before is listed again only
    when its mtime changed; the link count of each linked file is read afresh.
    Errors: HardLinkRefused.
    """
    names: dict[tuple[int, int], list[str]] = {}
    counts: dict[tuple[int, int], int] = {}
    left = max_entries
    stack = list(dict.fromkeys(roots))
    with _lock:
        while stack and left > 0:
            folder = _folder(stack.pop())
            if folder is None:
                continue
            left -= folder.entries
            stack.extend(folder.subfolders)
            for path in folder.linked:
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if st.st_nlink > 1 and stat.S_ISREG(st.st_mode):
                    names.setdefault((st.st_dev, st.st_ino), []).append(path)
                    counts[(st.st_dev, st.st_ino)] = st.st_nlink
    for key, found in names.items():
        if len(found) < counts[key]:
            raise HardLinkRefused(
                f"the sandbox cannot confine writes through {found[0]}: it is a hard link (the file has "
                f"{counts[key]} names, {len(found)} of them in the folders this call may write), so a write "
                "through it would change the file under its other names too. Break the link with a copy "
                f"(cp -p {found[0]} {found[0]}.copy && mv {found[0]}.copy {found[0]}) or remove it; "
                "or run mm with --sandbox off"
            )


def _git_objects(parent: str, name: str) -> bool:
    """Whether *parent*/*name* is a git object store (``.git/objects``), which the walk skips.

    ``git clone`` of a path on the same file system hard-links the objects of the repository it
    clones, so nearly every local clone would be refused otherwise. Objects are read-only files
    named by their hash, never written through by git; what a confined write through one could do
    is corrupt the same object of the other repository (docs/security.md says so).
    """
    return name == "objects" and os.path.basename(parent) == ".git"


def _folder(path: str) -> _Folder | None:
    """The walk of *path*: the cached one while its mtime holds, else a new listing."""
    try:
        mtime = os.lstat(path).st_mtime_ns
    except OSError:
        _walked.pop(path, None)
        return None
    cached = _walked.get(path)
    if cached is not None and cached.mtime == mtime:
        return cached
    subfolders, linked, entries = [], [], 0
    try:
        listing = os.scandir(path)
    except OSError:
        return None
    with listing:
        for entry in listing:
            entries += 1
            try:
                if entry.is_dir(follow_symlinks=False):
                    if not _git_objects(path, entry.name):
                        subfolders.append(entry.path)
                elif entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_nlink > 1:
                    linked.append(entry.path)
            except OSError:
                continue
    walked = _Folder(mtime, entries, tuple(subfolders), tuple(linked))
    _walked[path] = walked
    return walked
