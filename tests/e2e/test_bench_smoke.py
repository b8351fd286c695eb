"""Smoke tests of the benches under bench/: they run end to end and print every figure (no timings checked)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from ..paths import ROOT


def bench(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """bench/<name> run to its end with *args* (no input, output captured); it must exit 0."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / name), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


HEADINGS = (
    "== 1. client cold start",
    "== 2. mm -p to the first event",
    "== 3. harness overhead of one tool call",
)


def test_bench_client_runs_and_prints_each_figure():
    done = bench(
        "bench_client.py", "--runs", "2", "--cold-runs", "1", "--tool-calls", "3", "--cpu-turns", "1"
    )
    for heading in HEADINGS:
        assert heading in done.stdout, done.stdout


def test_bench_load_runs_every_session_and_prints_each_figure():
    done = bench("bench_load.py", "--sessions", "5", "--warm-up", "1")
    for heading in ("== 1. 5 mm -p at once", "== 2. the daemon", "== 3. the store, per session"):
        assert heading in done.stdout, done.stdout
    assert "completed: 5/5" in done.stdout


def test_bench_sandbox_runs_and_prints_each_figure():
    from mmd.sandbox import support

    if not support().available:
        return  # it exits saying why: nothing to measure without a kernel sandbox
    done = bench("bench_sandbox.py", "--runs", "2")
    for line in ("unconfined", "confined, real project", "hard-link walk", "an exec shim", "preexec_fn"):
        assert line in done.stdout, done.stdout


def test_bench_calls_counts_every_stage_in_both_modes():
    done = bench("bench_calls.py", "--turns", "1", "--tool-calls", "3")
    for line in (
        "default prompt",
        "--sandbox off",
        "supervisor: spawn",
        "model step",
        "passes of the event loop",
    ):
        assert line in done.stdout, done.stdout


def test_bench_cpu_pairs_two_trees_round_by_round():
    # Paired against this same checkout: the path that runs another tree's daemon is exercised.
    done = bench("bench_cpu.py", "--against", str(ROOT), "--rounds", "1", "--turns", "1", "--tool-calls", "3")
    for line in ("floor: `true` by subprocess.run", "this tree", "against", "round by round", "marginal"):
        assert line in done.stdout, done.stdout
    # Each per-call row ends with its marginal figure: the turn's CPU less the bare prompt's that followed it.
    rows = [line.split() for line in done.stdout.splitlines() if line.strip().startswith("this tree  ")]
    assert len(rows) == 3, done.stdout
    for row in rows[:2]:
        assert len(row) == 8, row  # "this tree", five figures, the marginal one
        float(row[-1])
    assert len(rows[2]) == 7, rows[2]  # per prompt: no marginal figure


@pytest.mark.skipif(
    shutil.which("valgrind") is None, reason="valgrind is not installed (.ci/run installs it)"
)
@pytest.mark.parametrize(
    "args", [("--turns", "1", "--tool-calls", "3"), ("--prompts", "2")], ids=["calls", "prompts"]
)
def test_bench_instructions_counts_a_daemon_under_callgrind(args):
    done = bench("bench_instructions.py", *args)
    [row] = [line.split() for line in done.stdout.splitlines() if line.strip().startswith("this tree")]
    assert row[-1] == "M" and float(row[-2]) > 0.1, done.stdout  # millions of instructions a call or prompt
    assert ("per prompt" in done.stdout) == (args[0] == "--prompts"), done.stdout
