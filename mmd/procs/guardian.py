"""The guardian: a shell that outlives a killed daemon just long enough to stop what it left running.

The daemon stops every process a call started, however it forked, when the call ends, is cancelled or the
daemon stops. A daemon killed (``kill -9``, the OOM killer, a crash) stops nothing: its processes — a
``sleep 1000 &``, a dev server a command left in the background, a ``yes`` — went on until a daemon was
next started on the same socket (``sweep_orphans``), which may be never. The guardian is one ``/bin/sh``
per daemon, started as it starts serving, that blocks reading a pipe only the daemon holds open. Whatever
ends the daemon ends the pipe: at its end of file the guardian sends SIGTERM to every process tagged with
the daemon's owner (``MM_PROC_TAG=<owner>.…``, as ``sweep_orphans`` finds them), waits ``grace`` seconds,
and sends SIGKILL to those left. A daemon that stops gracefully stops the guardian with its other children.

It is a tagged child itself: a daemon started on the socket meanwhile stops it with the rest before it
starts anything, so a guardian never sees that daemon's own processes. Its helpers (``grep``, ``sleep``)
run without the tag. About 1 MiB of memory; nothing runs in it until the daemon dies.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import trio

from .supervisor import TAG_VAR, supervised_process

# $1: the owner's tag prefix (hex), $2: the grace in seconds. `cat` returns at the pipe's end of file. A
# subshell of this shell (each `$(...)`) carries the tag in its environment as the shell does (`unset` does not
# change /proc/PID/environ): it and the shell are left out by their pid and parent's pid.
SCRIPT = f"""\
unset {TAG_VAR}
cat >/dev/null 2>&1
tagged() {{
  for f in $(grep -lsz "^{TAG_VAR}=$1\\." /proc/[0-9]*/environ 2>/dev/null); do
    p=${{f#/proc/}}; p=${{p%/environ}}
    [ "$p" = "$$" ] && continue
    read -r s < "/proc/$p/stat" 2>/dev/null || continue
    set -- ${{s##*") "}}
    [ "$2" = "$$" ] || echo "$p"
  done
}}
pids=$(tagged "$1")
[ -n "$pids" ] || exit 0
kill -TERM $pids 2>/dev/null
sleep "$2"
pids=$(tagged "$1")
[ -n "$pids" ] && kill -KILL $pids 2>/dev/null
exit 0
"""


async def guard(
    owner: str, grace: float, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
) -> int:
    """Run the guardian for the daemon whose children carry *owner*'s tag until cancelled (then it is stopped
    with its group, as every supervised child); ``task_status`` gets its pid once it runs. Returns the
    guardian's exit status if it ends first (someone killed it): it is reaped, not left a zombie.

    Errors: OSError if it cannot start (the daemon serves on; what a killed daemon left is then stopped by
    the next one, as before).
    """
    argv = ["/bin/sh", "-c", SCRIPT, "mmd-guardian", owner, f"{grace:g}"]
    async with supervised_process(
        argv,
        cwd=Path("/"),
        env={},
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        grace=0.5,
    ) as proc:
        task_status.started(proc.pid)
        return await proc.wait()  # the pipe's write end stays open in the daemon, written never
