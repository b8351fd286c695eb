"""What the benchmarks share: a daemon of their own on a private socket, started and waited for."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
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


def start_mmd(sock: Path, home: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start mmd as our own child on *sock* (in its own session) and return once it answers.

    Errors: BenchError when it exits first or does not answer within 20 s.
    """
    daemon = subprocess.Popen(
        [PY, "-m", "mmd", "--socket", str(sock)],
        env=env,
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
