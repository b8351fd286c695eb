"""The shadow repository of a project: git trees of its working tree, kept outside the user's ``.git``.

A snapshot is ``git add -A`` then ``git write-tree`` with ``--git-dir`` set to a private bare
repository under ``$XDG_STATE_HOME/mm/snapshots/<hash of the project's path>/`` and ``--work-tree``
set to the project. The index of that repository caches every file's stat data, so a snapshot after
the first one hashes only the files that changed: the cost is about a ``git status``
(bench/bench_snapshot.py). Trees, not commits: nothing moves a ref, nothing is ever pushed.

What git reads of the project is its content and the ``.gitignore`` files in it; nothing of the
user's git configuration runs. Each git process starts with an environment of its own (no
``GIT_DIR``, ``GIT_WORK_TREE``, ``GIT_INDEX_FILE`` or any other variable of the daemon's), no system
or global config (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``, ``HOME`` an empty folder),
hooks off, fsmonitor off, and ``info/attributes`` that turns off line-ending conversion and filters,
so that what is restored is byte for byte what was there. Each git runs under the supervisor, in its
own process group, stopped with its group when the call is cancelled.

Paths stay bytes from git to the work tree (``-z`` everywhere, ``GIT_LITERAL_PATHSPECS``), so a name
holding a newline, a glob character or bytes that are not UTF-8 is handled like any other; only what
people read is decoded (with U+FFFD). Symbolic links are stored and restored as links, never followed.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import os
import re
import shutil
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import trio

from ..procs import communicate, supervised_process
from ..untrusted import open_regular, read_at_most
from .watch import Unwatchable, Watch, refuse, watch_of

log = logging.getLogger(__name__)

# The tree of an empty project: what ``git write-tree`` gives for an empty index.
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
# The object id of an index entry that removes its path (``update-index --index-info`` with mode 0).
EMPTY_BLOB_ID = b"0" * 40
# Bytes of a diff returned to a client; the rest is cut with a note (an RPC frame holds 16 MiB).
MAX_DIFF_BYTES = 4 << 20
# Bytes kept of a git's stderr, for the error message.
MAX_STDERR = 8192
# The most of a project's .git/info/exclude copied into its shadow repository.
MAX_EXCLUDE = 1 << 20
# The heap one git of a snapshot may take (RLIMIT_DATA): far above what a tree of snapshot_max_files files
# needs (git maps the files it hashes, which does not count), far below what a project's endless file would
# take of the machine (a nested repository's ref linked to /dev/zero: git reads a ref whole).
MAX_GIT_DATA = 1 << 30
# Seconds between two looks at a running git for a FIFO it waits to open (_watch_fifo).
FIFO_LOOK = 1.0
# Which argument is the path, by /proc/PID/syscall's number: ``open`` and ``openat`` on x86-64, ``openat``
# on arm64 (elsewhere the FIFO is found, not named).
OPEN_PATH_ARG = {"x86_64": {"2": 0, "257": 1}, "aarch64": {"56": 1}}.get(os.uname().machine, {})
# Written into the shadow repository's config: nothing of the user's git setup may run.
CONFIG = """\
[core]
\tbare = true
\tautocrlf = false
\tsafecrlf = false
\tfileMode = true
\tsymlinks = true
\tfsmonitor = false
\thooksPath = /dev/null
\tuntrackedCache = true
\tquotePath = false
\tpreloadIndex = true
[gc]
\tauto = 0
[advice]
\taddEmbeddedRepo = false
\tdetachedHead = false
[index]
\tskipHash = false
"""
# info/attributes outranks every .gitattributes of the project: store the bytes as they are.
ATTRIBUTES = "* -text -filter -ident -working-tree-encoding\n"
# What git says when a lock file of the repository is in its way (a git killed before it removed it).
_LOCK_IN_THE_WAY = re.compile(rb"Unable to create '([^'\n]+\.lock)': File exists")
# When this daemon started (this module is imported as it starts): a lock file older is no git of its own.
_STARTED = time.time()


class SnapshotError(Exception):
    """A snapshot or a restore could not be made; the message says why and what to do."""


class Change(msgspec.Struct, frozen=True, array_like=True):
    """One path a step changed: ``added``, ``modified``, ``deleted`` or ``type`` (file ↔ link)."""

    change: str
    path: bytes

    def shown(self) -> dict[str, str]:
        return {"path": self.path.decode("utf-8", "replace"), "change": self.change}


# Called with each chunk of a git's stdout; True: enough was read, stop git.
Stop = Callable[[bytes], bool]

# What check-ignore could take for a glob in a path it is given.
_GLOB = re.compile(rb"[*?[\]\\]")

_CHANGES = {b"A": "added", b"M": "modified", b"D": "deleted", b"T": "type"}


def shadow_dir(snapshots: Path, project: Path) -> Path:
    """The shadow repository of *project* under the *snapshots* folder (one per project path)."""
    digest = hashlib.sha256(os.fsencode(os.path.realpath(project))).hexdigest()[:16]
    return snapshots / digest


def git_missing() -> bool:
    return shutil.which("git") is None


# The tree last written from each index file, by the index's checksum.
_trees: dict[Path, tuple[bytes, str]] = {}


def _checksum(index: Path) -> bytes | None:
    """The SHA-1 trailer git ends an index with; None if unreadable or zero (index.skipHash)."""
    try:
        with open(index, "rb") as f:
            f.seek(-20, os.SEEK_END)
            trailer = f.read(20)
    except OSError:
        return None
    return trailer if len(trailer) == 20 and any(trailer) else None


class Shadow(msgspec.Struct):
    """The shadow repository *git_dir* of the working tree *project*."""

    git_dir: Path
    project: Path
    timeout: float = 300.0  # seconds one git process may take before its group is stopped
    index: Path | None = None  # another index than the repository's own (an overlay's)
    watched: bool = True  # may a snapshot skip git when the project's watch saw no change (watch.py)

    # -- git ----------------------------------------------------------------------------

    def _env(self, literal: bool = True) -> dict[str, str]:
        home = str(self.git_dir / "home")
        return {
            "PATH": os.environ.get("PATH") or os.defpath,
            "HOME": home,
            "XDG_CONFIG_HOME": home,
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_LITERAL_PATHSPECS": "1" if literal else "0",
            "LC_ALL": "C",
            "TZ": "UTC",
            **({"GIT_INDEX_FILE": str(self.index)} if self.index else {}),
        }

    async def git(
        self,
        *args: str,
        stdin: bytes | None = None,
        stop: Stop | None = None,
        ok: tuple[int, ...] = (0,),
        literal: bool = True,
    ) -> bytes:
        """Run one git on the shadow repository; its stdout, up to the chunk for which *stop* said True
        (git is then stopped: its exit is no error). An exit code not in *ok* is a failure; pathspecs
        are literal unless *literal* is False (``check-ignore`` refuses literal pathspecs).

        Errors: SnapshotError when git cannot start, fails, or takes longer than ``timeout``.
        """
        argv = ["git", "-c", "safe.directory=*", f"--git-dir={self.git_dir}", f"--work-tree={self.project}"]
        out, err, code = await self._run([*argv, *args], stdin, stop, literal)
        if code is not None and code not in ok and self._drop_stale_lock(err):
            out, err, code = await self._run([*argv, *args], stdin, stop, literal)
        if code is not None and code not in ok:
            message = err.decode("utf-8", "replace").strip() or f"exit code {code}"
            if "out of memory" in message.lower():
                message += (
                    f" (mm lets it take {MAX_GIT_DATA >> 20} MiB: a file of the project may be endless, a "
                    "nested repository's ref linked to /dev/zero; or turn snapshots off for this project, "
                    "daemon.snapshot_max_files: 0)"
                )
            raise SnapshotError(f"git {args[0]} failed in {self.project}: {message}")
        return out

    def _drop_stale_lock(self, err: bytes) -> bool:
        """Remove the lock file a failed git found in the way, if it is stale (True: try once more).

        A git killed with SIGKILL (the daemon's whole service killed at once, the OOM killer, a power cut)
        leaves its ``index.lock``, and every later git that writes the index failed on it ("Unable to create
        …index.lock: File exists … remove the file manually"): no snapshot, no undo, for good. Every git of
        this daemon that writes a shadow's index runs under the shadow's lock (steps.py), and a daemon that
        starts stops what its killed predecessor left running (procs.sweep_orphans): so a lock file made
        before this daemon started, or longer ago than a git may run, is no live git's.
        """
        found = _LOCK_IN_THE_WAY.search(err)
        if found is None:
            return False
        lock = Path(os.fsdecode(found.group(1)))
        try:
            if not lock.parent.samefile(self.git_dir):
                return False  # not a lock of this shadow repository: never touched
            made = lock.lstat().st_mtime
        except OSError:
            return True  # gone meanwhile: the next try may find the way clear
        if made >= max(_STARTED, time.time() - self.timeout):
            return False
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()
        log.warning("removed %s, left by a git that was killed; snapshots go on", lock)
        return True

    async def _run(
        self, argv: list[str], stdin: bytes | None, stop: Stop | None, literal: bool = True
    ) -> tuple[bytes, bytes, int | None]:
        fifo: list[str] = []  # what git waits to open, when _watch_fifo saw it wait
        try:
            with trio.fail_after(self.timeout):
                async with supervised_process(
                    argv,
                    cwd=self.project,
                    env=self._env(literal),
                    inherit_env=False,
                    stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    grace=1.0,
                    max_data=MAX_GIT_DATA,
                ) as proc:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(_watch_fifo, proc.pid, fifo, nursery.cancel_scope)
                        done = await communicate(proc, stdin, stop=stop, max_stderr=MAX_STDERR)
                        nursery.cancel_scope.cancel()
                    if not fifo:
                        return done
        except trio.TooSlowError:
            raise SnapshotError(
                f"git {_shown(argv)} took over {self.timeout:.0f} s in {self.project}"
            ) from None
        except OSError as exc:
            raise SnapshotError(f"cannot run git in {self.project}: {exc.strerror or exc}") from None
        raise SnapshotError(
            f"git {_shown(argv)} in {self.project} waits to open {repr(fifo[0]) if fifo[0] else 'a file'}, a FIFO (named pipe) "
            "that nothing writes to, as a file it reads (a .gitignore, a .gitattributes, a nested "
            "repository's .git): remove it (`find . -type p` lists FIFOs), or turn snapshots off for this "
            "project (daemon.snapshot_max_files: 0)"
        )

    # -- the repository -----------------------------------------------------------------

    async def ensure(self) -> None:
        """Create the shadow repository on first use; copy the project's ``.git/info/exclude`` into it.

        Errors: SnapshotError.
        """
        if not (self.git_dir / "HEAD").exists():
            # Made anew (first use, or removed: retention, or you freeing space): no tree of what was here
            # may be taken for a tree of the new repository.
            for index in [i for i in _trees if i.parent == self.git_dir]:
                del _trees[index]
            self.git_dir.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            await self._init()
        lines = self._project_excludes()
        target = self.git_dir / "info" / "exclude"
        wanted = b".git\n" + lines
        if not target.exists() or target.read_bytes() != wanted:
            target.write_bytes(wanted)

    def _project_excludes(self) -> bytes:
        """The project's ``.git/info/exclude``, if a regular file of at most MAX_EXCLUDE bytes: a project may
        hold a FIFO there, or a sparse file of 200 GB that a tarball ships in a few bytes (read whole, it
        stopped the daemon). Errors: SnapshotError for one too big or unreadable."""
        exclude = self.project / ".git" / "info" / "exclude"
        if exclude.is_symlink() or not exclude.is_file():
            return b""
        try:
            with open_regular(exclude) as f:
                lines = read_at_most(f, MAX_EXCLUDE)
        except OSError as exc:
            raise SnapshotError(f"cannot read {exclude}: {exc.strerror or exc}") from None
        if len(lines) > MAX_EXCLUDE:
            raise SnapshotError(
                f"{exclude} holds more than {MAX_EXCLUDE >> 20} MiB of patterns: no snapshot copies it; "
                "make it smaller, or turn snapshots off for this project (daemon.snapshot_max_files: 0)"
            )
        return lines

    async def _init(self) -> None:
        _out, err, code = await self._run(["git", "init", "--quiet", "--bare", str(self.git_dir)], None, None)
        if code != 0:
            raise SnapshotError(f"cannot create {self.git_dir}: {err.decode('utf-8', 'replace').strip()}")
        (self.git_dir / "config").write_text(CONFIG)
        (self.git_dir / "info").mkdir(exist_ok=True)
        (self.git_dir / "info" / "attributes").write_text(ATTRIBUTES)
        (self.git_dir / "home").mkdir(mode=0o700, exist_ok=True)
        (self.git_dir / "project").write_bytes(os.fsencode(self.project))  # whose shadow this is

    async def count_files(self, limit: int) -> int:
        """The files a snapshot would hold, counted up to ``limit + 1`` (then git is stopped). Where the
        project is watched and no event came while git counted, the count is kept for :meth:`counted`."""
        seen = 0

        def enough(chunk: bytes) -> bool:
            nonlocal seen
            seen += chunk.count(b"\0")
            return seen > limit

        watch = self._watch()
        if watch is not None:
            watch.changed()  # what changed before the count is read here; what changes from now on clears it
            watch.count = None if watch.stale else (limit, None)
        await self.git("ls-files", "-z", "--cached", "--others", "--exclude-standard", stop=enough)
        count = min(seen, limit + 1)
        if watch is not None:
            watch.changed()
            if watch.count == (limit, None):
                watch.count = (limit, count)
        return count

    def counted(self, limit: int) -> int | None:
        """What :meth:`count_files` found up to *limit* when nothing changed in the project since (its watch
        read no event, the watches stayed set): a turn's first write call counts no files again (a git
        process) in a project nothing changed in since the last turn's. None: count them."""
        watch = self._watch()
        if watch is None:
            return None
        watch.changed()
        return watch.count[1] if watch.count is not None and watch.count[0] == limit else None

    def _watch(self) -> Watch | None:
        return watch_of(self.git_dir, self.project) if self.watched and not self.index else None

    def unchanged(self) -> str | None:
        """The last snapshot's tree if the project is watched and nothing changed in it since; else None.

        Synchronous, so no other task runs between reading the watch's queue and answering: callers take
        it without the shadow's lock (steps.py), which only a snapshot that runs git needs.
        """
        watch = watch_of(self.git_dir, self.project) if self.watched and not self.index else None
        if watch is None or watch.changed():
            return None
        assert watch.tree is not None
        return watch.tree

    async def snapshot(self) -> str:
        """The tree of the working tree now (ignored files left out). Errors: SnapshotError.

        Where the project is watched (watch.py), a tree in which nothing changed since the last snapshot
        is that snapshot's, without git.
        """
        if (tree := self.unchanged()) is not None:
            return tree
        watch = watch_of(self.git_dir, self.project) if self.watched and not self.index else None
        read = watch.reads if watch is not None else 0
        await self.ensure()
        if watch is not None and watch.stale:
            await self._watch_again(watch)
        tree = await self._write_tree()
        # Another snapshot that read the queue meanwhile (none does under steps.py's lock) may have taken
        # events this tree was read before: then it is not kept as the unchanged tree.
        if watch is not None and not watch.stale and watch.reads == read:
            watch.tree = tree
        return tree

    async def _watch_again(self, watch: Watch) -> None:
        """Watch every folder of the project but those git ignores as a whole (and holding no snapshotted
        file): ``ls-files --directory`` names the candidates, ``check-ignore`` keeps those ignored themselves
        (a folder of ignored files alone is listed too, yet a new file in it would be snapshotted)."""
        listed = await self.git(
            "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"
        )
        # check-ignore reads its paths as pathspecs: a name that could be magic or a glob stays watched.
        candidates = [
            p[:-1] for p in listed.split(b"\0") if p.endswith(b"/") and not _GLOB.search(p) and p[:1] != b":"
        ]
        ignored: set[bytes] = set()
        if candidates:
            stdin = b"\0".join(candidates) + b"\0"
            # Exit code 1: none of them is ignored.
            out = await self.git("check-ignore", "-z", "--stdin", stdin=stdin, ok=(0, 1), literal=False)
            ignored = {p + b"/" for p in out.split(b"\0") if p}
        try:
            await watch.restart(ignored)
        except Unwatchable as exc:
            refuse(self.git_dir, str(exc))

    async def _write_tree(self) -> str:
        try:
            await self.git("add", "--all", "--", ".")
        except SnapshotError:
            self._drop_temporaries()
            raise
        # The same index gives the same tree: the index's own checksum (its last 20 bytes) says
        # whether `git add` changed it, which saves one git process in most snapshots (the one
        # before a call finds the tree as the one after the last call left it).
        index = self.index or self.git_dir / "index"
        checksum = _checksum(index)
        known = _trees.get(index)
        if checksum is not None and known is not None and known[0] == checksum:
            return known[1]
        tree = (await self.git("write-tree")).decode().strip()
        if checksum is not None:
            _trees[index] = (checksum, tree)
        return tree

    def _drop_temporaries(self) -> None:
        """Remove what a ``git add`` stopped midway left in the object store: a pack it was writing (a file
        over git's big-file threshold, hashed until the timeout: 16 MB a try) and loose objects it had not
        named yet. Called under the shadow's lock (steps.py), so no other git of it is writing."""
        objects = self.git_dir / "objects"
        for left in (*objects.glob("pack/tmp_*"), *objects.glob("??/tmp_obj_*")):
            with contextlib.suppress(OSError):
                left.unlink()

    async def changes(self, before: str, after: str) -> list[Change]:
        """The paths that differ between two trees, with how."""
        if before == after:
            return []
        out = await self.git("diff-tree", "-r", "-z", "--no-renames", "--name-status", before, after)
        fields = out.split(b"\0")
        return [
            Change(_CHANGES.get(status[:1], "modified"), path)
            for status, path in zip(fields[0::2], fields[1::2], strict=False)
            if status
        ]

    async def diff(self, before: str, after: str) -> tuple[str, bool]:
        """The unified diff between two trees, and whether it was cut at MAX_DIFF_BYTES."""
        out = await self.git(
            "diff-tree",
            "-r",
            "-p",
            "--no-renames",
            "--no-ext-diff",
            "--no-textconv",
            before,
            after,
            stop=_bytes_over(MAX_DIFF_BYTES),
        )
        cut = len(out) > MAX_DIFF_BYTES
        return out[:MAX_DIFF_BYTES].decode("utf-8", "replace"), cut

    async def overlay(self, base: str, top: str, paths: list[bytes]) -> str:
        """A tree that is *base* with *paths* as they are in *top* (absent there: absent here).

        It is the changes of some steps alone, without what else changed in the tree meanwhile.
        """
        index = self.git_dir / f"overlay-{os.getpid()}.index"
        try:
            return await self._overlay(index, base, top, paths)
        finally:
            index.unlink(missing_ok=True)

    async def _overlay(self, index: Path, base: str, top: str, paths: list[bytes]) -> str:
        over = Shadow(self.git_dir, self.project, self.timeout, index=index, watched=False)
        entries = await self.entries(top)
        lines = [entries.get(p) or b"0 " + EMPTY_BLOB_ID + b"\t" + p for p in paths]
        await over.git("read-tree", base)
        await over.git("update-index", "-z", "--index-info", stdin=b"\0".join(lines) + b"\0")
        return (await over.git("write-tree")).decode().strip()

    async def entries(self, tree: str) -> dict[bytes, bytes]:
        """Every file of *tree*: path → its ``mode sha\\tpath`` line of ``ls-tree``."""
        out = await self.git("ls-tree", "-r", "-z", "--full-tree", tree)
        # find, not `in`: a bytes `in` raises and clears a TypeError before it searches (see models/_http.py),
        # once a file of the tree here.
        return {line.split(b"\t", 1)[1]: line for line in out.split(b"\0") if line.find(b"\t") >= 0}

    async def restore(self, tree: str, paths: list[bytes]) -> None:
        """Make each of *paths* in the work tree what it is in *tree*: written, or removed when absent.

        Content, the executable bit and symbolic links come back exactly; a file that is overwritten
        keeps its other permission bits (git keeps none: a 0600 file must not come back 0644). A path
        whose folder is a symbolic link out of the project is left alone (git refuses it too).
        """
        present = await self.entries(tree)
        keep = [p for p in paths if p in present]
        for path in (p for p in paths if p not in present):
            _remove(self.project, path)
        if keep:
            modes = {p: _mode(self.project, p) for p in keep}
            await self.git(
                "checkout",
                "--no-overlay",
                tree,
                "--pathspec-from-file=-",
                "--pathspec-file-nul",
                stdin=b"\0".join(keep) + b"\0",
            )
            for path, mode in modes.items():
                _keep_permissions(self.project, path, mode)


def _shown(argv: list[str]) -> str:
    """The git command of *argv* for a message: not its options, nor the ``-c`` setting mm gives every git
    (``safe.directory=*``)."""
    return " ".join(a for before, a in itertools.pairwise(argv) if not a.startswith("-") and before != "-c")[
        :60
    ]


async def _watch_fifo(pid: int, into: list[str], scope: trio.CancelScope) -> None:
    """Look, once a second while git *pid* runs, whether it waits to open a FIFO; if so, put the path it
    opens in *into* ("" when it cannot be read) and cancel *scope*.

    git opens the project's ``.gitignore`` and ``.gitattributes`` files, and a nested repository's
    ``.git``, without ``O_NONBLOCK``: a FIFO by such a name, which nothing writes to, held a snapshot
    until its timeout (five minutes) at the first write call of every turn. Most gits end before the
    first look.
    """
    while True:
        await trio.sleep(FIFO_LOOK)
        if (path := fifo_waited(pid)) is not None:
            into.append(path)
            scope.cancel()
            return


def fifo_waited(pid: int) -> str | None:
    """The path process *pid* (any of its threads) waits to open as a FIFO nothing writes to: None if none
    does, "" when the path cannot be read. The kernel names the wait in ``/proc/PID/task/TID/wchan``;
    the path is the open's argument, read from the process's memory (a parent may read its child's)."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/wchan") as f:
                if f.read() != "wait_for_partner":
                    continue
        except OSError:
            continue
        return _opened(pid, tid)
    return None


def _opened(pid: int, tid: str) -> str:
    """The path thread *tid* of *pid* is opening (``open`` or ``openat``), "" when it cannot be read."""
    try:
        with open(f"/proc/{pid}/task/{tid}/syscall") as f:
            number, *args = f.read().split()
        address = int(args[OPEN_PATH_ARG[number]], 16)
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            mem.seek(address)
            raw = mem.read(4096 - address % 4096)  # no further than its page: the next may not be mapped
            if b"\0" not in raw:
                with contextlib.suppress(OSError):
                    raw += mem.read(4096)  # a path that runs on into the next page
    except (OSError, ValueError, KeyError, IndexError, OverflowError):
        return ""
    return os.fsdecode(raw.partition(b"\0")[0])


def _bytes_over(most: int) -> Stop:
    total = 0

    def over(chunk: bytes) -> bool:
        nonlocal total
        total += len(chunk)
        return total > most

    return over


def _mode(project: Path, path: bytes) -> int | None:
    try:
        return os.lstat(os.path.join(os.fsencode(project), path)).st_mode
    except OSError:
        return None


def _keep_permissions(project: Path, path: bytes, before: int | None) -> None:
    """Give a restored regular file the permission bits the file it replaced had, git's executable bit kept."""
    now = _mode(project, path)
    if before is None or now is None or not (stat.S_ISREG(before) and stat.S_ISREG(now)):
        return
    bits = stat.S_IMODE(before) & ~0o111
    if now & 0o100:  # git says executable: where it may be read, it may be run
        bits |= (bits & 0o444) >> 2
    with contextlib.suppress(OSError):
        os.chmod(os.path.join(os.fsencode(project), path), bits)


def _remove(project: Path, path: bytes) -> None:
    """Remove one file (or link) of the work tree, and the folders it leaves empty."""
    target = os.path.join(os.fsencode(project), path)
    parent = os.path.realpath(os.path.dirname(target))
    root = os.path.realpath(os.fsencode(project))
    if parent != root and not parent.startswith(root + b"/"):
        return  # its folder is now a link out of the project: never follow it
    try:
        if os.path.isdir(target) and not os.path.islink(target):
            return  # a folder took its place: the checkout of what was there reports it
        os.unlink(target)
    except FileNotFoundError:
        return
    folder = os.path.dirname(target)
    while folder != os.fsencode(project) and len(folder) > len(os.fsencode(project)):
        try:
            os.rmdir(folder)
        except OSError:
            return
        folder = os.path.dirname(folder)
