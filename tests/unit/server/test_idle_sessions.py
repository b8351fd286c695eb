"""The daemon drops sessions unused for ``daemon.session_idle`` seconds: in virtual time (``autojump_clock``).

A daemon object in process, with its store in tmp_path and no socket: its sweep runs in the
test's nursery while the clock jumps over the idle minutes. And what keeps a session loaded at all: what
only reads the store (show, diff, stats) loads none, and one client follows at most MAX_SUBSCRIPTIONS.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from mmd.api import session as session_api
from mmd.api import tools as tools_api
from mmd.rpc import RPCError
from mmd.rpc.methods import Diff, SessionRef, ShowSession, Stats, Subscribe
from mmd.server import daemon as daemon_module
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


@contextlib.contextmanager
def stored_daemon(tmp_path: Path, config: str) -> Iterator[Daemon]:
    """A Daemon with its store open in *tmp_path*, not serving, its config.yaml holding *config*."""
    (tmp_path / "config.yaml").write_text(config)
    d = Daemon(
        methods={},
        socket_path=tmp_path / "mmd.sock",
        state_dir=tmp_path / "state",
        config_path=tmp_path / "config.yaml",
    )
    (tmp_path / "state").mkdir()
    d.store = Store.open(d.store_path)
    try:
        yield d
    finally:
        d.store.close()


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[Daemon]:
    with stored_daemon(tmp_path, "daemon:\n  session_idle: 300\n") as d:
        yield d


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


async def test_show_diff_and_stats_read_the_store_without_loading_the_session(
    daemon: Daemon, tmp_path: Path
) -> None:
    # A client that asked to see every session once loaded them all, each held (its messages in memory)
    # until idle for daemon.session_idle.
    rows = [
        daemon.store.create_session(cwd=str(tmp_path), agent=None, model="test/scripted") for _ in range(3)
    ]
    for row in rows:
        shown = await session_api.show(daemon, Client(), ShowSession(session_id=row.id[:8], events=True))
        assert shown.session.id == row.id and shown.session.running is False
        with pytest.raises(RPCError, match="has no recorded step"):  # no write ran: nothing to show
            await session_api.diff(daemon, Client(), Diff(session_id=row.id))
        await tools_api.stats(daemon, Client(), Stats(session_id=row.id))
    assert daemon.sessions == {}
    loaded = daemon.session(rows[0].id)
    loaded.start()  # a loaded one answers from memory: its turn runs
    assert (await session_api.show(daemon, Client(), ShowSession(session_id=rows[0].id))).session.running


async def test_one_client_follows_at_most_max_subscriptions_sessions(
    daemon: Daemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session_api, "MAX_SUBSCRIPTIONS", 3)
    ids = [daemon.store.create_session(cwd=str(tmp_path), agent=None, model="m").id for _ in range(4)]
    client = Client()
    for sid in ids[:3]:
        await session_api.subscribe(daemon, client, Subscribe(session_id=sid))
    await session_api.subscribe(daemon, client, Subscribe(session_id=ids[0]))  # again: not one more
    with pytest.raises(RPCError) as refused:
        await session_api.subscribe(daemon, client, Subscribe(session_id=ids[3]))
    assert refused.value.code == "too_many_subscriptions"
    assert refused.value.message.startswith("this client follows 3 sessions, the most one client may")
    assert ids[3] not in daemon.sessions  # refused before it was loaded
    await session_api.unsubscribe(daemon, client, SessionRef(session_id=ids[1]))
    await session_api.subscribe(daemon, client, Subscribe(session_id=ids[3]))
    assert sorted(client.subscriptions) == sorted([ids[0], ids[2], ids[3]])


async def test_the_sessions_confined_clients_started_are_remembered_within_a_bound(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sandboxed command may run `mm -p` in a loop: each session it started was remembered for the
    # daemon's life. The last CONFINED_SESSIONS are; one forgotten is only refused to confined clients.
    from mmd.server import daemon as module

    monkeypatch.setattr(module, "CONFINED_SESSIONS", 100)
    for n in range(250):
        daemon.remember_confined(f"s{n}")
    assert len(daemon.confined_sessions) == 100 and "s249" in daemon.confined_sessions
    assert "s0" not in daemon.confined_sessions


async def test_a_config_folder_that_turned_unreadable_keeps_the_last_idle_time(
    daemon: Daemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by an audit of the daemon's long-lived tasks: a PermissionError from reading config.yaml again
    # (its folder made unsearchable while the daemon runs) left the sweep's task, a task of the daemon's
    # nursery: the daemon stopped. (As root, permissions cannot make it: the read is made to fail.)
    assert daemon._session_idle() == 300

    def unreadable(path: Path) -> Any:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(daemon_module, "load_user_config", unreadable)
    (tmp_path / "config.yaml").write_text("daemon:\n  session_idle: 5\n")
    os.utime(tmp_path / "config.yaml", (1, 1))  # a new mtime, whatever the clock's tick: read again
    assert daemon._session_idle() == 300  # the last value, logged


async def test_a_look_for_orphans_that_fails_is_made_again_later(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    # The same audit: where the kernel keeps no children lists, reaping lists /proc, and an EMFILE there left
    # the reaper's task, a task of the daemon's nursery.
    looks: list[float] = []

    def out_of_descriptors() -> None:
        looks.append(trio.current_time())
        if len(looks) == 1:
            raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(daemon_module.procs, "reap_orphans", out_of_descriptors)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(daemon._reap_orphans)
        await trio.sleep(daemon_module.REAP_INTERVAL * 3 + 1)
        nursery.cancel_scope.cancel()
    assert len(looks) == 3  # it went on after the failed one
