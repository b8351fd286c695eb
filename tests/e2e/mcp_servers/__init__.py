"""Real MCP servers for the tests (see seed_server.py) and helpers to read what they received.

env_server.py shows the environment a stdio server was started with (the secrets tests).
deep_server.py answers every call with one line nested deeper than mm reads (the nesting tests).
schema_server.py declares raw JSON Schemas (nested, draft-07, hostile), over stdio or SSE (test_mcp_claude.py).
big_server.py lists more tools, with longer descriptions, than any real server (the listing bound's test).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ...paths import ROOT

HERE = Path(__file__).resolve().parent
SEED = HERE / "seed_server.py"
BIG = HERE / "big_server.py"
# JSON-RPC methods that open a connection: the legacy handshake and the 2026 probe.
HANDSHAKES = ("initialize", "server/discover")
# Where .ci/run installs the third-party servers from npm.
NPM_BIN = ROOT / ".ci" / "npm" / "node_modules" / ".bin"


def records(log: Path) -> list[dict[str, Any]]:
    """Every line the seed servers wrote to *log*, in order."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def starts(log: Path) -> list[dict[str, Any]]:
    return [r for r in records(log) if r.get("event") == "start"]


def handshakes(log: Path) -> list[dict[str, Any]]:
    return [r for r in records(log) if r.get("method") in HANDSHAKES]


def calls(log: Path, tool: str | None = None) -> list[dict[str, Any]]:
    """The tool calls the server ran (what reached the tool itself), in order."""
    return [r for r in records(log) if "tool" in r and (tool is None or r["tool"] == tool)]


def wait_for_record(log: Path, match: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
    """Wait until a server wrote a record with the fields of *match*; a bound on a hang, not a timing."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for record in records(log):
            if all(record.get(k) == v for k, v in match.items()):
                return record
        time.sleep(0.02)
    raise AssertionError(f"no record {match} in {log} within {timeout} s: {records(log)}")


class HttpServer:
    """The seed server over streamable HTTP, as a process the test can kill and start again."""

    def __init__(self, log: Path, port: int = 0) -> None:
        self.log = log
        self.port = port
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> HttpServer:
        env = {**os.environ, "MM_MCP_LOG": str(self.log)}
        self.proc = subprocess.Popen(
            [sys.executable, str(SEED), "http", str(self.port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line.startswith("listening "), line
        self.url = line.split(" ", 1)[1]
        self.port = int(self.url.rsplit(":", 1)[1].split("/", 1)[0])
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()
            if self.proc.stdout is not None:
                self.proc.stdout.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
        self.kill()


def npm_server(name: str) -> str | None:
    """The path of a third-party server .ci/run installed from npm (or found on PATH), else None."""
    local = NPM_BIN / name
    if local.exists():
        return str(local)
    return shutil.which(name)
