"""The log of a long-lived child (a stdio MCP server, llama-server), written by the daemon, bounded on disk.

A child given its log file as its stdout or stderr writes it for as long as it runs: a server that logs
without end fills the disk, from inside its sandbox too (a confinement to no writes at all still lets a
process write the descriptors it was given), and llama-server's lines of every request had it grow for as
long as mm was used. So the child's output is a pipe; the daemon drains it (:func:`drain`, never leaving it
to fill: a child that logs much is never stopped on a full pipe) into a :class:`BoundedLog`.

- :class:`BoundedLog` ``(path, banner)``: appends; past ``limit`` bytes (LOG_BYTES) the file becomes
  ``PATH.1`` (the one before goes) and a new one starts, at the start and while the child writes: twice the
  limit on disk at most. Private (0600), never through a symbolic link.
- :func:`drain` ``(stream, sink)``: a child's output stream read to its end into *sink*.
- :class:`Drains`: drains that can be waited for, so that the last lines of a child that died are in the
  file before it is quoted.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

log = logging.getLogger(__name__)

# Bytes a log file holds before it becomes PATH.1 and starts again.
LOG_BYTES = 8 * 1024 * 1024
# Bytes read at once from a child's output.
READ_SIZE = 65536


class BoundedLog:
    """A child's log: appended to, LOG_BYTES a file (``limit``), the one before kept as ``PATH.1``.

    A write that fails (a full disk) drops the chunk and is logged once. ``started``: the offset this run's
    bytes start at in the current file (0 once it was rotated), for quoting only this run's last lines.
    Errors (of the constructor): OSError when the file cannot be opened (a symbolic link is not followed).
    """

    def __init__(self, path: Path, banner: str, limit: int | None = None) -> None:
        self.path = path
        self.limit = LOG_BYTES if limit is None else limit
        self.started = 0
        self._fd = -1
        self._size = 0
        self._failed = False
        self._open(rotate=_size_of(path) > self.limit)
        self.write(banner.encode())
        self.started = self._size

    def _open(self, *, rotate: bool) -> None:
        if rotate:
            with contextlib.suppress(OSError):
                os.replace(self.path, self.path.with_name(self.path.name + ".1"))
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        self._fd = os.open(self.path, flags, 0o600)  # private, as every mm log
        self._size = os.fstat(self._fd).st_size

    def write(self, data: bytes) -> None:
        try:
            if self._size + len(data) > self.limit and self._size:
                os.close(self._fd)
                self._fd = -1
                self._open(rotate=True)
                self.started = 0
            os.write(self._fd, data)
            self._size += len(data)
        except OSError as exc:
            if not self._failed:
                self._failed = True
                log.warning("cannot write the log %s (%s): a child's output is dropped", self.path, exc)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> BoundedLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


async def drain(stream: Any, sink: Callable[[bytes], None]) -> None:
    """*stream* (a child's stdout or stderr pipe) read to its end, each chunk handed to *sink*."""
    with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError, OSError):
        while chunk := await stream.receive_some(READ_SIZE):
            sink(chunk)


class Drains:
    """Drains of a child's streams into one sink, started in *nursery*; :meth:`wait` until all reached their
    end (the child and whatever held its pipes exited)."""

    def __init__(self, nursery: trio.Nursery, sink: Callable[[bytes], None], *streams: Any) -> None:
        self._left = len(streams)
        self._done = trio.Event()
        if not streams:
            self._done.set()
        for stream in streams:
            nursery.start_soon(self._drain, stream, sink)

    async def _drain(self, stream: Any, sink: Callable[[bytes], None]) -> None:
        try:
            await drain(stream, sink)
        finally:
            self._left -= 1
            if not self._left:
                self._done.set()

    async def wait(self, seconds: float) -> None:
        """Until every stream ended, *seconds* at most."""
        with trio.move_on_after(seconds):
            await self._done.wait()
