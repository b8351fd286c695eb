"""Checkpoints around a turn's write calls, and what ``mm diff`` and ``mm undo`` do with them.

Every call of a write (or destructive) tool — ``bash``, ``write_file``, a declared tool, an MCP tool
— is a *step*: the working tree is snapshotted right before it runs and right after, and the store
keeps both trees with the files that differ (mmd/store, table ``checkpoints``). A step's files are
exactly what that call changed, whoever changed them while it ran; what changed between two steps
was changed by something else (you, an editor, another session).

Undo restores, for every file the chosen steps changed, its state before the first of them, and is
itself a step (``tool: undo``): undoing it puts the files back. It refuses, naming them, files that
something else changed after or between those steps, unless forced: your work is never overwritten
silently.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import re
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from ..procs import spill
from ..store import CheckpointRow, Store
from . import watch
from .shadow import Change, Shadow, SnapshotError, git_missing, shadow_dir

# Files a files_changed event or a checkpoint row names; the count says how many there were.
MAX_FILES_SHOWN = 500
# Files named in a refusal; more are counted.
MAX_CONFLICTS_SHOWN = 20

# One lock per shadow repository: two sessions of a project must not write its index at once.
_locks: dict[Path, trio.Lock] = {}


class UndoError(Exception):
    """``mm undo`` or ``mm diff`` cannot do what was asked; ``code`` is the RPC error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


# The name of a shadow repository's folder (shadow_dir): nothing else under snapshots/ is ever removed.
_SHADOW_NAME = re.compile(r"[0-9a-f]{16}")


@asynccontextmanager
async def locked(shadow: Shadow) -> AsyncIterator[None]:
    lock = _locks.setdefault(shadow.git_dir, trio.Lock())
    async with lock:
        yield


async def remove_unused(snapshots: Path, folders: Callable[[], list[str]], before: float) -> int:
    """Remove the shadow repositories under *snapshots* of projects that no session works in (*folders*:
    the sessions' working folders, read again under each repository's lock) and that no snapshot changed
    since *before* (a session made meanwhile). How many were removed.

    The trees a shadow repository holds are named by the checkpoints of its project's sessions alone: once
    retention deleted the last of them (mmd/server/retention.py), nothing can undo into it. The project's
    watch goes with it, so the next snapshot starts a new repository instead of naming a removed tree.
    """
    removed = 0
    for name in await trio.to_thread.run_sync(_untouched_since, snapshots, before):
        git_dir = snapshots / name
        async with _locks.setdefault(git_dir, trio.Lock()):
            used = await trio.to_thread.run_sync(_names_of, snapshots, folders())
            if name in used or await trio.to_thread.run_sync(_last_change, git_dir) >= before:
                continue
            watch.unwatch(git_dir)
            await trio.to_thread.run_sync(functools.partial(shutil.rmtree, git_dir, ignore_errors=True))
            removed += 1
    return removed


def _names_of(snapshots: Path, folders: list[str]) -> set[str]:
    return {shadow_dir(snapshots, Path(folder)).name for folder in folders}


def _untouched_since(snapshots: Path, before: float) -> list[str]:
    """The shadow repositories under *snapshots* last changed (``_last_change``) before *before*."""
    with contextlib.suppress(OSError), os.scandir(snapshots) as entries:
        return sorted(
            e.name
            for e in entries
            if _SHADOW_NAME.fullmatch(e.name) and e.is_dir(follow_symlinks=False)
            if _last_change(Path(e.path)) < before
        )
    return []


def _last_change(git_dir: Path) -> float:
    """When the shadow repository *git_dir* or a file at its top (``index``, ``HEAD``, the folder of objects)
    last changed; infinity if it cannot be told (never removed on a guess)."""
    try:
        with os.scandir(git_dir) as inside:
            return max([git_dir.lstat().st_mtime] + [e.stat(follow_symlinks=False).st_mtime for e in inside])
    except OSError:
        return float("inf")


def shown(changes: list[Change]) -> list[dict[str, str]]:
    return [c.shown() for c in changes[:MAX_FILES_SHOWN]]


class Recorder:
    """The checkpoints of one turn: a snapshot before and after each write call of it."""

    def __init__(
        self,
        *,
        store: Store,
        session_id: str,
        project: Path,
        snapshots: Path,
        max_files: int,
        emit: Callable[[str, dict[str, Any]], object],
        timeout: float = 300.0,
        watch: bool = True,
    ) -> None:
        self.store, self.session_id, self.emit = store, session_id, emit
        self.shadow = Shadow(shadow_dir(snapshots, project), project, timeout, watched=watch)
        self.max_files = max_files
        self.off = max_files <= 0  # snapshots are off for the rest of the turn (said once)
        self.counted = False

    async def before(self, call_id: str) -> str | None:
        """The tree before the call, or None when no snapshot is taken (a ``snapshot_skipped`` says why)."""
        if self.off:
            return None
        if self.counted and (tree := self.shadow.unchanged()) is not None:
            return tree  # nothing changed since the last snapshot: no lock, no git
        if not self._room(call_id):
            return None
        try:
            async with locked(self.shadow):
                if not await self._small_enough(call_id):
                    return None
                return await self.shadow.snapshot()
        except (SnapshotError, OSError) as exc:
            self._skip(call_id, "error", f"{exc}; this turn's steps cannot be undone with mm undo")
            return None

    async def after(self, call_id: str, tool: str, echo: str, before: str) -> CheckpointRow | None:
        """Record the step and announce its files (``files_changed``); None when it changed nothing or the
        snapshot failed.

        Cancellation: shielded for up to a minute, so a cancelled call's changes are still recorded.
        """
        if self.shadow.unchanged() == before:
            return None  # the watch saw no change since the snapshot before the call
        if not self._room(call_id):
            return None
        with trio.CancelScope(shield=True), trio.move_on_after(60):
            try:
                async with locked(self.shadow):
                    after = await self.shadow.snapshot()
                    changes = await self.shadow.changes(before, after)
            except (SnapshotError, OSError) as exc:
                self._skip(call_id, "error", f"{exc}; this step cannot be undone with mm undo")
                return None
            if not changes:
                return None  # not a step: nothing to undo or show
            return self._record(call_id, tool, echo, before, after, changes)
        self._skip(call_id, "error", "the snapshot after the call took over 60 s; this step cannot be undone")
        return None

    def _record(
        self, call_id: str, tool: str, echo: str, before: str, after: str, changes: list[Change]
    ) -> CheckpointRow:
        project = str(self.shadow.project)
        row = self.store.add_checkpoint(
            self.session_id,
            call_id=call_id,
            tool=tool,
            echo=echo,
            project=project,
            before=before,
            after=after,
            files=shown(changes),
        )
        data = {"call_id": call_id, "step": row.step, "files": row.files, "count": len(changes)}
        self.emit("files_changed", data)
        return row

    async def _small_enough(self, call_id: str) -> bool:
        if self.counted:
            return True
        if git_missing():
            self._skip(call_id, "no_git", "git is not installed: install git to let mm undo a turn's steps")
            return False
        # Counted again each turn (the files may be more now), unless the watch saw nothing change since the
        # last count: then a snapshot's git runs the same checks (shadow.ensure) when it runs at all.
        count = self.shadow.counted(self.max_files)
        if count is None:
            await self.shadow.ensure()
            count = await self.shadow.count_files(self.max_files)
        if count > self.max_files:
            self._skip(
                call_id,
                "too_many_files",
                f"{self.shadow.project} holds more than {self.max_files:,} files (daemon.snapshot_max_files "
                "in config.yaml): no snapshots in this turn, so its steps cannot be undone with mm undo; "
                "raise the limit, or add the bulky folders to .gitignore",
            )
            return False
        self.counted = True
        return True

    def _room(self, call_id: str) -> bool:
        """Whether the snapshots' disk has room: a snapshot stores every file a step changed, so a model that
        wrote big files step after step would fill it (the spill files' reserve, mmd/procs/spill.py)."""
        keep = spill.short_of_room(self.shadow.git_dir.parent)
        if keep is None:
            return True
        folder = self.shadow.git_dir.parent
        self._skip(
            call_id,
            "no_room",
            f"the disk that holds {folder} has less than {spill.size(keep)} free: no snapshots in the rest of this "
            f"turn, so its steps cannot be undone with mm undo; free space on it (`df -h {folder}`), or delete "
            "the snapshots of past sessions you will not undo",
        )
        return False

    def _skip(self, call_id: str, reason: str, message: str) -> None:
        self.off = True
        self.emit("snapshot_skipped", {"call_id": call_id, "reason": reason, "message": message})


# -- diff and undo, between turns ----------------------------------------------------------


def _steps(store: Store, session_id: str) -> list[CheckpointRow]:
    steps = store.checkpoints(session_id)
    if not steps:
        raise UndoError(
            "nothing_to_undo",
            f"session {session_id} has no recorded step that may write (no write call ran, or snapshots "
            "were off: see its snapshot_skipped events with mm sessions show --json)",
        )
    return steps


def _chosen(steps: list[CheckpointRow], step: int | None) -> list[CheckpointRow]:
    """The steps from *step* (default: the last) to the end."""
    first = steps[-1].step if step is None else step
    if not steps[0].step <= first <= steps[-1].step:
        raise UndoError(
            "no_step",
            f"no step {first}: this session's steps are {steps[0].step} to {steps[-1].step} (mm diff lists them)",
        )
    return [s for s in steps if s.step >= first]


def _shadow(steps: list[CheckpointRow], snapshots: Path) -> Shadow:
    project = Path(steps[0].project)
    if not project.is_dir():
        raise UndoError(
            "no_project", f"{project} no longer exists: there is no working tree to diff or restore"
        )
    if git_missing():
        raise UndoError("no_git", "git is not installed: mm diff and mm undo need it (install git)")
    # No watch: what undo checks and restores is what git reads now, whatever inotify could not see.
    return Shadow(shadow_dir(snapshots, project), project, watched=False)


async def _paths(shadow: Shadow, steps: list[CheckpointRow]) -> list[bytes]:
    """Every path the steps changed (raw bytes, from the trees: names that are not UTF-8 too)."""
    found: set[bytes] = set()
    for s in steps:
        found.update(c.path for c in await shadow.changes(s.before, s.after))
    return sorted(found)


async def diff(store: Store, snapshots: Path, session_id: str, step: int | None) -> dict[str, Any]:
    """What one step, or the whole session, changed: ``{steps, step, files, diff, truncated}``.

    The whole session is every file its steps changed, from before the first step to after the last,
    without what else changed in the tree between its steps. Errors: UndoError, SnapshotError.
    """
    steps = _steps(store, session_id)
    shadow = _shadow(steps, snapshots)
    if step is not None:
        [one] = [s for s in _chosen(steps, step) if s.step == step]
        text, cut = await shadow.diff(one.before, one.after)
        return {"steps": steps, "step": step, "files": one.files, "diff": text, "truncated": cut}
    paths = await _paths(shadow, steps)
    async with locked(shadow):
        top = await shadow.overlay(steps[0].before, steps[-1].after, paths)
    changes = await shadow.changes(steps[0].before, top)
    text, cut = await shadow.diff(steps[0].before, top)
    return {"steps": steps, "step": None, "files": shown(changes), "diff": text, "truncated": cut}


async def undo(
    store: Store, snapshots: Path, session_id: str, to_step: int | None, force: bool
) -> tuple[CheckpointRow | None, int]:
    """Restore every file steps *to_step*… changed as it was before *to_step*; the undo's own step
    (None when every file already was so: nothing to record) and the first step undone.

    Errors: UndoError (``conflict`` names the files something else changed since), SnapshotError.
    """
    steps = _steps(store, session_id)
    chosen = _chosen(steps, to_step)
    shadow = _shadow(steps, snapshots)
    async with locked(shadow):
        now = await shadow.snapshot()
        paths = await _paths(shadow, chosen)
        conflicts = await _conflicts(shadow, chosen, now, set(paths))
        if conflicts and not force:
            raise UndoError("conflict", _refusal(chosen[0].step, conflicts))
        await shadow.restore(chosen[0].before, paths)
        after = await shadow.snapshot()
        changes = await shadow.changes(now, after)
    if not changes:
        return None, chosen[0].step
    row = store.add_checkpoint(
        session_id,
        call_id=None,
        tool="undo",
        echo=_undo_echo(chosen),
        project=str(shadow.project),
        before=now,
        after=after,
        files=shown(changes),
    )
    return row, chosen[0].step


async def _conflicts(shadow: Shadow, chosen: list[CheckpointRow], now: str, paths: set[bytes]) -> list[bytes]:
    """The paths among *paths* something else changed: since the last step, or between two of them."""
    gaps = [(a.after, b.before) for a, b in itertools.pairwise(chosen)]
    found: set[bytes] = set()
    for start, end in [*gaps, (chosen[-1].after, now)]:
        found.update(c.path for c in await shadow.changes(start, end) if c.path in paths)
    return sorted(found)


def _undo_echo(chosen: list[CheckpointRow]) -> str:
    first, last = chosen[0].step, chosen[-1].step
    return f"undo of step {first}" if first == last else f"undo of steps {first} to {last}"


def _refusal(first: int, conflicts: list[bytes]) -> str:
    names = ", ".join(p.decode("utf-8", "replace") for p in conflicts[:MAX_CONFLICTS_SHOWN])
    more = f" and {len(conflicts) - MAX_CONFLICTS_SHOWN} more" if len(conflicts) > MAX_CONFLICTS_SHOWN else ""
    return (
        f"not undone: {names}{more} changed after the session's steps, by something else (you, an editor, "
        f"another session); undoing to before step {first} would lose that. Nothing was changed. Look with "
        "mm diff, save what you want to keep, then run mm undo again with --force to overwrite them"
    )
