"""Smoke test of bench/bench_mcp.py: it runs end to end and prints each figure (no timings checked)."""

from __future__ import annotations

import subprocess
import sys

from ..paths import ROOT


def test_bench_mcp_runs_and_prints_each_figure():
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_mcp.py"), "--runs", "1"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "== MCP connect time saved by the daemon's warm connections"
    for transport in ("stdio", "http"):
        assert any(line.startswith(f"{transport:<6} cold ") and "saved" in line for line in lines), (
            done.stdout
        )
    # The warm prompts (2 with --runs 1) reused the first prompt's connection: one handshake each.
    warm = [line for line in lines if line.strip().startswith("warm: ")]
    assert warm == [
        "       warm: 2 prompts caused 1 server start(s) and 1 handshake(s) (the first prompt's)",
        "       warm: 2 prompts caused 0 server start(s) and 1 handshake(s) (the first prompt's)",
    ]
