"""When an idle llama-server is stopped (mmd/local/server.py): idle counts from the end of the last turn."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio

from mmd.local import server


async def test_idle_counts_from_the_end_of_the_last_turn(tmp_path: Path, monkeypatch) -> None:
    # Looked at only every idle_timeout, a turn that ended just before a look had its server stopped at
    # once: the next prompt paid a model load. Now the look comes every BUSY_POLL while a turn runs.
    monkeypatch.setattr(server, "BUSY_POLL", 0.05, raising=False)
    turn_ends = time.monotonic() + 1.0
    async with trio.open_nursery() as nursery:
        servers = server.LocalServers(
            nursery, tmp_path, idle_timeout=0.6, busy=lambda: time.monotonic() < turn_ends
        )
        run = server._Running(url="http://127.0.0.1:1/v1", key="k", last_used=time.monotonic())
        with trio.CancelScope() as scope:
            await servers._idle(run, scope)
        stopped = time.monotonic()
    assert run.dead
    # A lower bound only (a loaded machine makes it later, never earlier): idle_timeout less a poll.
    assert stopped - turn_ends >= 0.6 - 0.05


async def test_a_server_whose_log_cannot_be_written_is_not_restarted_and_the_daemon_goes_on(
    tmp_path: Path, monkeypatch
) -> None:
    # A full disk (here: a file where the log folder would be) once raised OSError out of a restart, a task
    # of the daemon's nursery: the daemon stopped with every session in it.
    monkeypatch.setattr(server, "_check_servable", lambda name: None)
    monkeypatch.setattr(server.selftest, "server_argv", lambda name, port: ["true"])
    monkeypatch.setattr(server, "RESTART_DELAY", 0)
    blocked = tmp_path / "logs"
    blocked.write_text("not a folder")
    async with trio.open_nursery() as nursery:
        servers = server.LocalServers(nursery, blocked / "local", busy=lambda: False)
        with pytest.raises(server.LocalServerError, match=r"cannot write the log .*llama-server-tiny\.log"):
            await nursery.start(servers._serve, "tiny")
        await servers._restart("tiny", 1, "k")  # returns: logged, not raised into the nursery
    assert "tiny" not in servers.running


async def test_a_restart_whose_server_dies_while_loading_is_given_up_and_the_daemon_goes_on(
    tmp_path: Path, monkeypatch
) -> None:
    # Found by an audit of the daemon's long-lived tasks: the failure was raised within the pumps' nursery,
    # which trio wraps in an ExceptionGroup; the restart caught LocalServerError only, and the group left
    # its task into the daemon's nursery. A prompt's start got an internal error for it, not model_error.
    monkeypatch.setattr(server, "_check_servable", lambda name: None)
    monkeypatch.setattr(server.selftest, "server_argv", lambda name, port: ["sh", "-c", "exit 3"])
    monkeypatch.setattr(server, "RESTART_DELAY", 0)
    async with trio.open_nursery() as nursery:
        servers = server.LocalServers(nursery, tmp_path, busy=lambda: False)
        with pytest.raises(server.LocalServerError, match="exited with status 3 while loading"):
            await nursery.start(servers._serve, "tiny")  # as callers catch it: not in a group
        await servers._restart("tiny", 1, "k")  # returns: logged, not raised into the nursery
    assert "tiny" not in servers.running
