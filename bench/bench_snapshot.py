"""What a checkpoint costs (mmd/undo): snapshots of a small tree and of a 20,000-file tree.

For each tree, generated under /tmp and removed afterwards:

1. the first snapshot (a new shadow repository hashes every file);
2. an incremental snapshot with nothing changed (watched by inotify, mmd/undo/watch.py: no git; and not
   watched: ``git add``), setting the watches, and a snapshot after one file changed;
3. one whole step as a turn takes it (mmd.undo.Recorder: the file count of the turn's first step, a
   snapshot before, one file changed, a snapshot after, the changed files, the store row), and the
   step of a call that changed nothing;
4. the same ``git add -A`` + ``git write-tree`` run bare with subprocess.run (the supervisor's share);
5. ``git status --porcelain`` in an ordinary repository of the same tree, and the ratio of 2 and 3 to it.

Median milliseconds over ``--runs`` runs (default 25), the first snapshot over ``--first-runs`` (default
5: each needs a new shadow repository). Prints figures; asserts nothing.

    .venv/bin/python bench/bench_snapshot.py [--files 20000] [--runs 25] [--first-runs 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from mmd import procs
from mmd.store import Store
from mmd.undo import Recorder, Shadow, shadow_dir, watch

SMALL_FILES = 60


def make_tree(root: Path, files: int) -> None:
    """*files* small text files, 100 to a folder, like a source tree."""
    for n in range(files):
        folder = root / f"pkg{n // 100:04d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"mod{n % 100:03d}.py").write_text(f"# module {n}\nVALUE = {n}\n" + "x = 1\n" * (n % 40))
    (root / ".gitignore").write_text("build/\n*.pyc\n")


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def timed(
    fn: Callable[[], Awaitable[object]], runs: int, before: Callable[[], None] | None = None
) -> float:
    samples = []
    for _ in range(runs):
        if before is not None:
            before()
        start = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - start)
    return median_ms(samples)


def timed_sync(fn: Callable[[], object], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return median_ms(samples)


async def first_snapshot(tree: Path, scratch: Path, runs: int) -> float:
    samples = []
    for n in range(runs):
        shadow = Shadow(scratch / f"first-{n}", tree)
        start = time.perf_counter()
        await shadow.snapshot()
        samples.append(time.perf_counter() - start)
        shutil.rmtree(shadow.git_dir)
    return median_ms(samples)


class Toucher:
    """Changes one file before each run, a different one each time."""

    def __init__(self, tree: Path) -> None:
        self.files = sorted(tree.glob("pkg*/mod*.py"))
        self.n = 0

    def __call__(self) -> None:
        path = self.files[self.n % len(self.files)]
        path.write_text(path.read_text() + f"y = {self.n}\n")
        self.n += 1


async def one_step(store: Store, tree: Path, snapshots: Path, touch: Toucher | None) -> None:
    """A step exactly as a turn's first write call takes it (the file count included); *touch* None: a
    call that changes nothing (no step is recorded)."""
    row = store.create_session(cwd=str(tree), agent=None, model="bench")
    rec = Recorder(
        store=store,
        session_id=row.id,
        project=tree,
        snapshots=snapshots,
        max_files=10**7,
        emit=lambda *a: None,
    )
    before = await rec.before("call")
    if touch is not None:
        touch()
    assert before is not None
    assert (await rec.after("call", "bash", "", before) is None) == (touch is None)


def watch_folders(shadow: Shadow) -> int:
    w = watch.watch_of(shadow.git_dir, shadow.project)
    return w.folders if w is not None else 0


def bare_git(tree: Path, git_dir: Path) -> Callable[[], None]:
    base = ["git", f"--git-dir={git_dir}", f"--work-tree={tree}"]
    env = {"PATH": os.environ["PATH"], "HOME": str(git_dir), "GIT_CONFIG_NOSYSTEM": "1"}

    def run() -> None:
        subprocess.run([*base, "add", "--all", "--", "."], check=True, env=env, cwd=tree)
        subprocess.run([*base, "write-tree"], check=True, env=env, cwd=tree, capture_output=True)

    return run


def git_status(tree: Path) -> Callable[[], None]:
    copy = tree.parent / f"{tree.name}-repo"
    shutil.copytree(tree, copy)
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(copy)}
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@b"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run([*git, *args], cwd=copy, check=True, env=env)
    return lambda: subprocess.run(
        ["git", "status", "--porcelain"], cwd=copy, check=True, env=env, capture_output=True
    )


async def bench_tree(label: str, files: int, args: argparse.Namespace, scratch: Path, store: Store) -> None:
    tree = scratch / f"tree-{files}"
    make_tree(tree, files)
    snapshots = scratch / f"snapshots-{files}"
    shadow = Shadow(shadow_dir(snapshots, tree), tree)
    touch = Toucher(tree)
    print(f"\n== {label}: {files:,} files ({tree})")
    first = await first_snapshot(tree, scratch, args.first_runs)
    print(f"first snapshot (new shadow repository)      {first:9.1f} ms  (median of {args.first_runs})")
    await shadow.snapshot()
    watched = await timed(shadow.snapshot, args.runs)
    print(f"incremental snapshot, nothing changed       {watched:9.1f} ms  (watched: no git)")
    watch.ENABLED = False
    still = await timed(shadow.snapshot, args.runs)
    print(f"  the same, not watched (git add)           {still:9.1f} ms")
    watch.ENABLED = True
    setup = await timed(shadow.snapshot, max(1, args.runs // 5), before=watch.forget)
    print(f"  setting the watches, then the snapshot    {setup:9.1f} ms  ({watch_folders(shadow)} folders)")
    one = await timed(shadow.snapshot, args.runs, before=touch)
    print(f"incremental snapshot, one file changed      {one:9.1f} ms")
    count = await timed(lambda: shadow.count_files(10**7), args.runs)
    print(f"file count (once per turn)                  {count:9.1f} ms")
    step = await timed(lambda: one_step(store, tree, snapshots, touch), args.runs)
    print(f"one step: count + before + after + record    {step:9.1f} ms")
    idle = await timed(lambda: one_step(store, tree, snapshots, None), args.runs)
    print(f"one step of a call that changed nothing      {idle:9.1f} ms  (watched)")
    bare = timed_sync(bare_git(tree, shadow.git_dir), args.runs)
    print(
        f"bare add -A + write-tree (subprocess.run)   {bare:9.1f} ms  (supervisor's share: {one - bare:+.1f} ms)"
    )
    status = timed_sync(git_status(tree), args.runs)
    print(f"git status --porcelain (ordinary repo)      {status:9.1f} ms")
    print(f"ratio: snapshot / git status {one / status:.2f}, step / git status {step / status:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=20_000, help="files of the large tree (default 20000)")
    parser.add_argument("--runs", type=int, default=25, help="runs per incremental figure (default 25)")
    parser.add_argument("--first-runs", type=int, default=5, help="runs of the first snapshot (default 5)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="mm-bench-snapshot-", dir="/tmp"))
    # As in the daemon: a subreaper, so the supervisor follows each git's children by the kernel's
    # links (without it, each spawn would also pay a watcher thread and scans of /proc).
    reaper = procs.become_subreaper()
    print(
        f"git {subprocess.run(['git', '--version'], capture_output=True, text=True).stdout.split()[-1]}, "
        f"{os.cpu_count()} CPUs; median ms over {args.runs} runs; subreaper: {reaper}"
    )
    try:
        with Store.open(scratch / "mm.db") as store:
            for label, files in (("small tree", SMALL_FILES), ("large tree", args.files)):
                trio.run(bench_tree, label, files, args, scratch, store)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
