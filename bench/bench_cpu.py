"""The daemon's CPU per tool call, as the kernel counts it, optionally paired against another source tree.

Run ``python bench/bench_cpu.py [--against DIR] [--rounds N] [--turns N] [--tool-calls N]``. Each round
starts a daemon of its own (a private home, a scripted model server), runs one turn to warm up, then
``--turns`` turns of ``--tool-calls`` ``bash true`` calls, as a default prompt runs (undo checkpoint,
sandbox) and with ``--sandbox off`` and no checkpoint, and prints the daemon's CPU per call: its user and
system time as the kernel counts it (in 10 ms ticks), its threads' run time (``/proc/PID/task/*/schedstat``,
in ns: the figure the pairings compare), its event-loop thread's alone, and that thread's voluntary
context switches (psutil reads the leader's /proc/PID/status: the other threads' are not counted). A third
figure is per prompt: ``--prompts`` prompts the model answers with no tool call, what a prompt costs
itself (its connection, session, setup, one model step), which a turn's calls share.

The per-call figures divide all of a turn's CPU by its calls, so they carry a share of the prompt's own
cost (about 5 ms a prompt: 0.13 ms a call at 40 calls a turn, more in shorter turns). The ``marginal``
column leaves it out: each measured turn is followed, in the same daemon and mode, by a prompt answered
with no tool call, and a call's marginal CPU is (the turn's CPU − that prompt's) / the turn's calls: one
tool round trip (the model's step with the call, the call, its result), what the turn's length does not
change.

``--against DIR``: a checkout of another revision (``git worktree add /tmp/old REV``). Each round then
runs that tree's daemon right after this one's, and the figure to read is the ratio of the two within
a round: a shared machine's speed moves by a third between minutes, far more than most changes to the
daemon's hot path. The other tree's daemon runs with ``PYTHONPATH=DIR:DIR/clients`` and its working
directory outside both trees (``python -m mmd`` puts the working directory first on sys.path: started
from a checkout, it would run that checkout's daemon whatever PYTHONPATH says).

``--ablate NAMES``: each round pairs this tree's daemon with one that leaves out the named pieces of its
work (comma-separated: ``nosql``, ``notranscript``, ``nospawnhop``; bench/ablate/sitecustomize.py says what
each does), and prints the share of the CPU they cost, round by round. Such a daemon breaks a guarantee on
purpose: it exists to be measured.

The project folder is a git repository (``git init``), as most projects are: a confined call's guard of
git's own files (mmd/sandbox/gitguard.py) looks at its ``.git`` on both sides of every call. ``--plain``
leaves it a plain folder, as the figures before that guard were measured. The measured turns begin
:data:`SETTLED` seconds after ``git init`` at the earliest: a stamp within 2 s of a look is too recent for
the guard to trust (``mmd.paths.RACY_NS``), so it reads ``.git/config`` again on both sides of a call — what
a call pays right after a git command wrote the config, not in a project's usual state. Measured from the
``git init`` a second before them, half the calls of the default prompt paid it (+80–90 µs each).

The same run also measures the CPU of spawning ``true`` with ``subprocess.run`` in this process, right
after each daemon's figures: the floor of a tool call's spawn. The ``/ floor`` column is the median of each
round's own ratio, so that the machine's phase (its speed moves by half within an hour) is the same on
both sides of a ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil
from bench_client import MM, Env, bash_turns, run
from mmd_child import BenchError, start_mmd

# Seconds from ``git init`` to the first measured turn, at least: past mmd.paths.RACY_NS, a little more.
SETTLED = 2.1

# `true`s spawned beside each daemon's figures for the floor (~0.1 s).
FLOOR_SPAWNS = 100

# What is measured: its label, the prompt's options, and whether a unit is a prompt with no tool call (the
# cost of a prompt itself: its connection, session, setup and one model step) instead of a tool call.
MODES = (
    ("default prompt", [], False),
    ("--sandbox off, no checkpoint", ["--sandbox", "off"], False),
    ("a prompt answered with no tool call, --sandbox off", ["--sandbox", "off"], True),
)
ABLATE = Path(__file__).resolve().parent / "ablate"  # its sitecustomize.py takes pieces out (--ablate)
# A daemon to measure: its label, the tree it runs (None: this one), the pieces it leaves out ("": none).
Daemon = tuple[str, Path | None, str]


def measure(
    tree: Path | None, mode: list[str], turns: int, calls: int, ablate: str = "", *, plain: bool = False
) -> dict[str, float]:
    """One daemon (this checkout's, or *tree*'s; without the *ablate* pieces), one warm-up turn, then *turns*
    measured: per call, or per prompt where *calls* is 0 (each turn a prompt answered with no tool call).
    The project is a git repository unless *plain*."""
    env = Env()
    try:
        if not plain:
            subprocess.run(["git", "init", "-q", str(env.work)], check=True)
        made = time.monotonic()
        if calls:  # each turn of calls, then a prompt answered with no call (the marginal column)
            each = bash_turns(calls, turns + 1)  # turn t: steps t*(calls+1) to (t+1)*(calls+1), its text last
            script = each[: calls + 1]
            for t in range(1, turns + 1):
                script += [*each[t * (calls + 1) : (t + 1) * (calls + 1)], {"text": "done"}]
        else:
            script = [{"text": "done"}] * (turns + 1)
        env.start_servers({"chat": [{"text": "hi"}], "s": script}, default="chat")
        child_env = dict(os.environ)
        if tree is not None:
            child_env["PYTHONPATH"] = f"{tree}:{tree / 'clients'}"
        if ablate:
            child_env["PYTHONPATH"] = ":".join(filter(None, [str(ABLATE), child_env.get("PYTHONPATH")]))
            child_env["MM_ABLATE"] = ablate
        env.daemon = start_mmd(env.socket, env.home, env=child_env, cwd=env.home)
        if mode:
            env.set_daemon_option("snapshot_max_files", 0)
        argv = [*MM, "--yolo", *mode, "--output-format", "json", "--model", "s/scripted", "-p", "go"]
        run(argv, cwd=env.work)
        time.sleep(max(0.0, made + SETTLED - time.monotonic()))  # the repository as a project's: settled
        daemon = psutil.Process(env.daemon.pid)
        spent = {"user": 0.0, "sys": 0.0, "loop": 0.0, "switches": 0.0, "threads": 0.0, "bare": 0.0}
        for _ in range(turns):
            before = daemon.cpu_times(), _threads_ns(daemon.pid), daemon.num_ctx_switches()
            run(argv, cwd=env.work)
            after = daemon.cpu_times(), _threads_ns(daemon.pid), daemon.num_ctx_switches()
            spent["user"] += after[0].user - before[0].user
            spent["sys"] += after[0].system - before[0].system
            spent["loop"] += (after[1].get(daemon.pid, 0) - before[1].get(daemon.pid, 0)) / 1e9
            spent["threads"] += _ran(before[1], after[1])
            spent["switches"] += after[2].voluntary - before[2].voluntary
            if calls:  # the prompt answered with no call that follows each turn of calls
                run(argv, cwd=env.work)
                spent["bare"] += _ran(after[1], _threads_ns(daemon.pid))
        n = turns * calls or turns
        figures = {key: value / n for key, value in spent.items() if key != "bare"}
        figures["marginal"] = (spent["threads"] - spent["bare"]) / n if calls else 0.0
        return figures
    finally:
        env.close()


def _threads_ns(pid: int) -> dict[int, int]:
    """The CPU time of each of the daemon's threads, in ns (its main thread runs the event loop).

    The kernel counts a process's user and system time in clock ticks (10 ms): a prompt answered with no
    call (~5 ms) reads as 0 or 10 ms. A thread's run time (``schedstat``) is in ns."""
    found = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError, ValueError):  # the thread ended meanwhile
            found[int(tid)] = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
    return found


def _ran(before: dict[int, int], after: dict[int, int]) -> float:
    """Seconds the threads ran between two readings (a thread that ended meanwhile is not counted)."""
    return sum(ns - before.get(tid, 0) for tid, ns in after.items()) / 1e9


def spawn_floor(n: int = 200) -> float:
    """CPU seconds this process spends on one ``subprocess.run(["true"])``."""
    start = time.process_time()
    for _ in range(n):
        subprocess.run(["true"], capture_output=True, check=True)
    return (time.process_time() - start) / n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    other = parser.add_mutually_exclusive_group()
    other.add_argument("--against", type=Path, help="a checkout of another revision to pair each round with")
    other.add_argument(
        "--ablate", help="pieces to leave out of a daemon paired with each round's (see above)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--turns", type=int, default=6, help="measured turns per daemon (default 6)")
    parser.add_argument("--tool-calls", type=int, default=40, help="bash calls per turn (default 40)")
    parser.add_argument(
        "--prompts", type=int, default=25, help="prompts with no tool call measured (default 25)"
    )
    parser.add_argument(
        "--plain", action="store_true", help="the project is a plain folder, not a git repository"
    )
    args = parser.parse_args(argv)
    against = args.against.resolve() if args.against else None
    if against is not None and not (against / "mmd" / "__init__.py").exists():
        print(f"bench_cpu: {against} is not a checkout of mm (no mmd/__init__.py)", file=sys.stderr)
        return 1
    daemons: list[Daemon] = [("this tree", None, "")]
    if against:
        daemons.append(("against", against, ""))
    elif args.ablate:
        daemons.append(("ablated", None, args.ablate))
    print(
        f"mm daemon CPU per tool call: {args.rounds} rounds, {args.turns} turns of {args.tool_calls} `bash true`"
        f" in {'a plain folder' if args.plain else 'a git repository'}"
    )
    if against:
        print(f"  against: {against}")
    if args.ablate:
        print(f"  ablated: this tree's daemon without {args.ablate} (bench/ablate/sitecustomize.py)")
    floors: list[float] = []
    try:
        for label, mode, per_prompt in MODES:
            turns, calls = (args.prompts, 0) if per_prompt else (args.turns, args.tool_calls)
            rows: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in daemons}
            for _ in range(args.rounds):
                for name, tree, ablate in daemons:
                    row = measure(tree, mode, turns, calls, ablate, plain=args.plain)
                    # The floor beside each daemon's figures, so the ratio is of one phase of the machine.
                    row["floor"] = spawn_floor(FLOOR_SPAWNS)
                    floors.append(row["floor"])
                    rows[name].append(row)
            unit = "prompt" if per_prompt else "call"
            print(f"\n  {label} (ms per {unit}; median of {args.rounds} rounds)")
            print(
                f"    {'':<12}{'user+sys':>9}{'threads':>9}{'loop':>8}{'switches':>10}{'/ floor':>9}"
                + (f"{'marginal':>10}" if calls else "")
            )
            for name, _, _ in daemons:
                total = statistics.median(r["user"] + r["sys"] for r in rows[name])
                threads = statistics.median(r["threads"] for r in rows[name])
                loop = statistics.median(r["loop"] for r in rows[name])
                switches = statistics.median(r["switches"] for r in rows[name])
                marginal = statistics.median(r["marginal"] for r in rows[name])
                ratio = statistics.median(r["threads"] / r["floor"] for r in rows[name])
                print(
                    f"    {name:<12}{total * 1000:9.2f}{threads * 1000:9.2f}{loop * 1000:8.2f}{switches:10.1f}"
                    f"{ratio:8.1f}x" + (f"{marginal * 1000:10.2f}" if calls else "")
                )
            if len(daemons) > 1:
                _pair(rows, daemons[1][0])
    except BenchError as exc:
        print(f"bench_cpu: {exc}", file=sys.stderr)
        return 1
    print(
        f"\n  floor: `true` by subprocess.run cost this process {statistics.median(floors) * 1000:.2f} ms of CPU"
        f" (median; {min(floors) * 1000:.2f}–{max(floors) * 1000:.2f} beside the {len(floors)} daemons)"
    )
    return 0


def _pair(rows: dict[str, list[dict[str, float]]], other: str) -> None:
    """Print this tree's CPU (its threads' run time, in ns) against the other daemon's, round by round: a
    ratio for another tree, the share of this tree's CPU the left-out pieces cost for an ablated one."""
    pairs = [(a["threads"], b["threads"]) for a, b in zip(rows["this tree"], rows[other], strict=True)]
    pairs = [(a, b) for a, b in pairs if a > 0 and b > 0]
    if other == "ablated":
        figures, what = [1 - b / a for a, b in pairs], "share of this tree's CPU the ablated pieces cost"
    else:
        figures, what = [a / b for a, b in pairs], "this tree / against"
    shown = ", ".join(f"{f:.2f}" for f in figures)
    median = f"median {statistics.median(figures):.2f}" if figures else "no round ran"
    print(f"    {what} (threads), round by round: {shown}; {median}")


if __name__ == "__main__":
    sys.exit(main())
