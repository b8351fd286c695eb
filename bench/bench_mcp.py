"""Connect time an MCP server costs, and what the daemon's warm connections save per prompt.

Run ``python bench/bench_mcp.py [--runs N]``. For the test seed server (tests/e2e/mcp_servers/
seed_server.py, written with the SDK's server side) over stdio and over streamable HTTP, it
times ``mm -p`` prompts whose turn makes one MCP call (a scripted model asks for ``status``):

- **cold**: every prompt uses a server configuration the daemon has not seen (an extra variable or
  header with the run's number), so every prompt connects: a new stdio process, a handshake,
  ``tools/list``;
- **warm**: every prompt uses the same configuration, so the daemon's shared connection is reused.

It prints the medians, the difference (the connect time a warm connection saves each prompt), the
connect times the daemon itself measured (``mm mcp list --json``: connect, handshake, tools/list),
and, from the server's own log, how many starts and handshakes the warm prompts caused (one each:
the first prompt's). One daemon serves every prompt, started before the first, so the SDK import
(once per daemon) is not counted in either column.

Everything runs in a private tree under /tmp with a scripted model; every process the bench starts
is stopped at the end, on error and on Ctrl-C too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.e2e.mcp_servers import SEED, HttpServer, handshakes, starts  # noqa: E402

PY = sys.executable
MM = [PY, "-m", "mm.cli"]
TIMEOUT = 120.0


class Home:
    """A private mm home with a scripted model server and one daemon; ``close`` stops everything."""

    def __init__(self, steps: list[dict[str, Any]]) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="mm-bench-mcp-", dir="/tmp"))
        self.env = dict(os.environ)
        for var, sub in (
            ("XDG_RUNTIME_DIR", "run"),
            ("XDG_STATE_HOME", "state"),
            ("XDG_CONFIG_HOME", "config"),
        ):
            (self.home / sub).mkdir(mode=0o700)
            self.env[var] = str(self.home / sub)
        self.env.pop("MM_SOCKET", None)
        self.log = self.home / "mcp.jsonl"
        self.env["MM_MCP_LOG"] = str(self.log)
        self.work = self.home / "work"
        self.work.mkdir()
        script = self.home / "script.json"
        script.write_text(json.dumps({"responses": steps}))
        self.http = HttpServer(self.log)
        self.model = subprocess.Popen(
            [PY, "-m", "mmd.models.scripted", str(script)], stdout=subprocess.PIPE, text=True, env=self.env
        )
        try:
            self._configure()
        except BaseException:
            self.close()
            raise

    def _configure(self) -> None:
        assert self.model.stdout is not None
        line = self.model.stdout.readline().strip()
        if not line.startswith("listening "):
            raise RuntimeError(f"the scripted model server did not start: {line!r}")
        config = self.home / "config" / "mm" / "config.yaml"
        config.parent.mkdir(parents=True)
        url = line.split(" ", 1)[1]
        config.write_text(
            yaml.safe_dump(
                {
                    "providers": {"script": {"kind": "openai", "base_url": f"{url}/v1"}},
                    "default_model": "script/scripted",
                }
            )
        )
        self.mm("daemon", "start")  # detached, with this environment; stopped by close()

    def mm(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*MM, *args], cwd=self.work, env=self.env, capture_output=True, text=True, timeout=TIMEOUT
        )
        if done.returncode != 0:
            raise RuntimeError(f"mm {' '.join(args)} failed ({done.returncode}): {done.stderr}")
        return done

    def prompt(self, server: dict[str, Any]) -> float:
        (self.work / "agent.yaml").write_text(yaml.safe_dump({"builtins": [], "mcp": {"seed": server}}))
        started = time.perf_counter()
        self.mm("--agent", "agent.yaml", "-p", "how is billing?")
        return time.perf_counter() - started

    def connect_times(self) -> list[float]:
        listed = json.loads(self.mm("mcp", "list", "--agent", "agent.yaml", "--json").stdout)
        return [s["connect_seconds"] for s in listed if s.get("connect_seconds") is not None]

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self.mm("daemon", "stop")
        self.http.stop()
        self.model.terminate()
        self.model.wait()
        if self.model.stdout is not None:
            self.model.stdout.close()
        shutil.rmtree(self.home, ignore_errors=True)


def stdio_server(run: int | None) -> dict[str, Any]:
    env = {"MM_MCP_LOG": "${MM_MCP_LOG}"}
    if run is not None:
        env["MM_BENCH_RUN"] = str(run)  # a new configuration: a new connection
    return {"command": PY, "args": [str(SEED), "stdio"], "env": env, "tools": {"include": ["status"]}}


def http_server(url: str, run: int | None) -> dict[str, Any]:
    headers = {} if run is None else {"X-Bench-Run": str(run)}
    return {"url": url, "headers": headers, "tools": {"include": ["status"]}}


def measure(home: Home, name: str, make: Any, runs: int) -> dict[str, Any]:
    before_starts, before_handshakes = len(starts(home.log)), len(handshakes(home.log))
    warm = [home.prompt(make(None)) for _ in range(runs + 1)][1:]  # the first one connects
    warm_starts = len(starts(home.log)) - before_starts
    warm_handshakes = len(handshakes(home.log)) - before_handshakes
    cold = []
    connects = []
    for run in range(runs):
        cold.append(home.prompt(make(run)))
        connects += home.connect_times()
    return {
        "transport": name,
        "cold": statistics.median(cold),
        "warm": statistics.median(warm),
        "saved": statistics.median(cold) - statistics.median(warm),
        "connect": statistics.median(connects),
        "warm_starts": warm_starts,
        "warm_handshakes": warm_handshakes,
        "prompts": runs + 1,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="prompts per column (default 5)")
    args = parser.parse_args()
    prompts = 2 * (2 * args.runs + 1)
    steps = [
        step
        for _ in range(prompts)
        for step in (
            {"tool_calls": [{"name": "status", "arguments": {"service": "billing"}}]},
            {"text": "up"},
        )
    ]
    home = Home(steps)
    try:
        url = home.http.start().url
        results = [
            measure(home, "stdio", stdio_server, args.runs),
            measure(home, "http", lambda run: http_server(url, run), args.runs),
        ]
    finally:
        home.close()
    print("== MCP connect time saved by the daemon's warm connections")
    print(f"   mm -p with one MCP call, median of {args.runs} prompts each; one daemon, SDK already loaded")
    for r in results:
        print(
            f"{r['transport']:<6} cold {r['cold']:.3f} s   warm {r['warm']:.3f} s   "
            f"saved {r['saved']:.3f} s per prompt"
        )
        print(
            f"       connect + handshake + tools/list as the daemon measured it: {r['connect']:.3f} s (median)"
        )
        print(
            f"       warm: {r['prompts']} prompts caused {r['warm_starts']} server start(s) and "
            f"{r['warm_handshakes']} handshake(s) (the first prompt's)"
        )
    with contextlib.suppress(psutil.Error):
        assert not psutil.Process().children(recursive=True), "a process of the bench is still running"


if __name__ == "__main__":
    main()
