"""A full disk: what a command the model runs can do to the disk that holds mm's store and spill files.

A model may print without end or write a file until the disk is full (by mistake, or told to by a file it
read). Until 2026-12-05 the first ended the turn as an internal error once the spill met the full disk, and
the second stopped the daemon, every session in it with the one that filled the disk: the turn's end could
not be committed, and the error left the turn's task. Now no spill takes the disk's last tenth (at most
1 GiB: mmd/procs/spill.py), a spill that cannot be written is given up and the model told why, and a store
that cannot be written ends the turn with what to do, while the daemon serves on and saves the turn's end
once it can (mmd/turn/session.py, settle).

Each case puts the state folder (and, where it says so, the project) on a small tmpfs: root only, skipped
elsewhere (tests/disks.py).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ...disks import fill, free_bytes, small_disk
from ..conftest import run_mm, spawn_mm, start_mmd, stop_daemon
from .raw_client import wait_until
from .serves import assert_daemon_serves

DISK = "8m"
RESERVE = 8 * 1024 * 1024 // 10  # a tenth of the disk: the spill's reserve (spill.keep_free)


def bash(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}


@pytest.fixture
def disk(mm_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An 8 MiB disk of its own holding the state folder (``disk / "state"``: the store, spills, snapshots)."""
    with small_disk(mm_home / "disk", DISK) as folder:
        state = folder / "state"
        state.mkdir(mode=0o700)
        monkeypatch.setenv("XDG_STATE_HOME", str(state))
        yield folder


def stored(state: Path) -> tuple[list[tuple[int, str, dict[str, Any]]], list[dict[str, Any]]]:
    """The events (seq, kind, data) and the messages of the store's one session, read by another connection."""
    db = sqlite3.connect(state / "mm" / "mm.db")
    try:
        events = [
            (seq, kind, msgspec.msgpack.decode(data))
            for seq, kind, data in db.execute("SELECT seq, kind, data FROM events ORDER BY seq")
        ]
        messages = [
            msgspec.msgpack.decode(d) for (d,) in db.execute("SELECT data FROM messages ORDER BY idx")
        ]
    finally:
        db.close()
    return events, messages


def assert_history_whole(
    events: list[tuple[int, str, dict[str, Any]]], messages: list[dict[str, Any]]
) -> None:
    """Every turn that started ended, and every call the model made was answered: the session can go on."""
    kinds = [kind for _, kind, _ in events]
    starts = [i for i, kind in enumerate(kinds) if kind == "turn_started"]
    ends = [i for i, kind in enumerate(kinds) if kind == "turn_ended"]
    assert len(starts) == len(ends) and all(s < e for s, e in zip(starts, ends, strict=True))
    assert all(e < s for e, s in zip(ends, starts[1:], strict=False))
    assert [seq for seq, _, _ in events] == list(range(1, len(events) + 1))
    called = {c["id"] for m in messages for c in m.get("tool_calls") or ()}
    answered = {m.get("tool_call_id") for m in messages if m["role"] == "tool"}
    assert called <= answered


def test_a_command_that_fills_the_disk_mid_turn_ends_its_turn_and_the_daemon_serves_on(
    mm_home: Path, scripted: Any, disk: Path
) -> None:
    # The project and the store on one disk, as on most machines: the command fills it, then prints.
    state = disk / "state"
    work = disk / "work"
    work.mkdir()
    scripted([bash("head -c 20000000 /dev/zero > big; seq 1 100000"), {"text": "back again"}])
    daemon = start_mmd(mm_home)
    try:
        filled = run_mm("--yolo", "-p", "fill the disk", cwd=work)
        assert filled.returncode == 1
        store = state / "mm" / "mm.db"
        told = f"the store {store} could not be written: the disk is full; free space on it (`df -h "
        assert told in filled.stderr, filled.stderr
        assert "internal error" not in filled.stderr and daemon.poll() is None
        (work / "big").unlink()  # the person frees the space, as the message says
        resumed = run_mm("--yolo", "-c", "-p", "go on", cwd=work)
        assert resumed.returncode == 0, resumed.stderr
        assert "back again" in resumed.stdout and daemon.poll() is None
        events, messages = stored(state)
        assert_history_whole(events, messages)
        first_end = next(data for _, kind, data in events if kind == "turn_ended")
        assert first_end["status"] == "error" and told in first_end["error"]  # saved once it could be
        assert_daemon_serves(mm_home)
    finally:
        stop_daemon(daemon)


def test_output_that_would_fill_the_disk_stops_at_its_reserve_and_the_call_goes_on(
    mm_home: Path, scripted: Any, disk: Path
) -> None:
    state = disk / "state"
    scripted([bash("head -c 30000000 /dev/zero | tr '\\0' y | fold -w 99"), {"text": "printed"}])
    done = run_mm("--yolo", "-p", "print a lot", cwd=mm_home / "work")
    assert done.returncode == 0, done.stderr
    assert "printed" in done.stdout
    assert free_bytes(disk) >= RESERVE
    _, messages = stored(state)
    [result] = [m["content"] for m in messages if m["role"] == "tool"]
    assert f"the whole output was not kept (the disk would keep less than {RESERVE:,} bytes free)" in result
    assert result.endswith("[exit code 0]")
    assert not list((state / "mm" / "sessions").glob("*/output-*.log"))  # no part left to mislead


def test_a_daemon_started_on_a_full_disk_serves_and_closes_the_turn_it_found_open_once_it_can(
    mm_home: Path, scripted: Any, disk: Path
) -> None:
    state = disk / "state"
    work = mm_home / "work"
    scripted([bash("sleep 60"), {"text": "resumed"}])
    first = start_mmd(mm_home)
    turn = spawn_mm("--yolo", "-p", "wait", cwd=work)
    try:
        wait_until(lambda: any(kind == "tool_call" for _, kind, _ in stored(state)[0]), "the call ran")
        first.send_signal(signal.SIGKILL)  # the turn is left open in the store
        first.wait()
        turn.communicate(timeout=30)
    finally:
        if turn.poll() is None:
            turn.kill()
            turn.communicate()
    filler = fill(disk)
    daemon = start_mmd(mm_home)  # its start cannot close that turn: it serves all the same
    try:
        status = run_mm("daemon", "status", cwd=work)
        assert status.returncode == 0, status.stderr
        refused = run_mm("--yolo", "-c", "-p", "go on", cwd=work)
        assert refused.returncode == 1
        assert "could not be written: the disk is full" in refused.stderr, refused.stderr
        filler.unlink()
        resumed = run_mm("--yolo", "-c", "-p", "go on", cwd=work)
        assert resumed.returncode == 0, resumed.stderr
        assert "resumed" in resumed.stdout
        events, messages = stored(state)
        assert_history_whole(events, messages)
        ends = [data["status"] for _, kind, data in events if kind == "turn_ended"]
        assert ends == ["interrupted", "ok"]
        assert daemon.poll() is None
    finally:
        stop_daemon(daemon)


def test_a_full_disk_at_a_new_sessions_start_is_told_as_such(
    mm_home: Path, scripted: Any, disk: Path
) -> None:
    scripted([{"text": "fine"}])
    daemon = start_mmd(mm_home)
    try:
        # Its socket shows before its store is open: once it answers, the store is made.
        assert run_mm("daemon", "status").returncode == 0
        filler = fill(disk)
        refused = run_mm("-p", "hello", "--output-format", "json", cwd=mm_home / "work")
        assert refused.returncode == 1
        assert "could not be written: the disk is full" in refused.stderr, refused.stderr
        assert "internal error" not in refused.stderr and "inside the daemon" not in refused.stderr
        os.remove(filler)
        ok = run_mm("-p", "hello", "--output-format", "json", cwd=mm_home / "work")
        assert ok.returncode == 0, ok.stderr
        assert json.loads(ok.stdout)["result"] == "fine"
        assert daemon.poll() is None
    finally:
        stop_daemon(daemon)


def test_a_daemon_that_cannot_create_its_store_on_a_full_disk_is_told_as_such(
    mm_home: Path, scripted: Any, disk: Path
) -> None:
    # No store yet, and no room for one: the daemon the client starts stops, and cannot write why to its log
    # (on the same disk); the client names the full disk. Once there is room, the next command starts it.
    state = disk / "state"
    scripted([{"text": "fine"}])
    filler = fill(disk)
    refused = run_mm("-p", "hello", cwd=mm_home / "work")
    assert refused.returncode == 1
    folder = state / "mm"
    assert f"the disk that holds {folder} is full: free space on it (`df -h {folder}`)" in refused.stderr
    filler.unlink()
    ok = run_mm("-p", "hello", cwd=mm_home / "work")
    assert ok.returncode == 0, ok.stderr
    assert "fine" in ok.stdout


def test_no_snapshot_takes_the_disks_reserve_and_the_turn_says_so(
    mm_home: Path, scripted: Any, disk: Path
) -> None:
    # The undo snapshots store every file a step changed, on the state folder's disk: with less free there
    # than the spill files leave, none is taken (a model writing big files step after step would fill it).
    work = mm_home / "work"
    scripted([bash("echo x > a.txt"), {"text": "written"}])
    filler = fill(disk)
    os.truncate(filler, filler.stat().st_size - RESERVE // 2)  # room, but less than the reserve
    done = run_mm("--yolo", "--output-format", "events", "-p", "write", cwd=work)
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    [skipped] = [e["data"] for e in events if e["kind"] == "snapshot_skipped"]
    assert skipped["reason"] == "no_room" and "cannot be undone" in skipped["message"]
    assert "df -h" in skipped["message"]
    assert (work / "a.txt").read_text() == "x\n"  # the call ran all the same
    assert free_bytes(disk) > 0
