"""Sessions not used for ``daemon.session_days`` days are deleted, with their files.

Every prompt made a session's rows (events, messages, tool-call figures), its transcript and, for an
output that was cut, a folder of spill files, and nothing ever deleted any of them: a daemon in daily use
grew its state folder without end, and each start looked at every session ever made for a turn left open.
A session last used (a turn begun or ended) before the cut is deleted from the store, then its folder and
transcript. A session this daemon holds in memory (a turn, a client, used within ``session_idle``) is never
deleted. Files of a session the store no longer knows (its rows went, and the daemon was killed before its
files did) go once they are as old as the cut, and so does the shadow repository of ``mm undo``'s snapshots
of a project no session works in any more. ``session_days: 0`` keeps everything.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import time
from collections.abc import Collection
from pathlib import Path

import trio

from .. import undo
from ..config import ConfigError, load_user_config
from ..store import Store

log = logging.getLogger(__name__)

# Seconds from the daemon's start to the first look (not on the path of the first prompt), and between two.
FIRST_LOOK = 60.0
LOOK_EVERY = 6 * 3600.0
# Sessions deleted in one transaction: the event loop is free between two.
BATCH = 50
DAY = 86400.0
# A session's id (Store.create_session): the names of its folder and transcript; nothing else is touched.
_SESSION_ID = re.compile(r"[0-9a-f]{12}")


def session_days(config_path: Path) -> float | None:
    """``daemon.session_days`` of config.yaml; None (logged) when the file cannot be read: nothing is deleted
    on a guess."""
    try:
        return load_user_config(config_path).daemon.session_days
    except (ConfigError, OSError) as exc:
        log.warning("sessions are not pruned now: %s", exc)
        return None


async def prune(store: Store, state_dir: Path, days: float, in_use: Collection[str]) -> int:
    """Delete the sessions unused for *days* days but those *in_use* (read again between batches), and their
    files; then the files of sessions the store does not know that are as old. The number of sessions
    deleted. Errors: the store's (a disk that fails its writes)."""
    if days <= 0:
        return 0
    before = time.time() - days * DAY
    deleted = 0
    while True:
        # Those in use are passed over: they are among the oldest at most len(in_use) times.
        old = [s for s in store.sessions_unused_since(before, BATCH + len(in_use)) if s not in in_use][:BATCH]
        if not old:
            break
        store.delete_sessions(old)  # the rows first: files of a session the store forgot go in any case
        deleted += len(old)
        await trio.to_thread.run_sync(_remove_files, state_dir, old)
    # Files of sessions the store forgot: their rows went, and the daemon was killed before their files did.
    old_files = sorted(await trio.to_thread.run_sync(_old_files, state_dir, before))
    strays = sorted(set(old_files) - store.known_sessions(old_files))
    if strays:
        await trio.to_thread.run_sync(_remove_files, state_dir, strays)
        log.info("removed the files of %d sessions the store does not hold", len(strays))
    # An MCP server's log is one per configuration (its command, environment and project): a server used in
    # many projects, or given a rotating token, left a file for each that nothing removed.
    await trio.to_thread.run_sync(_remove_old_logs, state_dir / "mcp", before)
    # A project's shadow repository (mm undo's snapshots) once no session works in it: it held the trees of
    # that project's checkpoints alone, and a project tried once and left kept its copy of every file.
    shadows = await undo.remove_unused(state_dir / "snapshots", store.session_folders, before)
    if shadows:
        log.info("removed the snapshots of %d projects no session works in", shadows)
    if deleted:
        log.info("deleted %d sessions unused for %g days, with their files", deleted, days)
    return deleted


def _remove_old_logs(folder: Path, before: float) -> None:
    """The logs in *folder* (``*.log``, ``*.log.1``) not written since *before*."""
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.endswith((".log", ".log.1")):
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_mtime < before:
                        os.unlink(entry.path)


def _remove_files(state_dir: Path, session_ids: list[str]) -> None:
    for session_id in session_ids:
        shutil.rmtree(state_dir / "sessions" / session_id, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.unlink(state_dir / "transcripts" / f"{session_id}.jsonl")


def _old_files(state_dir: Path, before: float) -> set[str]:
    """The sessions that have a spill folder or a transcript last changed before *before*."""
    found: set[str] = set()
    for folder, suffix in (("sessions", ""), ("transcripts", ".jsonl")):
        with contextlib.suppress(OSError), os.scandir(state_dir / folder) as entries:
            for entry in entries:
                session_id = (
                    entry.name[: len(entry.name) - len(suffix)] if entry.name.endswith(suffix) else ""
                )
                with contextlib.suppress(OSError):
                    if (
                        _SESSION_ID.fullmatch(session_id)
                        and entry.stat(follow_symlinks=False).st_mtime < before
                    ):
                        found.add(session_id)
    return found
