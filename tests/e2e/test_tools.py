"""Tools through a real mmd: bad input and big output are answered, and the turn goes on.

Each test drives the real daemon (the ``daemon`` fixture, or one the ``mm``
CLI starts) with the scripted model server, and checks what the model was
sent in its next request (the server records every request body).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from mm.connection import Client

from mmd.tools.process import ECHO_LIMIT

from ..process_trees import TREE, TREE_SIZE  # a tree of processes that resists SIGTERM
from .conftest import run_mm, wait_for_file

# Seconds a client waits for one message from the daemon before the test fails.
READ_TIMEOUT = 60.0


def bash(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "tool"]


def stream(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def set_daemon_config(home: Path, **daemon: Any) -> None:
    """Add ``daemon:`` settings to the config the ``scripted`` fixture wrote."""
    path = home / "config" / "mm" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    config["daemon"] = {**config.get("daemon", {}), **daemon}
    path.write_text(yaml.safe_dump(config))


def connect() -> Client:
    client = Client.connect(autostart=False, client="tools-e2e")
    client.sock.settimeout(READ_TIMEOUT)
    return client


def wait_turn_end(client: Client, session_id: str, after_seq: int) -> list[dict[str, Any]]:
    events = []
    while True:
        method, ev = client.next_notification()
        if method == "event" and ev["session_id"] == session_id and ev["seq"] > after_seq:
            events.append(ev)
            if ev["kind"] == "turn_ended":
                return events


# -- answered failures ---------------------------------------------------------


def test_a_command_that_does_not_exist_is_exit_127_and_the_answer_arrives(mm_home, scripted):
    work = mm_home / "work"
    server = scripted([bash("mm-no-such-command-xyz --flag"), {"text": "That command is not installed."}])
    result = run_mm("--yolo", "-p", "run it", cwd=work)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "That command is not installed.\n"
    [tool] = tool_messages(server.requests()[1]["body"])
    assert "mm-no-such-command-xyz: command not found" in tool["content"]
    assert tool["content"].endswith("[exit code 127]")


def test_a_vanished_working_directory_is_answered_and_the_turn_goes_on(mm_home, scripted, daemon):
    work = mm_home / "work" / "project"
    work.mkdir()
    server = scripted([{"text": "started"}, bash("ls"), {"text": "The folder is gone."}, {"text": "never"}])
    first = run_mm("-p", "hello", cwd=work)
    assert first.returncode == 0, first.stderr
    work.rmdir()

    # An editor continues the newest session of that directory (the protocol's --continue).
    client = connect()
    started = client.call(
        "session.prompt",
        {"prompt": "list it", "cwd": str(work), "continue_last": True, "yolo": True},
    )
    events = wait_turn_end(client, started["session_id"], started["after_seq"])
    client.close()
    ended = events[-1]["data"]
    assert ended["status"] == "ok" and ended["text"] == "The folder is gone."
    [result] = [e["data"] for e in events if e["kind"] == "tool_result"]
    assert result["ok"] is False
    assert result["content"] == f"working directory {work} no longer exists"
    [tool] = tool_messages(server.requests()[2]["body"])
    assert tool["content"] == f"working directory {work} no longer exists"

    # `mm --continue` typed in the deleted directory says so instead of failing with a traceback.
    script = 'mkdir -p "$1" && cd "$1" && rmdir "$1" && exec "$2" -m mm.cli --continue -p again'
    shell = subprocess.run(
        ["bash", "-c", script, "mm-continue", str(work), sys.executable],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shell.returncode == 1, shell.stderr
    assert "no longer exists" in shell.stderr and "Traceback" not in shell.stderr
    assert len(server.requests()) == 3  # nothing was sent to the model


def test_invalid_utf8_and_nul_bytes_reach_the_model_readably(mm_home, scripted):
    work = mm_home / "work"
    server = scripted([bash(r"printf 'caf\xe9 \xff end\0tail\n'"), {"text": "odd bytes"}])
    result = run_mm("--yolo", "--output-format", "events", "-p", "print them", cwd=work)
    assert result.returncode == 0, result.stderr
    [tool] = tool_messages(server.requests()[1]["body"])
    assert tool["content"] == "caf\ufffd \ufffd end\\0tail\n[exit code 0]"
    echoed = "".join(e["data"]["text"] for e in stream(result) if e["kind"] == "tool_output")
    assert echoed == "caf\ufffd \ufffd end\\0tail\n"
    assert stream(result)[-1]["data"]["status"] == "ok"


def write_skill(folder: Path, text: str) -> None:
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(text)


def test_broken_skills_are_warned_and_a_good_one_is_read_end_to_end(mm_home, scripted):
    work = mm_home / "work"
    skills = work / ".mm" / "skills"
    (skills / "no-skill-here").mkdir(parents=True)
    (skills / "no-skill-here" / "notes.txt").write_text("not a skill\n")
    write_skill(skills / "broken", "name: broken\nno front matter at all\n")
    write_skill(
        skills / "deploy",
        "---\nname: deploy\ndescription: How to deploy the site\nkeywords: [release]\n---\n"
        "Run ./deploy.sh --prod, then check /health.\n",
    )
    (skills / "deploy" / "deploy.sh").write_text("#!/bin/sh\n")
    server = scripted(
        [{"tool_calls": [{"name": "read_skill", "arguments": {"name": "deploy"}}]}, {"text": "Deployed."}]
    )
    result = run_mm("--output-format", "events", "-p", "deploy the site", cwd=work)
    assert result.returncode == 0, result.stderr
    events = stream(result)
    warnings = [e["data"]["message"] for e in events if e["kind"] == "warning"]
    assert any(str(skills / "no-skill-here") in w and "no SKILL.md" in w for w in warnings), warnings
    assert any(str(skills / "broken" / "SKILL.md") in w and "front matter" in w for w in warnings), warnings
    assert events[-1]["kind"] == "turn_ended"
    assert events[-1]["data"]["status"] == "ok" and events[-1]["data"]["text"] == "Deployed."

    first = server.requests()[0]["body"]
    system = first["messages"][0]["content"]
    assert "- deploy — How to deploy the site [release]" in system and "broken" not in system
    assert "read_skill" in [t["function"]["name"] for t in first["tools"]]
    [tool] = tool_messages(server.requests()[1]["body"])
    assert "Run ./deploy.sh --prod, then check /health." in tool["content"]
    assert "- deploy.sh" in tool["content"]


def test_a_disabled_builtin_is_absent_and_a_call_to_it_is_answered(mm_home, scripted):
    work = mm_home / "work"
    (work / "mm.yaml").write_text("builtins: [read_file]\n")
    server = scripted([bash("rm -rf ."), {"text": "I cannot run commands here."}])
    result = run_mm("--yolo", "-p", "clean up", cwd=work)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "I cannot run commands here.\n"
    first = server.requests()[0]["body"]
    assert [t["function"]["name"] for t in first["tools"]] == ["read_file"]
    [tool] = tool_messages(server.requests()[1]["body"])
    assert 'There is no tool named "bash".' in tool["content"]
    assert "Available tools: read_file." in tool["content"]
    assert (work / "mm.yaml").exists()


def test_an_invalid_call_is_answered_with_the_call_quoted_back(mm_home, scripted):
    work = mm_home / "work"
    server = scripted(
        [
            {"tool_calls": [{"name": "read_file", "arguments": {"path": 3, "colour": 1}}]},
            {"text": "Let me try again."},
        ]
    )
    result = run_mm("-p", "read something", cwd=work)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Let me try again.\n"
    body = server.requests()[1]["body"]
    sent = body["messages"][-2]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(sent) == {"path": 3, "colour": 1}
    [tool] = tool_messages(body)
    content = tool["content"]
    assert content.startswith("read_file was not run.")
    assert f"You sent: read_file({sent})" in content
    assert "colour is not a parameter." in content
    assert "- path (string): " in content and "Example: read_file(" in content


# -- big output and cancellation (slow) ----------------------------------------


@pytest.mark.slow
def test_one_gigabyte_of_tool_output_keeps_the_daemon_small(mm_home, scripted, daemon):
    work = mm_home / "work"
    total = 1_000_000_000
    line = "0123456789abcdef"
    server = scripted(
        [
            bash("echo warm"),
            {"text": "warm"},
            bash(f"yes {line} | head -c {total}"),
            {"text": "That was a lot of output."},
        ]
    )
    # A first turn loads everything a turn needs (provider, HTTP client), so the
    # baseline below is the daemon's steady state.
    assert run_mm("--yolo", "-p", "warm up", cwd=work).returncode == 0
    mmd = psutil.Process(daemon.pid)
    baseline = peak = mmd.memory_info().rss
    out, err = work / "mm.out", work / "mm.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        mm = subprocess.Popen(
            [sys.executable, "-m", "mm.cli", "--yolo", "--continue", "-p", "flood"],
            cwd=work,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
        )
        deadline = time.monotonic() + 600
        while mm.poll() is None:
            peak = max(peak, mmd.memory_info().rss)
            if time.monotonic() > deadline:
                mm.kill()
                mm.wait()
                raise AssertionError("the 1 GB turn did not end within 600 s")
            time.sleep(0.05)
    assert mm.returncode == 0, err.read_text()[-2000:]
    assert out.read_text() == "That was a lot of output.\n"
    growth = peak - baseline
    print(f"mmd RSS: baseline {baseline / 2**20:.1f} MiB, growth {growth / 2**20:.1f} MiB")
    # Measured on the dev machine (2 vCPU VM), sampled every 50 ms: the daemon's RSS
    # grows by 3.6 to 7.4 MiB while the gigabyte streams through it (reads of up to
    # 1 MiB decoded once each, a 30 kB head/tail view, 256 KiB of echo events). 32 MiB
    # is over four times that, for allocator noise, and 1/30 of the output: a daemon
    # that kept the output, or sent it all as events, would grow by gigabytes.
    assert growth < 32 * 2**20

    # The model read the head, a marker naming the spill file, and the tail.
    [tool] = tool_messages(server.requests()[3]["body"])[-1:]
    content = tool["content"]
    assert content.startswith(f"{line}\n{line}\n")
    assert content.endswith(f"{line}\n0123456\n[exit code 0]")  # 10**9 = 58823529 × 17 + 7
    assert len(content.encode()) < 30_000 + 400
    marker = re.search(
        r"\n\[\.\.\. .* cut .*; the whole output \(1,000,000,000 bytes, .*\) is in (\S+) — ", content
    )
    assert marker, content[14_000:16_500]
    spill = Path(marker[1])
    assert spill.parent.parent == mm_home / "state" / "mm" / "sessions"
    assert spill.stat().st_size == total

    # The store got the capped echo, not the gigabyte.
    client = connect()
    session_id = json.loads(run_mm("sessions", "list", "--json", cwd=work).stdout)[0]["id"]
    events = client.call("session.show", {"session_id": session_id, "events": True})["events"]
    client.close()
    echoed = sum(len(e["data"]["text"]) for e in events if e["kind"] == "tool_output")
    assert echoed <= ECHO_LIMIT + 300
    store = mm_home / "state" / "mm"
    assert sum(p.stat().st_size for p in store.glob("mm.db*")) < 16 * 2**20
    spill.unlink()


def _gone(pid: int, created: float) -> bool:
    try:
        p = psutil.Process(pid)
        return p.create_time() != created or p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.slow
def test_cancelling_turns_leaves_no_process_of_their_tools(mm_home, scripted, daemon):
    work = mm_home / "work"
    (work / "tree.sh").write_text(TREE)
    rounds = 10
    scripted([bash(f"bash tree.sh pids-{n}") for n in range(rounds)])
    set_daemon_config(mm_home, grace=0.3)  # the tree ignores SIGTERM: each stop waits all of it
    client = connect()
    session_id: str | None = None
    survivors: list[int] = []
    for n in range(rounds):
        params: dict[str, Any] = {"prompt": f"round {n}", "cwd": str(work), "yolo": True}
        if session_id:
            params["session_id"] = session_id
        started = client.call("session.prompt", params)
        session_id = started["session_id"]
        pid_file = work / f"pids-{n}"
        wait_for_file(pid_file)
        deadline = time.monotonic() + 30
        while len(pid_file.read_text().split()) < TREE_SIZE:
            assert time.monotonic() < deadline, f"the tree did not start: {pid_file.read_text()!r}"
            time.sleep(0.01)
        procs = [(pid, psutil.Process(pid).create_time()) for pid in map(int, pid_file.read_text().split())]
        assert client.call("session.cancel", {"session_id": session_id}) == {"cancelled": True}
        events = wait_turn_end(client, session_id, started["after_seq"])
        assert events[-1]["data"]["status"] == "cancelled"
        # The turn ends only once the whole tree is gone: check right away.
        survivors += [pid for pid, created in procs if not _gone(pid, created)]
    messages = client.call("session.show", {"session_id": session_id})["messages"]
    client.close()
    assert survivors == []
    cancelled = [m["content"] for m in messages if m["role"] == "tool"]
    assert cancelled == ["Not run: the turn was cancelled."] * rounds
