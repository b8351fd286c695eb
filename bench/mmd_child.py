"""What the benchmarks share: a daemon of their own on a private socket, or a llama-server, started and
waited for."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

PY = sys.executable


class BenchError(RuntimeError):
    """A step of the bench failed; the message says which and shows the output."""


def answers(sock: Path) -> bool:
    """Whether something accepts connections on the Unix socket *sock*."""
    with contextlib.closing(socket.socket(socket.AF_UNIX)) as s:
        try:
            s.connect(str(sock))
        except OSError:
            return False
        return True


def start_mmd(
    sock: Path, home: Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start mmd as our own child on *sock* (in its own session, in *cwd*) and return once it answers.

    Errors: BenchError when it exits first or does not answer within 20 s.
    """
    daemon = subprocess.Popen(
        [PY, "-m", "mmd", "--socket", str(sock)],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 20
    while not answers(sock):
        if daemon.poll() is not None:
            raise BenchError(f"mmd exited with {daemon.returncode}; see {home}/state/mm/mmd.log")
        if time.monotonic() > deadline:
            raise BenchError(f"mmd did not answer on {sock} within 20 s")
        time.sleep(0.02)
    return daemon


@contextlib.contextmanager
def llama_server(model: str) -> Iterator[int]:
    """llama-server serving local/*model* as mmd starts it (mmd.local.selftest.server_argv); yields its port
    once /health answers, stops it after.

    Errors: SystemExit when the model is not set up; BenchError when the server exits or does not answer.
    """
    import httpx

    from mmd.local import catalog, selftest

    if not catalog.model_ready(model):
        sys.exit(f"local/{model} is not set up: {catalog.setup_hint(model)}")
    port = selftest.free_port()
    argv = selftest.server_argv(model, port)
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            if server.poll() is not None:
                raise BenchError(f"llama-server exited with {server.returncode}: {' '.join(argv)}")
            if time.monotonic() > deadline:
                raise BenchError(f"llama-server did not answer on port {port} within 180 s")
            time.sleep(0.2)
        yield port
    finally:
        server.terminate()
        server.wait(30)
