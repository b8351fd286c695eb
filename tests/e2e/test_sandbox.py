"""The sandbox end to end: real mm, real mmd, real processes trying to write where they may not.

Every test runs its daemon with TMPDIR set to a folder of its own: the temp dir
is writable in every mode, and the test's $HOME (under /tmp) must not be inside
it. What a process managed to do is judged from the files, never from its exit
code alone; what the model read from the requests the scripted server received.
This machine runs the suite as root, which the file permissions never stop:
only the sandbox can refuse these writes.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mmd.api.trust import CONFINED_TRUST
from mmd.sandbox import PRETEND_VAR, confined_refusal, support

from .conftest import run_mm, trust_here
from .test_declared import call, connect, interactive_turn, of, session_events, tool_messages

WRITER = Path(__file__).parent / "mcp_servers" / "write_server.py"

pytestmark = pytest.mark.skipif(
    not support().available, reason=f"the kernel cannot enforce a sandbox: {support().reason}"
)


@pytest.fixture
def home(mm_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """mm_home with a temp dir of the daemon's own, so that $HOME lies outside every writable folder."""
    tmp = mm_home / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    return mm_home


@pytest.fixture
def etc_probe() -> Iterator[Path]:
    """A path in /etc no one has; removed after the test if a write got through."""
    path = Path("/etc") / f"mm-sandbox-probe-{uuid.uuid4().hex}"
    yield path
    path.unlink(missing_ok=True)


def bash(command: str) -> dict[str, Any]:
    return call("bash", {"command": command})


def prompt(work: Path, *extra: str) -> Any:
    return run_mm("--yolo", *extra, "-p", "go", cwd=work)


def agent(work: Path, **keys: Any) -> Path:
    """The project's mm.yaml, trusted as a person does once, having read it (docs/security.md#project-trust)."""
    path = work / "mm.yaml"
    path.write_text(yaml.safe_dump(keys, sort_keys=False))
    trust_here(work)
    return path


def test_workspace_writes_inside_the_project_and_nowhere_else_each_refusal_answered(
    home, scripted, etc_probe
):
    work, outside = home / "work", home / "home"
    (outside / "real.txt").write_text("untouched\n")
    (work / "out-link").symlink_to(outside / "real.txt")
    server = scripted(
        [
            bash("echo inside > inside.txt && cat inside.txt"),
            bash(f"echo x > {outside}/new.txt"),
            bash(f"echo x > {etc_probe}"),
            bash("echo pwned > out-link"),
            # A grandchild in a session of its own (setsid) is confined all the same.
            bash(f"setsid -w bash -c 'echo x > {outside}/grandchild.txt'"),
            {"text": "done"},
        ]
    )
    result = prompt(work)
    assert result.returncode == 0, result.stderr
    assert (work / "inside.txt").read_text() == "inside\n"
    assert not (outside / "new.txt").exists()
    assert not etc_probe.exists()
    assert (outside / "real.txt").read_text() == "untouched\n"
    assert not (outside / "grandchild.txt").exists()
    answers = tool_messages(server.requests()[-1])
    assert answers[0].startswith("inside\n") and answers[0].endswith("[exit code 0]")
    refused = {
        1: f"{outside}/new.txt",
        2: str(etc_probe),
        3: f"{outside}/real.txt",  # where the link leads: the path Landlock judged
        4: f"{outside}/grandchild.txt",
    }
    for i, path in refused.items():
        assert "Permission denied" in answers[i]
        assert (
            f"[mm: the sandbox refused writing {path}: sandbox workspace: processes may write only under"
            in (answers[i])
        ), answers[i]
        assert "adding it to sandbox.writable: in the agent file" in answers[i]
        assert "--sandbox off" in answers[i]


def test_a_hard_link_made_beforehand_refuses_the_call_and_the_file_outside_is_untouched(home, scripted):
    work, outside = home / "work", home / "home"
    victim = outside / "victim.txt"
    victim.write_text("untouched\n")
    os.link(victim, work / "hl.txt")  # made before the turn, by something unconfined
    server = scripted([bash("echo pwned >> hl.txt"), {"text": "done"}])
    result = prompt(work)
    assert result.returncode == 0, result.stderr
    assert victim.read_text() == "untouched\n"
    [answer] = tool_messages(server.requests()[-1])
    assert answer.startswith(f"bash was not started: the sandbox cannot confine writes through {work}/hl.txt")
    assert "it is a hard link (the file has 2 names, 1 of them in the folders this call may write)" in answer
    assert "--sandbox off" in answer


def test_a_confined_process_cannot_link_a_file_from_outside_into_the_project(home, scripted):
    work, outside = home / "work", home / "home"
    (outside / "victim.txt").write_text("untouched\n")
    server = scripted([bash(f"ln {outside}/victim.txt made.txt"), {"text": "done"}])
    assert prompt(work).returncode == 0
    assert not (work / "made.txt").exists()
    [answer] = tool_messages(server.requests()[-1])
    assert "Invalid cross-device link" in answer
    assert "[mm: the sandbox refused writing" in answer


def test_git_files_a_confined_turn_changes_are_put_back_and_both_the_model_and_the_person_told(
    home, scripted
):
    """A hook or a config entry that names a program runs with the person's rights outside every sandbox the
    next time they run git (or their shell prompt does), and no diff shows it: such a change is put back."""
    work, ran = home / "work", home / "home" / "ran"
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    server = scripted(
        [
            bash(
                f"printf '#!/bin/sh\\ntouch {ran}\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit"
            ),
            bash(f"git config core.fsmonitor 'touch {ran}'"),
            bash("git config user.email model@example.com"),  # a setting stands
            call("write_file", {"path": ".git/hooks/post-commit", "content": f"#!/bin/sh\ntouch {ran}\n"}),
            {"text": "done"},
        ]
    )
    result = prompt(work)
    assert result.returncode == 0, result.stderr
    # The person's git afterwards, unconfined: nothing the turn wrote runs.
    subprocess.run(["git", "status"], cwd=work, check=True, capture_output=True, env=env)
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "x"], cwd=work, check=True, env=env)
    assert not ran.exists()
    assert {p.name for p in (work / ".git" / "hooks").iterdir() if not p.name.endswith(".sample")} == {
        "pre-commit.mm-refused"
    }
    assert "fsmonitor" in (work / ".git" / "config.mm-refused").read_text()
    assert "fsmonitor" not in (work / ".git" / "config").read_text()
    assert "model@example.com" in (work / ".git" / "config").read_text()
    answers = tool_messages(server.requests()[-1])
    assert "[mm: this command changed git's own files" in answers[0]
    assert ".git/hooks/pre-commit: a hook made" in answers[0]
    assert ".git/config: core.fsmonitor set" in answers[1]
    assert "[mm:" not in answers[2]
    assert "git's own files (in .git)" in answers[3]
    # The person reads it too, as a warning of the turn.
    assert result.stderr.count("a sandboxed command changed git's own files, and mm put them back") == 2


def test_read_only_refuses_a_write_inside_the_project_but_not_the_temp_dir(home, scripted):
    work = home / "work"
    server = scripted([bash("echo x > inside.txt"), bash(f"echo x > {home}/tmp/scratch.txt"), {"text": "ok"}])
    result = prompt(work, "--sandbox", "read-only")
    assert result.returncode == 0, result.stderr
    assert not (work / "inside.txt").exists()
    assert (home / "tmp" / "scratch.txt").read_text() == "x\n"
    refused, allowed = tool_messages(server.requests()[-1])
    assert (
        f"[mm: the sandbox refused writing {work}/inside.txt: sandbox read-only: processes may write only"
        in (refused)
    )
    assert allowed.endswith("[exit code 0]")


def test_writable_folders_of_the_agent_file_are_allowed(home, scripted):
    work, shared = home / "work", home / "shared"
    shared.mkdir()
    agent(work, sandbox={"mode": "workspace", "writable": ["../shared"]})
    scripted([bash(f"echo x > {shared}/ok.txt"), {"text": "ok"}])
    assert prompt(work).returncode == 0
    assert (shared / "ok.txt").read_text() == "x\n"


def test_writable_folders_of_config_yaml_are_allowed_in_every_project(home, scripted):
    # A tool's cache outside every project (uv: ~/.cache/uv, which `uv run` locks): refused until the person
    # names it once in config.yaml, and the note says so; then allowed in a project with no agent file.
    work, cache = home / "work", home / "home" / ".cache" / "tool"
    cache.mkdir(parents=True)
    server = scripted(
        [bash(f"echo x > {cache}/lock"), {"text": "refused"}, bash(f"echo y > {cache}/lock"), {"text": "ok"}]
    )
    assert prompt(work).returncode == 0
    [refused] = tool_messages(server.requests()[-1])
    assert f"[mm: the sandbox refused writing {cache}/lock" in refused
    assert f"or in {home / 'config' / 'mm' / 'config.yaml'} (every project" in refused
    assert not (cache / "lock").exists()
    config = home / "config" / "mm" / "config.yaml"
    config.write_text(config.read_text() + "sandbox:\n  writable: [~/.cache/tool]\n")
    assert prompt(work).returncode == 0
    assert (cache / "lock").read_text() == "y\n"


def test_network_off_refuses_a_loopback_connection_to_a_server_of_the_test(home, scripted):
    work = home / "work"
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        connect = f"{sys.executable} -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}))'"
        agent(work, sandbox={"network": False})
        server = scripted([bash(connect), {"text": "no network"}])
        result = prompt(work)
        assert result.returncode == 0, result.stderr
        [answer] = tool_messages(server.requests()[-1])
        assert "PermissionError: [Errno 13] Permission denied" in answer
        assert (
            "[mm: the sandbox may have refused this (sandbox workspace: processes may write only under"
            in answer
        )
        assert (
            "no network (no internet socket, TCP or UDP" in answer
            and "removing sandbox.network: off" in answer
        )
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):  # nothing connected
            listener.accept()
        # The same command with the network on reaches the server.
        agent(work)
        scripted([bash(connect), {"text": "connected"}])
        assert prompt(work).returncode == 0
        listener.setblocking(True)
        conn, _ = listener.accept()
        conn.close()


def test_off_restores_todays_behaviour(home, scripted):
    work, outside = home / "work", home / "home"
    server = scripted([bash(f"echo x > {outside}/free.txt"), {"text": "ok"}])
    result = prompt(work, "--sandbox", "off")
    assert result.returncode == 0, result.stderr
    assert (outside / "free.txt").read_text() == "x\n"
    [answer] = tool_messages(server.requests()[-1])
    assert "[mm:" not in answer


def test_the_agent_files_off_restores_it_too(home, scripted):
    work, outside = home / "work", home / "home"
    agent(work, sandbox="off")
    scripted([bash(f"echo x > {outside}/free.txt"), {"text": "ok"}])
    assert prompt(work).returncode == 0
    assert (outside / "free.txt").exists()


def test_hooks_are_confined_like_the_tools(home, scripted):
    work, outside = home / "work", home / "home"
    hook = work / "hook.sh"
    hook.write_text(f"#!/bin/sh\necho in > {work}/hook-in.txt\necho out > {outside}/hook-out.txt\nexit 0\n")
    hook.chmod(0o755)
    agent(work, hooks={"preToolCall": [{"matcher": "bash", "command": ["./hook.sh"]}]})
    scripted([bash("true"), {"text": "ok"}])
    assert prompt(work).returncode == 0
    assert (work / "hook-in.txt").read_text() == "in\n"
    assert not (outside / "hook-out.txt").exists()
    _, events = session_events(work)
    [ran] = of(events, "hook", event="preToolCall")
    assert "Permission denied" in ran["stderr"]


def test_a_declared_tool_is_confined_and_its_refusal_answered(home, scripted):
    work, outside = home / "work", home / "home"
    agent(
        work,
        tools=[
            {
                "name": "touch",
                "description": "Create an empty file.",
                "command": ["touch", "{{path}}"],
                "parameters": {"path": {"type": "string", "required": True}},
            }
        ],
    )
    server = scripted(
        [call("touch", {"path": "made.txt"}), call("touch", {"path": f"{outside}/made.txt"}), {"text": "ok"}]
    )
    assert prompt(work).returncode == 0
    assert (work / "made.txt").exists()
    assert not (outside / "made.txt").exists()
    made, refused = tool_messages(server.requests()[-1])
    assert made.endswith("[exit code 0]")
    assert f"[mm: the sandbox refused writing {outside}/made.txt" in refused


def test_an_mcp_stdio_server_with_sandbox_workspace_is_confined(home, scripted):
    work, outside = home / "work", home / "home"
    server_entry = {"command": sys.executable, "args": [str(WRITER)], "sandbox": "workspace"}
    agent(work, mcp={"writer": server_entry})
    server = scripted(
        [
            call("write_text", {"path": f"{work}/mcp-in.txt", "text": "in"}),
            call("write_text", {"path": f"{outside}/mcp-out.txt", "text": "out"}),
            {"text": "ok"},
        ]
    )
    result = prompt(work)
    assert result.returncode == 0, result.stderr
    assert (work / "mcp-in.txt").read_text() == "in"
    assert not (outside / "mcp-out.txt").exists()
    wrote, refused = tool_messages(server.requests()[-1])
    assert "wrote" in wrote
    assert "Permission denied" in refused
    listed = json.loads(run_mm("tools", "list", "--json", cwd=work).stdout)
    assert {t["name"]: t["sandbox"] for t in listed}["write_text"] == "workspace"


def test_a_confined_mcp_server_that_logs_without_end_fills_no_disk(home, monkeypatch):
    # The server was given its log file as its stderr: confined to no writes at all, it could still fill the
    # disk through it. The daemon now writes the log, 8 MiB a file, the one before kept as .log.1.
    work = home / "work"
    entry = {"command": sys.executable, "args": [str(WRITER), "--stderr-mib", "40"], "sandbox": "read-only"}
    agent(work, mcp={"writer": entry})
    tested = run_mm("mcp", "test", "writer", cwd=work)
    assert tested.returncode == 0, tested.stderr
    assert "write_text" in tested.stdout  # it served, its stderr drained as it wrote
    logs = sorted((home / "state" / "mm" / "mcp").glob("writer-*.log*"))
    assert [p.name.split(".", 1)[1] for p in logs] == ["log", "log.1"]
    sizes = [p.stat().st_size for p in logs]
    assert all(0 < size <= 8 * 1024 * 1024 for size in sizes), sizes
    assert logs[0].read_bytes().endswith(b"x" * 1023 + b"\n")  # the newest bytes are the ones kept


def test_an_mcp_stdio_server_is_not_confined_by_default(home, scripted):
    work, outside = home / "work", home / "home"
    agent(work, mcp={"writer": {"command": sys.executable, "args": [str(WRITER)]}})
    scripted([call("write_text", {"path": f"{outside}/mcp-out.txt", "text": "out"}), {"text": "ok"}])
    assert prompt(work).returncode == 0
    assert (outside / "mcp-out.txt").read_text() == "out"


def test_tools_list_and_the_consent_ask_show_the_sandbox(home, scripted):
    work = home / "work"
    agent(work, sandbox={"mode": "read-only", "network": False})
    listed = run_mm("tools", "list", cwd=work)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line for line in listed.stdout.splitlines() if line.startswith("  ")}
    assert "read-only, network off" in rows["bash"]
    assert rows["read_file"].split()[2] == "-"  # runs inside mm
    scripted([bash("true"), {"text": "ok"}])
    asks = []

    def deny(ask: dict[str, Any], session_id: str) -> dict[str, Any]:
        asks.append(ask)
        return {"decision": "deny"}

    client = connect()
    try:
        interactive_turn(client, work, None, deny, yolo=False)
    finally:
        client.close()
    [ask] = asks
    assert (ask["tool"], ask["sandbox"]) == ("bash", "read-only, network off")


def test_without_a_kernel_sandbox_write_tools_are_refused_and_mm_says_so_once(home, scripted, monkeypatch):
    monkeypatch.setenv(PRETEND_VAR, "1")  # the daemon the first mm starts inherits it
    work, outside = home / "work", home / "home"
    server = scripted([bash("echo x > inside.txt"), bash("echo y > inside.txt"), {"text": "refused"}])
    result = run_mm("--yolo", "--output-format", "events", "-p", "go", cwd=work)
    assert result.returncode == 0, result.stderr
    assert not (work / "inside.txt").exists()
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    warnings = [e["data"]["message"] for e in events if e["kind"] == "warning"]
    assert len([w for w in warnings if "cannot be enforced here" in w]) == 1
    first, second = tool_messages(server.requests()[-1])
    assert second.startswith("bash was not run")
    assert first.startswith(
        "bash was not run: it would run under the sandbox (workspace), which this machine"
    )
    assert f"{PRETEND_VAR} is set" in first and "--sandbox off" in first
    status = run_mm("daemon", "status")
    assert f"sandbox: unavailable: {PRETEND_VAR} is set" in status.stdout
    # --sandbox off runs it, unconfined.
    scripted([bash(f"echo x > {outside}/free.txt"), {"text": "ran"}])
    assert run_mm("--yolo", "--sandbox", "off", "-p", "go", cwd=work).returncode == 0
    assert (outside / "free.txt").exists()


def test_a_prompt_from_a_process_with_no_new_privs_runs_read_only_without_network(home, scripted):
    # Every process of a confined turn has no_new_privs: `mm -p --sandbox off` run by one must not
    # get an unconfined turn. setpriv gives the client (only: the daemon is started first) the flag.
    work, outside = home / "work", home / "home"
    assert run_mm("daemon", "start").returncode == 0
    server = scripted([bash(f"echo x > {outside}/escape.txt; echo y > inside.txt"), {"text": "ok"}])
    argv = ["setpriv", "--no-new-privs", sys.executable, "-m", "mm.cli", "--yolo", "--sandbox", "off"]
    result = subprocess.run(
        [*argv, "--output-format", "events", "-p", "go"], cwd=work, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert not (outside / "escape.txt").exists() and not (work / "inside.txt").exists()
    warnings = [
        json.loads(line)["data"]["message"] for line in result.stdout.splitlines() if '"warning"' in line
    ]
    assert any("runs with no_new_privs" in w and "read-only with no network" in w for w in warnings)
    [answer] = tool_messages(server.requests()[-1])
    assert "sandbox read-only" in answer


def sandboxed(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """*argv* run with no_new_privs, as every process of a confined turn runs (the daemon does not)."""
    return subprocess.run(
        ["setpriv", "--no-new-privs", *argv], cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_a_process_with_no_new_privs_starts_no_mcp_server_through_the_daemon(home, scripted):
    # A stdio server runs with its own sandbox (off by default): a confined command that wrote one into the
    # project's mm.yaml, then asked the daemon for a turn, a tool listing or a server test, had it started
    # unconfined. Its turn is read-only; no server of the agent file is started for it at all.
    work = home / "work"
    started = home / "home" / "server-started"
    server = {"command": sys.executable, "args": ["-c", f"open({str(started)!r}, 'w')"]}
    agent(work, mcp={"escape": server})
    assert run_mm("daemon", "start").returncode == 0
    scripted([{"text": "ok"}])
    mm = (sys.executable, "-m", "mm.cli")
    turn = sandboxed(*mm, "--yolo", "--sandbox", "off", "--output-format", "events", "-p", "go", cwd=work)
    assert turn.returncode == 0, turn.stderr
    warnings = [
        json.loads(line)["data"]["message"] for line in turn.stdout.splitlines() if '"warning"' in line
    ]
    assert any(
        w.startswith("MCP servers are not started for a process that runs with no_new_privs")
        for w in warnings
    )
    listed = sandboxed(*mm, "tools", "list", cwd=work)
    assert listed.returncode == 0, listed.stderr
    assert "MCP servers are not started" in listed.stdout + listed.stderr
    tested = sandboxed(*mm, "mcp", "test", "escape", cwd=work)
    assert tested.returncode != 0 and "MCP servers are not started" in tested.stdout + tested.stderr
    assert not started.exists()
    run_mm("tools", "list", cwd=work)  # from the person's own terminal the server starts, as it should
    assert started.exists()


# Each argument a JSON [method, params], called through `client`: one line per call, the error code and
# message, or "ok". CALLS runs it in a client with no_new_privs.
CALL_EACH = """
for method, params in map(json.loads, sys.argv[1:]):
    try:
        client.call(method, params)
    except RPCError as exc:
        print(exc.code, exc.message)
    else:
        print("ok")
"""
CALLS = (
    """
import json, sys
from mm.connection import Client
from mmd.rpc import RPCError
client = Client.connect(autostart=False, client="sandboxed")
"""
    + CALL_EACH
)


def calls_sandboxed(work: Path, *calls: tuple[str, dict[str, Any]]) -> list[str]:
    done = sandboxed(sys.executable, "-c", CALLS, *map(json.dumps, calls), cwd=work)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


REFUSED = "confined_client this client runs with no_new_privs, as every process of a sandboxed turn does, and may not "


def test_a_process_with_no_new_privs_acts_on_no_session_it_did_not_start(home, scripted):
    # A sandboxed command (the model's) that answered the ask of the turn that runs it allowed itself what
    # the person was asked; one that continued, compacted, undid or cancelled the person's session, or
    # stopped the daemon, acted on what is the person's. Refused; the ask stays for the person.
    work, outside = home / "work", home / "home"
    assert run_mm("daemon", "start").returncode == 0
    scripted(
        [
            bash(f"echo x > {outside}/allowed.txt"),
            {"text": "done"},
            {"text": "its own"},
            {"text": "and again"},
        ]
    )
    client = connect()
    tried: list[list[str]] = []

    def answer(ask: dict[str, Any], session_id: str) -> dict[str, Any]:
        mine = {"session_id": session_id, "request_id": ask["request_id"], "decision": "allow_always"}
        tried.append(calls_sandboxed(work, ("consent.answer", mine)))
        return {"decision": "deny", "reason": "the person said no"}

    try:
        events = interactive_turn(client, work, None, answer, yolo=False)
        session_id = events[0]["session_id"]
    finally:
        client.close()
    assert tried == [
        [
            REFUSED + "answer an ask of this session: a sandboxed command acts only on the sessions "
            "such a command started, never on yours or the daemon (else it could allow what its own "
            "turn asks of you). Do it from your own terminal"
        ]
    ]
    [answered] = of(events, "consent_answered")
    assert answered["decision"] == "deny"
    assert not (outside / "allowed.txt").exists()
    assert json.loads(run_mm("consent", "list", "--json", cwd=work).stdout) == []
    theirs = {"session_id": session_id}
    refusals = calls_sandboxed(
        work,
        ("session.prompt", {"prompt": "more", "cwd": str(work), "continue_last": True, "yolo": True}),
        ("session.prompt", {"prompt": "more", "cwd": str(work), "session_id": session_id}),
        ("session.compact", theirs),
        ("session.undo", {**theirs, "to_step": 1}),
        ("session.cancel", theirs),
        ("daemon.stop", {}),
        ("daemon.status", {}),  # what only reads is not refused
    )
    doing = [
        "continue this session",
        "continue this session",
        "compact this session",
        "undo this session's steps",
        "cancel this session's turn",
        "stop the daemon",
    ]
    assert [line.split(":")[0] for line in refusals] == [REFUSED + d for d in doing] + ["ok"]
    assert run_mm("daemon", "status").returncode == 0
    # A session of its own it may start, and go on with (`mm -c`: the newest in the folder is its own now).
    for argv, said in ((["-p", "first"], "its own"), (["-c", "-p", "again"], "and again")):
        own = sandboxed(sys.executable, "-m", "mm.cli", *argv, cwd=work)
        assert own.returncode == 0 and said in own.stdout, own.stderr
    newest = json.loads(run_mm("sessions", "list", "--json", cwd=work).stdout)[0]
    assert newest["id"] != session_id and newest["turns"] == 2


# CALLS, made by the child of the process that connected, once that process is gone: its parent exits as
# soon as it connected and forked, and bash (as the bash tool's does) reaps it. Its pid then names no process.
FORKED = (
    """
import json, os, socket, sys, time
from mm.connection import Client
from mmd import paths
from mmd.rpc import RPCError
sock = socket.socket(socket.AF_UNIX)
sock.connect(str(paths.socket_path()))
parent = os.getpid()
if os.fork():
    os._exit(0)
while os.path.exists(f"/proc/{parent}"):
    time.sleep(0.01)  # exited, and reaped by bash
client = Client(sock, paths.socket_path())
client.handshake("forked", False)
"""
    + CALL_EACH
)


def test_a_sandboxed_command_whose_connecting_process_is_gone_is_still_confined(home, scripted):
    # A command of a confined turn connected, forked and exited, and its child called through the connection.
    # The daemon asked the connecting pid, at each request, whether it ran with no_new_privs, and read "no"
    # of a pid that named no process: the child trusted files, stopped the daemon and got a turn with the
    # sandbox off. The client is judged as it connects now, and one that cannot be told counts as confined.
    work, outside = home / "work", home / "home"
    assert run_mm("daemon", "start").returncode == 0
    server = scripted([bash(f"echo x > {outside}/escape.txt; echo y > inside.txt"), {"text": "ok"}])
    agent_file = work / "mm.yaml"
    agent_file.write_text(f"hooks:\n  preToolCall:\n    - command: touch {outside}/hooked\n")
    calls = [
        ("trust.add", {"files": [{"path": str(agent_file), "digest": "0" * 64}]}),
        ("daemon.stop", {}),
        ("session.prompt", {"prompt": "go", "cwd": str(work), "yolo": True, "sandbox": "off"}),
    ]
    code = f"{sys.executable} -c {shlex.quote(FORKED)} {' '.join(shlex.quote(json.dumps(c)) for c in calls)}"
    done = sandboxed("bash", "-c", f"{code}; true", cwd=work)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"confined_client {CONFINED_TRUST}",
        f"confined_client {confined_refusal('stop the daemon')}",
        "ok",
    ]
    assert json.loads(run_mm("trust", "list", "--json").stdout) == []
    assert run_mm("daemon", "status").returncode == 0
    deadline = time.monotonic() + 30
    while len(server.requests()) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    [answer] = tool_messages(server.requests()[-1])
    assert "sandbox read-only" in answer
    assert not (outside / "escape.txt").exists() and not (work / "inside.txt").exists()


@pytest.mark.skipif(support().abi < 6, reason="the kernel's Landlock has no scopes (ABI 6, Linux 6.12)")
def test_a_sandboxed_command_cannot_kill_the_daemon(home, scripted, daemon):
    # It runs as you: before Landlock's scopes, `kill -9` of the daemon ended every session's turn, and any
    # process of yours (a shell, an editor with unsaved work) was as reachable.
    work = home / "work"
    agent(work, sandbox="workspace")
    server = scripted([call("bash", {"command": f"kill -9 {daemon.pid}"}), {"text": "tried"}])
    result = prompt(work)
    assert result.returncode == 0, result.stderr
    [refused] = tool_messages(server.requests()[-1])
    assert "Operation not permitted" in refused
    assert daemon.poll() is None
