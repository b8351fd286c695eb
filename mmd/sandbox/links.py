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

The walk stops after MAX_ENTRIES entries: what lies past it is not checked
(docs/security.md says so). Its cost is measured by bench/bench_sandbox.py.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable

# Entries walked per spawn at most, all writable folders together: about 25 ms on a warm cache.
MAX_ENTRIES = 20_000


class HardLinkRefused(OSError):
    """A writable folder holds a hard link to a file some of whose names lie outside."""


def check_links(roots: Iterable[str], max_entries: int = MAX_ENTRIES) -> None:
    """Raise HardLinkRefused for the first file under *roots* with a name outside them.

    Symbolic links are not followed (Landlock checks where they lead). A folder
    that cannot be read is skipped. Errors: HardLinkRefused.
    """
    names: dict[tuple[int, int], list[str]] = {}
    links: dict[tuple[int, int], int] = {}
    left = max_entries
    stack = [root for root in dict.fromkeys(roots) if os.path.isdir(root)]
    while stack and left > 0:
        folder = stack.pop()
        try:
            entries = os.scandir(folder)
        except OSError:
            continue
        with entries:
            for entry in entries:
                left -= 1
                if left <= 0:
                    break
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                        continue
                    if not entry.is_file(follow_symlinks=False):
                        continue
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if st.st_nlink > 1 and stat.S_ISREG(st.st_mode):
                    key = (st.st_dev, st.st_ino)
                    names.setdefault(key, []).append(entry.path)
                    links[key] = st.st_nlink
    for key, found in names.items():
        if len(found) < links[key]:
            raise HardLinkRefused(
                f"the sandbox cannot confine writes through {found[0]}: it is a hard link (the file has "
                f"{links[key]} names, {len(found)} of them in the folders this call may write), so a write "
                "through it would change the file under its other names too. Break the link with a copy "
                f"(cp -p {found[0]} {found[0]}.copy && mv {found[0]}.copy {found[0]}) or remove it; "
                "or run mm with --sandbox off"
            )
