"""Calls the daemon makes per tool call, by stage: a figure of its CPU that does not move with the machine.

Run ``python bench/bench_calls.py [--turns N] [--tool-calls N]``. It starts a scripted model server
and a daemon of its own under a counting profiler (``sys.setprofile``: every Python function called
and every C function called from Python, in every thread), runs one turn to warm up, then counts
over ``--turns`` turns of ``--tool-calls`` ``bash true`` calls each, twice: as a default prompt
runs (undo checkpoint, sandbox) and with ``--sandbox off`` and no checkpoint. It prints the calls
per tool call, each stage's share (a call is counted in the innermost stage on its stack), and the
passes of the event loop (trio's ``epoll.poll``) per tool call. A coroutine's call and each of its
resumes count as one call each.

Why: the daemon's CPU per call (bench_client.py, figure 4) is counted by the kernel in 10 ms ticks
and swings by a third between runs on a shared machine; the number of calls is the same in every
run, so a change to the hot path shows in it exactly. A Python call costs 0.5-1 µs here: the
counts are not milliseconds, and the profiler itself makes the counted run several times slower.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from bench_client import MM, PY, Env, bash_turns, run
from mmd_child import BenchError, answers

# Runs mmd with the counting profiler, switched on by SIGUSR1; writes the counts at exit.
COUNTED_MMD = r"""
import atexit, collections, json, os, signal, sys, threading
STAGES = json.loads(os.environ.pop("MM_BENCH_STAGES"))
DETAIL = os.environ.pop("MM_BENCH_DETAIL", "") == "1"
counts = collections.Counter()
frames = collections.Counter()  # of which Python functions (a frame entered or resumed), the rest C
detail = collections.Counter()
main_thread = threading.main_thread()

counting = False

def profile(frame, event, arg):
    if not counting or (event != "call" and event != "c_call"):
        return
    if (
        event == "c_call"
        and frame.f_code.co_qualname == "EpollIOManager.get_events"
        and getattr(arg, "__qualname__", "") == "epoll.poll"
    ):
        counts["passes of the event loop"] += 1
    f = frame
    while f is not None:
        stage = STAGES.get(f.f_code.co_qualname)
        if stage is not None:
            break
        f = f.f_back
    else:
        stage = "event loop (trio's scheduler)" if threading.current_thread() is main_thread else "other threads"
    counts[stage] += 1
    if event == "call":
        frames[stage] += 1
    if DETAIL:
        name = getattr(arg, "__qualname__", "?") if event == "c_call" else frame.f_code.co_qualname + "()"
        detail[stage + "\t" + name] += 1

def start(*_):
    global counting
    counting = True

def dump():
    sys.setprofile(None)
    with open(os.environ["MM_BENCH_COUNTS"], "w") as f:
        json.dump({"counts": counts, "frames": frames, "detail": detail.most_common(3000)}, f)

# Installed before any thread starts, counting from SIGUSR1: on Python 3.11 a profile function reaches
# only threads started after it is set, and the sandbox's spawner threads start in the warm-up turn.
threading.setprofile(profile)
sys.setprofile(profile)
signal.signal(signal.SIGUSR1, start)
atexit.register(dump)
sys.argv = ["mmd", *sys.argv[1:]]
from mmd.main import main
sys.exit(main())
"""

# The function (its qualified name) whose frame marks a stage, and the stage's name. The innermost
# one on a call's stack wins: a spawn inside a call's stages counts as the supervisor's.
STAGES = {
    "run_tool_process": "supervisor: spawn, read the output, stop and reap",
    "Recorder.before": "undo checkpoint",
    "Recorder.after": "undo checkpoint",
    "model_step": "model step: request, streamed answer, parse",
    "Session.emit": "events: store, queue to the client",
    "Session.add_message": "messages: store",
    "Connection._writer": "writing to the client",
    "CallRunner.run": "call stages: contract, consent, hooks, result",
    "run_steps": "turn loop, the rest",
    "Daemon.prompt": "per prompt: plan, setup",
}
POLLS = "passes of the event loop"


def counted_turns(
    env: Env, server: str, calls: int, turns: int, extra: list[str], detail: bool = False
) -> dict[str, Any]:
    """Start a counted daemon, run a warm-up turn, count *turns* turns of *calls* calls; the counts."""
    out = env.home / f"counts-{server}.json"
    child_env = {
        **os.environ,
        "MM_BENCH_STAGES": json.dumps(STAGES),
        "MM_BENCH_COUNTS": str(out),
        "MM_BENCH_DETAIL": "1" if detail else "",
    }
    daemon = subprocess.Popen(
        [PY, "-c", COUNTED_MMD, "--socket", str(env.socket)],
        env=child_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    env.daemon = daemon
    deadline = time.monotonic() + 20
    while not answers(env.socket):
        if daemon.poll() is not None or time.monotonic() > deadline:
            raise BenchError(f"the counted mmd did not start; see {env.home}/state/mm/mmd.log")
        time.sleep(0.02)
    argv = [*MM, "--yolo", *extra, "--output-format", "json", "--model", f"{server}/scripted", "-p", "go"]
    for turn in range(turns + 1):
        result = json.loads(run(argv, cwd=env.work).stdout)
        if result.get("status") != "ok" or len(result["tool_calls"]) != calls:
            raise BenchError(f"turn {turn} of {server} did not run {calls} calls: {result}")
        if turn == 0:
            daemon.send_signal(signal.SIGUSR1)
            time.sleep(0.2)
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(60)
    env.daemon = None
    return json.loads(out.read_text())


def report(
    label: str, found: dict[str, Any], per: int, detail: str | None, rows: int = 60, python: bool = False
) -> None:
    counts: dict[str, int] = found["counts"]
    frames: dict[str, int] = found["frames"]
    polls = counts.pop(POLLS, 0)
    total = sum(counts.values())
    print(
        f"\n  {label}: {total / per:,.0f} calls per tool call, {sum(frames.values()) / per:,.0f} of them to Python "
        f"functions; {polls / per:.1f} passes of the event loop"
    )
    print(f"    {'calls':>8}  {'share':>6}  {'Python':>7}  stage")
    for stage, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"    {n / per:8,.0f}  {100 * n / total:4.1f} %  {frames.get(stage, 0) / per:7,.0f}  {stage}")
        if detail is not None and detail in stage:
            listed = [(n, key.split("\t")[1]) for key, n in found["detail"] if key.startswith(stage + "\t")]
            if python:
                listed = [(n, name) for n, name in listed if name.endswith("()")]
            for calls, name in listed[:rows]:
                print(f"              {calls / per:8,.1f}  {name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=5, help="counted turns per mode (default 5)")
    parser.add_argument("--tool-calls", type=int, default=40, help="bash calls per turn (default 40)")
    parser.add_argument(
        "--detail",
        metavar="STAGE",
        help="also list the functions most called in the stages whose name holds STAGE",
    )
    parser.add_argument(
        "--rows", type=int, default=60, help="functions listed per stage by --detail (default 60)"
    )
    parser.add_argument("--python", action="store_true", help="--detail lists Python functions only")
    args = parser.parse_args(argv)
    turns, calls = max(1, args.turns), max(1, args.tool_calls)
    env = Env()
    try:
        env.start_servers(
            {
                "chat": [{"text": "hi"}],
                "bash": bash_turns(calls, turns + 1),
                "plain": bash_turns(calls, turns + 1),
            },
            default="chat",
        )
        print(
            f"mm daemon call count: python {sys.version.split()[0]}; {turns} turns of {calls} `bash true` calls"
        )
        modes: list[tuple[str, str, list[str]]] = [
            ("default prompt (undo checkpoint, sandbox)", "bash", []),
            ("--sandbox off, no checkpoint", "plain", ["--sandbox", "off"]),
        ]
        for label, server, extra in modes:
            if server == "plain":
                env.set_daemon_option("snapshot_max_files", 0)
            found = counted_turns(env, server, calls, turns, extra, args.detail is not None)
            report(label, found, turns * calls, args.detail, args.rows, args.python)
    except BenchError as exc:
        print(f"bench_calls: {exc}", file=sys.stderr)
        return 1
    finally:
        env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
