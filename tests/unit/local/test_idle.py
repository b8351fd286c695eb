"""When an idle llama-server is stopped (mmd/local/server.py): idle counts from the end of the last turn."""

from __future__ import annotations

import time
from pathlib import Path

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
        run = server._Running(url="http://127.0.0.1:1/v1", last_used=time.monotonic())
        with trio.CancelScope() as scope:
            await servers._idle(run, scope)
        stopped = time.monotonic()
    assert run.dead
    # A lower bound only (a loaded machine makes it later, never earlier): idle_timeout less a poll.
    assert stopped - turn_ends >= 0.6 - 0.05
