"""Where mm keeps its socket, state, configuration and data (XDG directories).

Shared by the daemon and the clients, so it imports only the standard library.
Every location can be overridden by its environment variable, which is how
tests give each daemon its own private tree.
"""

from __future__ import annotations

import errno
import functools
import os
import time
from pathlib import Path

# A file system stamps a change (a file's or a folder's ctime) with its clock's coarse tick: a few ms on Linux
# before 6.13 (most file systems), up to 2 s on FAT and some NFS servers. A second change within the same
# tick leaves the stamp as it was, so a stamp this close to the moment it was read does not tell whether a
# change comes after: what is kept by it is looked at again next time (git's "racy" entries, the same rule).
RACY_NS = 2_000_000_000


def home() -> Path:
    """The user's home folder, as ``Path.home()`` gives it: made once for each value of ``$HOME`` (without
    it, the password database's entry of this uid, which does not change), where ``Path.home()`` cost ~40
    Python calls each time, several times a prompt."""
    return _home(os.environ.get("HOME"))


@functools.lru_cache(maxsize=8)
def _home(value: str | None) -> Path:
    return Path.home()


def racy(stamp_ns: int) -> bool:
    """Whether a change stamped *stamp_ns* (a ctime, in ns), read now, may be followed by another under the
    same stamp (:data:`RACY_NS`): nothing kept by the stamp may be trusted to show it. A stamp ahead of the
    clock (a clock set back) is racy too."""
    return time.time_ns() - stamp_ns < RACY_NS


def _xdg(var: str, default: str) -> Path:
    value = os.environ.get(var)
    return Path(value) if value and os.path.isabs(value) else home() / default


def runtime_dir() -> Path:
    """``$XDG_RUNTIME_DIR/mm``, or ``/tmp/mm-<uid>`` where no runtime dir is set."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and os.path.isabs(base):
        return Path(base) / "mm"
    return Path(f"/tmp/mm-{os.getuid()}")


def socket_path() -> Path:
    """The daemon's socket: ``$MM_SOCKET`` if set, else ``runtime_dir()/mmd.sock``.

    A relative ``$MM_SOCKET`` is taken from the current folder, once, here: the daemon a client starts runs
    in ``/``, and bound it there (``/s/mmd.sock`` for ``MM_SOCKET=s/mmd.sock``) while the client waited in
    vain where it was. Where the current folder is gone, it stays relative (and is not found)."""
    override = os.environ.get("MM_SOCKET")
    if not override:
        return runtime_dir() / "mmd.sock"
    try:
        return Path(os.path.abspath(override))
    except OSError:
        return Path(override)


def state_dir() -> Path:
    """``$XDG_STATE_HOME/mm``: the SQLite store, session folders and the daemon log."""
    return _xdg("XDG_STATE_HOME", ".local/state") / "mm"


def config_dir() -> Path:
    """``$XDG_CONFIG_HOME/mm``: config.yaml and user skills."""
    return _xdg("XDG_CONFIG_HOME", ".config") / "mm"


def data_dir() -> Path:
    """``$XDG_DATA_HOME/mm``: downloaded models and built binaries."""
    return _xdg("XDG_DATA_HOME", ".local/share") / "mm"


# The errors of a stat that mean "not there", as Path.exists() reads them; any other (a name too long, no
# permission) is raised.
_ABSENT = frozenset((errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP))


def project_root(cwd: Path) -> Path:
    """The nearest folder from *cwd* up holding ``.git`` (a folder, or a worktree's file); else *cwd*.

    Each ``.git`` is looked for as ``(folder / ".git").exists()`` would, without joining a Path (~45
    Python calls each on 3.11): once or more every prompt."""
    for folder in (cwd, *cwd.parents):
        try:
            os.stat(os.path.join(folder, ".git"))
        except OSError as exc:
            if exc.errno not in _ABSENT:
                raise
            continue
        except ValueError:  # a NUL in the path: no such file, as Path.exists() answers
            continue
        return folder
    return cwd
