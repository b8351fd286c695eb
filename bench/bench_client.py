"""Figures for the mm client: cold start, time to the first event, harness overhead per tool call.

Run ``python bench/bench_client.py [--runs N] [--cold-runs M] [--tool-calls K]``. It prints:

1. client cold start: wall time of ``mm --version`` as a fresh process against ``python -c pass``, the
   import time of ``mm.cli`` (``-X importtime``), and the modules the client must not import
   (trio, httpx, anyio, psutil, daemon modules outside ``mmd.rpc``): each list should be empty;
2. ``mm -p`` to the first event: from spawning ``mm --output-format events --yolo -p hi`` to its
   first stdout line and to its exit, with a warm daemon, then with no daemon running (the client
   starts one; it is stopped between runs);
3. harness overhead of one tool call: one turn of K tool calls answered at once by the scripted
   model; per call, the gap from the model's response sent to the next request received, less the
   tool's own run time; for ``bash true`` and for ``read_file`` of a small file.

Everything runs in a private tree under /tmp (XDG dirs, socket, config.yaml pointing at scripted
model servers); every process the bench starts is stopped at the end, on error and on Ctrl-C too.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import math
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil
import yaml
from mmd_child import PY, BenchError, answers, start_mmd

CONSOLE_SCRIPT = Path(PY).with_name("mm")
# The client command: the console script installed next to this interpreter, else the module.
MM = [str(CONSOLE_SCRIPT)] if CONSOLE_SCRIPT.exists() else [PY, "-m", "mm.cli"]
# Top-level packages the client must never import, so that it starts fast.
FORBIDDEN = ("trio", "httpx", "httpcore", "anyio", "psutil", "h11")
PROMPT_ARGS = ["--output-format", "events", "--yolo", "-p", "hi"]
# Seconds any one child command may take before the bench gives up on it.
TIMEOUT = 60.0
# daemon.session_idle of the bench's config: how soon figure 4 sees the sessions unloaded.
SESSION_IDLE = 2.0


# ---------------------------------------------------------------- numbers


def ms(seconds: float) -> float:
    return seconds * 1000.0


def p90(values: Sequence[float]) -> float:
    """Nearest-rank 90th percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def spread(values: Sequence[float]) -> str:
    """min / median / max, in ms, for values in seconds."""
    return f"{ms(min(values)):8.1f} {ms(statistics.median(values)):8.1f} {ms(max(values)):8.1f}"


def shown(argv: Sequence[str]) -> str:
    """A command line as printed: the interpreter and the console script by their short names."""
    short = {PY: "python", str(CONSOLE_SCRIPT): "mm"}
    return shlex.join(short.get(a, a) for a in argv)


def heading(text: str) -> None:
    print(f"\n== {text} ==", flush=True)


# ---------------------------------------------------------------- the private environment


class Env:
    """A private mm home: XDG dirs, socket, scripted servers, daemons; ``close`` stops them all."""

    def __init__(self) -> None:
        # A short folder under /tmp: Unix socket paths are limited to 108 bytes.
        self.home = Path(tempfile.mkdtemp(prefix="mm-bench-", dir="/tmp"))
        for var, sub in (
            ("XDG_RUNTIME_DIR", "run"),
            ("XDG_STATE_HOME", "state"),
            ("XDG_CONFIG_HOME", "config"),
            ("XDG_DATA_HOME", "data"),
        ):
            (self.home / sub).mkdir(mode=0o700)
            os.environ[var] = str(self.home / sub)
        os.environ.pop("MM_SOCKET", None)
        self.socket = self.home / "run" / "mm" / "mmd.sock"
        self.work = self.home / "work"
        self.work.mkdir()
        self.servers: dict[str, tuple[subprocess.Popen[str], str]] = {}
        self.daemon: subprocess.Popen[bytes] | None = None

    # -- scripted model servers -------------------------------------------------

    def start_servers(self, scripts: dict[str, list[dict[str, Any]]], default: str) -> None:
        """Start one scripted server per script (in parallel) and name them in config.yaml."""
        for name, steps in scripts.items():
            path = self.home / f"script-{name}.json"
            path.write_text(json.dumps({"responses": steps}))
            proc = subprocess.Popen(
                [PY, "-m", "mmd.models.scripted", str(path)],
                stdout=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            self.servers[name] = (proc, "")
        for name, (proc, _) in list(self.servers.items()):
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            if not line.startswith("listening "):
                raise BenchError(f"scripted server {name} did not start: {line!r}")
            self.servers[name] = (proc, line.split(" ", 1)[1])
        providers = {
            name: {"kind": "openai", "base_url": f"{url}/v1", "max_retries": 0}
            for name, (_, url) in self.servers.items()
        }
        config = {
            "providers": providers,
            "default_model": f"{default}/scripted",
            "daemon": {"max_steps": max(len(s) for s in scripts.values()) + 10, "session_idle": SESSION_IDLE},
        }
        path = self.home / "config" / "mm" / "config.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config))

    def set_daemon_option(self, key: str, value: Any) -> None:
        """Set ``daemon.<key>`` in config.yaml (the daemon reads it again with each prompt)."""
        path = self.home / "config" / "mm" / "config.yaml"
        config = yaml.safe_load(path.read_text())
        config["daemon"][key] = value
        path.write_text(yaml.safe_dump(config))

    def requests(self, name: str) -> list[dict[str, Any]]:
        """The completion requests server ``name`` received, in order."""
        url = self.servers[name][1] + "/_mm/requests"
        with urllib.request.urlopen(url, timeout=10) as resp:
            rows = json.load(resp)
        return [r for r in rows if r["path"] == "/v1/chat/completions"]

    # -- daemons ------------------------------------------------------------------

    def start_daemon(self) -> None:
        """Start mmd as our own child on the private socket and wait until it answers."""
        self.daemon = start_mmd(self.socket, self.home)

    def stop_daemon(self) -> None:
        """Stop our own daemon (SIGTERM) and any daemon a client started on our socket."""
        if self.daemon is not None:
            stop(self.daemon, timeout=15)
            self.daemon = None
        self.stop_detached_daemons()

    def detached_daemons(self) -> list[psutil.Process]:
        sock = str(self.socket)
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                cmd = proc.info["cmdline"] or []
                if "mmd" in cmd and sock in cmd:
                    found.append(proc)
        return found

    def stop_detached_daemons(self) -> None:
        procs = self.detached_daemons()
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _, alive = psutil.wait_procs(procs, timeout=15)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()

    def close(self) -> None:
        try:
            self.stop_daemon()
        finally:
            for proc, _ in self.servers.values():
                stop(proc, timeout=5)
                if proc.stdout is not None:
                    proc.stdout.close()
            shutil.rmtree(self.home, ignore_errors=True)


def stop(proc: subprocess.Popen[Any], timeout: float) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` seconds; always reaped."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run(argv: Sequence[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command to its end; BenchError unless it exits 0."""
    done = subprocess.run(
        argv, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT
    )
    if done.returncode != 0:
        raise BenchError(f"`{shown(argv)}` exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done


def wall(argv: Sequence[str]) -> float:
    """Seconds from spawning ``argv`` to its exit (output discarded)."""
    start = time.perf_counter()
    code = subprocess.call(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, timeout=TIMEOUT)
    took = time.perf_counter() - start
    if code != 0:
        raise BenchError(f"`{shown(argv)}` exited {code}")
    return took


# ---------------------------------------------------------------- figure 1


def import_times(code: str) -> dict[str, tuple[int, int, int]]:
    """``python -X importtime -c code``: module → (depth, self µs, cumulative µs), in import order."""
    done = run([PY, "-X", "importtime", "-c", code])
    rows: dict[str, tuple[int, int, int]] = {}
    for line in done.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \| ( *)(\S+)", line)
        if m:
            rows[m[4]] = (len(m[3]) // 2, int(m[1]), int(m[2]))
    return rows


def import_total(baseline: set[str]) -> tuple[float, dict[str, tuple[int, int, int]]]:
    """Seconds ``import mm.cli`` takes beyond interpreter start-up: top-level imports not in ``baseline``."""
    rows = import_times("import mm.cli")
    total = sum(cum for name, (depth, _, cum) in rows.items() if depth == 0 and name not in baseline)
    return total / 1e6, rows


def forbidden(modules: Sequence[str]) -> list[str]:
    bad = []
    for name in modules:
        top = name.split(".")[0]
        daemon_side = (
            top == "mmd"
            and name not in ("mmd", "mmd.paths")
            and not (name == "mmd.rpc" or name.startswith("mmd.rpc."))
        )
        if top in FORBIDDEN or daemon_side:
            bad.append(name)
    return sorted(bad)


def modules_after(argv_tail: Sequence[str], cwd: Path, out: Path) -> list[str]:
    """sys.modules at the exit of ``mm ARGV_TAIL`` run in-process by runpy (as the console script does)."""
    code = (
        "import atexit, json, runpy, sys\n"
        "imported = lambda: sorted(m for m, mod in sys.modules.items() if mod is not None)\n"
        f"atexit.register(lambda: open({str(out)!r}, 'w').write(json.dumps(imported())))\n"
        f"sys.argv = ['mm', *{list(argv_tail)!r}]\n"
        "runpy.run_module('mm.cli', run_name='__main__', alter_sys=True)\n"
    )
    run([PY, "-c", code], cwd=cwd)
    return json.loads(out.read_text())


def figure1(runs: int) -> float:
    """Print figure 1; returns the median seconds of ``mm --version``."""
    baseline_cmd = [PY, "-c", "pass"]
    version_cmd = [*MM, "--version"]
    commands = [
        baseline_cmd,
        # The interpreter without site (.pth files, the editable-install finder): a floor, not a baseline.
        [PY, "-S", "-c", "pass"],
        version_cmd,
    ]
    if MM[0] != PY:
        commands.append([PY, "-m", "mm.cli", "--version"])
    for argv in commands:
        wall(argv)  # warm the page cache
    times = [[wall(argv) for _ in range(runs)] for argv in commands]

    startup = set(import_times("pass"))
    imports = [import_total(startup) for _ in range(runs)]
    totals = [t for t, _ in imports]
    rows = imports[len(imports) // 2][1]
    heavy = sorted(
        ((cum, name) for name, (depth, _, cum) in rows.items() if depth == 1 and name not in startup),
        reverse=True,
    )[:5]

    heading(f"1. client cold start (fresh process, {runs} runs; ms)")
    print(f"  {'command':<44}{'min':>8} {'median':>8} {'max':>8}   ratio to python -c pass")
    base = statistics.median(times[0])
    for argv, values in zip(commands, times, strict=True):
        print(f"  {shown(argv):<44}{spread(values)}   {statistics.median(values) / base:.1f}x")
    label = "import mm.cli: python -X importtime, total"
    print(f"  {label:<44}{spread(totals)}   (imports beyond those of python -c pass)")
    print("    heaviest under it (cumulative ms): " + ", ".join(f"{n} {c / 1000:.1f}" for c, n in heavy))
    print(f"  `mm` is the console script {CONSOLE_SCRIPT}" if MM[0] != PY else "  `mm` is python -m mm.cli")
    return statistics.median(times[commands.index(version_cmd)])


def check_modules(env: Env) -> None:
    """Print the modules the client imported that it must not: each list should be empty."""
    out = env.home / "modules.json"
    checks = [
        (
            "import mm.cli",
            json.loads(
                run(
                    [
                        PY,
                        "-c",
                        "import sys, json, mm.cli; print(json.dumps([m for m, v in sys.modules.items() if v]))",
                    ]
                ).stdout
            ),
        ),
        ("mm --version", modules_after(["--version"], env.work, out)),
        ("mm -p hi (a whole turn, warm daemon)", modules_after(PROMPT_ARGS, env.work, out)),
    ]
    print(
        f"  modules the client must not import ({', '.join(FORBIDDEN)}, mmd.* outside mmd.rpc and mmd.paths):"
    )
    for what, modules in checks:
        bad = forbidden(modules)
        verdict = "ok" if not bad else "NOT EMPTY"
        print(f"    {what:<40}{bad}  {verdict}")


# ---------------------------------------------------------------- figure 2


Rows = list[tuple[float, float, float, float]]


def first_event(env: Env) -> tuple[float, float, float, float]:
    """Spawn ``mm -p`` with --output-format events: seconds to turn_started in the daemon, to the model
    request the scripted server received, to the first line, to exit."""
    argv = [*MM, *PROMPT_ARGS]
    with tempfile.TemporaryFile() as err:
        spawned_wall = time.time()
        start = time.perf_counter()
        proc = subprocess.Popen(
            argv, cwd=env.work, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            first = time.perf_counter() - start
            rest = proc.stdout.read()
            code = proc.wait(TIMEOUT)
            end = time.perf_counter() - start
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if code != 0 or not line:
            err.seek(0)
            raise BenchError(f"`{shown(argv)}` exited {code}:\n{(line + rest).decode()}{err.read().decode()}")
    ev = json.loads(line)
    if ev["kind"] != "turn_started":
        raise BenchError(f"the first event is {ev['kind']}, not turn_started")
    request = env.requests("chat")[-1]["t_received"] - spawned_wall
    return ev["ts"] - spawned_wall, request, first, end


def wait_daemon_gone(env: Env) -> None:
    deadline = time.monotonic() + 15
    while env.detached_daemons() or answers(env.socket):
        if time.monotonic() > deadline:
            raise BenchError("the daemon did not stop within 15 s of `mm daemon stop`")
        time.sleep(0.02)


def figure2_warm(env: Env, runs: int) -> Rows:
    for _ in range(2):
        first_event(env)  # warm-up: provider connection, caches
    return [first_event(env) for _ in range(runs)]


def figure2_cold(env: Env, runs: int) -> Rows:
    results = []
    for _ in range(runs):
        results.append(first_event(env))
        run([*MM, "daemon", "stop"])
        wait_daemon_gone(env)
    return results


def print_figure2(warm: Rows, cold: Rows, version: float) -> None:
    heading("2. mm -p to the first event (ms)")
    print(f"  command: {shown([*MM, *PROMPT_ARGS])}   (stdin /dev/null; each run a new session)")
    print(f"  {'':<44}{'min':>8} {'median':>8} {'max':>8}   ratio to mm --version")
    for label, rows in (
        (f"daemon running, warm ({len(warm)} runs)", warm),
        (f"no daemon, mm starts it ({len(cold)} runs)", cold),
    ):
        print(f"  {label}")
        for i, what in enumerate(
            (
                "spawn → turn_started (daemon's ts)",
                "spawn → model request received",
                "spawn → first line (first event)",
                "spawn → exit",
            )
        ):
            values = [r[i] for r in rows]
            print(f"    {what:<42}{spread(values)}   {statistics.median(values) / version:.1f}x")
    print("  turn_started's ts is taken in the daemon as it stores the event; the first line is that event")
    print("  no daemon: `mm daemon stop` after each run; the next runs once the old daemon is gone")


# ---------------------------------------------------------------- figure 3


@dataclasses.dataclass
class Turn:
    """Per-call timings of one tool-call turn, in seconds."""

    argv: list[str]
    rows: dict[str, list[float]]
    skipped: int  # gaps left out: the response never finished (the client hung up first)
    connections: int  # HTTP connections the daemon opened to the model server


def tool_turn(env: Env, server: str, calls: int, extra: Sequence[str] = ()) -> Turn:
    """Run one turn of ``calls`` tool calls against ``server`` and time each call's gap."""
    argv = [*MM, "--yolo", *extra, "--output-format", "json", "--model", f"{server}/scripted", "-p", "go"]
    result = json.loads(run(argv, cwd=env.work).stdout)
    if result.get("status", "ok") != "ok" or len(result["tool_calls"]) != calls:
        raise BenchError(f"the {server} turn did not run {calls} tool calls: {result}")
    events = json.loads(run([*MM, "sessions", "show", "--json", result["session_id"]]).stdout)["events"]
    reqs = env.requests(server)[-(calls + 1) :]
    assistants = [e for e in events if e["kind"] == "assistant"][-(calls + 1) :]
    tool_calls = [e for e in events if e["kind"] == "tool_call"][-calls:]
    results = [e for e in events if e["kind"] == "tool_result"][-calls:]
    rows: dict[str, list[float]] = {k: [] for k in ("overhead", "run", "parse", "validate", "call", "next")}
    skipped = 0
    for i in range(calls):
        res = results[i]["data"]
        if not res["ok"]:
            raise BenchError(f"tool call {i} failed: {res['content']}")
        responded = reqs[i]["t_responded"]
        if responded is None:
            skipped += 1
            continue
        run_time = float(res["data"].get("duration", 0.0))  # bash: its process's duration; else none
        rows["overhead"].append(reqs[i + 1]["t_received"] - responded - run_time)
        rows["run"].append(run_time)
        rows["parse"].append(assistants[i]["ts"] - responded)
        rows["validate"].append(tool_calls[i]["ts"] - assistants[i]["ts"])
        rows["call"].append(results[i]["ts"] - tool_calls[i]["ts"] - run_time)
        rows["next"].append(reqs[i + 1]["t_received"] - results[i]["ts"])
    if not rows["overhead"]:
        raise BenchError(f"no response of the {server} turn finished: nothing to time")
    return Turn(argv, rows, skipped, len({r["connection"] for r in reqs}))


def print_figure3(calls: int, bash: Turn, read: Turn, small: str, bare: list[float]) -> None:
    heading(f"3. harness overhead of one tool call ({calls} calls in one turn, model answers at once; ms)")
    print(f"  command: {shown(bash.argv)}   (and --model read/scripted for read_file)")
    print(
        f"  script:  {calls} x {{tool_calls: [bash {{command: true N}}]}} (or [read_file {{path: {small}}}]), then a text"
    )
    print("  overhead_i = t_received(request i+1) - t_responded(response i) - the tool's own run time")
    print(f"  {'':<36}{'median':>8} {'p90':>8} {'min':>8} {'max':>8}   {'first 10':>8} {'last 10':>8}")

    def line(label: str, values: list[float]) -> None:
        stats = [statistics.median(values), p90(values), min(values), max(values)]
        ends = [statistics.median(values[:10]), statistics.median(values[-10:])]
        print(
            f"  {label:<36}"
            + " ".join(f"{ms(v):8.2f}" for v in stats)
            + "   "
            + " ".join(f"{ms(v):8.2f}" for v in ends)
        )

    line("bash `true`: overhead", bash.rows["overhead"])
    line("  its process (data.data.duration)", bash.rows["run"])
    line("  bare `bash -c true` (no daemon)", bare)
    ratio = statistics.median(bash.rows["run"]) / statistics.median(bare)
    print(f"  {'  ratio supervised / bare process':<36}{ratio:7.1f}x")
    line(f"read_file {small}: overhead", read.rows["overhead"])
    print("  where a gap goes (medians, ms; from the scripted server's times and the events' ts):")
    print(f"  {'':<52}{'bash':>8} {'read_file':>10}")
    for key, label in (
        ("parse", "response sent → assistant event"),
        ("validate", "assistant event → tool_call event"),
        ("call", "tool_call → tool_result event, less the tool's run"),
        ("next", "tool_result event → next request received"),
    ):
        print(
            f"  {label:<52}{ms(statistics.median(bash.rows[key])):8.2f} {ms(statistics.median(read.rows[key])):10.2f}"
        )
    print(
        f"  {'(not counted: the tool run, i.e. the process)':<52}{ms(statistics.median(bash.rows['run'])):8.2f} {'-':>10}"
    )
    for name, turn in (("bash", bash), ("read_file", read)):
        note = (
            f", {turn.skipped} gaps left out (response unfinished: the daemon hung up first)"
            if turn.skipped
            else ""
        )
        print(f"  {name}: {calls + 1} model requests over {turn.connections} HTTP connection(s){note}")


# ---------------------------------------------------------------- figure 4


@dataclasses.dataclass
class Memory:
    """The daemon's resident set, in bytes, at three moments."""

    idle: int  # started, handshakes answered, no prompt yet
    loaded: int  # after the prompts of figure 2, their sessions in memory
    unloaded: int  # once every session was unloaded (daemon.session_idle)
    sessions: int  # sessions the prompts loaded


def daemon_cpu(env: Env) -> float:
    """CPU seconds the bench's own daemon has used (user + system, itself only)."""
    assert env.daemon is not None
    times = psutil.Process(env.daemon.pid).cpu_times()
    return times.user + times.system


def bash_turns(calls: int, turns: int) -> list[dict[str, Any]]:
    """A script of *turns* turns of *calls* bash calls each, every command different, each turn ended by a text."""
    steps: list[dict[str, Any]] = []
    for t in range(turns):
        steps += [
            {"tool_calls": [{"name": "bash", "arguments": {"command": f"true {t} {i}"}}]}
            for i in range(calls)
        ]
        steps.append({"text": "done"})
    return steps


def cpu_of_turns(
    env: Env, server: str, calls: int, turns: int, extra: Sequence[str] = ()
) -> tuple[Turn, list[float]]:
    """*turns* turns of *calls* calls: the first one's timings, and the daemon's CPU seconds per call of each.

    The kernel counts a process's CPU in clock ticks (10 ms here), a quarter of a millisecond per call
    over a turn of 40: figure 4 pools several turns.
    """
    first, per_call = None, []
    for _ in range(turns):
        before = daemon_cpu(env)
        turn = tool_turn(env, server, calls, extra)
        per_call.append((daemon_cpu(env) - before) / calls)  # its client's requests included: a little more
        first = first or turn
    assert first is not None
    return first, per_call


def rss(env: Env) -> int:
    assert env.daemon is not None
    return psutil.Process(env.daemon.pid).memory_info().rss


def memory(env: Env, runs: int) -> Memory:
    """The daemon's RSS idle, with ``runs`` sessions loaded, and once they were unloaded."""
    run([*MM, "daemon", "status"])
    idle = rss(env)
    for _ in range(runs):
        first_event(env)
    loaded = rss(env)
    deadline = time.monotonic() + SESSION_IDLE * 10 + 15
    while json.loads(run([*MM, "daemon", "status", "--json"]).stdout).get("sessions_loaded", 0):
        if time.monotonic() > deadline:
            raise BenchError("the daemon did not unload its idle sessions")
        time.sleep(SESSION_IDLE / 2)
    return Memory(idle, loaded, rss(env), runs)


def print_figure4(
    version: float,
    python: float,
    trio: float,
    cold: Rows,
    bash: tuple[Turn, list[float]],
    plain: tuple[Turn, list[float]],
    true_spawn: list[float],
    mem: Memory,
) -> None:
    heading("4. against the floor (issue 17's goals; medians)")
    mib = 1024 * 1024
    floor = statistics.median(true_spawn)
    rows = []
    for label, (turn, cpu) in (
        ("bash `true`, checkpoint and sandbox on", bash),
        ("bash `true`, --sandbox off, no checkpoint", plain),
    ):
        overhead = turn.rows["overhead"]
        rows += [
            (
                f"harness per call: {label}",
                f"{ms(statistics.median(overhead)):.2f} ms, p90 {ms(p90(overhead)):.2f}",
                f"{statistics.median(overhead) / floor:.1f}x `true` by subprocess.run",
                "≤ 3 ms, p90 ≤ 6",
            ),
            (
                f"  daemon CPU per call ({len(cpu)} turns pooled)",
                f"{ms(statistics.fmean(cpu)):.2f} ms",
                f"turns {ms(min(cpu)):.2f}–{ms(max(cpu)):.2f} ms",
                "≤ 1.5 ms",
            ),
        ]
    rows += [
        ("floor: `true` spawned by subprocess.run", f"{ms(floor):.2f} ms", "", ""),
        ("mm --version", f"{ms(version):.1f} ms", f"{version / python:.1f}x python -c pass", "≤ 2x"),
        (
            "mm -p, no daemon: spawn → model request",
            f"{ms(statistics.median(r[1] for r in cold)):.0f} ms",
            f"{statistics.median(r[1] for r in cold) / (python + trio):.1f}x the floor below",
            "≤ 300 ms",
        ),
        (
            "  floor: python -c pass, then python -c 'import trio'",
            f"{ms(python + trio):.0f} ms",
            "the client's interpreter, the daemon's",
            "",
        ),
        ("daemon RSS idle", f"{mem.idle / mib:.1f} MiB", "", "≤ 30 MiB"),
        (
            f"  with {mem.sessions} sessions loaded / all unloaded",
            f"{mem.loaded / mib:.1f} / {mem.unloaded / mib:.1f} MiB",
            f"{(mem.loaded - mem.idle) / mem.sessions / 1024:+.0f} kB a session",
            "unloaded when idle",
        ),
    ]
    print(f"  {'figure':<58}{'measured':<24}{'ratio':<34}goal")
    for label, value, ratio, goal in rows:
        print(f"  {label:<58}{value:<24}{ratio:<34}{goal}")


# ---------------------------------------------------------------- main


def bytecode_cached() -> bool:
    """Whether processes here find or write compiled bytecode for mm's own modules."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE"):
        return True
    spec = importlib.util.find_spec("mmd")
    return spec is None or spec.origin is None or (Path(spec.origin).parent / "__pycache__").exists()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per timed figure (default 20)")
    parser.add_argument(
        "--cold-runs", type=int, help="mm -p runs with no daemon running (default: runs / 4, at least 2)"
    )
    parser.add_argument(
        "--tool-calls", type=int, default=40, help="tool calls in figure 3's turns (default 40)"
    )
    parser.add_argument(
        "--cpu-turns",
        type=int,
        default=5,
        help="turns whose daemon CPU is pooled for figure 4's CPU per call (default 5)",
    )
    parser.add_argument(
        "--pyc-cache",
        action="store_true",
        help="let every process cache bytecode (in the private tree), even under PYTHONDONTWRITEBYTECODE",
    )
    args = parser.parse_args(argv)
    runs = max(1, args.runs)
    cold = args.cold_runs if args.cold_runs is not None else max(2, runs // 4)
    calls = max(1, args.tool_calls)
    cpu_turns = max(1, args.cpu_turns)

    def terminated(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminated)
    small = "small.txt"
    # One answer for the module check, two warm-ups, the warm and cold runs, the memory runs, two to spare.
    texts = [{"text": "hello"}] * (1 + 2 + runs + cold + runs + 2)
    env = Env()
    try:
        if args.pyc_cache:
            os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
            os.environ["PYTHONPYCACHEPREFIX"] = str(env.home / "pycache")
        (env.work / small).write_text("".join(f"line {n}\n" for n in range(1, 11)))
        env.start_servers(
            {
                "chat": texts,
                # Each call differs (a repeat of a call that succeeded is not run again); one turn for
                # figure 3's timings, as many as --cpu-turns for the daemon's CPU in figure 4.
                "bash": bash_turns(calls, cpu_turns),
                # bash again, with no undo checkpoint and --sandbox off: the harness alone.
                "plain": bash_turns(calls, cpu_turns),
                "read": [
                    {"tool_calls": [{"name": "read_file", "arguments": {"path": small, "limit": 100 + i}}]}
                    for i in range(calls)
                ]
                + [{"text": "done"}],
            },
            default="chat",
        )
        print(
            f"mm client bench: python {sys.version.split()[0]} at {PY}; private home {env.home}", flush=True
        )
        if not bytecode_cached():
            print(
                "note: PYTHONDONTWRITEBYTECODE is set and mm's sources have no __pycache__, so every process "
                "compiles the mm modules it imports; --pyc-cache measures with a bytecode cache"
            )
        version = figure1(runs)
        env.start_daemon()
        check_modules(env)
        warm = figure2_warm(env, runs)
        env.stop_daemon()
        wait_daemon_gone(env)
        cold_rows = figure2_cold(env, cold)
        print_figure2(warm, cold_rows, version)
        env.start_daemon()
        mem = memory(env, runs)
        bash, cpu = cpu_of_turns(env, "bash", calls, cpu_turns)
        read = tool_turn(env, "read", calls)
        env.set_daemon_option("snapshot_max_files", 0)  # checkpoints off (config.yaml is read per prompt)
        plain, plain_cpu = cpu_of_turns(env, "plain", calls, cpu_turns, ["--sandbox", "off"])
        bare = [wall(["bash", "-c", "true"]) for _ in range(calls)]
        true_spawn = [wall(["true"]) for _ in range(max(calls, 20))]
        print_figure3(calls, bash, read, small, bare)
        python = statistics.median(wall([PY, "-c", "pass"]) for _ in range(runs))
        # A cold `mm -p` starts two interpreters, the client's and the daemon's, and the daemon cannot
        # serve before trio is imported: that is its floor.
        trio = statistics.median(wall([PY, "-c", "import trio"]) for _ in range(runs))
        print_figure4(version, python, trio, cold_rows, (bash, cpu), (plain, plain_cpu), true_spawn, mem)
    except KeyboardInterrupt:
        print("\ninterrupted; stopping what the bench started", file=sys.stderr)
        return 130
    except BenchError as exc:
        print(f"bench_client: {exc}", file=sys.stderr)
        return 1
    finally:
        env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
