"""The shadow repository with real git and real files: snapshots, changes, overlays, restores, the
environment git runs in, and the steps of mmd/undo/steps.py against a real store."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import trio

from mmd.store import Store
from mmd.undo import EMPTY_TREE, Recorder, Shadow, SnapshotError, UndoError, diff, shadow_dir, undo
from mmd.undo import shadow as shadow_module
from mmd.undo.shadow import Change

pytestmark = pytest.mark.skipif(
    os.system("git --version >/dev/null 2>&1") != 0, reason="git is not installed"
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("a\n")
    (work / "tool.sh").write_text("#!/bin/sh\n")
    (work / "tool.sh").chmod(0o755)
    return work


@pytest.fixture
def shadow(tmp_path: Path, project: Path) -> Shadow:
    return Shadow(shadow_dir(tmp_path / "snapshots", project), project)


def files(root: Path) -> dict[str, tuple[int, bytes]]:
    found = {}
    for folder, dirs, names in os.walk(root):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            body = os.readlink(path).encode() if stat.S_ISLNK(st.st_mode) else Path(path).read_bytes()
            found[os.path.relpath(path, root)] = (st.st_mode, body)
    return found


async def test_the_shadow_repository_is_outside_the_project_and_one_per_project_path(
    tmp_path, project, shadow
):
    await shadow.snapshot()
    assert not (project / ".git").exists()
    assert shadow.git_dir.parent == tmp_path / "snapshots"
    assert shadow_dir(tmp_path / "snapshots", project / ".") == shadow.git_dir
    assert shadow_dir(tmp_path / "snapshots", tmp_path) != shadow.git_dir


async def test_an_unchanged_tree_gives_the_same_snapshot_and_no_changes(shadow):
    first = await shadow.snapshot()
    assert await shadow.snapshot() == first
    assert await shadow.changes(first, first) == []


async def test_an_empty_project_is_the_empty_tree(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert await Shadow(tmp_path / "s", empty).snapshot() == EMPTY_TREE


async def test_changes_name_added_modified_deleted_and_type_changes(project, shadow):
    before = await shadow.snapshot()
    (project / "a.txt").write_text("b\n")
    (project / "tool.sh").unlink()
    (project / "new\nline").write_bytes(b"\xff")
    os.symlink("/etc/passwd", project / "link")
    after = await shadow.snapshot()
    assert sorted(await shadow.changes(before, after), key=lambda c: c.path) == [
        Change("modified", b"a.txt"),
        Change("added", b"link"),
        Change("added", b"new\nline"),
        Change("deleted", b"tool.sh"),
    ]


async def test_restore_brings_back_bytes_modes_and_links_and_removes_what_was_created(project, shadow):
    (project / "bin.dat").write_bytes(bytes(range(256)))
    (project / "crlf.txt").write_bytes(b"one\r\ntwo\n")
    (project / ".gitattributes").write_text("* text=auto eol=crlf\n")  # no conversion may apply
    os.symlink("a.txt", project / "link")
    start = files(project)
    before = await shadow.snapshot()
    for name in ("bin.dat", "tool.sh", "link"):
        (project / name).unlink()
    (project / "crlf.txt").write_bytes(b"x")
    (project / "deep" / "er").mkdir(parents=True)
    (project / "deep" / "er" / "made.txt").write_text("made")
    after = await shadow.snapshot()
    await shadow.restore(before, [c.path for c in await shadow.changes(before, after)])
    assert files(project) == start
    assert not (project / "deep").exists()


async def test_ignored_files_are_neither_snapshotted_nor_restored(project, shadow):
    (project / ".gitignore").write_text("*.log\n")
    (project / "run.log").write_text("one")
    before = await shadow.snapshot()
    (project / "run.log").write_text("two")
    assert await shadow.changes(before, await shadow.snapshot()) == []
    assert await shadow.count_files(100) == 3  # .gitignore, a.txt, tool.sh


async def test_the_projects_own_info_exclude_is_respected_and_its_git_folder_never_read(project, shadow):
    (project / ".git" / "info").mkdir(parents=True)
    (project / ".git" / "info" / "exclude").write_text("secret.txt\n")
    (project / "secret.txt").write_text("s")
    tree = await shadow.snapshot()
    assert b"secret.txt" not in await shadow.git("ls-tree", "-r", "--name-only", tree)
    assert b".git" not in await shadow.git("ls-tree", "-r", "--name-only", tree)


async def test_every_git_of_a_snapshot_runs_with_mms_heap_limit(project, shadow):
    # A project can feed git without end (a nested repository's ref linked to /dev/zero): each git of a
    # snapshot runs with RLIMIT_DATA, so it fails for want of memory, not the machine (e2e: test_undo.py).
    out, _err, code = await shadow._run(["sh", "-c", "ulimit -d"], None, None)
    assert code == 0 and out.strip() == str(shadow_module.MAX_GIT_DATA >> 10).encode()


@pytest.mark.parametrize(
    "exclude", ["fifo", "big"], ids=["a FIFO", "a file over the bound (sparse: no disk)"]
)
async def test_a_projects_info_exclude_that_is_no_small_file_is_never_read_whole(project, shadow, exclude):
    # Read whole on the event loop, a sparse 200 GB exclude stopped the daemon (MemoryError or the OOM
    # killer); a FIFO there is no file.
    info = project / ".git" / "info"
    info.mkdir(parents=True)
    if exclude == "fifo":
        os.mkfifo(info / "exclude")
        await shadow.snapshot()  # is_file() is False for a FIFO: as if there were none
        return
    with open(info / "exclude", "wb") as f:
        f.truncate(200 << 30)
    with pytest.raises(SnapshotError, match="holds more than 1 MiB of patterns: no snapshot copies it"):
        await shadow.snapshot()


@pytest.mark.parametrize("fifo", ["deep/down/.gitignore", ".gitattributes"])
async def test_a_git_waiting_to_open_a_fifo_is_stopped_at_once_and_the_fifo_named(tmp_path, project, fifo):
    # git opens a project's .gitignore and .gitattributes without O_NONBLOCK: a FIFO by such a name held the
    # first snapshot of every turn until the timeout (five minutes). The git is stopped within seconds now,
    # and the error names the FIFO and what to do. (Without the look, this test waits out the timeout and
    # reads another message.)
    (project / fifo).parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(project / fifo)
    shadow = Shadow(shadow_dir(tmp_path / "snapshots", project), project, timeout=60.0)
    with pytest.raises(SnapshotError) as raised:
        await shadow.snapshot()
    assert str(raised.value).startswith(
        f"git ls-files in {project} waits to open {fifo!r}, a FIFO (named pipe) that nothing writes to"
    ) or str(raised.value).startswith(f"git add . in {project} waits to open {fifo!r}")
    assert "`find . -type p` lists FIFOs" in str(raised.value)
    (project / fifo).unlink()
    assert await shadow.snapshot()


async def test_a_git_that_takes_too_long_is_stopped_and_named_in_the_error(tmp_path, project, monkeypatch):
    # A git held where mm cannot tell why (a hung network mount; a kernel that does not name a FIFO's wait,
    # here a look that never comes) is stopped at the shadow's timeout, and the error names the git command,
    # not mm's own -c setting.
    monkeypatch.setattr(shadow_module, "FIFO_LOOK", 3600.0)
    os.mkfifo(project / ".gitignore")
    shadow = Shadow(shadow_dir(tmp_path / "snapshots", project), project, timeout=1.0)
    with pytest.raises(SnapshotError) as raised:
        await shadow.snapshot()
    assert str(raised.value) == f"git ls-files took over 1 s in {project}"


async def test_a_git_add_stopped_midway_leaves_no_partial_pack_behind(tmp_path, project):
    # A sparse file of 1 TiB (a few bytes in a tarball): git hashes it until the timeout, writing a pack;
    # stopped, it left the pack (16 MB a try at 120 s) in the shadow repository at every snapshot.
    with open(project / "big", "wb") as f:
        f.truncate(1 << 40)
    shadow = Shadow(shadow_dir(tmp_path / "snapshots", project), project, timeout=2.0)
    for _ in range(2):
        with pytest.raises(SnapshotError, match=r"git add \. took over 2 s"):
            await shadow.snapshot()
        assert not [p for p in (shadow.git_dir / "objects").rglob("tmp_*")]
    (project / "big").unlink()
    assert await shadow.snapshot()


async def test_count_files_stops_past_the_limit(project, shadow):
    for n in range(50):
        (project / f"f{n}").write_text("x")
    await shadow.ensure()
    assert await shadow.count_files(10) == 11


async def test_overlay_takes_only_the_named_paths_from_the_top_tree(project, shadow):
    base = await shadow.snapshot()
    (project / "a.txt").write_text("mine\n")
    (project / "tool.sh").unlink()
    top = await shadow.snapshot()
    mixed = await shadow.overlay(base, top, [b"tool.sh"])
    assert await shadow.changes(base, mixed) == [Change("deleted", b"tool.sh")]


async def test_git_runs_without_the_daemons_git_variables_or_the_users_config(
    project, shadow, monkeypatch, tmp_path
):
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "nowhere"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(tmp_path / "nowhere.index"))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", f"'core.fsmonitor'='touch {tmp_path}/pwned'")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[core]\n\thooksPath = /nope\n\texcludesFile = /nope\n")
    monkeypatch.setenv("HOME", str(home))
    await shadow.snapshot()
    (project / "a.txt").write_text("changed\n")
    await shadow.snapshot()
    assert not (tmp_path / "nowhere.index").exists() and not (tmp_path / "pwned").exists()
    config = (await shadow.git("config", "--list", "--show-origin")).decode()
    assert "gitconfig" not in config and "/nope" not in config


async def test_a_git_failure_is_a_snapshot_error_that_says_what_failed(project, shadow):
    await shadow.ensure()
    with pytest.raises(SnapshotError, match="git cat-file failed"):
        await shadow.git("cat-file", "-p", "0" * 40)


async def test_a_cancelled_git_leaves_no_process(project, shadow):
    await shadow.ensure()
    with trio.move_on_after(0):
        await shadow.snapshot()
    assert await shadow.snapshot()  # the index lock was not left behind


async def test_a_lock_a_killed_git_left_is_removed_and_the_snapshot_made(tmp_path, project):
    # A git may run two hours here: the lock below is stale only for being older than this daemon.
    shadow = Shadow(shadow_dir(tmp_path / "snapshots", project), project, timeout=7200)
    first = await shadow.snapshot()
    (project / "b.txt").write_text("b\n")
    # What a git killed with SIGKILL before this daemon started leaves: its index.lock.
    lock = shadow.git_dir / "index.lock"
    lock.write_bytes(b"")
    past = lock.stat().st_mtime - 3600
    os.utime(lock, (past, past))
    second = await shadow.snapshot()
    assert [c.shown() for c in await shadow.changes(first, second)] == [{"path": "b.txt", "change": "added"}]
    assert not lock.exists()


async def test_a_lock_younger_than_the_daemon_and_a_gits_timeout_is_left_alone(project, shadow):
    await shadow.ensure()
    lock = shadow.git_dir / "index.lock"
    lock.write_bytes(b"")  # made now: a git of another daemon on this state folder may be writing
    with pytest.raises(SnapshotError, match=r"index\.lock"):
        await shadow.snapshot()
    assert lock.exists()
    # Older than a git may run: no git holds it any more.
    past = lock.stat().st_mtime - shadow.timeout - 1
    os.utime(lock, (past, past))
    assert await shadow.snapshot()
    assert not lock.exists()


# -- the steps ------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path):
    with Store.open(tmp_path / "mm.db") as opened:
        yield opened


def recorder(store: Store, project: Path, tmp_path: Path, events: list, max_files: int = 1000) -> Recorder:
    row = store.create_session(cwd=str(project), agent=None, model="m")
    return Recorder(
        store=store,
        session_id=row.id,
        project=project,
        snapshots=tmp_path / "snapshots",
        max_files=max_files,
        emit=lambda kind, data: events.append((kind, data)),
    )


async def test_a_step_is_stored_and_announced_and_undone(store, project, tmp_path):
    events: list = []
    rec = recorder(store, project, tmp_path, events)
    before = await rec.before("call_1")
    (project / "a.txt").write_text("changed\n")
    row = await rec.after("call_1", "bash", "$ edit", before)
    assert row is not None and row.step == 1 and row.files == [{"path": "a.txt", "change": "modified"}]
    assert events == [("files_changed", {"call_id": "call_1", "step": 1, "files": row.files, "count": 1})]

    shown = await diff(store, tmp_path / "snapshots", rec.session_id, None)
    assert "+changed" in shown["diff"] and shown["files"] == row.files
    step, first = await undo(store, tmp_path / "snapshots", rec.session_id, None, False)
    assert (project / "a.txt").read_text() == "a\n" and (step.step, step.tool, first) == (2, "undo", 1)


async def test_undo_refuses_a_file_changed_between_two_steps(store, project, tmp_path):
    rec = recorder(store, project, tmp_path, [])
    for content in ("one\n", "two\n"):
        before = await rec.before("c")
        (project / "a.txt").write_text(content)
        await rec.after("c", "write_file", "a.txt", before)
        (project / "a.txt").write_text(content + "mine\n")  # someone else, between the steps
    with pytest.raises(UndoError, match=r"a\.txt") as refused:
        await undo(store, tmp_path / "snapshots", rec.session_id, 1, False)
    assert refused.value.code == "conflict"
    assert (project / "a.txt").read_text() == "two\nmine\n"


async def test_a_tree_over_the_limit_is_skipped_once_with_a_note(store, project, tmp_path):
    events: list = []
    rec = recorder(store, project, tmp_path, events, max_files=1)
    assert await rec.before("c1") is None and await rec.before("c2") is None
    [(kind, data)] = events
    assert kind == "snapshot_skipped" and data["reason"] == "too_many_files"
    with pytest.raises(UndoError) as nothing:
        await undo(store, tmp_path / "snapshots", rec.session_id, None, False)
    assert nothing.value.code == "nothing_to_undo"


async def test_without_git_the_turn_says_so_and_goes_on(store, project, tmp_path, monkeypatch):
    events: list = []
    rec = recorder(store, project, tmp_path, events)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    assert await rec.before("c1") is None
    assert events[0][1]["reason"] == "no_git" and "install git" in events[0][1]["message"]


async def test_an_overwritten_file_keeps_its_own_permission_bits(project, shadow):
    secret = project / "secret.env"
    secret.write_text("KEY=1\n")
    secret.chmod(0o600)
    before = await shadow.snapshot()
    secret.write_text("KEY=2\n")  # as sed -i or an editor would: the mode stays
    (project / "tool.sh").write_text("#!/bin/sh\nexit 1\n")
    (project / "tool.sh").chmod(0o700)
    after = await shadow.snapshot()
    await shadow.restore(before, [c.path for c in await shadow.changes(before, after)])
    assert secret.read_text() == "KEY=1\n" and stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert stat.S_IMODE((project / "tool.sh").stat().st_mode) == 0o700


async def test_a_call_that_changed_nothing_is_no_step_and_an_undo_with_nothing_to_do_records_none(
    store, project, tmp_path
):
    events: list = []
    rec = recorder(store, project, tmp_path, events)
    before = await rec.before("c1")
    (project / "a.txt").write_text("b\n")
    assert await rec.after("c1", "bash", "$ edit", before) is not None
    before = await rec.before("c2")
    assert await rec.after("c2", "bash", "$ ls", before) is None  # read only: not a step
    assert [e[1]["step"] for e in events] == [1]
    (project / "a.txt").write_text("a\n")  # someone put it back already
    row, first = await undo(store, tmp_path / "snapshots", rec.session_id, None, True)
    assert row is None and first == 1 and len(store.checkpoints(rec.session_id)) == 1


async def test_an_unchanged_index_skips_write_tree_and_a_changed_one_never_does(
    project, shadow, monkeypatch, git_runs
):
    # snapshot() keeps the tree of the last index by the index's checksum: one git (add) when
    # nothing changed, and never a stale tree after a change, even one of the same size.
    monkeypatch.setattr(shadow_module, "watch_of", lambda *_: None)  # git each time, as without inotify
    ran = git_runs
    first = await shadow.snapshot()
    # git may rewrite a racily clean index again (files as new as the index); then it settles.
    for _ in range(10):
        ran.clear()
        assert await shadow.snapshot() == first
        if ran == ["add"]:
            break
        await trio.sleep(0.05)
    assert ran == ["add"]
    (project / "a.txt").write_text((project / "a.txt").read_text().upper())  # same size, new bytes
    ran.clear()
    second = await shadow.snapshot()
    assert second != first and ran == ["add", "write-tree"]
    assert [c.path for c in await shadow.changes(first, second)] == [b"a.txt"]
