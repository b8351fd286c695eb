"""The guardian's shell (mmd/procs/guardian.py), run as the daemon runs it, its pipe ended as a daemon's death
ends it: what carries the owner's tag is stopped, nothing else, and the shell never takes itself for a
process to stop."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess

import psutil
import trio

from mmd.procs import TAG_VAR
from mmd.procs.guardian import SCRIPT, guard

# Owners of this worker alone: xdist runs these tests at once in other workers, and a guardian stops what
# carries its owner's tag wherever it runs (a fixed owner made two tests' guardians stop each other's).
OWNER, OTHER = secrets.token_hex(6), secrets.token_hex(6)


def run_guardian(grace: str) -> int:
    """The exit code of the guardian of OWNER, tagged as the supervisor tags it, its pipe already at its end."""
    env = {**os.environ, TAG_VAR: f"{OWNER}.guardian"}
    argv = ["/bin/sh", "-c", SCRIPT, "mmd-guardian", OWNER, grace]
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        return proc.wait(60)  # a hang guard
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # its `sleep` too, when the guard fired
        proc.wait()


def sleeper(tag: str | None, *, ignore_term: bool = False) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != TAG_VAR}
    if tag is not None:
        env[TAG_VAR] = tag
    trap = "trap '' TERM; " if ignore_term else ""
    return subprocess.Popen(["/bin/sh", "-c", f"{trap}exec sleep 1000"], env=env, start_new_session=True)


def test_at_the_pipes_end_the_owners_processes_are_stopped_and_no_other():
    ours, stubborn = sleeper(f"{OWNER}.call1"), sleeper(f"{OWNER}.call2", ignore_term=True)
    other, untagged = sleeper(f"{OTHER}.call1"), sleeper(None)
    try:
        assert run_guardian("1") == 0
        assert ours.wait(30) == -signal.SIGTERM
        assert stubborn.wait(30) == -signal.SIGKILL  # after the grace
        assert other.poll() is None and untagged.poll() is None
    finally:
        for proc in (ours, stubborn, other, untagged):
            proc.kill()
            proc.wait()


def test_with_nothing_to_stop_the_guardian_ends_without_waiting_out_its_grace():
    # Its own subshells carry its tag too: taken for the daemon's processes, they made it wait the grace (a
    # thousand seconds here, past the hang guard) after signalling processes already gone.
    assert run_guardian("1000") == 0
    assert not [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]


async def test_a_guardian_killed_by_hand_is_reaped_and_its_end_returned():
    # It waited for ever in the daemon (trio.sleep_forever): killed by hand, it stayed a zombie of the daemon
    # for the daemon's life, and the daemon never knew to start another.
    with trio.fail_after(30):  # a hang guard
        async with trio.open_nursery() as nursery:
            ended: list[int] = []
            pid = await nursery.start(_started_guard, ended)
            os.kill(pid, signal.SIGKILL)
    assert ended == [-signal.SIGKILL]
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() != psutil.STATUS_ZOMBIE


async def _started_guard(
    ended: list[int], task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
) -> None:
    ended.append(await guard(OWNER, 1.0, task_status=task_status))
