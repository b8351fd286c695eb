"""What a confined tool call may not leave behind: git's own files that run programs, which no diff shows.

Landlock adds write rights down a tree and cannot take a subtree back, so a process confined to the
project may write its ``.git`` too. There git keeps programs it runs with the user's rights, outside
every sandbox, the next time the user runs git — or a shell prompt runs ``git status`` on entering the
folder: hooks (``.git/hooks/pre-commit``), and config keys that name a program (``core.fsmonitor`` runs
at every status, ``core.hooksPath``, ``core.sshCommand``, aliases, filters, ``include.path``…). Neither
``git status`` nor ``git diff`` shows them.

So each confined tool call is looked at on both sides. :func:`before` (in the spawner's thread, beside
the hard-link check, whose walk finds every folder holding a ``.git`` beneath the writable folders)
keeps what each repository's guarded files hold — taken afresh only while no confined call runs there:
a change between calls is the user's. :func:`after` (once the call's processes are gone) compares, and
puts back what the call changed:

- a hook made or changed (a file in ``hooks/`` not named ``*.sample``; its mode too: a hook git skipped
  for want of the executable bit runs once it has it) is renamed ``NAME.mm-refused`` — kept for the user
  to read, never run (git runs only its hooks' exact names) — and the old one written back;
- a config (``config``, ``config.worktree``) whose new entries are not all on :data:`ALLOWED` (names
  and settings: ``git init``, ``git clone``, ``git remote add``, ``git config user.email`` stay
  possible) is kept as ``config.mm-refused`` and the old one written back; a config this module cannot
  read line by line as git would is refused whole, never guessed at;
- a ``.git`` file (a worktree's or submodule's pointer) or ``commondir`` that leads anywhere but into a
  guarded repository's ``.git`` is renamed aside: git would read config and hooks from there;
- a ``hooks`` or ``modules`` folder replaced by a link or a file is renamed aside and made again.

The call's answer names what was put back (mmd/tools/process.py), so the model tells the user instead of
trying again. Nothing is deleted: what the call wrote stays beside, under ``.mm-refused``.

Not covered (docs/security.md): a repository past the hard-link walk's entry limit, a confined process
that outlives its call and drops mm's tag, and a program the project keeps in its own files that a hook
or config already runs (``core.hooksPath = .husky``, a hook that calls ``./scripts/check``): those are
the project's files, which ``git status`` shows.
"""

from __future__ import annotations

import os
import re
import stat
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from mmd import paths as mm_paths
from mmd.paths import racy

ASIDE = ".mm-refused"
# Bounds, none of which a command can use to get round the guard: the bytes kept of one file and of one
# repository (a file past them is known by its inode, size and change time instead: changed, it is set
# aside, but cannot be written back), the names read of one folder (a folder with more is set aside whole
# and made again empty), how deep the guard looks into ``modules`` (a submodule named a/b/c is
# modules/a/b/c: deeper, its git dir is not guarded, and no ``.git`` file may lead to it), and how many
# repositories' states are kept between calls.
MAX_FILE = 256 << 10
MAX_KEPT = 512 << 10
MAX_NAMES = 4096
MAX_MODULE_DEPTH = 4
MAX_REPOS = 32
CONFIGS = ("config", "config.worktree")
_FILES = (*CONFIGS, "commondir")  # the files of a git dir the guard looks at
_FOLDERS = ("hooks", "modules", "worktrees")  # and its folders

# Config entries a confined command may add or change: names, remotes, branches, settings of git's own
# behaviour — none names a program or a file git reads more config or hooks from. Each is
# (section, with a subsection, key); "*" is any key of the section.
ALLOWED = frozenset(
    [
        *(
            ("core", False, key)
            for key in (
                "repositoryformatversion",
                "filemode",
                "bare",
                "logallrefupdates",
                "ignorecase",
                "precomposeunicode",
                "symlinks",
                "autocrlf",
                "eol",
                "safecrlf",
                "quotepath",
                "sparsecheckout",
                "sparsecheckoutcone",
                "checkstat",
                "trustctime",
                "untrackedcache",
                "splitindex",
                "abbrev",
                "commitgraph",
                "multipackindex",
                "compression",
                "loosecompression",
                "preloadindex",
            )
        ),
        *(("user", False, key) for key in ("name", "email", "signingkey", "useconfigonly")),
        ("init", False, "defaultbranch"),
        *(
            ("extensions", False, key)
            for key in ("worktreeconfig", "objectformat", "refstorage", "preciousobjects", "noop")
        ),
        *(("remote", True, key) for key in ("url", "pushurl", "fetch", "push", "tagopt", "prune", "mirror")),
        *(("branch", True, key) for key in ("remote", "pushremote", "merge", "rebase", "description")),
        *(("submodule", True, key) for key in ("url", "active", "branch", "ignore", "shallow")),
        *(("pull", False, key) for key in ("rebase", "ff")),
        *(("push", False, key) for key in ("default", "autosetupremote", "followtags")),
        *(("fetch", False, key) for key in ("prune", "prunetags", "writecommitgraph")),
        *(("merge", False, key) for key in ("ff", "conflictstyle")),
        *(("rebase", False, key) for key in ("autostash", "autosquash", "updaterefs")),
        *(("commit", False, key) for key in ("gpgsign", "verbose")),
        *(("gc", False, key) for key in ("auto", "autodetach")),
        *(("status", False, key) for key in ("showuntrackedfiles", "submodulesummary")),
        *(("diff", False, key) for key in ("renames", "algorithm", "submodule")),
        ("color", False, "*"),
        ("color", True, "*"),
        ("advice", False, "*"),
        ("index", False, "version"),
        ("protocol", False, "version"),
    ]
)
# Only in a submodule's git dir (.git/modules/NAME/config): `git submodule add` writes it there.
ALLOWED_IN_MODULE = frozenset([("core", False, "worktree")])

_SECTION = re.compile(r'[ \t]*\[([A-Za-z0-9.-]+)(?:[ \t]+"((?:[^"\\\n]|\\.)*)")?\][ \t]*(?:[#;].*)?')
# No lazy quantifier before the line's end: "k=x" then 200,000 blanks and a "y" cost it time quadratic in the
# line (minutes for a config the guard reads whole); the value's blanks are stripped in Python instead.
_ENTRY = re.compile(r"[ \t]*([A-Za-z][A-Za-z0-9-]*)[ \t]*(?:=(.*))?")
_BLANK = re.compile(r"[ \t]*(?:[#;].*)?")


class Unreadable(ValueError):
    """A config text that is not read here line by line as git reads it: refused whole."""


def config_entries(text: bytes) -> list[tuple[tuple[str, bool, str], str, str]]:
    """Each entry of a git config *text*: (section, has a subsection, key) lowercased, the subsection, and
    the value as written.

    Only the plain form is read: a section header alone on its line, one ``key = value`` a line, comments.
    A value continued on the next line (a trailing backslash), an entry on a header's line, a byte
    order mark, a NUL or text that is not UTF-8 raise Unreadable: git reads some of those, and a guard
    that read them otherwise than git would be a way round it.
    """
    try:
        lines = text.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        raise Unreadable("not UTF-8") from None
    section: tuple[str, bool, str] | None = None  # name, has a subsection, the subsection
    entries = []
    for number, line in enumerate(lines, 1):
        line = line.removesuffix("\r")
        if "\0" in line or "\ufeff" in line:
            raise Unreadable(f"line {number}: a NUL or a byte order mark")
        if _BLANK.fullmatch(line):
            continue
        if found := _SECTION.fullmatch(line):
            head, dot, rest = found.group(1).partition(".")
            sub = found.group(2)
            if dot and (sub is not None or not rest):
                raise Unreadable(f"line {number}: a section header git's plain form does not write")
            if dot:
                section = (head.lower(), True, rest.lower())
            else:
                section = (head.lower(), sub is not None, sub or "")
            continue
        found = _ENTRY.fullmatch(line)
        if found is None or section is None:
            raise Unreadable(f"line {number}: not an entry git's plain form writes")
        value = (found.group(2) or "").strip(" \t")
        if value.endswith("\\"):
            raise Unreadable(f"line {number}: a value continued on the next line")
        name, has_sub, sub = section
        entries.append(((name, has_sub, found.group(1).lower()), sub, value))
    return entries


def refused_entry(old: bytes | None, new: bytes, *, module: bool = False) -> str | None:
    """Why config text *new* may not replace *old* (None: no old file): the first entry it adds or
    changes that is not allowed, as ``section.key``; None when every one is."""
    try:
        before = Counter(config_entries(old)) if old else Counter()
        after = config_entries(new)
    except Unreadable as exc:
        return f"a config mm cannot check ({exc})"
    allowed = ALLOWED | ALLOWED_IN_MODULE if module else ALLOWED
    for entry in Counter(after) - before:
        (head, has_sub, key), sub, _value = entry
        if (head, has_sub, key) not in allowed and (head, has_sub, "*") not in allowed:
            return f"{head}.{sub}.{key}" if has_sub else f"{head}.{key}"
    return None


class _Item(NamedTuple):
    """What a guarded path holds: its kind, its permission bits, its bytes (a file's, a link's target)."""

    kind: str  # "file", "link", "dir", "crowded" (a folder of more than MAX_NAMES names), "other"
    mode: int
    data: bytes | None  # None: a folder, or a file past the bounds, known by its stamp
    stamp: tuple[int, int, int] = (0, 0, 0)  # inode, size, ctime of what is not read


class _Repo:
    """One folder holding a ``.git``: what its guarded paths held when last taken, and the calls running."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.running = 0  # confined calls between their before and after
        self.marks: tuple[tuple[object, ...], ...] | None = None
        self.kept: dict[str, _Item] = {}


_repos: dict[str, _Repo] = {}
_lock = threading.Lock()


def before(folders: Iterable[str]) -> tuple[str, ...]:
    """A confined call is about to start with write access to the repositories in *folders* (each holding
    a ``.git``): keep what their guarded files hold, unless a confined call runs there already (then a
    change since is not taken for the user's). Returns the folders, for :func:`after`."""
    taken = tuple(dict.fromkeys(folders))
    with _lock:
        for folder in taken:
            repo = _repos.pop(folder, None) or _Repo(folder)
            _repos[folder] = repo  # the most recently used last
            if repo.running == 0:
                paths = _paths(folder)
                marks = _marks(paths)
                if marks != repo.marks:
                    repo.kept, repo.marks = _read(paths), marks
            repo.running += 1
        _evict()
    return taken


def _evict() -> None:
    """Forget the least recently used repositories no call runs in, past MAX_REPOS (under _lock): at most
    MAX_REPOS × MAX_KEPT bytes stay kept between calls. A forgotten one is taken afresh by its next call.
    A folder is known crowded only while its listing is kept (MAX_LISTED): listed again, it is judged again.
    Not sooner: the call's marks, taken after its listings, still read it."""
    if len(_repos) > MAX_REPOS:  # (the usual call has one repository: no list made)
        idle = [folder for folder, repo in _repos.items() if repo.running == 0]
        for folder in idle[: len(_repos) - MAX_REPOS]:
            del _repos[folder]
    if _crowded:
        _crowded.intersection_update(_listed)


def release(taken: Sequence[str]) -> None:
    """The call of :func:`before` never started: nothing to compare."""
    with _lock:
        for folder in taken:
            if (repo := _repos.get(folder)) is not None and repo.running:
                repo.running -= 1


def after(
    taken: Sequence[str], folders: Iterable[str], base: str = "", *, wait: bool = True
) -> list[str] | None:
    """The call of :func:`before` (*taken*) ended; *folders* hold a ``.git`` now. Put back what it changed
    of git's files in each, and return what was put back, one line each (paths relative to *base* when
    beneath it). Without *wait*, None at once when another thread is guarding (it may wait on a file
    system): ask again from a thread that may wait."""
    if not _lock.acquire(blocking=wait):
        return None
    notes: list[str] = []
    folders = tuple(folders)
    guarded: set[str] | None = None  # the git dirs a .git file may lead to, found once a change is seen
    try:
        for folder in dict.fromkeys((*taken, *folders)):
            repo = _repos.get(folder)
            if repo is None or (folder not in taken and repo.running == 0):
                repo = _repos[folder] = _Repo(folder)  # a repository the call made: nothing was there before
                repo.marks = ()
            elif repo.running:
                repo.running -= 1
            paths = _paths(folder)
            marks = _marks(paths)
            if marks == repo.marks:
                continue
            now = _read(paths)
            if now == repo.kept:  # each path holds what it held (a stamp too recent to trust, read: the same)
                repo.marks = marks
                continue
            if guarded is None:
                guarded = _guarded_gitdirs((*taken, *folders))
            notes += _put_back(repo, now, guarded, base or folder)
            paths = _paths(folder)
            repo.kept, repo.marks = _read(paths), _marks(paths)
        _evict()
    finally:
        _lock.release()
    return notes


def forget() -> None:
    """Drop what every repository's guard kept (tests)."""
    with _lock:
        _repos.clear()
        _listed.clear()
        _crowded.clear()
        _hooks_of.clear()


# -- the guarded paths -------------------------------------------------------------------------------


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def _paths(folder: str, gitdirs: list[str] | None = None) -> list[tuple[str, os.stat_result | None]]:
    """Every path guarded in *folder*'s repository, with its lstat (None: absent), shallow first; the git
    dirs whose config and hooks are among them are added to *gitdirs*."""
    dot = f"{folder}/.git"
    st = _lstat(dot)
    found = [(dot, st)]
    if st is not None and stat.S_ISDIR(st.st_mode):
        _gitdir(dot, st, found, 0, [] if gitdirs is None else gitdirs)
    return found


def _gitdir(
    gitdir: str,
    st: os.stat_result,
    found: list[tuple[str, os.stat_result | None]],
    depth: int,
    gitdirs: list[str],
) -> None:
    gitdirs.append(gitdir)
    names = _names(gitdir, st)
    if gitdir in _crowded:  # its listing stopped short: look for each name instead
        names = frozenset((*_FILES, *_FOLDERS))
    for name in _FILES:
        if name in names:  # an absent one is no path: made, it is a new one, and the folder changed
            path = f"{gitdir}/{name}"
            found.append((path, _lstat(path)))
    for name in _FOLDERS:
        if name not in names:
            continue
        path = f"{gitdir}/{name}"
        st = _lstat(path)
        found.append((path, st))
        if st is None or not stat.S_ISDIR(st.st_mode):
            continue
        listed = _names(path, st)
        if path in _crowded:  # the folder is judged whole (_refused): its names are not looked through
            continue
        if name == "hooks":
            found += [(hook, _lstat(hook)) for hook in _hooks(path, listed)]
        elif depth < MAX_MODULE_DEPTH:
            for sub in sorted(listed):
                below = f"{path}/{sub}"
                st_below = _lstat(below)
                if st_below is not None and stat.S_ISDIR(st_below.st_mode):
                    found.append((below, st_below))
                    _gitdir(below, st_below, found, depth + 1, gitdirs)


# A folder's names by its path, with the (inode, ctime) they were listed at: a name made, removed or
# renamed in it changes its ctime, which no unprivileged process can set back (a listing whose ctime was
# racy, paths.racy, is not kept: a name made within the same tick would leave the ctime as it was). Most
# calls change nothing in .git: they then cost an lstat of .git, its config and its hooks folder, and no
# listing.
_listed: dict[str, tuple[tuple[int, int], frozenset[str]]] = {}
_crowded: set[str] = set()  # folders whose last listing stopped at MAX_NAMES
MAX_LISTED = 1024


def _names(folder: str, st: os.stat_result) -> frozenset[str]:
    key = (st.st_ino, st.st_ctime_ns)
    kept = _listed.get(folder)
    if kept is not None and kept[0] == key:
        return kept[1]
    found: list[str] = []
    try:
        with os.scandir(folder) as listing:
            for entry in listing:
                if len(found) == MAX_NAMES:
                    break
                found.append(entry.name)
    except OSError:
        pass
    (_crowded.add if len(found) == MAX_NAMES else _crowded.discard)(folder)
    names = frozenset(found)
    if len(_listed) >= MAX_LISTED:
        _listed.clear()
    if racy(st.st_ctime_ns):
        _listed.pop(folder, None)
    else:
        _listed[folder] = (key, names)  # listed after the lstat: a name made meanwhile changes the key again
    return names


# The hooks of a listing of a hooks folder (their paths, sorted), by folder, with the listing they were
# found in: the listing is kept (_listed), and its hooks were picked out of it again at every look, a dozen
# samples twice a call. Cleared with _listed.
_hooks_of: dict[str, tuple[frozenset[str], list[str]]] = {}


def _hooks(folder: str, listed: frozenset[str]) -> list[str]:
    """The paths of the hooks in *listed*, the names in *folder*: a sample is not run, nor what this guard set
    aside (git runs only its hooks' exact names)."""
    kept = _hooks_of.get(folder)
    if kept is not None and kept[0] is listed:
        return kept[1]
    hooks = [f"{folder}/{h}" for h in sorted(listed) if not h.endswith(".sample") and ASIDE not in h]
    if len(_hooks_of) >= MAX_LISTED:
        _hooks_of.clear()
    _hooks_of[folder] = (listed, hooks)
    return hooks


def _marks(paths: list[tuple[str, os.stat_result | None]]) -> tuple[tuple[object, ...], ...]:
    """What tells a change without reading: a file's inode, size, mode and change time (``ctime``, which no
    unprivileged process can set back, unlike the modification time); a folder's inode and mode (what is
    in it is guarded path by path: a new hook is a new path). A change time too recent to tell the next
    change (:func:`mmd.paths.racy`) marks the file as changed: what it holds is read and compared."""
    # paths.racy, the clock read once for all (read before the stamps are compared: never later than racy's).
    now, racy_ns = time.time_ns(), mm_paths.RACY_NS
    marks: list[tuple[object, ...]] = []
    for path, st in paths:
        if st is None:
            marks.append((path,))
        elif stat.S_ISDIR(st.st_mode) and path not in _crowded:
            marks.append((path, st.st_ino, st.st_mode))
        else:
            ctime = st.st_ctime_ns
            marks.append(
                (path, st.st_ino, st.st_size, st.st_mode, object() if now - ctime < racy_ns else ctime)
            )
    return tuple(marks)


def _read(paths: list[tuple[str, os.stat_result | None]]) -> dict[str, _Item]:
    """What each present path holds; files read while each fits MAX_FILE and all together MAX_KEPT."""
    items, left = {}, MAX_KEPT
    for path, st in paths:
        if st is not None:
            items[path] = item = _item(path, st, left)
            left -= len(item.data or b"")
    return items


def _item(path: str, st: os.stat_result, left: int) -> _Item:
    mode, stamp = stat.S_IMODE(st.st_mode), (st.st_ino, st.st_size, st.st_ctime_ns)
    if stat.S_ISDIR(st.st_mode):
        return _Item("crowded", mode, None, stamp) if path in _crowded else _Item("dir", mode, None)
    if stat.S_ISLNK(st.st_mode):
        try:
            return _Item("link", mode, os.fsencode(os.readlink(path)))
        except OSError:
            return _Item("link", mode, None, stamp)
    if not stat.S_ISREG(st.st_mode) or st.st_size > min(MAX_FILE, left):
        return _Item("file" if stat.S_ISREG(st.st_mode) else "other", mode, None, stamp)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return _Item("file", mode, None, stamp)
    with os.fdopen(fd, "rb") as f:
        data = f.read(min(MAX_FILE, left) + 1)
    return _Item("file", mode, data) if len(data) <= min(MAX_FILE, left) else _Item("file", mode, None, stamp)


def _guarded_gitdirs(folders: Iterable[str]) -> set[str]:
    """The git dirs whose config and hooks the guard looks at in *folders*' repositories (a ``.git``, a
    submodule's and a worktree's beneath it), links resolved: the only ones a ``.git`` file may lead to."""
    gitdirs: list[str] = []
    for folder in dict.fromkeys(folders):
        _paths(folder, gitdirs)
    return {os.path.realpath(g) for g in gitdirs}


# -- putting back --------------------------------------------------------------------------------------


def _put_back(repo: _Repo, now: dict[str, _Item], guarded: set[str], base: str) -> list[str]:
    """Make *repo*'s guarded paths hold what was kept again, where what they hold now is not allowed."""
    notes: list[str] = []
    moved: list[tuple[str, str | None]] = []  # folders set aside, and where (None: the move failed)
    for path in sorted(set(repo.kept) | set(now), key=lambda p: (p.count(os.sep), p)):
        old, new = repo.kept.get(path), now.get(path)
        folder = next((m for m in moved if path.startswith(m[0] + os.sep)), None)
        if folder is not None:  # what it held went aside with it; what was kept there is brought back
            if old is not None and (failed := _bring_back(path, old, folder)):
                notes.append(f"{_shown(path, base)}: {failed}")
            continue
        why = _refused(path, old, new, guarded, repo.folder)
        if why is None:
            continue
        note, aside = _restore(path, old, new, base)
        notes.append(f"{_shown(path, base)}: {why}{note}")
        remade = old is not None and old.kind in ("dir", "crowded") and path != f"{repo.folder}/.git"
        if remade or (new is not None and new.kind in ("dir", "crowded")):
            moved.append((path, aside))
    return notes


def _bring_back(path: str, old: _Item, folder: tuple[str, str | None]) -> str:
    """Write *old* back at *path*, whose folder was set aside; a file not kept (past the bounds) is moved back
    from the set-aside folder if it is unchanged there. What went wrong, or ""."""
    inside, aside = folder
    if old.data is not None or old.kind in ("dir", "crowded"):
        return _restore(path, old, None, "")[0]
    there = aside + path[len(inside) :] if aside is not None else None
    found = _lstat(there) if there is not None else None
    if (
        there is not None
        and found is not None
        and (found.st_ino, found.st_size, found.st_ctime_ns) == old.stamp
    ):
        try:
            os.rename(there, path)
            return ""
        except OSError as exc:
            return f"putting it back failed: {exc.strerror}"
    return f"changed by the command, and larger than mm keeps: not written back (see {aside or 'the set-aside folder'})"


def _refused(path: str, old: _Item | None, new: _Item | None, guarded: set[str], folder: str) -> str | None:
    """Why what *path* holds now (*new*) may not stand where *old* was; None: it may. A removal may always
    stand: nothing left runs."""
    if new is None or old == new:
        return None
    name, parent = os.path.basename(path), os.path.dirname(path)
    if path == os.path.join(folder, ".git"):
        # A repository made (its files are judged one by one), or a pointer to a guarded git dir, stands.
        if new.kind in ("dir", "crowded") or (
            new.data is not None and _leads_into(new.data, parent, guarded)
        ):
            return None
        return "a .git that leads git elsewhere for its config and hooks"
    if os.path.basename(parent) == "hooks":
        return "a hook made" if old is None else "a hook changed"
    if name in CONFIGS:
        if new.kind != "file" or new.data is None:
            return "a config that is not a plain file"
        kept = old.data if old is not None and old.kind == "file" else None
        why = refused_entry(kept, new.data, module=f"{os.sep}modules{os.sep}" in path)
        return f"{why} set" if why is not None and not why.startswith("a config") else why
    if name == "commondir":
        return None if _common_home(path, new) else "a commondir that leads git elsewhere"
    if new.kind == "crowded":
        return f"a folder of more than {MAX_NAMES} names, more than mm looks through"
    if new.kind != "dir":
        return "a link or file where git keeps a folder"
    return None


def _common_home(path: str, item: _Item) -> bool:
    """Whether a ``commondir`` file is a worktree's that leads back to the git dir it lies in
    (``.git/worktrees/NAME/commondir`` holding ``../..``)."""
    worktree = os.path.dirname(path)
    if os.path.basename(os.path.dirname(worktree)) != "worktrees" or item.kind != "file" or not item.data:
        return False
    target = os.path.normpath(os.path.join(worktree, os.fsdecode(item.data.strip())))
    return target == os.path.dirname(os.path.dirname(worktree))


def _leads_into(text: bytes, folder: str, guarded: set[str]) -> bool:
    """Whether a ``.git`` file's ``gitdir:`` line leads to one of the *guarded* git dirs (any other folder,
    even one inside a ``.git``, may hold a config and hooks no guard looks at)."""
    line = text.split(b"\n", 1)[0].strip()
    if not line.startswith(b"gitdir:"):
        return False
    return os.path.realpath(os.path.join(folder, os.fsdecode(line[7:].strip()))) in guarded


def _restore(path: str, old: _Item | None, new: _Item | None, base: str) -> tuple[str, str | None]:
    """Set *path*'s *new* content aside and write *old* back (not a ``.git`` folder: the repository is
    wherever the command put it); what the note adds, and where the new content went."""
    said, aside = "", None
    try:
        if new is not None:
            aside = _aside(path)
            os.rename(path, aside)
            said = f" (what the command wrote is kept as {_shown(aside, base)})"
        if old is None or os.path.basename(path) == ".git":
            return said, aside
        if old.kind in ("dir", "crowded"):
            os.mkdir(path, old.mode)
        elif old.kind == "link" and old.data is not None:
            os.symlink(old.data, path)
        elif old.kind == "file" and old.data is not None:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, old.mode)
            with os.fdopen(fd, "wb") as f:
                f.write(old.data)
                os.fchmod(
                    f.fileno(), old.mode
                )  # the umask took bits; by the descriptor: the path may be swapped
        else:
            return f"{said}; the old one, larger than mm keeps, could not be written back", aside
    except OSError as exc:
        return f"{said}; putting it back failed: {exc.strerror}", aside
    return said, aside


def _aside(path: str) -> str:
    aside, n = path + ASIDE, 1
    while os.path.lexists(aside):
        n += 1
        aside = f"{path}{ASIDE}.{n}"
    return aside


def _shown(path: str, base: str) -> str:
    return os.path.relpath(path, base) if path.startswith(base.rstrip(os.sep) + os.sep) else path
