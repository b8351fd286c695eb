"""Hooks end to end: the real ``mm`` CLI, a real mmd, a scripted model server, real hook scripts.

What ran is judged from files the commands wrote, and what the model read
from the requests the scripted server received.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

from ..paths import ROOT
from .conftest import run_mm
from .test_declared import call, of, session_events, tool_messages

GUARD = ROOT / "contrib" / "hooks" / "guard.sh"


def py_hook(path: Path, body: str) -> Path:
    """A Python hook script; ``data`` is the JSON it read on stdin."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\nimport json, sys\ndata = json.load(sys.stdin)\n{body}")
    path.chmod(0o755)
    return path


def agent(work: Path, hooks: dict[str, Any], extra: str = "") -> Path:
    path = work / "agent.yaml"
    path.write_text(yaml.safe_dump({"hooks": hooks}) + extra)
    return path


def add_user_hooks(home: Path, hooks: dict[str, Any]) -> None:
    path = home / "config" / "mm" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    config["hooks"] = hooks
    path.write_text(yaml.safe_dump(config))


def test_contrib_guard_blocks_the_model_reads_why_and_the_turn_goes_on(mm_home, scripted):
    work = mm_home / "work"
    shutil.copytree(GUARD.parent, work / "hooks")
    agent(work, {"preToolCall": [{"matcher": "bash", "command": ["./hooks/guard.sh"], "timeout": 10}]})
    # `true ||` keeps this harmless even if the guard failed to block it.
    server = scripted(
        [
            call("bash", {"command": "true || rm -rf /"}),
            call("bash", {"command": "echo cleaned > done.txt"}),
            {"text": "cleaned the build folder instead"},
        ]
    )
    result = run_mm("--yolo", "--agent", "agent.yaml", "-p", "clean everything", cwd=work)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "cleaned the build folder instead\n"
    requests = server.requests()
    [blocked] = tool_messages(requests[1])
    assert blocked.startswith("bash was not run: blocked by the preToolCall hook ./hooks/guard.sh.\n")
    assert "Blocked by guard.sh: this command removes / or the home folder recursively" in blocked
    assert (work / "done.txt").read_text() == "cleaned\n"  # the next call ran
    _, events = session_events(work)
    assert [(h["exit_code"], h["decision"]) for h in of(events, "hook")] == [(2, "deny"), (0, None)]


def test_updated_input_changes_what_runs_and_context_reaches_the_model(mm_home, scripted):
    work = mm_home / "work"
    py_hook(
        work / "hooks" / "rewrite.py",
        "cmd = data['tool_input']['command'].replace('one', 'two')\n"
        "print(json.dumps({'hookSpecificOutput': {'hookEventName': 'PreToolUse',"
        " 'updatedInput': {'command': cmd}, 'additionalContext': 'Rewritten by policy.'}}))\n",
    )
    py_hook(
        work / "hooks" / "after.py",
        "print(json.dumps({'hookSpecificOutput': {'hookEventName': 'PostToolUse',"
        " 'additionalContext': 'post saw ' + data['tool_response']['content'].splitlines()[0]}}))\n",
    )
    agent(
        work,
        {
            "preToolCall": [{"matcher": "bash", "command": ["./hooks/rewrite.py"]}],
            "postToolCall": [{"matcher": "bash", "command": ["./hooks/after.py"]}],
        },
    )
    server = scripted([call("bash", {"command": "echo one > out.txt; cat out.txt"}), {"text": "done"}])
    result = run_mm("--yolo", "--agent", "agent.yaml", "-p", "write one", cwd=work)
    assert result.returncode == 0, result.stderr
    assert (work / "out.txt").read_text() == "two\n"
    [told] = tool_messages(server.requests()[1])
    assert told.startswith("two\n")
    assert told.endswith("\n\npost saw two\n\nRewritten by policy.")


def test_ask_under_yolo_without_a_terminal_is_denied_with_exit_3(mm_home, scripted):
    work = mm_home / "work"
    py_hook(work / "ask.py", "print(json.dumps({'hookSpecificOutput': {'permissionDecision': 'ask'}}))\n")
    agent(work, {"preToolCall": [{"command": "./ask.py"}]})
    server = scripted([call("bash", {"command": "echo ran > ran.txt"}), {"text": "never"}])
    result = run_mm("--yolo", "--agent", "agent.yaml", "-p", "run it", cwd=work)
    assert result.returncode == 3, result.stderr
    assert "no one to ask" in result.stderr
    assert "hook asked for a person's decision" in result.stderr and "--yolo" not in result.stderr
    assert not (work / "ran.txt").exists()
    assert len(server.requests()) == 1


def test_several_hooks_user_first_updates_chain_and_deny_wins(mm_home, scripted):
    work = mm_home / "work"
    server = scripted(
        [
            call("bash", {"command": "echo a"}),
            call("bash", {"command": "echo forbidden > f.txt"}),
            {"text": "done"},
        ]
    )
    user_hook = py_hook(
        mm_home / "config" / "mm" / "hooks" / "user.py",
        "cmd = data['tool_input']['command']\n"
        "print(json.dumps({'permissionDecision': 'allow', 'updatedInput': {'command': cmd + ' b'}}))\n",
    )
    add_user_hooks(mm_home, {"preToolCall": [{"command": ["./hooks/user.py"]}]})
    assert user_hook.exists()
    py_hook(
        work / "agent.py",
        "cmd = data['tool_input']['command']\n"
        "if 'forbidden' in cmd:\n"
        "    print('forbidden by the agent', file=sys.stderr); sys.exit(2)\n"
        "print(json.dumps({'updatedInput': {'command': cmd + ' c > chain.txt'}}))\n",
    )
    agent(work, {"preToolCall": [{"command": ["./agent.py"]}]})
    result = run_mm("--yolo", "--agent", "agent.yaml", "-p", "go", cwd=work)
    assert result.returncode == 0, result.stderr
    assert (work / "chain.txt").read_text() == "a b c\n"
    assert not (work / "f.txt").exists()
    told = tool_messages(server.requests()[2])[-1]
    assert told.endswith("forbidden by the agent")
    _, events = session_events(work)
    assert [(h["hook"], h["decision"]) for h in of(events, "hook")] == [
        ("./hooks/user.py", "allow"),
        ("./agent.py", None),
        ("./hooks/user.py", "allow"),
        ("./agent.py", "deny"),
    ]


def test_hooks_apply_to_a_declared_tool(mm_home, scripted):
    work = mm_home / "work"
    (work / "greet").write_text(
        f"#!{sys.executable}\nimport sys\nopen('greeted.txt', 'w').write(sys.argv[1])\n"
    )
    (work / "greet").chmod(0o755)
    py_hook(
        work / "polite.py",
        "assert data['tool_name'] == 'greet'\n"
        "print(json.dumps({'updatedInput': {'name': 'Dr. ' + data['tool_input']['name']}}))\n",
    )
    tools = """tools:
  - name: greet
    description: Greet one person.
    command: ["./greet", "{{name}}"]
    parameters:
      name: {type: string, required: true}
    effects: write
"""
    agent(work, {"preToolCall": [{"matcher": "gree*", "command": ["./polite.py"]}]}, tools)
    scripted([call("greet", {"name": "Who"}), {"text": "greeted"}])
    result = run_mm("--yolo", "--agent", "agent.yaml", "-p", "greet Who", cwd=work)
    assert result.returncode == 0, result.stderr
    assert (work / "greeted.txt").read_text() == "Dr. Who"


def test_hook_errors_are_logged_and_the_call_goes_on(mm_home, scripted):
    work = mm_home / "work"
    (work / "fail.sh").write_text("#!/usr/bin/env bash\necho 'cannot reach policy server' >&2\nexit 1\n")
    (work / "slow.sh").write_text("#!/usr/bin/env bash\nsleep 60\n")
    for name in ("fail.sh", "slow.sh"):
        (work / name).chmod(0o755)
    agent(work, {"preToolCall": [{"command": "./fail.sh"}, {"command": "./slow.sh", "timeout": 0.5}]})
    scripted([call("bash", {"command": "echo went on > on.txt"}), {"text": "ok"}])
    result = run_mm("--yolo", "--agent", "agent.yaml", "-p", "go", cwd=work)
    assert result.returncode == 0, result.stderr
    assert (work / "on.txt").read_text() == "went on\n"
    _, events = session_events(work)
    hooks = of(events, "hook")
    assert [(h["decision"], h["exit_code"]) for h in hooks] == [("error", 1), ("error", None)]
    assert hooks[0]["error"] == "exit code 1: cannot reach policy server"
    assert hooks[1]["error"].startswith("timed out after 0.5 s")
    [log] = list(mm_home.glob("state/**/mmd.log"))
    text = log.read_text()
    assert "preToolCall hook './fail.sh' for bash: hook error: exit code 1" in text
    assert "preToolCall hook './slow.sh' for bash: hook error: timed out" in text
