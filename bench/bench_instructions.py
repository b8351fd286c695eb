"""The instructions the daemon executes per tool call, counted by valgrind: a figure of its CPU that repeats.

Run ``python bench/bench_instructions.py [--against DIR] [--turns N] [--tool-calls N]`` (valgrind, a Debian
package, on PATH). It starts this checkout's daemon under ``valgrind --tool=callgrind`` with counting off,
runs one turn to warm up, counts the instructions of all its threads over ``--turns`` turns of
``--tool-calls`` ``bash true`` calls, and prints them per call; with ``--against DIR`` (a checkout of another
revision, ``git worktree add /tmp/old REV``) the same for that tree's daemon, and the ratio. ``--prompts N``
counts N prompts the model answers in words instead (no tool call), per prompt: what a prompt itself costs
(its connection, session, the files it reads, one model step), which every ``mm -p`` pays.

Why: this machine's CPU time per call moves by a third between minutes and single paired rounds spread
±20 % (bench_cpu.py), so a change of a few per cent never shows in it; bench_calls.py counts Python calls,
which are not equal work. callgrind counts the instructions executed in user space — the interpreter, mm's
code, SQLite, msgspec, libc — back to back the same within a few tenths of a per cent, over hours within
1.5 % (the daemon's path depends a little on timing: how often its loop waits, how a read splits an
answer), whatever else the machine does; compare trees in one run (``--against``). It does not count the
kernel's work (system calls, context switches: about 30 % of the daemon's CPU here, see
docs/performance.md) nor the commands the calls run (valgrind does not follow children).

The daemon runs with ``--sandbox off`` and no undo checkpoint: valgrind does not know Landlock's system
calls, so a confined prompt would find no sandbox. Each turn's commands run as they do without valgrind;
the daemon itself runs some 50 times slower, so a turn of 40 calls takes seconds, not a tenth of one.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import bench_client
from bench_client import MM, PY, Env, bash_turns, run
from mmd_child import BenchError, answers

# Seconds the daemon may take to answer on its socket under valgrind (its start is ~50× slower too).
START_TIMEOUT = 300.0


def counted(tree: Path | None, turns: int, calls: int) -> int:
    """Instructions the daemon of *tree* (None: this checkout) executed over *turns* turns of *calls* calls
    (of no call: *turns* prompts answered in words)."""
    env = Env()
    log = None
    try:
        log = open(env.home / "valgrind.log", "w")  # noqa: SIM115 (closed below, before the env's folder goes)
        subprocess.run(["git", "init", "-q", str(env.work)], check=True)
        env.start_servers({"chat": [{"text": "hi"}], "s": bash_turns(calls, turns + 1)}, default="chat")
        env.set_daemon_option("snapshot_max_files", 0)
        out = env.home / "callgrind.out"
        child_env = dict(os.environ)
        if tree is not None:
            child_env["PYTHONPATH"] = f"{tree}:{tree / 'clients'}"
        argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
        env.daemon = subprocess.Popen(
            [*argv, PY, "-m", "mmd", "--socket", str(env.socket)],
            env=child_env,
            cwd=env.home,  # python -m puts the working directory first on sys.path: not a checkout
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
        )
        _wait_answering(env)
        prompt = [
            *MM,
            "--yolo",
            "--sandbox",
            "off",
            "--output-format",
            "json",
            "--model",
            "s/scripted",
            "-p",
            "go",
        ]
        run(prompt, cwd=env.work)
        _control(env, "-i", "on")
        for _ in range(turns):
            run(prompt, cwd=env.work)
        _control(env, "-i", "off")
        _control(env, "-d")
        return _totals(out)
    finally:
        if log is not None:
            log.close()
        env.close()


def _wait_answering(env: Env) -> None:
    assert env.daemon is not None
    deadline = time.monotonic() + START_TIMEOUT
    while not answers(env.socket):
        if env.daemon.poll() is not None:
            raise BenchError(
                f"mmd under valgrind exited with {env.daemon.returncode}: {env.home}/valgrind.log"
            )
        if time.monotonic() > deadline:
            raise BenchError(f"mmd under valgrind did not answer within {START_TIMEOUT:g} s")
        time.sleep(0.2)


def _control(env: Env, *args: str) -> None:
    assert env.daemon is not None
    subprocess.run(
        ["callgrind_control", *args, str(env.daemon.pid)], check=True, capture_output=True, timeout=120
    )


def _totals(out: Path) -> int:
    """The instructions of every dump callgrind wrote (``-d`` writes ``OUT.1``; its exit, ``OUT``)."""
    total = 0
    for path in glob.glob(f"{out}*"):
        with open(path) as f:
            total += sum(int(line.split()[1]) for line in f if line.startswith("totals:"))
    if total == 0:
        raise BenchError(f"callgrind counted nothing (files {out}*)")
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--against", type=Path, help="a checkout of another revision to count beside this one"
    )
    parser.add_argument("--turns", type=int, default=3, help="counted turns (default 3)")
    parser.add_argument("--tool-calls", type=int, default=40, help="bash calls per turn (default 40)")
    parser.add_argument(
        "--prompts",
        type=int,
        default=0,
        help="count N prompts the model answers with no tool call instead, per prompt",
    )
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print(
            "bench_instructions: valgrind is not installed (Debian: apt-get install valgrind)",
            file=sys.stderr,
        )
        return 1
    against = args.against.resolve() if args.against else None
    if against is not None and not (against / "mmd" / "__init__.py").exists():
        print(f"bench_instructions: {against} is not a checkout of mm (no mmd/__init__.py)", file=sys.stderr)
        return 1
    bench_client.TIMEOUT = 600.0  # a turn's commands wait on a daemon 50× slower
    # A prompt answered with no tool call is a turn of no calls: its connection, session, setup, one step.
    turns, tool_calls = (args.prompts, 0) if args.prompts else (args.turns, args.tool_calls)
    units = turns * tool_calls or turns
    print(
        f"mm daemon instructions per prompt answered with no tool call (callgrind, user space, all threads): "
        f"{turns} prompts, --sandbox off"
        if args.prompts
        else f"mm daemon instructions per tool call (callgrind, user space, all threads): {turns} turns of "
        f"{tool_calls} `bash true`, --sandbox off, no checkpoint"
    )
    try:
        mine = counted(None, turns, tool_calls) / units
        print(f"  this tree  {mine / 1e6:8.3f} M")
        if against is not None:
            theirs = counted(against, turns, tool_calls) / units
            print(f"  against    {theirs / 1e6:8.3f} M   ({against})")
            print(f"  this tree / against: {mine / theirs:.3f}")
    except BenchError as exc:
        print(f"bench_instructions: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
