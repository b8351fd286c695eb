"""A tree of processes that resists SIGTERM, and how to run and watch it under the supervisor.

Shared by the supervisor's unit tests (tests/unit/procs/test_supervisor.py), its stress tests
(tests/e2e/test_supervisor_stress.py) and the cancelled turns of tests/e2e/test_tools.py.
"""

from __future__ import annotations

from pathlib import Path

import psutil
import trio

from mmd.procs import ProcResult, run_tool_process
from mmd.sandbox import Sandbox

# Short grace: the trees below ignore SIGTERM on purpose, so each stop waits all of it.
GRACE = 0.3
# The sandbox `run` confines its calls to when the caller names none (tests/unit/procs sets it: every
# test of the supervisor runs confined too, its children started by a spawner thread).
confine_to: Sandbox | None = None

# A tree that resists: a TERM-ignoring child, a child in its own session, and a
# TERM-ignoring grandchild that double-forked out of the tree (setsid -f). Each
# process appends its own pid to the file named by $1, once it is set up.
TREE = r"""
echo $$ >> "$1"
(trap '' TERM; echo $BASHPID >> "$1"; exec sleep 1000) &
setsid bash -c 'echo $$ >> "$0"; exec sleep 1000' "$1" &
setsid -f bash -c 'trap "" TERM; echo $$ >> "$0"; exec sleep 1000' "$1"
wait
"""
TREE_SIZE = 4


async def run(argv: list[str], tmp_path: Path, **kw: object) -> ProcResult:
    kw.setdefault("cwd", tmp_path)
    kw.setdefault("env", {})
    kw.setdefault("spill_path", tmp_path / "spill.log")
    kw.setdefault("grace", GRACE)
    kw.setdefault("sandbox", confine_to)
    return await run_tool_process(argv, **kw)  # type: ignore[arg-type]


def gone(p: psutil.Process) -> bool:
    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def tree_pids(pid_file: Path) -> list[psutil.Process]:
    """Wait until every process of TREE has written its pid, then hold them by (pid, create time)."""
    while True:
        pids = pid_file.read_text().split() if pid_file.exists() else []
        if len(pids) == TREE_SIZE:
            return [psutil.Process(int(pid)) for pid in pids]
        await trio.sleep(0.01)


def tree_command(tmp_path: Path) -> tuple[list[str], Path]:
    script = tmp_path / "tree.sh"
    script.write_text(TREE)
    pid_file = tmp_path / "pids"
    pid_file.unlink(missing_ok=True)
    return ["bash", str(script), str(pid_file)], pid_file


async def cancel_tree_once(tmp_path: Path) -> list[int]:
    """Start TREE, cancel the call once it is all up; the pids that survived."""
    argv, pid_file = tree_command(tmp_path)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, argv, tmp_path)
        procs = await tree_pids(pid_file)
        nursery.cancel_scope.cancel()
    return [p.pid for p in procs if not gone(p)]
