"""Protocol edge cases against a real daemon over its real socket: pipelined frames, hang-ups, kill -9.

A client may write its handshake and its requests in one ``send``; it may hang up the moment its
prompt is written; the daemon may be killed in the middle of a turn. None of these may lose a request,
a turn or the history of a session.
"""

from __future__ import annotations

import contextlib
import json

import psutil

from mmd.rpc import PROTOCOL_VERSION, RPCError

from ..conftest import name_of, run_mm, spawn_mm, start_mmd, stop_daemon
from .raw_client import Raw, scripted_agent, wait_until
from .serves import assert_daemon_serves

HANDSHAKE = {"protocol": PROTOCOL_VERSION, "client": "adversarial"}
# Connections that each write a handshake and two requests in one send.
PIPELINED_TRIES = 300
# Prompts written right before a hang-up.
HANG_UPS = 12


def bash(command: str) -> dict:
    return {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}


def test_requests_written_with_the_handshake_are_all_served(mm_home, daemon):
    for attempt in range(PIPELINED_TRIES):
        with Raw(mm_home, handshake=False) as raw:
            data = raw.frame("handshake", HANDSHAKE)
            data += raw.frame("daemon.status")
            data += raw.frame("session.list", {"limit": 1})
            raw.sock.sendall(data)  # one send: the daemon reads all three frames at once
            for msgid in (1, 2, 3):
                resp = raw.response(msgid)
                assert resp.error is None, f"try {attempt}, request {msgid}: {resp.error}"
    assert_daemon_serves(mm_home)


def test_a_request_written_before_the_handshake_is_still_refused(mm_home, daemon):
    # Order of receipt decides: the handshake that follows it in the same send does not count for it.
    with Raw(mm_home, handshake=False) as raw:
        raw.sock.sendall(raw.frame("daemon.status") + raw.frame("handshake", HANDSHAKE))
        early, handshake = raw.response(1), raw.response(2)
        assert RPCError.from_wire(early.error).code == "handshake_required"
        assert handshake.error is None
    assert_daemon_serves(mm_home)


def test_a_prompt_followed_by_a_hang_up_runs_its_turn_to_the_end(mm_home, daemon):
    work = mm_home / "hang-up"
    agent = scripted_agent(work, [bash("echo the tool ran"), {"text": "done"}])
    prompt = {"prompt": "run it", "cwd": str(work), "agent": str(agent), "yolo": True}
    for n in range(HANG_UPS):
        if n % 2:  # handshake and prompt in one send, then gone
            raw = Raw(mm_home, handshake=False)
            raw.sock.sendall(raw.frame("handshake", HANDSHAKE) + raw.frame("session.prompt", prompt))
        else:  # handshake answered, then the prompt, then gone
            raw = Raw(mm_home)
            raw.sock.sendall(raw.frame("session.prompt", prompt))
        raw.close()

    with Raw(mm_home) as raw:

        def all_ended() -> list[dict] | None:
            rows = raw.call("session.list", {"cwd": str(work), "limit": 100})["sessions"]
            done = len(rows) == HANG_UPS and all(r["last_status"] and not r["running"] for r in rows)
            return rows if done else None

        rows = wait_until(all_ended, f"the {HANG_UPS} prompts' turns end")
        for row in rows:
            assert row["last_status"] == "ok", row
            shown = raw.call("session.show", {"session_id": row["id"], "events": True})
            kinds = [e["kind"] for e in shown["events"]]
            assert kinds[0] == "turn_started" and kinds[-1] == "turn_ended", kinds
            [result] = [e["data"] for e in shown["events"] if e["kind"] == "tool_result"]
            assert result["ok"] and "the tool ran" in result["content"]
            assert [m["role"] for m in shown["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert_daemon_serves(mm_home)


def test_a_daemon_killed_mid_turn_leaves_the_turn_closed_as_interrupted(mm_home):
    work = mm_home / "killed"
    agent = scripted_agent(work, [bash("sleep 60"), {"text": "never reached"}])
    proc = start_mmd(mm_home)
    try:
        client = spawn_mm("--yolo", "-p", "wait for it", "--agent", str(agent), cwd=work)
        daemon = psutil.Process(proc.pid)

        def sleeping() -> psutil.Process | None:
            kids = daemon.children(recursive=True)
            return next((p for p in kids if name_of(p) == "sleep"), None)

        sleeper = wait_until(sleeping, "the tool's sleep starts")
        with Raw(mm_home) as raw:
            [row] = raw.call("session.list", {"cwd": str(work)})["sessions"]
        session_id = row["id"]
        proc.kill()  # SIGKILL: no turn_ended, no cleanup
        proc.wait()
        _, err = client.communicate(timeout=30)
        assert client.returncode == 1, err  # the client says it lost the daemon
    finally:
        stop_daemon(proc)

    proc = start_mmd(mm_home)
    try:
        # The new daemon stopped what the killed one left running.
        wait_until(lambda: not _alive(sleeper), "the orphaned sleep is stopped")
        shown = json.loads(run_mm("sessions", "show", "--json", session_id, cwd=work).stdout)
        assert shown["session"]["last_status"] == "interrupted"
        [turn] = shown["turns"]
        assert turn["status"] == "interrupted" and f"mm --resume {session_id}" in turn["error"]
        assert shown["events"][-1]["kind"] == "turn_ended"
        assert shown["events"][-1]["data"]["status"] == "interrupted"
        # The call that never finished has a result, so the history is valid for the model.
        tool = [m for m in shown["messages"] if m["role"] == "tool"]
        assert len(tool) == 1 and tool[0]["content"].startswith("Not run: the daemon stopped")

        text = run_mm("sessions", "show", session_id, cwd=work)
        assert text.returncode == 0 and "[turn interrupted: the daemon stopped" in text.stdout
        listed = run_mm("sessions", "list", cwd=work).stdout
        assert f"{session_id}  " in listed and "(interrupted)" in listed.split(session_id)[1].splitlines()[0]

        # It can be resumed: a new turn on the same history.
        probe = scripted_agent(mm_home / "resume", [{"text": "resumed"}])
        resumed = run_mm("--resume", session_id, "--agent", str(probe), "-p", "go on", cwd=work)
        assert resumed.returncode == 0 and resumed.stdout == "resumed\n", resumed.stderr

        # A later restart closes nothing twice.
        stop_daemon(proc)
        proc = start_mmd(mm_home)
        shown = json.loads(run_mm("sessions", "show", "--json", session_id, cwd=work).stdout)
        assert [t["status"] for t in shown["turns"]] == ["interrupted", "ok"]
        assert_daemon_serves(mm_home)
    finally:
        stop_daemon(proc)


def test_what_a_killed_daemons_call_left_running_is_stopped_without_a_new_daemon(mm_home):
    # A background job, one in a session of its own, one that ignores SIGTERM: the guardian stops them all
    # as the daemon dies (procs/guardian.py), not when (if ever) the next daemon starts.
    work = mm_home / "guarded"
    script = "sleep 1000 & setsid sleep 1001 & (trap '' TERM; exec sleep 1002) & echo started; sleep 1003"
    agent = scripted_agent(work, [bash(script), {"text": "never reached"}])
    proc = start_mmd(mm_home)
    sleepers: list[psutil.Process] = []
    try:
        client = spawn_mm("--yolo", "-p", "start them", "--agent", str(agent), cwd=work)

        def all_sleeping() -> list[psutil.Process] | None:
            found = [p for p in psutil.process_iter() if name_of(p) == "sleep" and _tagged_by(p, proc.pid)]
            return found if len(found) == 4 else None

        sleepers = wait_until(all_sleeping, "the tool's four sleeps start")
        proc.kill()  # SIGKILL: the daemon stops nothing itself
        proc.wait()
        client.communicate(timeout=30)
        wait_until(lambda: not any(_alive(p) for p in sleepers), "the killed daemon's sleeps are stopped")
        assert not psutil.pid_exists(proc.pid) or not _alive(psutil.Process(proc.pid))
    finally:
        stop_daemon(proc)
        for sleeper in sleepers:  # a failed test leaves none behind either
            with contextlib.suppress(psutil.Error):
                sleeper.kill()


def _tagged_by(proc: psutil.Process, daemon_pid: int) -> bool:
    """Whether *proc* is a tool process of the daemon *daemon_pid* (its descendant, tagged)."""
    try:
        return "MM_PROC_TAG" in proc.environ() and any(p.pid == daemon_pid for p in proc.parents())
    except psutil.Error:
        return False


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
