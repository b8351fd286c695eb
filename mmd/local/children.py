"""The setup's children — builds, downloads, self-test servers — each in its own process group, known before
an interrupt can end the setup, and stopped as whole groups when it is interrupted. Standard library only.

Ctrl-C, or SIGTERM (``install._interrupt`` makes it one), raises KeyboardInterrupt in the main thread
wherever it is: inside ``Popen``, or between it and the line that keeps the child, it used to leave a child
nobody would stop (a CI run saw a build step's ``sleep`` survive its SIGTERM; a self-test's llama-server
would hold gigabytes). :func:`start` holds those two signals in the main thread while the child starts and
is registered; one that came meanwhile stops the child's group, then raises. A worker thread's child started
after :func:`stop_all` began is stopped the same way.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from typing import Any

# The children started and not yet forgotten.
_running: set[subprocess.Popen[Any]] = set()
# Set by stop_all: the setup is being interrupted.
_stopping = False


def start(argv: list[str], **options: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(argv, start_new_session=True, **options)``, registered before an interrupt lands.

    Errors: what Popen raises; KeyboardInterrupt (the child's group already stopped).
    """
    main = threading.current_thread() is threading.main_thread()
    held: list[int] = []
    previous = {}
    if main:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda signum, frame: held.append(signum))
    try:
        proc = subprocess.Popen(argv, start_new_session=True, **options)
        _running.add(proc)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if held or (_stopping and not main):
        stop_group(proc)
        raise KeyboardInterrupt
    return proc


def stop_group(proc: subprocess.Popen[Any], grace: float = 3.0) -> None:
    """SIGTERM to the child's group, SIGKILL after *grace* seconds, reap; the child is forgotten."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    _running.discard(proc)


def stop_all() -> None:
    """Stop every child still running, each with its group (the setup is interrupted)."""
    global _stopping
    _stopping = True
    for proc in list(_running):
        stop_group(proc)
