"""Crashes: ``kill -9`` the daemon at random points of turns, many times, then check what it left.

Run ``python bench/bench_crash.py [--kills N] [--max-delay S]``. Each round starts a daemon, sends one
``mm --continue -p`` whose turn streams text, runs a ``bash`` call that starts background ``sleep``s (one in
a session of its own) and prints 1.3 MB (a spill file), writes a file (an undo checkpoint, git), and ends in
text; after a random delay every daemon on the socket (the one started, or one the client started itself) is
killed with SIGKILL. After each kill: no process of the call is alive a few seconds later, though no daemon
started (the guardian). At the end, on a daemon started once more: ``PRAGMA integrity_check`` is ok, every
event a client printed is in the store, ``mm --continue -p``, ``mm diff`` and ``mm undo`` work, each shadow
repository passes ``git fsck``, and the socket's folder holds only the socket and its lock. Prints the
figures and exits 1 on any failure. Everything runs under /tmp and is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
from bench_client import MM, Env
from mmd_child import start_mmd

# Seconds the processes of a killed daemon's call may take to go (its guardian's grace is 3 s).
GONE_WITHIN = 10.0


def script(rounds: int) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    for t in range(rounds * 3):
        command = f"sleep 1000 & setsid sleep 1001 & seq 1 200000; echo {t} > f{t}.txt; sleep 0.3"
        steps += [
            {
                "text": "Running it. " * 20,
                "chunk_delay": 0.005,
                "tool_calls": [_call("bash", command=command)],
            },
            {"tool_calls": [_call("write_file", path=f"w{t}.txt", content=f"w {t}\n" * 100)]},
            {"text": "done " * 50, "chunk_delay": 0.005},
        ]
    return steps


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def left_running(home: Path) -> list[str]:
    """The call's sleeps, and any process tagged by a daemon of this home, still alive."""
    found = []
    for proc in psutil.process_iter(["cmdline", "environ", "status"]):
        try:
            cmd, env = proc.info["cmdline"] or [], proc.info["environ"] or {}
        except psutil.Error:
            continue
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if cmd[:2] in (["sleep", "1000"], ["sleep", "1001"]) or (
            "MM_PROC_TAG" in env and str(home) in env.get("XDG_STATE_HOME", "")
        ):
            found.append(f"{proc.pid} {' '.join(cmd)[:40]}")
    return found


def kill_daemons(env: Env) -> int:
    daemons = env.detached_daemons()
    for proc in daemons:
        proc.send_signal(signal.SIGKILL)
    psutil.wait_procs(daemons, timeout=10)
    return len(daemons)


def one_round(env: Env, n: int, max_delay: float, seen: dict[str, set[int]]) -> list[str]:
    daemon = start_mmd(env.socket, env.home)
    out = env.home / f"client-{n}.jsonl"
    args = [*(["--continue"] if n else []), "--yolo", "--output-format", "events", "-p", f"go {n}"]
    with out.open("w") as sink:
        client = subprocess.Popen([*MM, *args], cwd=env.work, stdout=sink, stderr=subprocess.DEVNULL)
        time.sleep(random.uniform(0, max_delay))
        kill_daemons(env)
        daemon.wait()
        client.wait(60)
        kill_daemons(env)  # one the client started, having found none, is killed as well
    for line in out.read_text().splitlines():
        event = json.loads(line)
        seen.setdefault(event["session_id"], set()).add(event["seq"])
    deadline = time.monotonic() + GONE_WITHIN
    while (left := left_running(env.home)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [f"round {n}: left running after the kill: {left}"] if left else []


def final_checks(env: Env, seen: dict[str, set[int]]) -> list[str]:
    failures = []
    db = sqlite3.connect(env.home / "state" / "mm" / "mm.db")
    if (check := db.execute("PRAGMA integrity_check").fetchall()) != [("ok",)]:
        failures.append(f"integrity_check: {check}")
    for session_id, seqs in seen.items():
        stored = {r[0] for r in db.execute("SELECT seq FROM events WHERE session_id = ?", (session_id,))}
        if missing := sorted(seqs - stored):
            failures.append(f"session {session_id}: events a client saw are gone: {missing[:10]}")
    db.close()
    for argv in (["--continue", "--yolo", "-p", "last"], ["diff"], ["undo"]):
        done = subprocess.run([*MM, *argv], cwd=env.work, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            failures.append(f"mm {' '.join(argv)}: exit {done.returncode}: {done.stderr[-300:]}")
    for shadow in (env.home / "state" / "mm" / "snapshots").iterdir():
        fsck = subprocess.run(
            ["git", f"--git-dir={shadow}", "fsck", "--no-dangling"], capture_output=True, text=True
        )
        if fsck.returncode != 0:
            failures.append(f"git fsck {shadow.name}: {fsck.stderr[-300:]}")
    if extra := sorted(
        p.name for p in env.socket.parent.iterdir() if p.name not in ("mmd.sock", "mmd.sock.lock")
    ):
        failures.append(f"left in the socket's folder: {extra}")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument(
        "--max-delay", type=float, default=1.5, help="seconds from the prompt to the kill, at most"
    )
    args = parser.parse_args(argv)
    env = Env()
    try:
        env.start_servers({"s": script(args.kills + 2)}, default="s")
        subprocess.run(["git", "init", "-q"], cwd=env.work, check=True)
        seen: dict[str, set[int]] = {}
        failures = [f for n in range(args.kills) for f in one_round(env, n, args.max_delay, seen)]
        env.start_daemon()
        failures += final_checks(env, seen)
        print(f"{args.kills} kills; {sum(map(len, seen.values()))} events seen by clients, all checked")
        for failure in failures:
            print("FAIL", failure)
        print("ok" if not failures else f"{len(failures)} failures")
        return 1 if failures else 0
    finally:
        env.close()


if __name__ == "__main__":
    sys.exit(main())
