"""Nothing a session leaves behind may pile up in the daemon, and nothing mm writes is readable by others.

Sessions are run one after another against a real daemon over its real socket, with a ``scripted:``
model (served inside the daemon, once per turn). Figures are compared after a warm-up, as growth
bounds: descriptors equal within a small constant, resident memory within a few MB.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import psutil

from ..conftest import run_mm, start_mmd, stop_daemon, write_config
from .raw_client import Raw, scripted_agent, wait_until
from .serves import assert_daemon_serves

# Sessions run before the figures are first taken: imports, caches and the allocator settle.
WARM_UP = 30
# Sessions whose sum of leaks is measured.
SESSIONS = 200
# Growth allowed over SESSIONS sessions: descriptors (a socket mid-close), and resident memory (about
# 1 MB is seen: SQLite's page cache filling as the store grows, bounded caches). Before this was fixed
# a scripted session kept 3 descriptors and 0.9 MB, so 200 kept 600 and 180 MB; a leak of 20 KB per
# session would still be caught.
MAX_FD_GROWTH = 3
MAX_RSS_GROWTH = 4 * 1024 * 1024
# Unload a session as soon as it is idle: the daemon looks every SWEEP_MIN (0.1) s.
UNLOAD_AT_ONCE = {"daemon": {"session_idle": 0}}


def bash(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}


def run_session(home: Path, agent: Path, cwd: Path) -> dict[str, Any]:
    """One new session, one turn (a bash call, then an answer), on a connection of its own."""
    with Raw(home) as raw:
        prompt = {"prompt": "go", "cwd": str(cwd), "agent": str(agent), "yolo": True}
        raw.call("session.prompt", prompt)
        ended = raw.events_until("turn_ended")[-1]
    assert ended["data"]["status"] == "ok", ended
    return ended


def unloaded(monitor: Raw) -> bool:
    return monitor.call("daemon.status")["sessions_loaded"] == 0


def figures(pid: int) -> tuple[int, int]:
    proc = psutil.Process(pid)
    return proc.num_fds(), proc.memory_info().rss


def test_descriptors_and_memory_stay_flat_over_200_sessions(mm_home, monkeypatch):
    monkeypatch.setenv("MM_DUMPABLE", "1")  # its descriptors are counted from outside (mmd/main.py)
    write_config(mm_home, UNLOAD_AT_ONCE)
    work = mm_home / "many"
    agent = scripted_agent(work, [bash("echo hi"), {"text": "done"}])
    proc = start_mmd(mm_home)
    try:
        with Raw(mm_home) as monitor:  # open for both measures: it holds one descriptor in each
            for _ in range(WARM_UP):
                run_session(mm_home, agent, work)
            wait_until(lambda: unloaded(monitor), "the warm-up sessions are unloaded")
            fds_before, rss_before = figures(proc.pid)
            for _ in range(SESSIONS):
                run_session(mm_home, agent, work)
            wait_until(lambda: unloaded(monitor), f"the {SESSIONS} sessions are unloaded")
            fds_after, rss_after = figures(proc.pid)
            rows = monitor.call("session.list", {"cwd": str(work), "limit": 1000})["sessions"]
        assert len(rows) == WARM_UP + SESSIONS and {r["last_status"] for r in rows} == {"ok"}
        assert fds_after - fds_before <= MAX_FD_GROWTH, (fds_before, fds_after)
        growth = rss_after - rss_before
        assert growth <= MAX_RSS_GROWTH, f"RSS grew {growth / 2**20:.1f} MB over {SESSIONS} sessions"
        assert_daemon_serves(mm_home)
    finally:
        stop_daemon(proc)


def test_an_unloaded_session_comes_back_whole(mm_home):
    write_config(mm_home, UNLOAD_AT_ONCE)
    work = mm_home / "back"
    agent = scripted_agent(work, [{"text": "one"}, {"text": "two"}, bash("echo three"), {"text": "three"}])
    proc = start_mmd(mm_home)
    try:
        with Raw(mm_home) as monitor:
            first = run_mm("--output-format", "json", "-p", "first", "--agent", str(agent), cwd=work)
            assert first.returncode == 0, first.stderr
            session_id = json.loads(first.stdout)["session_id"]
            wait_until(lambda: unloaded(monitor), "the session is unloaded")

            # --resume loads it again, and its scripted model goes on where the last turn left it.
            second = run_mm("--resume", session_id[:6], "-p", "second", cwd=work)
            assert second.returncode == 0 and second.stdout == "two\n", second.stderr
            wait_until(lambda: unloaded(monitor), "the session is unloaded again")

            # Replay after a seq, from an unloaded session.
            with Raw(mm_home) as raw:
                replay = raw.call("session.subscribe", {"session_id": session_id, "after_seq": 1})
                assert replay["events"][0]["seq"] == 2 and not replay["running"]
                ended = [e["data"]["text"] for e in replay["events"] if e["kind"] == "turn_ended"]
                assert ended == ["one", "two"]
            wait_until(lambda: unloaded(monitor), "the session is unloaded once its client left")

            # A consent ask of a reloaded session is answered, and the session stays loaded
            # while its client is attached, however long that is.
            with Raw(mm_home) as raw:
                raw.call(
                    "session.prompt",
                    {"prompt": "third", "cwd": str(work), "session_id": session_id, "interactive": True},
                )
                ask = raw.events_until("consent_needed")[-1]["data"]
                assert ask["command"] == "echo three"
                raw.call(
                    "consent.answer",
                    {"session_id": session_id, "request_id": ask["request_id"], "decision": "allow_once"},
                )
                ended = raw.events_until("turn_ended")[-1]["data"]
                assert (ended["status"], ended["text"]) == ("ok", "three")
                time.sleep(0.5)  # several looks for idle sessions: an attached one is never unloaded
                assert monitor.call("daemon.status")["sessions_loaded"] == 1
            wait_until(lambda: unloaded(monitor), "the session is unloaded after the last turn")

        shown = json.loads(run_mm("sessions", "show", "--json", session_id, cwd=work).stdout)
        assert [t["status"] for t in shown["turns"]] == ["ok", "ok", "ok"]
        assert [m["content"] for m in shown["messages"] if m["role"] == "user"] == [
            "first",
            "second",
            "third",
        ]
        assert_daemon_serves(mm_home)
    finally:
        stop_daemon(proc)


def test_every_file_and_folder_mm_writes_is_private(mm_home):
    state = mm_home / "state" / "mm"
    state.mkdir(mode=0o700)
    old_log = state / "mmd.log"
    old_log.write_text("a log written by an older mm\n")
    old_log.chmod(0o644)
    write_config(mm_home, {"daemon": {"output_max_lines": 5}})
    work = mm_home / "private"
    agent = scripted_agent(work, [bash("seq 1 100"), {"text": "done"}])  # truncated: a spill file stays
    proc = start_mmd(mm_home)
    try:
        result = run_mm("--yolo", "--output-format", "json", "-p", "count", "--agent", str(agent), cwd=work)
        assert result.returncode == 0, result.stderr
        session_id = json.loads(result.stdout)["session_id"]
        spills = list((state / "sessions" / session_id).glob("output-*.log"))
        assert len(spills) == 1
        modes = {
            path.name: stat.S_IMODE(os.stat(path).st_mode)
            for path in (state, state / "sessions", state / "sessions" / session_id)
        }
        assert set(modes.values()) == {0o700}, modes
        files = [state / "mmd.log", *state.glob("mm.db*"), *spills]
        modes = {path.name: stat.S_IMODE(os.stat(path).st_mode) for path in files}
        assert {"mmd.log", "mm.db", "mm.db-wal"} <= modes.keys()
        assert set(modes.values()) == {0o600}, modes
        assert_daemon_serves(mm_home)
    finally:
        stop_daemon(proc)
