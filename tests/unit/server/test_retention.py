"""Sessions unused for ``daemon.session_days`` are deleted with their files (mmd/server/retention.py).

A daemon object in process with its store in tmp_path: sessions are made old by setting their ``updated``
time, and the daemon's pruning task runs in virtual time (``autojump_clock``).
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from mmd.models.base import Message
from mmd.server import retention
from mmd.server.daemon import Daemon
from mmd.store import Store
from mmd.undo import Shadow, shadow_dir, watch

from .test_idle_sessions import stored_daemon

DAY = 86400.0


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[Daemon]:
    with stored_daemon(tmp_path, "daemon:\n  session_days: 30\n") as d:
        yield d


def session_with_files(daemon: Daemon, cwd: Path, days_unused: float) -> str:
    """A session with a row in every table that holds a session's, a spill file and a transcript, last used
    *days_unused* days ago."""
    store = daemon.store
    sid = store.create_session(cwd=str(cwd), agent=None, model="test/scripted").id
    store.append_event(sid, "turn_started", {"prompt": "hi"})
    store.append_message(sid, Message(role="user", content="hi"))
    store.record_tool_call(session_id=sid, tool="bash", valid=True, error=None, retry=False)
    store.add_checkpoint(
        sid, call_id="c1", tool="bash", echo="$ true", project=str(cwd), before="a", after="b", files=[]
    )
    store.add_consent(tool="bash", kind="tool", rule=None, scope="session", scope_key=sid, origin="test")
    spill = daemon.state_dir / "sessions" / sid
    spill.mkdir(parents=True)
    (spill / "output-c1.log").write_text("x" * 1000)
    (daemon.state_dir / "transcripts").mkdir(exist_ok=True)
    (daemon.state_dir / "transcripts" / f"{sid}.jsonl").write_text("{}\n")
    used = time.time() - days_unused * DAY
    store._conn.execute("UPDATE sessions SET updated = ? WHERE id = ?", (used, sid))
    return sid


def rows_of(store: Store, sid: str) -> dict[str, int]:
    tables = {"sessions": "id", "events": "session_id", "messages": "session_id", "tool_calls": "session_id"}
    tables |= {"checkpoints": "session_id", "consents": "scope_key"}
    return {
        t: store._conn.execute(f"SELECT count(*) FROM {t} WHERE {c} = ?", (sid,)).fetchone()[0]
        for t, c in tables.items()
    }


def has_files(daemon: Daemon, sid: str) -> bool:
    return (daemon.state_dir / "sessions" / sid).exists() or (
        daemon.state_dir / "transcripts" / f"{sid}.jsonl"
    ).exists()


async def test_a_session_unused_past_session_days_goes_with_its_rows_and_files(
    daemon: Daemon, tmp_path: Path
):
    old = session_with_files(daemon, tmp_path, days_unused=31)
    recent = session_with_files(daemon, tmp_path, days_unused=29)
    loaded = session_with_files(daemon, tmp_path, days_unused=40)
    daemon.session(loaded)  # held by this daemon (a client, a turn): never deleted under it

    assert await retention.prune(daemon.store, daemon.state_dir, 30, daemon.sessions) == 1

    assert set(rows_of(daemon.store, old).values()) == {0} and not has_files(daemon, old)
    for kept in (recent, loaded):
        assert set(rows_of(daemon.store, kept).values()) == {1} and has_files(daemon, kept)
    assert [r.id for r in daemon.store.list_sessions()] == [recent, loaded]


async def test_many_old_sessions_go_in_batches_and_zero_days_keeps_them(daemon: Daemon, tmp_path: Path):
    sids = [session_with_files(daemon, tmp_path, days_unused=100) for _ in range(retention.BATCH + 3)]
    assert await retention.prune(daemon.store, daemon.state_dir, 0, daemon.sessions) == 0
    assert len(daemon.store.list_sessions(limit=1000)) == len(sids)
    assert await retention.prune(daemon.store, daemon.state_dir, 30, daemon.sessions) == len(sids)
    assert daemon.store.list_sessions() == [] and not any(has_files(daemon, s) for s in sids)


async def test_old_files_of_a_session_the_store_forgot_go_and_nothing_else(daemon: Daemon, tmp_path: Path):
    # A daemon killed between deleting a session's rows and its files left these.
    stray, young = "0123456789ab", "ba9876543210"
    for sid in (stray, young):
        (daemon.state_dir / "sessions" / sid).mkdir(parents=True)
        (daemon.state_dir / "sessions" / sid / "output-c1.log").write_text("x")
    (daemon.state_dir / "transcripts").mkdir()
    (daemon.state_dir / "transcripts" / f"{stray}.jsonl").write_text("{}\n")
    other = daemon.state_dir / "sessions" / "notes.txt"  # not a session's: never touched
    other.write_text("mine")
    past = time.time() - 31 * DAY
    for path in (
        daemon.state_dir / "sessions" / stray,
        daemon.state_dir / "transcripts" / f"{stray}.jsonl",
        other,
    ):
        os.utime(path, (past, past))

    await retention.prune(daemon.store, daemon.state_dir, 30, daemon.sessions)

    assert not has_files(daemon, stray)
    assert has_files(daemon, young)  # as young as a session being made now
    assert other.read_text() == "mine"


async def test_an_mcp_servers_log_not_written_for_session_days_goes(daemon: Daemon):
    # One log per server configuration (command, environment, project): one for each project it served.
    logs = daemon.state_dir / "mcp"
    logs.mkdir()
    old, rotated, recent = (
        logs / "seed-0123abcd.log",
        logs / "seed-0123abcd.log.1",
        logs / "seed-4567ef01.log",
    )
    for path in (old, rotated, recent):
        path.write_text("started\n")
    past = time.time() - 31 * DAY
    for path in (old, rotated):
        os.utime(path, (past, past))
    await retention.prune(daemon.store, daemon.state_dir, 30, daemon.sessions)
    assert sorted(p.name for p in logs.iterdir()) == [recent.name]


async def settled(done: Callable[[], bool]) -> bool:
    """Whether *done* holds once the pruning task had time to get there. Bounded in real time, not in virtual
    minutes: virtual time jumps while a worker thread runs (reading the config, removing files), so on a
    loaded machine a thousand virtual minutes passed within one thread's run, before its prune ended."""
    deadline = time.monotonic() + 60  # a hang guard
    while not done():
        if time.monotonic() > deadline:
            return False
        await trio.sleep(60)
    return True


async def test_the_daemon_prunes_a_minute_after_it_starts_then_every_few_hours(
    daemon: Daemon, tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
):
    runs: list[int] = []  # what each finished prune deleted
    prune = retention.prune

    async def counted(*args: Any) -> int:
        runs.append(await prune(*args))
        return runs[-1]

    monkeypatch.setattr(retention, "prune", counted)
    first = session_with_files(daemon, tmp_path, days_unused=31)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(daemon._prune_sessions)
        await trio.sleep(retention.FIRST_LOOK - 1)
        assert runs == []  # not on the path of the start
        assert await settled(lambda: runs == [1])
        assert daemon.store.list_sessions() == [] and not has_files(daemon, first)
        # A config that cannot be read deletes nothing (no guess at what you set).
        daemon.config_path.write_text("daemon:\n  session_days: -100\n")
        second = session_with_files(daemon, tmp_path, days_unused=31)
        await trio.sleep(2 * retention.LOOK_EVERY)
        assert runs == [1] and [r.id for r in daemon.store.list_sessions()] == [second]
        daemon.config_path.write_text("daemon:\n  session_days: 30\n")
        assert await settled(lambda: runs == [1, 1])
        assert daemon.store.list_sessions() == [] and not has_files(daemon, second)
        nursery.cancel_scope.cancel()


# --- mm undo's shadow repositories (mmd/undo/steps.py remove_unused) ------------------------------------


@pytest.fixture(autouse=True)
def no_watch_left() -> Iterator[None]:
    yield
    watch.forget()  # the watches the snapshots made: inotify descriptors of this worker


def aged(git_dir: Path, days: float) -> None:
    """Make a shadow repository look last changed *days* days ago (its folder and what is at its top)."""
    past = time.time() - days * DAY
    for path in [*git_dir.iterdir(), git_dir]:
        os.utime(path, (past, past), follow_symlinks=False)


async def snapshotted(daemon: Daemon, project: Path) -> Shadow:
    project.mkdir(exist_ok=True)
    (project / "a.txt").write_text("one\n")
    shadow = Shadow(shadow_dir(daemon.state_dir / "snapshots", project), project)
    await shadow.snapshot()
    return shadow


async def test_the_snapshots_of_a_project_whose_last_session_went_go_too(daemon: Daemon, tmp_path: Path):
    # They held every file of every project ever tried (a clone looked at once, then deleted), for good.
    left, kept, new = [await snapshotted(daemon, tmp_path / p) for p in ("left", "kept", "new")]
    session_with_files(daemon, tmp_path / "left", days_unused=31)
    session_with_files(daemon, tmp_path / "kept", days_unused=29)
    for shadow in (left, kept):
        aged(shadow.git_dir, 31)  # the project untouched since its session: no snapshot since
    (daemon.state_dir / "snapshots" / "notes").mkdir()  # not a shadow repository: never touched
    aged(daemon.state_dir / "snapshots" / "notes", 31)

    assert await retention.prune(daemon.store, daemon.state_dir, 30, daemon.sessions) == 1

    assert not left.git_dir.exists()
    assert kept.git_dir.exists()  # its session may still undo
    assert new.git_dir.exists()  # no session yet, but snapshotted now: a session that is starting
    assert (daemon.state_dir / "snapshots" / "notes").exists()


async def test_a_project_whose_snapshots_went_is_snapshotted_anew_never_from_its_old_watch(
    daemon: Daemon, tmp_path: Path
):
    # The watch of the project kept its last tree: the next snapshot named a tree no repository held, and
    # the step could never be undone.
    shadow = await snapshotted(daemon, tmp_path / "p")
    assert shadow.unchanged() is not None  # watched: the next snapshot would be this tree, without git
    aged(shadow.git_dir, 31)
    await retention.prune(daemon.store, daemon.state_dir, 30, daemon.sessions)
    assert not shadow.git_dir.exists()
    assert shadow.unchanged() is None
    tree = await shadow.snapshot()
    assert await shadow.entries(tree) != {}  # the new repository holds it
