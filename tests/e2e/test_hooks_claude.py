"""Hooks written from Claude Code's documentation, run unchanged through the real ``mm`` and ``mmd``.

The scripts in tests/e2e/claude_hooks/ are Claude Code's documented examples,
byte for byte (its README names each source). Each test configures them the
way Claude Code's documentation does (its settings shape, or `.claude/settings.json`
with ``import: claude``) and judges what took effect from files on disk and the
requests the scripted model server received.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from .conftest import daemon_pids, run_mm, trust_here
from .test_declared import call, connect, interactive_turn, of, session_events, tool_messages

DOCS = Path(__file__).parent / "claude_hooks"
# Seconds a hook that runs after the client left (SessionEnd) is waited for; it takes well under one.
AFTER_EXIT_WAIT = 30.0


@pytest.fixture
def home(mm_home: Path) -> Path:
    """The test's own HOME (mm_home sets it), so ~/.claude/settings.json is never the developer's."""
    return mm_home / "home"


def claude_project(work: Path, hooks: dict[str, Any], *scripts: str) -> None:
    """A project as Claude Code's docs set one up: scripts in .claude/hooks/, hooks in .claude/settings.json."""
    folder = work / ".claude" / "hooks"
    folder.mkdir(parents=True)
    for name in scripts:
        shutil.copy2(DOCS / name, folder / name)
    (work / ".claude" / "settings.json").write_text(json.dumps({"hooks": hooks}, indent=2))
    trust_here(work)  # as a person does once, having read them (docs/security.md#project-trust)


def settings_hook(matcher: str, command: str) -> list[dict[str, Any]]:
    return [{"matcher": matcher, "hooks": [{"type": "command", "command": command}]}]


def agent(work: Path, hooks: dict[str, Any]) -> None:
    (work / "mm.yaml").write_text(yaml.safe_dump({"hooks": hooks}))
    trust_here(work)


def user_messages(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["body"]["messages"] if m["role"] == "user"]


def test_the_documented_bash_validator_blocks_grep_by_claude_codes_tool_name(mm_home, home, scripted):
    work = mm_home / "work"
    command = f'{sys.executable} "$CLAUDE_PROJECT_DIR"/.claude/hooks/bash_command_validator'
    claude_project(work, {"PreToolUse": settings_hook("Bash", command)}, "bash_command_validator")
    agent(work, {"import": "claude"})
    server = scripted(
        [
            call("bash", {"command": "grep -r secret . > found.txt"}),
            call("bash", {"command": "echo fine > ok.txt"}),
            {"text": "used rg instead"},
        ]
    )
    result = run_mm("--yolo", "-p", "find the secret", cwd=work)
    assert result.returncode == 0, result.stderr
    assert not (work / "found.txt").exists()  # blocked: the validator knew it as Bash
    assert (work / "ok.txt").read_text() == "fine\n"  # exit 0 (no issue): it ran
    [blocked] = tool_messages(server.requests()[1])
    assert "was not run: blocked by the preToolCall hook" in blocked
    assert "• Use 'rg' (ripgrep) instead of 'grep' for better performance and features" in blocked
    _, events = session_events(work)
    assert [(h["exit_code"], h["decision"]) for h in of(events, "hook")] == [(2, "deny"), (0, None)]


def test_the_documented_file_guard_blocks_a_dot_env_write_through_file_path(mm_home, home, scripted):
    work = mm_home / "work"
    command = '"$CLAUDE_PROJECT_DIR"/.claude/hooks/protect-files.sh'
    claude_project(work, {"PreToolUse": settings_hook("Edit|Write", command)}, "protect-files.sh")
    agent(work, {"import": "claude"})
    server = scripted(
        [
            call("write_file", {"path": "secrets.env", "content": "TOKEN=1\n"}),
            call("write_file", {"path": "notes.txt", "content": "kept\n"}),
            {"text": "wrote the notes"},
        ]
    )
    result = run_mm("--yolo", "-p", "save the token and the notes", cwd=work)
    assert result.returncode == 0, result.stderr
    assert not (work / "secrets.env").exists()
    assert (work / "notes.txt").read_text() == "kept\n"
    [blocked] = tool_messages(server.requests()[1])
    assert f"Blocked: {work / 'secrets.env'} matches protected pattern '.env'" in blocked


def test_the_documented_prompt_hook_adds_context_or_blocks_the_prompt(mm_home, home, scripted):
    work = mm_home / "work"
    hooks_dir = work / "hooks"
    hooks_dir.mkdir()
    shutil.copy2(DOCS / "user_prompt_context", hooks_dir / "user_prompt_context")
    record = work / "stdin.json"
    agent(  # Claude Code's settings shape, written in the agent file
        work,
        {
            "UserPromptSubmit": [
                {
                    "hooks": [
                        {"type": "command", "command": f"{sys.executable} hooks/user_prompt_context"},
                        {"type": "command", "command": f"cat > {record}"},
                    ]
                }
            ]
        },
    )
    server = scripted([{"text": "it is late"}])
    result = run_mm("-p", "what time is it?", cwd=work)
    assert result.returncode == 0, result.stderr
    [sent] = user_messages(server.requests()[0])
    assert sent.startswith("what time is it?\n\nCurrent time: ")
    seen = json.loads(record.read_text())
    session_id, _ = session_events(work)
    assert seen["hook_event_name"] == "UserPromptSubmit" and seen["prompt"] == "what time is it?"
    assert (seen["session_id"], seen["cwd"], seen["permission_mode"]) == (session_id, str(work), "default")
    transcript = Path(seen["transcript_path"])
    assert transcript == mm_home / "state" / "mm" / "transcripts" / f"{session_id}.jsonl"
    lines = [json.loads(line) for line in transcript.read_text().splitlines()]
    assert [(line["type"], line["message"]["content"]) for line in lines] == [
        ("user", sent),
        ("assistant", "it is late"),
    ]
    # Held open while the turn ran (one descriptor for its messages), closed with the turn.
    [pid] = daemon_pids(mm_home)
    assert str(transcript) not in {f.path for f in psutil.Process(pid).open_files()}

    blocked = run_mm("-p", "my password: hunter2, log in", cwd=work)
    assert blocked.returncode == 3, blocked.stderr
    assert "Security policy violation: Prompt contains potential secrets." in blocked.stderr
    assert len(server.requests()) == 1  # the model never saw it
    assert "hunter2" not in transcript.read_text()


def test_the_documented_stop_hook_makes_the_model_go_on_once(mm_home, home, scripted):
    work = mm_home / "work"
    command = '"$CLAUDE_PROJECT_DIR"/.claude/hooks/stop-once.sh'
    claude_project(work, {"Stop": [{"hooks": [{"type": "command", "command": command}]}]}, "stop-once.sh")
    agent(work, {"import": "claude"})
    server = scripted([{"text": "first answer"}, {"text": "second answer"}, {"text": "never asked"}])
    result = run_mm("-p", "answer", cwd=work)
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().endswith("second answer")
    requests = server.requests()
    assert len(requests) == 2
    assert user_messages(requests[1])[-1] == "Must be provided when Claude is blocked from stopping"
    _, events = session_events(work)
    assert [h["decision"] for h in of(events, "hook", event="Stop")] == ["deny", None]


def test_session_start_context_and_session_end_after_the_client_left(mm_home, home, scripted):
    work = mm_home / "work"
    ended = work / "ended.json"
    agent(
        work,
        {
            "SessionStart": settings_hook("startup", "echo 'Reminder: use Bun, not npm.'"),
            "SessionEnd": settings_hook("", f"cat > {ended}"),
        },
    )
    server = scripted([{"text": "noted"}, {"text": "again"}])
    assert run_mm("-p", "hello", cwd=work).returncode == 0
    assert user_messages(server.requests()[0]) == ["hello\n\nReminder: use Bun, not npm."]
    wait_for(ended)
    seen = json.loads(ended.read_text())
    assert (seen["hook_event_name"], seen["reason"]) == ("SessionEnd", "other")
    # The next prompt resumes the session: the "startup" matcher does not match "resume".
    assert run_mm("--continue", "-p", "again", cwd=work).returncode == 0
    assert user_messages(server.requests()[1])[-1] == "again"


def wait_for(path: Path) -> None:
    deadline = time.monotonic() + AFTER_EXIT_WAIT
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)


def test_a_notification_hook_runs_while_a_consent_ask_waits(mm_home, home, scripted):
    work = mm_home / "work"
    notified = work / "notified.json"
    agent(work, {"Notification": settings_hook("permission_prompt", f"cat > {notified}")})
    scripted([call("bash", {"command": "echo ran > ran.txt"}), {"text": "done"}])
    assert run_mm("daemon", "start").returncode == 0

    def allow_once_notified(ask: dict[str, Any], session_id: str) -> dict[str, Any]:
        wait_for(notified)  # the hook ran while the ask waited, not after it
        return {"decision": "allow_once"}

    client = connect()
    try:
        events = interactive_turn(client, work, None, allow_once_notified, yolo=False)
    finally:
        client.close()
    assert of(events, "turn_ended")[-1]["status"] == "ok"
    assert (work / "ran.txt").read_text() == "ran\n"
    seen = json.loads(notified.read_text())
    assert (seen["hook_event_name"], seen["notification_type"]) == ("Notification", "permission_prompt")
    assert seen["message"] == "mm needs your permission to use bash"


def test_a_malformed_claude_settings_file_is_a_clear_error_and_the_daemon_goes_on(mm_home, home, scripted):
    work = mm_home / "work"
    (work / ".claude").mkdir()
    (work / ".claude" / "settings.json").write_text('{\n  "hooks": {\n    "PreToolUse": [\n  }\n}\n')
    (work / "mm.yaml").write_text("hooks: {import: claude}\n")  # names no command: needs no trust
    scripted([{"text": "fine"}])
    result = run_mm("-p", "hi", cwd=work)
    assert result.returncode == 1
    assert f"{work / '.claude' / 'settings.json'}:4" in result.stderr and "not valid JSON" in result.stderr
    (work / ".claude" / "settings.json").write_text(
        json.dumps(
            {"hooks": {"PreCompact": settings_hook("", "true"), "Stop": [{"hooks": [{"type": "cmd"}]}]}}
        )
    )
    result = run_mm("-p", "hi", cwd=work)
    assert result.returncode == 1
    assert "hooks.Stop[0].hooks[0].type" in result.stderr and 'found a string ("cmd")' in result.stderr
    (work / ".claude" / "settings.json").write_text(
        json.dumps({"hooks": {"PreCompact": settings_hook("", "true")}})
    )
    result = run_mm("-p", "hi", cwd=work)  # the same daemon answers, and skips what it does not run
    assert result.returncode == 0, result.stderr
    assert "PreCompact hooks are not run by mm" in result.stderr
