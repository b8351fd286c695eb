"""The daemon drops sessions unused for ``daemon.session_idle`` seconds: in virtual time (``autojump_clock``).

A daemon object in process, with its store in tmp_path and no socket: its sweep runs in the
test's nursery while the clock jumps over the idle minutes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from mmd.server.daemon import Daemon
from mmd.store import Store


class Client:
    client = "test"
    peer_pid = 4242

    def __init__(self) -> None:
        self.subscriptions: dict[str, bool] = {}

    def notify(self, method: str, params: Any) -> None:
        pass

    def notify_each(self, method: str, each: list[Any]) -> None:
        pass


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[Daemon]:
    config = tmp_path / "config.yaml"
    config.write_text("daemon:\n  session_idle: 300\n")
    d = Daemon(
        methods={}, socket_path=tmp_path / "mmd.sock", state_dir=tmp_path / "state", config_path=config
    )
    (tmp_path / "state").mkdir()
    d.store = Store.open(d.store_path)
    yield d
    d.store.close()


def new_session(daemon: Daemon, cwd: Path) -> str:
    row = daemon.store.create_session(cwd=str(cwd), agent=None, model="test/scripted")
    daemon.session(row.id)  # loaded, as a prompt or a subscribe loads it
    return row.id


async def test_an_unused_session_is_dropped_after_session_idle_and_loaded_again(
    daemon: Daemon, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    sid = new_session(daemon, tmp_path)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(daemon._unload_idle_sessions)
        await trio.sleep(290)
        assert sid in daemon.sessions  # not yet: 300 s
        await trio.sleep(20)
        assert sid not in daemon.sessions
        nursery.cancel_scope.cancel()
    assert daemon.session(sid).id == sid  # everything it held is in the store


async def test_a_session_with_a_client_stays_and_its_idle_time_starts_when_the_client_leaves(
    daemon: Daemon, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    kept, dropped = new_session(daemon, tmp_path), new_session(daemon, tmp_path)
    client = Client()
    daemon.sessions[kept].subscribe(client, interactive=False)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(daemon._unload_idle_sessions)
        await trio.sleep(3600)
        assert kept in daemon.sessions and dropped not in daemon.sessions
        daemon.sessions[kept].unsubscribe(client)
        await trio.sleep(290)
        assert kept in daemon.sessions
        await trio.sleep(20)
        assert kept not in daemon.sessions
        nursery.cancel_scope.cancel()
