"""Figures for the supervisor: how long a stop takes, and what supervision costs a call.

Run ``python bench/bench_supervisor.py [--runs N]``. It prints:

- cancel-to-gone: from the cancel of a running call to the last process of its tree gone, for a
  tree that respects SIGTERM and one that ignores it (then about ``grace``);
- spawn overhead: the median wall time of ``run_tool_process(["true"])`` against bare
  ``subprocess.run(["true"])`` and ``trio.run_process(["true"])``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import psutil
import trio

from mmd import procs
from mmd.procs import run_tool_process

# Grace used for the stop figures: small, so that the TERM-ignoring tree costs little.
GRACE = 0.5

# Trees of four processes; each writes its pid to $1 once set up.
POLITE_TREE = r"""
echo $$ >> "$1"
(echo $BASHPID >> "$1"; exec sleep 1000) &
(echo $BASHPID >> "$1"; exec sleep 1000) &
setsid bash -c 'echo $$ >> "$0"; exec sleep 1000' "$1" &
wait
"""
STUBBORN_TREE = r"""
echo $$ >> "$1"
(trap '' TERM; echo $BASHPID >> "$1"; exec sleep 1000) &
setsid bash -c 'trap "" TERM; echo $$ >> "$0"; exec sleep 1000' "$1" &
setsid -f bash -c 'trap "" TERM; echo $$ >> "$0"; exec sleep 1000' "$1"
wait
"""


async def cancel_to_gone(tree: str, tmp: Path) -> float:
    """Seconds from cancelling a call running ``tree`` to every process of it gone."""
    script, pid_file = tmp / "tree.sh", tmp / "pids"
    script.write_text(tree)
    pid_file.unlink(missing_ok=True)
    argv = ["bash", str(script), str(pid_file)]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: run_tool_process(argv, cwd=tmp, env={}, spill_path=tmp / "s.log", grace=GRACE)
        )
        procs = await _wait_for_tree(pid_file)
        cancelled = time.perf_counter()
        nursery.cancel_scope.cancel()
    while any(_alive(p) for p in procs):  # run_tool_process waited for them: this should not loop
        await trio.sleep(0.001)
    return time.perf_counter() - cancelled


async def _wait_for_tree(pid_file: Path) -> list[psutil.Process]:
    while True:
        pids = pid_file.read_text().split() if pid_file.exists() else []
        if len(pids) == 4:
            return [psutil.Process(int(pid)) for pid in pids]
        await trio.sleep(0.005)


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


async def median_ms(runs: int, call: Callable[[], Awaitable[object]]) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        await call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


async def main(runs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="mm-bench-") as name:
        tmp = Path(name)
        stops = [runs // 10 or 1]
        polite = [await cancel_to_gone(POLITE_TREE, tmp) * 1000 for _ in range(stops[0])]
        stubborn = [await cancel_to_gone(STUBBORN_TREE, tmp) * 1000 for _ in range(stops[0])]

        async def supervised() -> object:
            return await run_tool_process(["true"], cwd=tmp, env={}, spill_path=tmp / "t.log")

        async def bare_subprocess() -> object:
            return subprocess.run(["true"], check=True)

        async def bare_trio() -> object:
            return await trio.run_process(["true"])

        await median_ms(10, supervised)  # warm up the thread cache and imports
        sup_scan = await median_ms(runs, supervised)  # without a subreaper: watcher and /proc scans
        procs.become_subreaper()  # as the daemon runs it
        await median_ms(10, supervised)
        sup = await median_ms(runs, supervised)
        procs.become_subreaper(False)
        sub = await median_ms(runs, bare_subprocess)
        tri = await median_ms(runs, bare_trio)

    print(f"cancel-to-gone, grace {GRACE} s, {stops[0]} runs each (median / min / max, ms)")
    print(f"  {'TERM-respecting tree':<24}{_spread(polite)}")
    print(f"  {'TERM-ignoring tree':<24}{_spread(stubborn)}")
    print(
        f"spawn overhead, median of {runs} runs of `true` ({len(os.listdir('/proc'))} entries in /proc; ms)"
    )
    print(f"  {'run_tool_process':<24}{sup:8.2f}   (as a subreaper, as the daemon runs it)")
    print(
        f"  {'  not a subreaper':<24}{sup_scan:8.2f}   (a watcher thread and scans of /proc: {sup_scan / sup:.1f}x)"
    )
    print(f"  {'subprocess.run':<24}{sub:8.2f}   ratio {sup / sub:.1f}x")
    print(f"  {'trio.run_process':<24}{tri:8.2f}   ratio {sup / tri:.1f}x")
    print(f"  {'added per call':<24}{sup - tri:8.2f}   (vs trio.run_process)")


def _spread(ms: list[float]) -> str:
    return f"{statistics.median(ms):8.1f} {min(ms):8.1f} {max(ms):8.1f}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="runs for the spawn medians (default 200)")
    trio.run(main, parser.parse_args().runs)
