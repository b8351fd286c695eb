"""Smoke test of bench/bench_client.py: it runs end to end and prints every figure (no timings checked)."""

from __future__ import annotations

import subprocess
import sys

from .conftest import ROOT

HEADINGS = (
    "== 1. client cold start",
    "== 2. mm -p to the first event",
    "== 3. harness overhead of one tool call",
)


def test_bench_client_runs_and_prints_each_figure():
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "bench_client.py"),
            "--runs",
            "2",
            "--cold-runs",
            "1",
            "--tool-calls",
            "3",
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for heading in HEADINGS:
        assert heading in done.stdout, done.stdout
