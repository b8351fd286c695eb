"""Binding and connecting a Unix socket by a path of any length.

A Unix socket's address holds at most :data:`MAX_PATH` bytes of path (``sun_path`` is 108 bytes with its
NUL). A long ``$XDG_RUNTIME_DIR`` or ``$MM_SOCKET`` (a CI workspace, a test's temp folder, a home folder deep
in a network mount) makes mm's socket path longer, and ``bind``/``connect`` refuse it ("AF_UNIX path too
long"). Past the limit the socket is reached through its folder, opened as a file descriptor:
``/proc/self/fd/N/mmd.sock`` names the same file in about 25 bytes, for this process alone, and the
socket file is made and found where the long path says. Where that cannot be done either (no ``/proc``,
a file name itself past the limit), :class:`PathTooLong` says so and what to do.

The daemon binds, and every client connects, through these two functions (the Neovim client does the
same in Lua: clients/nvim/lua/mm/init.lua). Only the standard library is used: the thin client imports it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path

# The longest path a Unix socket's address holds on Linux: sun_path's 108 bytes, less the closing NUL.
MAX_PATH = 107


class PathTooLong(OSError):
    """The socket's path is past :data:`MAX_PATH` and cannot be reached through its folder either; the
    message names the path, its length, the limit and what to do."""


def bind(sock: socket.socket, path: Path) -> None:
    """``sock.bind`` to *path*, whatever its length. Errors: PathTooLong; the OSError of bind."""
    _through_folder(sock.bind, path)


def connect(sock: socket.socket, path: Path) -> None:
    """``sock.connect`` to *path*, whatever its length. Errors: PathTooLong; the OSError of connect
    (FileNotFoundError also when the socket's folder does not exist)."""
    _through_folder(sock.connect, path)


def _through_folder(call: Callable[[str | bytes], None], path: Path) -> None:
    encoded = os.fsencode(path)
    if len(encoded) <= MAX_PATH:
        call(encoded)
        return
    name = os.fsencode(path.name)
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        short = b"/proc/self/fd/%d/%s" % (fd, name)
        if len(short) > MAX_PATH:
            raise PathTooLong(_too_long(encoded, f"its file name alone ({len(name)} bytes) is too long"))
        if not os.path.isdir(b"/proc/self/fd/%d" % fd):
            raise PathTooLong(_too_long(encoded, "/proc is not mounted here to reach it through its folder"))
        call(short)
    finally:
        os.close(fd)


def _too_long(path: bytes, why: str) -> str:
    shown = os.fsdecode(path)
    return (
        f"the socket path {shown} is {len(path)} bytes, past the {MAX_PATH} a Unix socket's address may hold, "
        f"and {why}: set MM_SOCKET to a shorter path (a file in a folder only you can write, such as "
        f"/tmp/mm-{os.getuid()}/mmd.sock), or XDG_RUNTIME_DIR to a shorter folder"
    )
