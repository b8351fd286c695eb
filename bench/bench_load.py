"""Load: many `mm -p` sessions at once against one daemon, and what they leave in it.

Run ``python bench/bench_load.py [--sessions N] [--warm-up W]``. It starts one daemon, runs W
sessions one after another (imports, caches and the allocator settle), takes the daemon's figures,
then spawns N ``mm --yolo --output-format json -p ...`` clients at once, each a new session whose
turn makes one ``bash`` tool call and then answers. It prints:

1. completions: how many clients exited 0 with status ok and exactly one tool call; the wall time
   of each client, spawn to exit (p50, p99, max), and of the whole batch;
2. the daemon: resident memory and open descriptors before the batch, at their peak during it
   (sampled every 20 ms), and after it once every session was unloaded (``daemon.session_idle`` is
   set to 1 s here; the default is 60 s);
3. the store: events, event and message bytes per session (read from the store), and the store
   file's size per session once the daemon has stopped (its WAL folded in).

The model is ``scripted:`` (a script file named in the agent file, served inside the daemon) and
not one scripted model server process: a server process hands its steps out in the order requests
arrive, so with the sessions' requests interleaved a session could get another's answer (two tool
calls, or none); ``scripted:`` replays the script for each session, so every session makes exactly
one call, and the per-turn start and stop of its model server (and any leak of it) is on the
daemon's bill, as in the leak tests.

Everything runs in a private tree under /tmp; every process the bench starts is stopped at the
end, on error and on Ctrl-C too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil
import yaml
from mmd_child import PY, BenchError, start_mmd

CONSOLE_SCRIPT = Path(PY).with_name("mm")
# The client command: the console script installed next to this interpreter, else the module.
MM = [str(CONSOLE_SCRIPT)] if CONSOLE_SCRIPT.exists() else [PY, "-m", "mm.cli"]
# Seconds any one client, or the wait for the daemon to unload its sessions, may take.
TIMEOUT = 120.0
# Seconds between two samples of the daemon's memory and descriptors during the batch.
SAMPLE_EVERY = 0.02
# daemon.session_idle for this bench: sessions leave memory this long after their turn.
SESSION_IDLE = 1.0
# The one turn every session runs: a tool call, then an answer.
SCRIPT = [
    {"tool_calls": [{"name": "bash", "arguments": {"command": "echo load"}}]},
    {"text": "done"},
]


def heading(text: str) -> None:
    print(f"\n== {text} ==", flush=True)


def nearest_rank(values: Sequence[float], q: float) -> float:
    """The q-quantile (0 < q <= 1) by nearest rank."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


class Home:
    """A private mm home (XDG dirs, socket, agent file, config) and its daemon; ``close`` stops all."""

    def __init__(self) -> None:
        # A short folder under /tmp: Unix socket paths are limited to 108 bytes.
        self.home = Path(tempfile.mkdtemp(prefix="mm-bench-load-", dir="/tmp"))
        self.env = dict(os.environ)
        for var, sub in (
            ("XDG_RUNTIME_DIR", "run"),
            ("XDG_STATE_HOME", "state"),
            ("XDG_CONFIG_HOME", "config"),
            ("XDG_DATA_HOME", "data"),
        ):
            (self.home / sub).mkdir(mode=0o700)
            self.env[var] = str(self.home / sub)
        self.env.pop("MM_SOCKET", None)
        self.env["MM_DUMPABLE"] = "1"  # its descriptors are counted from outside (mmd/main.py)
        self.socket = self.home / "run" / "mm" / "mmd.sock"
        self.store = self.home / "state" / "mm" / "mm.db"
        self.work = self.home / "work"
        self.work.mkdir()
        (self.work / "script.json").write_text(json.dumps({"responses": SCRIPT}))
        self.agent = self.work / "agent.yaml"
        self.agent.write_text("model: scripted:script.json\n")
        config = self.home / "config" / "mm" / "config.yaml"
        config.parent.mkdir(parents=True)
        config.write_text(yaml.safe_dump({"daemon": {"session_idle": SESSION_IDLE}}))
        self.daemon: subprocess.Popen[bytes] | None = None

    def start_daemon(self) -> psutil.Process:
        """Start mmd as our own child on the private socket; its process once it answers."""
        self.daemon = start_mmd(self.socket, self.home, self.env)
        return psutil.Process(self.daemon.pid)

    def stop_daemon(self) -> None:
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.terminate()
            try:
                self.daemon.wait(15)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()
        self.daemon = None

    def mm(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*MM, *args],
            cwd=self.work,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        if done.returncode != 0:
            raise BenchError(f"mm {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
        return done

    def prompt_argv(self, n: int) -> list[str]:
        return [*MM, "--yolo", "--output-format", "json", "--agent", str(self.agent), "-p", f"load {n}"]

    def sessions_loaded(self) -> int:
        return json.loads(self.mm("daemon", "status", "--json").stdout)["sessions_loaded"]

    def wait_unloaded(self) -> float:
        """Wait until the daemon holds no session in memory; the seconds it took."""
        start = time.monotonic()
        while self.sessions_loaded():
            if time.monotonic() - start > TIMEOUT:
                raise BenchError(f"the daemon still holds sessions {TIMEOUT:g} s after the last turn")
            time.sleep(0.2)
        return time.monotonic() - start

    def close(self) -> None:
        try:
            self.stop_daemon()
        finally:
            shutil.rmtree(self.home, ignore_errors=True)


class Sampler:
    """Samples a process's resident memory and descriptors in a thread; the peaks seen."""

    def __init__(self, proc: psutil.Process) -> None:
        self.proc = proc
        self.peak_rss = 0
        self.peak_fds = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(psutil.Error):
                self.peak_rss = max(self.peak_rss, self.proc.memory_info().rss)
                self.peak_fds = max(self.peak_fds, self.proc.num_fds())
            self._stop.wait(SAMPLE_EVERY)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def figures(proc: psutil.Process) -> tuple[int, int]:
    return proc.memory_info().rss, proc.num_fds()


def run_batch(home: Home, count: int) -> tuple[list[float], list[dict[str, Any]], float]:
    """Spawn ``count`` clients at once; each one's wall seconds and JSON result, and the batch's wall."""
    walls: list[float] = [0.0] * count
    results: list[dict[str, Any]] = [{}] * count
    procs: list[subprocess.Popen[str]] = []

    def wait(i: int, proc: subprocess.Popen[str], started: float) -> None:
        try:
            out, err = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        walls[i] = time.perf_counter() - started
        try:
            results[i] = {"exit": proc.returncode, **json.loads(out)}
        except ValueError:
            results[i] = {"exit": proc.returncode, "error": (out + err).strip()[-300:]}

    threads = []
    batch_start = time.perf_counter()
    try:
        for i in range(count):
            started = time.perf_counter()
            proc = subprocess.Popen(
                home.prompt_argv(i),
                cwd=home.work,
                env=home.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            procs.append(proc)
            thread = threading.Thread(target=wait, args=(i, proc, started))
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return walls, results, time.perf_counter() - batch_start


def store_figures(store: Path, session_ids: list[str]) -> tuple[float, float, float]:
    """Per session: events, event bytes, message bytes (the stored msgpack), read without writing."""
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        marks = ",".join("?" * len(session_ids))
        events, event_bytes = db.execute(
            f"SELECT count(*), coalesce(sum(length(data)), 0) FROM events WHERE session_id IN ({marks})",
            session_ids,
        ).fetchone()
        (message_bytes,) = db.execute(
            f"SELECT coalesce(sum(length(data)), 0) FROM messages WHERE session_id IN ({marks})", session_ids
        ).fetchone()
    finally:
        db.close()
    n = max(1, len(session_ids))
    return events / n, event_bytes / n, message_bytes / n


def completed(result: dict[str, Any]) -> bool:
    return result.get("exit") == 0 and result.get("status") == "ok" and len(result.get("tool_calls", [])) == 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100, help="clients spawned at once (default 100)")
    parser.add_argument(
        "--warm-up", type=int, default=10, help="sessions run one by one before the figures (default 10)"
    )
    args = parser.parse_args(argv)
    count, warm = max(1, args.sessions), max(0, args.warm_up)

    def terminated(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminated)
    home = Home()
    try:
        print(f"mm load bench: python {sys.version.split()[0]} at {PY}; private home {home.home}", flush=True)
        print(f"  {os.cpu_count()} cores; {count} clients at once, {warm} warm-up sessions first", flush=True)
        daemon = home.start_daemon()
        for i in range(warm):
            home.mm("--yolo", "--agent", str(home.agent), "-p", f"warm-up {i}")
        home.wait_unloaded()
        rss_before, fds_before = figures(daemon)
        with Sampler(daemon) as sampler:
            walls, results, batch = run_batch(home, count)
        unload = home.wait_unloaded()
        rss_after, fds_after = figures(daemon)
        ok = [r for r in results if completed(r)]
        ids = [r["session_id"] for r in results if r.get("session_id")]
        events, event_bytes, message_bytes = store_figures(home.store, ids)
        total_sessions = warm + count
        home.stop_daemon()
        file_bytes = home.store.stat().st_size / total_sessions

        heading(f"1. {count} mm -p at once, one bash call each (scripted: model)")
        print(f"  completed: {len(ok)}/{count} (exit 0, status ok, exactly one tool call)")
        for r in [r for r in results if not completed(r)][:5]:
            print(f"    not completed: {json.dumps(r)[:300]}")
        print(
            f"  wall per client, spawn to exit: p50 {statistics.median(walls):.2f} s, "
            f"p99 {nearest_rank(walls, 0.99):.2f} s, max {max(walls):.2f} s"
        )
        print(f"  whole batch: {batch:.2f} s, {count / batch:.1f} sessions/s")

        heading(f"2. the daemon (pid {daemon.pid})")
        print(f"  {'':<34}{'RSS':>12} {'fds':>6}")
        print(f"  {'before (after the warm-up)':<34}{mib(rss_before):>12} {fds_before:>6}")
        print(f"  {'peak during the batch':<34}{mib(sampler.peak_rss):>12} {sampler.peak_fds:>6}")
        print(f"  {'after (every session unloaded)':<34}{mib(rss_after):>12} {fds_after:>6}")
        print(
            f"  growth: {mib(rss_after - rss_before)} RSS, {fds_after - fds_before:+d} fds; "
            f"sessions unloaded {unload:.1f} s after the batch (session_idle {SESSION_IDLE:g} s)"
        )

        heading("3. the store, per session")
        print(
            f"  {events:.0f} events: {event_bytes:,.0f} bytes of events, {message_bytes:,.0f} bytes of messages"
        )
        print(
            f"  store file: {file_bytes:,.0f} bytes per session ({total_sessions} sessions, after the daemon stopped)"
        )
    except KeyboardInterrupt:
        print("\ninterrupted; stopping what the bench started", file=sys.stderr)
        return 130
    except BenchError as exc:
        print(f"bench_load: {exc}", file=sys.stderr)
        return 1
    finally:
        home.close()
    return 0 if len(ok) == count else 1


if __name__ == "__main__":
    sys.exit(main())
