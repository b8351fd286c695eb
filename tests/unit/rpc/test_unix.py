"""mmd/rpc/unix.py: a Unix socket bound and connected by a path of any length."""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

import pytest

from mmd.rpc import unix


def _long_folder(tmp_path: Path) -> Path:
    folder = tmp_path / ("d" * 120)
    folder.mkdir()
    return folder


def test_a_path_past_the_limit_is_bound_and_connected_through_its_folder(tmp_path):
    path = _long_folder(tmp_path) / "mmd.sock"
    assert len(os.fsencode(path)) > unix.MAX_PATH
    with contextlib.closing(socket.socket(socket.AF_UNIX)) as server:
        unix.bind(server, path)
        server.listen()
        assert path.is_socket()  # made where the long path says
        with contextlib.closing(socket.socket(socket.AF_UNIX)) as client:
            unix.connect(client, path)
            conn, _ = server.accept()
            conn.close()


def test_no_descriptor_is_left_open(tmp_path):
    path = _long_folder(tmp_path) / "mmd.sock"
    before = set(os.listdir("/proc/self/fd"))
    with contextlib.closing(socket.socket(socket.AF_UNIX)) as client, pytest.raises(FileNotFoundError):
        unix.connect(client, path)  # no socket there: as a connect by a short path says
    assert set(os.listdir("/proc/self/fd")) - before <= {str(client.fileno())}


def test_a_missing_folder_is_a_missing_file(tmp_path):
    with contextlib.closing(socket.socket(socket.AF_UNIX)) as client, pytest.raises(FileNotFoundError):
        unix.connect(client, tmp_path / ("d" * 120) / "mmd.sock")


def test_a_file_name_past_the_limit_says_what_to_do(tmp_path):
    path = tmp_path / ("s" * 110)
    with contextlib.closing(socket.socket(socket.AF_UNIX)) as sock, pytest.raises(unix.PathTooLong) as err:
        unix.bind(sock, path)
    said = str(err.value)
    assert f"the socket path {path} is {len(os.fsencode(path))} bytes, past the 107" in said
    assert "its file name alone (110 bytes) is too long" in said
    assert "set MM_SOCKET to a shorter path" in said


def test_a_short_path_is_used_as_it_is(tmp_path):
    path = tmp_path / "s.sock"
    with contextlib.closing(socket.socket(socket.AF_UNIX)) as sock:
        unix.bind(sock, path)
        assert sock.getsockname() == str(path)
