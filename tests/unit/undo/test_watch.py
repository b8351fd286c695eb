"""Snapshots that skip git when inotify saw no change (mmd/undo/watch.py), against real files and real git.

Every test compares the watched shadow's tree with the tree git makes from scratch in a second shadow
repository of the same project: a change the watch missed would show as a different tree.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
import trio

from mmd import inotify
from mmd.store import Store
from mmd.undo import Recorder, Shadow, shadow_dir, watch
from mmd.undo.watch import Watch

pytestmark = [
    pytest.mark.skipif(os.system("git --version >/dev/null 2>&1") != 0, reason="git is not installed"),
    pytest.mark.skipif(inotify.LIBC is None, reason="no inotify here"),
]


@pytest.fixture(autouse=True)
def no_watch_left():
    yield
    watch.forget()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "src" / "a.py").write_text("a = 1\n")
    (work / "notes.txt").write_text("notes\n")
    (work / ".gitignore").write_text("node_modules/\n*.log\n")
    (work / "node_modules" / "pkg").mkdir(parents=True)
    (work / "node_modules" / "pkg" / "index.js").write_text("x\n")
    return work


class CountingShadow(Shadow):
    """A shadow that names each git it runs in ``ran``."""

    ran: list[str] = []

    async def git(self, *args, **kw):
        self.ran.append(args[0])
        return await super().git(*args, **kw)


class Counted:
    """A watched shadow whose git processes are counted, and a second one that never watches (the reference)."""

    def __init__(self, tmp_path: Path, project: Path) -> None:
        self.ran: list[str] = []
        self.shadow = CountingShadow(shadow_dir(tmp_path / "snapshots", project), project, ran=self.ran)
        self.reference = Shadow(tmp_path / "reference", project)

    async def snapshot(self) -> str:
        """The watched shadow's tree, checked against git's tree made from scratch."""
        self.ran.clear()
        tree = await self.shadow.snapshot()
        await self.reference.ensure()
        assert tree == await self.reference._write_tree(), "the watch missed a change"
        return tree


@pytest.fixture
def shadows(tmp_path: Path, project: Path) -> Counted:
    return Counted(tmp_path, project)


async def test_a_tree_nothing_changed_in_is_the_last_snapshot_without_git(shadows):
    first = await shadows.snapshot()
    assert "add" in shadows.ran  # the first one runs git, and sets the watches
    for _ in range(3):
        assert await shadows.snapshot() == first
        assert shadows.ran == []


def change_content(p: Path) -> None:
    (p / "notes.txt").write_text("NOTES\n")  # same size


def append(p: Path) -> None:
    with open(p / "src" / "a.py", "a") as f:
        f.write("b = 2\n")


def truncate(p: Path) -> None:
    os.truncate(p / "notes.txt", 0)


def make_executable(p: Path) -> None:
    (p / "notes.txt").chmod(0o755)


def create(p: Path) -> None:
    (p / "src" / "b.py").write_text("b\n")


def delete(p: Path) -> None:
    (p / "notes.txt").unlink()


def rename(p: Path) -> None:
    (p / "notes.txt").rename(p / "src" / "notes.md")


def symlink(p: Path) -> None:
    os.symlink("/etc/hostname", p / "link")


def new_folder(p: Path) -> None:
    (p / "docs" / "deep").mkdir(parents=True)
    (p / "docs" / "deep" / "x.md").write_text("x\n")


def unignore(p: Path) -> None:
    (p / ".gitignore").write_text("*.log\n")


CHANGES = [
    change_content,
    append,
    truncate,
    make_executable,
    create,
    delete,
    rename,
    symlink,
    new_folder,
    unignore,
]


@pytest.mark.parametrize("change", CHANGES, ids=lambda f: f.__name__)
async def test_every_kind_of_change_between_snapshots_is_seen(shadows, project, change):
    first = await shadows.snapshot()
    change(project)
    assert await shadows.snapshot() != first
    assert "add" in shadows.ran


async def test_a_file_in_a_folder_made_after_the_watches_were_set_is_seen(shadows, project):
    await shadows.snapshot()
    (project / "new" / "inner").mkdir(parents=True)
    await shadows.snapshot()  # sees the folder: the watches are set again, over it too
    (project / "new" / "inner" / "f.txt").write_text("f\n")
    second = await shadows.snapshot()
    (project / "new" / "inner" / "f.txt").write_text("g\n")
    assert await shadows.snapshot() != second


@pytest.mark.parametrize("source", ["work/old", "outside"], ids=["within_the_project", "from_outside_it"])
async def test_a_folder_moved_is_watched_under_its_new_name(shadows, project, tmp_path, source):
    # Within the project its watches go with it; from outside it had none, and its move-in sets them.
    (tmp_path / source / "sub").mkdir(parents=True)
    await shadows.snapshot()
    (tmp_path / source).rename(project / "moved")
    first = await shadows.snapshot()
    (project / "moved" / "sub" / "f.txt").write_text("f\n")
    assert await shadows.snapshot() != first


async def test_a_folder_ignored_again_is_watched_once_it_is_not(shadows, project):
    await shadows.snapshot()
    (project / "node_modules" / "pkg" / "index.js").write_text("changed\n")
    await shadows.snapshot()  # ignored: the tree is the same (git may or may not run)
    unignore(project)
    first = await shadows.snapshot()
    (project / "node_modules" / "pkg" / "index.js").write_text("changed again\n")
    assert await shadows.snapshot() != first


async def test_a_folder_excluded_in_git_info_is_watched_once_it_is_not(shadows, project):
    (project / ".git" / "info").mkdir(parents=True)
    (project / ".git" / "info" / "exclude").write_text("build/\n")
    (project / "build").mkdir()
    await shadows.snapshot()
    (project / ".git" / "info" / "exclude").write_text("")
    first = await shadows.snapshot()
    (project / "build" / "out.txt").write_text("out\n")
    assert await shadows.snapshot() != first


async def test_a_change_in_an_ignored_folder_runs_no_git(shadows, project):
    first = await shadows.snapshot()
    (project / "node_modules" / "pkg" / "index.js").write_text("changed\n")
    (project / "node_modules" / "new").mkdir()
    assert await shadows.snapshot() == first
    assert shadows.ran == []


async def test_a_folder_of_ignored_files_alone_is_watched(shadows, project):
    # ls-files --directory lists build/ (all it holds is ignored), yet a new file in it is snapshotted.
    (project / "build").mkdir()
    (project / "build" / "out.log").write_text("log\n")
    first = await shadows.snapshot()
    (project / "build" / "keep.txt").write_text("keep\n")
    assert await shadows.snapshot() != first


async def test_a_commit_in_a_nested_repository_changes_the_tree(shadows, project):
    nested = project / "vendor"
    nested.mkdir()
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=nested, check=True, env=env)
    (nested / "f").write_text("1\n")
    subprocess.run([*git, "add", "f"], cwd=nested, check=True, env=env)
    subprocess.run([*git, "commit", "-qm", "one"], cwd=nested, check=True, env=env)
    first = await shadows.snapshot()
    (nested / "f").write_text("2\n")
    subprocess.run([*git, "commit", "-qam", "two"], cwd=nested, check=True, env=env)
    assert await shadows.snapshot() != first


async def test_lost_events_make_the_watch_start_again(shadows, project):
    await shadows.snapshot()
    # More events than the kernel queues (16,384 by default): two files in turn, so none are merged.
    a, b = project / "notes.txt", project / "src" / "a.py"
    for i in range(17_000):
        os.utime(a if i % 2 else b, ns=(i, i))
    (project / "late").mkdir()  # its event is lost: only the overflow says the watches are not complete
    first = await shadows.snapshot()
    (project / "late" / "c.py").write_text("c\n")
    assert await shadows.snapshot() != first


async def test_a_tree_with_too_many_folders_is_not_watched_and_snapshots_run_git(
    shadows, project, monkeypatch
):
    monkeypatch.setattr(watch, "MAX_FOLDERS", 1)
    first = await shadows.snapshot()
    assert await shadows.snapshot() == first
    assert "add" in shadows.ran  # not watched: git each time
    change_content(project)
    assert await shadows.snapshot() != first


async def test_without_inotify_snapshots_run_git(shadows, project, monkeypatch):
    monkeypatch.setattr(inotify, "LIBC", None)
    first = await shadows.snapshot()
    assert await shadows.snapshot() == first
    assert "add" in shadows.ran
    create(project)
    assert await shadows.snapshot() != first


async def test_only_a_few_projects_are_watched_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(watch, "MAX_WATCHES", 2)
    made = []
    for i in range(4):
        work = tmp_path / f"p{i}"
        work.mkdir()
        (work / "f").write_text("f\n")
        made.append(Shadow(shadow_dir(tmp_path / "s", work), work))
        await made[-1].snapshot()
    assert list(watch._watches) == [str(s.git_dir) for s in made[2:]]


def test_the_inotify_descriptor_is_not_inherited(tmp_path):
    (tmp_path / "f").write_text("f\n")
    w = Watch(tmp_path)
    w.start(set())
    try:
        fds = subprocess.run(["ls", "/proc/self/fd"], capture_output=True, text=True, close_fds=False).stdout
        assert str(w._fd) not in fds.split()
    finally:
        w.close()


@pytest.mark.parametrize("seed", range(4))
async def test_random_changes_never_give_a_stale_tree(shadows, project, seed):
    rng = random.Random(seed)
    names = ["a", "b", "c", "d.log"]

    def folder() -> Path:
        return rng.choice(
            [project, project / "src", project / "x", project / "x" / "y", project / "node_modules"]
        )

    for _ in range(60):
        for _ in range(rng.randrange(0, 3)):
            where, name = folder(), rng.choice(names)
            op = rng.randrange(6)
            if op == 0:
                where.mkdir(parents=True, exist_ok=True)
                (where / name).write_text(rng.choice(["1", "22", "333"]))
            elif op == 1 and (where / name).is_file():
                (where / name).unlink()
            elif op == 2 and (where / name).is_file():
                (where / name).chmod(rng.choice([0o644, 0o755]))
            elif op == 3 and where.is_dir() and where != project:
                target = project / rng.choice(["x", "z", "src2"])
                if not target.exists():
                    where.rename(target)
            elif op == 4:
                (project / ".gitignore").write_text(rng.choice(["node_modules/\n", "*.log\n", "x/\n", ""]))
            elif op == 5 and (where / name).is_file():
                with open(where / name, "a") as f:
                    f.write("+")
        await shadows.snapshot()


def recorder(
    store: Store, session_id: str, project: Path, emit: Any, *, max_files: int = 1000, watch: bool = True
) -> Recorder:
    """The checkpoints of a session in *project*, its snapshots beside it."""
    return Recorder(
        store=store,
        session_id=session_id,
        project=project,
        snapshots=project.parent / "snapshots",
        max_files=max_files,
        emit=emit,
        watch=watch,
    )


@pytest.mark.parametrize("watched", [True, False])
async def test_a_turn_s_call_that_changes_nothing_runs_git_only_where_not_watched(
    tmp_path, project, git_runs, watched
):
    ran = git_runs
    with Store.open(tmp_path / "mm.db") as store:
        row = store.create_session(cwd=str(project), agent=None, model="m")
        events: list[str] = []
        rec = recorder(store, row.id, project, lambda kind, data: events.append(kind), watch=watched)
        first = await rec.before("c1")
        assert first is not None and await rec.after("c1", "bash", "ls", first) is None
        ran.clear()
        for n in range(2, 4):  # calls that change nothing
            before = await rec.before(f"c{n}")
            assert before == first and await rec.after(f"c{n}", "bash", "ls", before) is None
        assert ("add" in ran) is not watched
        ran.clear()
        before = await rec.before("c4")
        (project / "notes.txt").write_text("changed\n")
        step = await rec.after("c4", "bash", "edit", before)
        assert step is not None and step.files == [{"path": "notes.txt", "change": "modified"}]
        assert "add" in ran and events == ["files_changed"]


@pytest.mark.parametrize("watched", [True, False])
async def test_a_turn_counts_the_files_again_only_where_something_changed_since_the_last_count(
    tmp_path, project, git_runs, watched
):
    # Each turn's first write call counts the project's files (a git ls-files) to decide whether snapshots
    # are worth taking. Where the watch read no event since a count, the next turn takes that count.
    ran = git_runs
    with Store.open(tmp_path / "mm.db") as store:
        row = store.create_session(cwd=str(project), agent=None, model="m")

        async def turn(max_files: int = 1000) -> list[str]:
            ran.clear()
            rec = recorder(
                store, row.id, project, lambda kind, data: None, max_files=max_files, watch=watched
            )
            before = await rec.before("c")
            assert before is not None and await rec.after("c", "bash", "ls", before) is None
            return [c for c in ran if c == "ls-files"]

        await turn()  # the first count is made before the project is watched: not kept
        assert await turn() == ["ls-files"]
        assert await turn() == ([] if watched else ["ls-files"])
        (project / "new.txt").write_text("made\n")  # by someone, between turns
        assert await turn() == ["ls-files"]
        assert await turn() == ([] if watched else ["ls-files"])
        assert await turn(max_files=500) == ["ls-files"]  # another limit: counted to it
        assert await turn(max_files=500) == ([] if watched else ["ls-files"])
        (project / "new.txt").unlink()
        assert await turn(max_files=500) == ["ls-files"]


async def test_a_count_kept_over_the_limit_still_skips_the_snapshots(tmp_path, project, git_runs):
    # A project over the limit stays over it while nothing changes: each turn skips its snapshots, saying so.
    with Store.open(tmp_path / "mm.db") as store:
        row = store.create_session(cwd=str(project), agent=None, model="m")
        shadow_events: list[list[str]] = []
        for _ in range(3):
            events: list[str] = []
            rec = recorder(
                store, row.id, project, lambda kind, data, ev=events: ev.append(data["reason"]), max_files=1
            )
            assert await rec.before("c") is None
            shadow_events.append(events)
        assert shadow_events == [["too_many_files"]] * 3


async def test_a_project_reached_through_a_link_is_watched_as_itself(tmp_path, project):
    link = tmp_path / "link"
    os.symlink(project, link)
    shadows = Counted(tmp_path, link)
    first = await shadows.snapshot()
    assert await shadows.snapshot() == first and shadows.ran == []
    change_content(project)
    assert await shadows.snapshot() != first


@pytest.mark.parametrize("how", ["folder above moved", "project moved", "link turned"])
async def test_a_project_folder_replaced_under_the_same_path_is_watched_anew(tmp_path, how):
    # The watches follow the folders they were set on: when the path names another folder now, the
    # snapshot must be of that one (watch_of compares the folder's device and inode, not the path).
    above = tmp_path / "above"
    (above / "proj").mkdir(parents=True)
    (above / "proj" / "a.txt").write_text("old\n")
    path = above / "proj"
    if how == "link turned":
        other = tmp_path / "other"
        shutil.copytree(above / "proj", other)
        (other / "a.txt").write_text("other\n")
        path = tmp_path / "link"
        os.symlink(above / "proj", path)
    shadows = Counted(tmp_path, path)
    first = await shadows.snapshot()
    assert await shadows.snapshot() == first and shadows.ran == []
    if how == "folder above moved":
        above.rename(tmp_path / "moved")
        (above / "proj").mkdir(parents=True)
        (above / "proj" / "a.txt").write_text("new\n")
    elif how == "project moved":
        path.rename(tmp_path / "moved")
        path.mkdir()
        (path / "a.txt").write_text("new\n")
    else:
        path.unlink()
        os.symlink(tmp_path / "other", path)
    assert await shadows.snapshot() != first  # checked against a tree made from scratch, too


@pytest.mark.parametrize("how", ["removed", "moved away"])
async def test_a_shadow_repository_removed_from_outside_is_made_anew_and_holds_the_next_tree(
    shadows, project, how
):
    # Freeing the space of the snapshots is yours (docs/undo.md), and retention removes those of a project
    # no session works in. The watch kept the last tree, and the tree last written from an index of the
    # same content was kept too: the next snapshot named a tree the new repository did not hold, and its
    # step could never be undone ("not a tree object").
    first = await shadows.snapshot()
    assert await shadows.snapshot() == first and shadows.ran == []
    git_dir = shadows.shadow.git_dir
    if how == "removed":
        shutil.rmtree(git_dir)
    else:
        git_dir.rename(git_dir.with_name("elsewhere"))
    tree = await shadows.snapshot()
    assert tree == first  # the same files: the same tree...
    assert await shadows.shadow.entries(tree)  # ...held by the new repository
    assert await shadows.snapshot() == tree and shadows.ran == []  # and watched again


def test_a_project_never_takes_more_than_a_32nd_of_the_user_s_watches(tmp_path, monkeypatch):
    monkeypatch.setattr(inotify, "user_watches", lambda: 8192)
    assert Watch(tmp_path).max_folders == 256
    monkeypatch.setattr(inotify, "user_watches", lambda: 1 << 20)
    assert Watch(tmp_path).max_folders == watch.MAX_FOLDERS
    monkeypatch.setattr(inotify, "user_watches", lambda: 64)
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
    with pytest.raises(watch.Unwatchable, match="more than 2 folders"):
        Watch(tmp_path).start(set())


def test_a_folder_of_more_folders_than_are_watched_is_not_listed_to_its_end(tmp_path, monkeypatch):
    """Each subfolder waits to be watched: a folder of a million of them held a million paths before the
    first past the bound was refused. The listing stops once the folders waiting pass the bound."""
    monkeypatch.setattr(inotify, "user_watches", lambda: 64)  # 2 folders
    for i in range(200):
        (tmp_path / f"f{i:03}").mkdir()
    given = []
    real = os.scandir

    def counted(path):
        with real(path) as listing:
            entries = list(listing)

        class Listing:
            def __enter__(self):
                return (given.append(e.name) or e for e in entries)

            def __exit__(self, *exc):
                return False

        return Listing()

    monkeypatch.setattr(watch.os, "scandir", counted)
    with pytest.raises(watch.Unwatchable, match="more than 2 folders"):
        Watch(tmp_path).start(set())
    assert len(given) <= 2


async def test_a_project_on_a_file_system_changed_from_elsewhere_is_not_watched(
    shadows, project, monkeypatch
):
    # A network or shared file system (nfs, 9p: WSL's /mnt/c) may change with no event here.
    device = os.lstat(project / "src").st_dev
    monkeypatch.setattr(inotify, "file_systems", lambda: {device: "nfs4"})
    first = await shadows.snapshot()
    assert await shadows.snapshot() == first
    assert "add" in shadows.ran  # not watched: git each time
    with pytest.raises(watch.Unwatchable, match=r"file system \(nfs4\)"):
        Watch(project).start(set())


def test_the_file_system_this_test_runs_on_is_known(tmp_path):
    kinds = inotify.file_systems()
    assert kinds.get(os.lstat(tmp_path).st_dev) is not None


async def test_a_snapshot_never_keeps_a_tree_read_before_a_change_another_reader_took(shadows, project):
    # steps.py's lock keeps two snapshots of a shadow from running at once (git's index.lock too); were
    # they not, one could read the queue, taking the event of a change made after the other's git read
    # the tree: that tree must not then be kept as the unchanged one.
    await shadows.snapshot()
    w = watch.watch_of(shadows.shadow.git_dir, project)
    change_content(project)
    git = CountingShadow.git

    async def then_change(self, *args, **kw):
        out = await git(self, *args, **kw)
        if args[0] == "add":  # the tree is read: change it, and let another reader take the event
            append(project)
            assert w.changed()
        return out

    CountingShadow.git = then_change
    try:
        await shadows.shadow.snapshot()
    finally:
        CountingShadow.git = git
    await shadows.snapshot()  # compared with git's tree from scratch


async def test_a_restart_walks_in_a_worker_thread_while_the_loop_runs_on(tmp_path, monkeypatch):
    # Watching a project lists and watches each folder: ~100 ms for 4,000, during which the whole daemon's
    # loop waited when the walk ran on its thread. The walk here waits until the loop has run a task.
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
    loop_ran = threading.Event()
    real_add = watch._Tree._add

    def add(self: watch._Tree, folder: bytes) -> bool:
        if not loop_ran.wait(10):
            raise AssertionError("the loop ran nothing while the walk went on")
        return real_add(self, folder)

    monkeypatch.setattr(watch._Tree, "_add", add)
    w = Watch(tmp_path)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(w.restart, set())
            await trio.sleep(0)  # the restart starts its walk
            loop_ran.set()  # what the loop does meanwhile
        assert w.folders == 4 and not w.stale
        assert w.changed()  # no snapshot's tree yet
        w.tree = "t"
        assert not w.changed()
        (tmp_path / "a" / "new").write_text("n\n")  # a folder watched by the walk in the thread
        assert w.changed()
    finally:
        w.close()


async def test_a_watch_dropped_while_its_walk_runs_closes_what_the_walk_made(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    release, built = threading.Event(), []
    real_build = watch._Tree.build

    def build(self: watch._Tree, ignored: set[bytes], repository: bytes | None = None) -> watch._Tree:
        release.wait(10)
        built.append(real_build(self, ignored, repository))
        return built[-1]

    monkeypatch.setattr(watch._Tree, "build", build)
    w = Watch(tmp_path)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(w.restart, set())
        await trio.sleep(0)
        w.drop()  # as watch_of does when the path names another folder now
        release.set()
    assert w._fd == -1 and w.stale
    with pytest.raises(OSError):
        os.fstat(built[0].fd)  # closed, not leaked
