"""Figures for the sandbox: what confining a child costs per spawn, and what the alternatives would.

Run ``python bench/bench_sandbox.py [--runs N] [--project DIR]``. Every figure is the median wall
time of ``run_tool_process(["true"])`` (spawn, wait, stop, reap) over N runs (default 50), the
confined and unconfined runs interleaved in the same process so that both see the same machine:

- unconfined, against confined in ``workspace`` mode with an empty project: the cost of the
  spawn thread, the Landlock ruleset and no_new_privs;
- confined with ``--project`` (default: this repository) as the project: the walk that looks for
  hard links Landlock could not confine (mmd/sandbox/links.py), warm, and its first, cold walk;
- the git guard's look at the project's repositories on both sides of a call that changed nothing
  (mmd/sandbox/gitguard.py), in CPU time of the calling thread;
- what the alternatives would add: an exec shim (``python -I -S`` started before the command, the
  least any Python shim costs) and ``preexec_fn`` (subprocess then forks instead of vforking).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from mmd.procs import run_tool_process
from mmd.sandbox import Sandbox, gitguard, links, support

ROOT = Path(__file__).resolve().parent.parent


async def timed(call: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await call()
    return (time.perf_counter() - start) * 1000


async def interleaved(runs: int, calls: dict[str, Callable[[], Awaitable[object]]]) -> dict[str, float]:
    """The median ms of each call, run in turn N times (one of each per round)."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():  # warm up: imports, the thread cache, the page cache of the walk
        await call()
    for _ in range(runs):
        for name, call in calls.items():
            times[name].append(await timed(call))
    return {name: statistics.median(ms) for name, ms in times.items()}


def walk_ms(project: Path) -> tuple[float, float, float, int]:
    """The hard-link check of *project*: the walk cold (nothing cached) and warm, and the check while its
    inotify watch saw nothing (ms, medians of 20 but the cold one), and the entries the walk read."""

    def check() -> float:
        start = time.perf_counter()
        links.check_links([str(project)])
        return (time.perf_counter() - start) * 1000

    links.ENABLED = False
    links.forget()
    cold = check()
    warm = statistics.median(check() for _ in range(20))
    entries = sum(f.entries for f in links._walked.values())
    links.ENABLED = True
    check()  # the walk that settles the watch
    quiet = statistics.median(check() for _ in range(20))
    return cold, warm, quiet, entries


def guard_us(project: Path, calls: int = 2000) -> tuple[float, int]:
    """The git guard's before and after of one call that changes nothing, in µs of this thread's CPU
    (median of 5 rounds of *calls*), and the repositories it looks at in *project*."""
    found = links.repositories([str(project)])
    gitguard.forget()
    rounds = []
    for _ in range(5):
        start = time.thread_time()
        for _ in range(calls):
            gitguard.after(gitguard.before(found), found)
        rounds.append((time.thread_time() - start) / calls * 1e6)
    return statistics.median(rounds), len(found)


async def main(runs: int, project: Path) -> None:
    found = support()
    if not found.available:
        sys.exit(f"no sandbox on this machine: {found.reason}")
    with tempfile.TemporaryDirectory(prefix="mm-bench-") as name:
        tmp = Path(name)
        (tmp / "project").mkdir()
        empty = Sandbox(roots=(str(tmp / "project"),))
        real = Sandbox(roots=(str(project),))

        def run(argv: list[str], box: Sandbox | None) -> Callable[[], Awaitable[object]]:
            return lambda: run_tool_process(
                argv, cwd=tmp / "project", env={}, spill_path=tmp / "s.log", sandbox=box
            )

        shim = [sys.executable, "-I", "-S", "-c", "import os; os.execvp('true', ['true'])"]
        medians = await interleaved(
            runs,
            {
                "unconfined": run(["true"], None),
                "confined": run(["true"], empty),
                "confined, real project": run(["true"], real),
                "exec shim (unconfined)": run(shim, None),
                "trio, no preexec_fn": lambda: trio.run_process(["true"]),
                "trio, preexec_fn": lambda: trio.run_process(["true"], preexec_fn=_nothing),
            },
        )
    base = medians["unconfined"]
    print(
        f"Landlock ABI {found.abi}; median of {runs} interleaved runs of `true` through run_tool_process (ms)"
    )
    print(f"  {'unconfined':<30}{base:8.2f}")
    for name in ("confined", "confined, real project"):
        ms = medians[name]
        print(f"  {name:<30}{ms:8.2f}   +{ms - base:.2f}   ratio {ms / base:.2f}x")
    cold, warm, quiet, entries = walk_ms(project)
    print(
        f"  (the real project: {project}; its hard-link walk reads {entries:,} entries: {cold:.1f} ms cold,"
    )
    print(
        f"   {warm:.2f} ms warm, when only the folders' mtimes are read; {quiet:.3f} ms while the walk's inotify"
    )
    print("   watch saw no change, as in the figure above)")
    guard, repositories = guard_us(project)
    print(
        f"  the git guard, before and after a call that changed nothing: {guard:.1f} µs of CPU "
        f"({repositories} repositories in the project)"
    )
    print("what the alternatives would add per spawn (ms)")
    shim = medians["exec shim (unconfined)"]
    print(f"  {'an exec shim: python -I -S':<30}{shim:8.2f}   +{shim - base:.2f}")
    fork = medians["trio, preexec_fn"] - medians["trio, no preexec_fn"]
    print(
        f"  {'preexec_fn (fork, no vfork)':<30}{medians['trio, preexec_fn']:8.2f}   +{fork:.2f} over trio's vfork"
    )


def _nothing() -> None:
    pass


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50, help="interleaved runs of each (default 50)")
    parser.add_argument(
        "--project", type=Path, default=ROOT, help="a real project to confine to (default: mm)"
    )
    args = parser.parse_args()
    trio.run(main, args.runs, args.project.resolve())
