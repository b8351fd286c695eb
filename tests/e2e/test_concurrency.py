"""Many clients and commands at once on one daemon: what a second terminal, an editor or a script in a loop
does while a turn is being set up, runs, or the daemon stops (docs/protocol.md: session.cancel, daemon.stop,
busy). A turn's setup (its model, its MCP servers: seconds while a local model loads) is held open by a gate,
so each interleaving is the one a person hits, every time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from mmd import undo as checkpoints
from mmd.rpc import RPCError, request
from mmd.rpc.messages import Response
from mmd.server.daemon import Daemon

from .conftest import _default_sigint, socket_of
from .test_protocol import RawClient, code
from .test_protocol import live as live  # the fixture

# A bound on a hang, never a timing.
HANG = 30

WRITES = [
    {"tool_calls": [{"id": "c1", "name": "bash", "arguments": {"command": "echo ran > ran.txt"}}]},
    {"text": "done"},
]
# A command that ignores SIGTERM: a cancelled turn running it ends only at SIGKILL, after daemon.grace.
STUCK = {
    "tool_calls": [
        {"id": "s1", "name": "bash", "arguments": {"command": "trap '' TERM; echo ready > ready; sleep 30"}}
    ]
}


def hold_setup(daemon: Daemon) -> tuple[trio.Event, trio.Event]:
    """Hold every turn's setup until the second event is set; the first is set once one waits there."""
    entered, release = trio.Event(), trio.Event()
    real = daemon._setup

    async def held(resolved: Any, session: Any) -> Any:
        entered.set()
        await release.wait()
        return await real(resolved, session)

    daemon._setup = held  # type: ignore[method-assign]
    return entered, release


async def send_prompt(client: RawClient, work: Path) -> int:
    """Send a session.prompt that runs WRITES without asking; its answer is read later (answer): its msgid."""
    client.msgid += 1
    await client.send_raw(
        request(client.msgid, "session.prompt", {"prompt": "write", "cwd": str(work), "yolo": True})
    )
    return client.msgid


async def answer(client: RawClient, msgid: int) -> Response:
    while True:
        msg = await client.next()
        assert msg is not None, "the daemon closed the connection"
        if isinstance(msg, Response) and msg.msgid == msgid:
            return msg


async def test_a_cancel_while_the_turn_is_set_up_cancels_it(live, mm_home):
    # A Ctrl-C in another client (or the editor's cancel) while a local model loads: answered `false` and
    # lost, the turn then ran every call of it.
    daemon, use_script = live
    await use_script(WRITES)
    entered, release = hold_setup(daemon)
    work = mm_home / "work"
    prompter, other = await RawClient.open(socket_of(mm_home)), await RawClient.open(socket_of(mm_home))
    with trio.fail_after(HANG):
        msgid = await send_prompt(prompter, work)
        await entered.wait()
        [row] = (await other.call("session.list", {"cwd": str(work)}))["result"]["sessions"]
        assert row["running"] is True
        cancelled = await other.call("session.cancel", {"session_id": row["id"]})
        assert cancelled["result"] == {"cancelled": True}
        release.set()
        started = await answer(prompter, msgid)
        assert started.error is None
        events = await prompter.events_until("turn_ended")
    assert [e["kind"] for e in events] == ["turn_started", "turn_ended"]
    assert events[-1]["data"]["status"] == "cancelled"
    assert not (work / "ran.txt").exists()
    shown = (await other.call("session.show", {"session_id": row["id"]}))["result"]
    assert [m["role"] for m in shown["messages"]] == ["user"]  # the prompt is kept, as in any cancelled turn
    assert [t["status"] for t in shown["turns"]] == ["cancelled"]


async def stuck_turn(client: RawClient, work: Path) -> None:
    """Start a turn in *work* whose command ignores SIGTERM, and return once it runs: cancelled, it holds the
    daemon's turns open for the grace period (daemon.grace), the window in which a stop lets clients in."""
    work.mkdir()
    started = await client.call("session.prompt", {"prompt": "stuck", "cwd": str(work), "yolo": True})
    assert started["error"] is None
    while not (work / "ready").exists():
        await trio.sleep(0.01)


async def test_daemon_stop_while_a_turn_is_set_up_starts_no_turn(live, mm_home):
    # `mm daemon stop` while a script's `mm -p` was starting and another turn ran: the new turn started after
    # the stop, uncancelled, ran its calls and held the daemon up to its end.
    daemon, use_script = live
    await use_script([STUCK, *WRITES])
    work = mm_home / "work"
    stuck, prompter = await RawClient.open(socket_of(mm_home)), await RawClient.open(socket_of(mm_home))
    with trio.fail_after(HANG):
        await stuck_turn(stuck, work / "other")
        entered, release = hold_setup(daemon)
        msgid = await send_prompt(prompter, work)
        await entered.wait()
        daemon.request_stop("asked by the test")
        release.set()
        refused = await answer(prompter, msgid)
        await daemon.stopped.wait()
    assert refused.error is not None
    assert RPCError.from_wire(refused.error).code == "stopping"
    assert not (work / "ran.txt").exists()


async def test_a_prompt_while_the_daemon_stops_is_refused(live, mm_home):
    # A script's `mm -p` in a loop connects while the stop waits for the turns it cancelled.
    daemon, use_script = live
    await use_script([STUCK, *WRITES])
    work = mm_home / "work"
    stuck, client = await RawClient.open(socket_of(mm_home)), await RawClient.open(socket_of(mm_home))
    with trio.fail_after(HANG):
        await stuck_turn(stuck, work / "other")
        daemon.request_stop("asked by the test")
        refused = await client.call("session.prompt", {"prompt": "x", "cwd": str(work), "yolo": True})
        sessions = [row.cwd for row in daemon.store.list_sessions()]
        await daemon.stopped.wait()
    assert code(refused) == "stopping"
    assert sessions == [str(work / "other")]  # no empty session made for it
    assert not (work / "ran.txt").exists()


async def test_busy_says_what_the_session_is_busy_with(live, mm_home, monkeypatch: pytest.MonkeyPatch):
    # A prompt (or a second `mm undo`) during an undo was told the session "is running a turn" and to cancel
    # it; a cancel then did nothing (false), and nothing said why.
    _, use_script = live
    await use_script([{"text": "hi"}])
    client, other = await RawClient.open(socket_of(mm_home)), await RawClient.open(socket_of(mm_home))
    work = mm_home / "work"
    entered, release = trio.Event(), trio.Event()

    async def held_undo(*args: Any) -> Any:
        entered.set()
        await release.wait()
        raise checkpoints.UndoError("nothing_to_undo", "no step")

    monkeypatch.setattr(checkpoints, "undo", held_undo)
    with trio.fail_after(HANG):
        sid = (await client.call("session.prompt", {"prompt": "a", "cwd": str(work)}))["result"]["session_id"]
        await client.events_until("turn_ended")
        client.msgid += 1
        await client.send_raw(request(client.msgid, "session.undo", {"session_id": sid}))
        undoing = client.msgid
        await entered.wait()
        busy = [
            await other.call("session.undo", {"session_id": sid}),
            await other.call("session.prompt", {"prompt": "b", "cwd": str(work), "session_id": sid}),
            await other.call("session.compact", {"session_id": sid}),
        ]
        cancelled = await other.call("session.cancel", {"session_id": sid})
        release.set()
        await answer(client, undoing)
    for reply in busy:
        refusal = RPCError.from_wire(reply["error"])
        assert refusal.code == "busy"
        assert "undoing steps" in refusal.message and "running a turn" not in refusal.message
    assert cancelled["result"] == {"cancelled": False}


async def test_ctrl_c_of_mm_p_while_its_turn_starts_cancels_the_turn(live, mm_home):
    # Ctrl-C while `mm -p` waited for its turn to start (a local model loading) left at once, and the turn
    # then ran every call unseen: the person had said stop.
    daemon, use_script = live
    await use_script([{**WRITES[0], "delay": 5}, WRITES[1]])  # the cancel reaches the turn in its first step
    entered, release = hold_setup(daemon)
    work = mm_home / "work"
    watcher = await RawClient.open(socket_of(mm_home))
    argv = [sys.executable, "-m", "mm", "-p", "--yolo", "write"]
    mm = await trio.lowlevel.open_process(  # SIGINT as a terminal's: a suite run in the background ignores it
        argv,
        cwd=work,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=_default_sigint,
    )
    try:
        with trio.fail_after(HANG):
            await entered.wait()  # the client sent session.prompt and waits for its answer
            [row] = (await watcher.call("session.list", {"cwd": str(work)}))["result"]["sessions"]
            await watcher.call("session.subscribe", {"session_id": row["id"]})
            await _reading(mm.pid)  # not still between its send and its wait, as a loaded machine can hold it
            mm.send_signal(signal.SIGINT)
            said = b""
            while b"cancelling" not in said and (chunk := await mm.stderr.receive_some()):
                said += chunk  # the client took the Ctrl-C (or, before the fix, left)
            release.set()
            ended = (await watcher.events_until("turn_ended"))[-1]
            await mm.wait()
    finally:
        if mm.returncode is None:
            mm.kill()
            await mm.wait()
        await mm.stderr.aclose()
    assert ended["data"]["status"] == "cancelled"
    assert not (work / "ran.txt").exists()
    assert mm.returncode == 130


# The number /proc/PID/syscall shows for recvfrom (Python's socket.recv), by machine.
RECVFROM = {"x86_64": "45", "aarch64": "207"}


async def _reading(pid: int) -> None:
    """Wait until process *pid* waits in a socket read: `mm -p` waiting for session.prompt's answer."""
    number = RECVFROM.get(os.uname().machine)
    if number is None:  # another machine: the read is not told apart
        return
    while True:
        with open(f"/proc/{pid}/syscall") as f:
            if f.read().split(" ", 1)[0] == number:
                return
        await trio.sleep(0.01)
