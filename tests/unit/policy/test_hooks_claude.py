"""Claude Code's hook contract: tool names and parameters, matchers, its settings shape and files, the
events other than a tool call. Real hook scripts, run as real processes."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mmd.config import hooks as config_hooks
from mmd.config import load_agent_file
from mmd.config.hooks import HooksSpec, claude_settings_files, claude_settings_hooks
from mmd.config.loader import ConfigError
from mmd.config.trust import Trust
from mmd.models.base import ToolCall
from mmd.policy import hooks_claude
from mmd.policy.hooks import Hook, Site, merged_hooks, run_event_hooks, run_pre_hooks

from .test_hooks import TOOLS, bash_hook, py_hook, seen

# (mm tool, mm arguments, Claude Code's name, Claude Code's arguments) with cwd /work.
MAPPED = [
    ("bash", {"command": "ls", "timeout": 5}, "Bash", {"command": "ls", "timeout": 5000}),
    (
        "read_file",
        {"path": "a.py", "offset": 3, "limit": 9},
        "Read",
        {"file_path": "/work/a.py", "offset": 3, "limit": 9},
    ),
    ("write_file", {"path": "s.env", "content": "x"}, "Write", {"file_path": "/work/s.env", "content": "x"}),
    (
        "edit_file",
        {"path": "/etc/x", "old_text": "a", "new_text": "b", "replace_all": True},
        "Edit",
        {"file_path": "/etc/x", "old_string": "a", "new_string": "b", "replace_all": True},
    ),
    (
        "grep",
        {"pattern": "TODO", "path": "src", "glob": "*.py", "ignore_case": True, "max_results": 5},
        "Grep",
        {"pattern": "TODO", "path": "src", "glob": "*.py", "-i": True, "max_results": 5},
    ),
    ("list_files", {"pattern": "**/*.ts", "path": "."}, "Glob", {"pattern": "**/*.ts", "path": "."}),
]


@pytest.mark.parametrize(("tool", "args", "name", "claude"), MAPPED)
def test_builtins_are_shown_by_claude_codes_names_and_map_back(tool, args, name, claude):
    cwd = Path("/work")
    assert hooks_claude.claude_name(TOOLS[tool]) == name
    assert hooks_claude.to_claude(TOOLS[tool], args, cwd) == claude
    assert hooks_claude.to_mm(TOOLS[tool], claude, args, cwd) == args  # unchanged: the original back


def test_an_update_in_claude_codes_names_is_converted_and_its_extra_fields_dropped():
    bash, cwd = TOOLS["bash"], Path("/work")
    updated = {"command": "ls -a", "timeout": 1500, "description": "List", "run_in_background": False}
    assert hooks_claude.to_mm(bash, updated, {"command": "ls"}, cwd) == {"command": "ls -a", "timeout": 2}
    write = TOOLS["write_file"]
    sent = {"path": "a.txt", "content": "x"}
    assert hooks_claude.to_mm(write, {"file_path": "/tmp/b.txt", "content": "y"}, sent, cwd) == {
        "path": "/tmp/b.txt",
        "content": "y",
    }
    assert hooks_claude.to_mm(write, {"path": "c.txt", "content": "z"}, sent, cwd) == {
        "path": "c.txt",
        "content": "z",
    }


def test_mcp_tools_take_claude_codes_mcp_names_and_others_keep_theirs():
    mcp = SimpleNamespace(name="files_read_file", source="mcp:files", remote_name="read_file")
    assert hooks_claude.claude_name(mcp) == "mcp__files__read_file"  # type: ignore[arg-type]
    declared = SimpleNamespace(name="release", source="declared")
    assert hooks_claude.claude_name(declared) == "release"  # type: ignore[arg-type]
    assert hooks_claude.to_claude(declared, {"version": "1"}, Path("/")) == {"version": "1"}  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("matcher", "claude", "names", "matches"),
    [
        ("Edit|Write", True, ("Write", "write_file"), True),
        ("Write", True, ("TodoWrite", "todo"), False),  # Claude Code: a plain name matches exactly
        ("write", True, ("Write", "write_file"), False),  # case-sensitive
        ("mcp__files__.*", True, ("mcp__files__read_file", "files_read_file"), True),
        ("", True, ("Bash", "bash"), True),
        ("bash|write_*", False, ("Write", "write_file"), True),  # mm's globs, case-insensitive
        ("Bash", False, ("Bash", "bash"), True),
        ("read_*", False, ("Grep", "grep"), False),
    ],
)
def test_matchers_accept_either_name(matcher, claude, names, matches):
    hook = Hook("PreToolUse", matcher, ["true"], "true", 1.0, Path("/"), (), claude)
    assert hook.matches(*names) is matches


def test_a_matcher_that_backtracks_does_not_match_and_is_warned_about_once(caplog):
    # A cloned repository's .claude/settings.json: this matcher tries 2**41 ways on the MCP tool's name
    # before its "-"; Python's re hung the daemon at each call. It ends at its deadline: no match.
    slow = r"(\w|\w)+"
    hook = Hook("PreToolUse", slow, ["true"], "true", 1.0, Path("/"), (), True)
    name = "mcp__github__list_every_open_issue_of_all-repos"
    with caplog.at_level(logging.WARNING, logger="mmd.policy.hooks"):
        assert hook.matches(name, "github_list_every_open_issue_of_all-repos") is False
        assert hook.matches(name) is False
    warned = [r.getMessage() for r in caplog.records if "hook matcher" in r.getMessage()]
    assert warned == [
        f"hook matcher {slow!r} took longer than 0.2 s on {name} or github_list_every_open_issue_of_all-repos: taken as no match (warned once)"
    ]
    assert hook.matches("Bash") is True  # a name it decides at once


def test_a_glob_matcher_of_unclosed_brackets_is_read_in_linear_time():
    # mm's shape: fnmatch scanned to the end of this 400 KB matcher once for each of its 200,000 "[".
    hook = Hook("PreToolUse", "[a" * 200_000, ["true"], "true", 1.0, Path("/"), (), False)
    assert hook.matches("Bash", "bash") is False


async def test_a_claude_code_update_reaches_the_tool_in_mm_parameters(tmp_path):
    py_hook(
        tmp_path,
        "h.py",
        "i = data['tool_input']\n"
        "print(json.dumps({'hookSpecificOutput': {'hookEventName': 'PreToolUse', 'permissionDecision': 'allow',"
        " 'updatedInput': {**i, 'file_path': i['file_path'].replace('.env', '.txt')}}}))\n",
    )
    spec = load_spec(
        tmp_path, "PreToolUse:\n  - matcher: Write\n    hooks: [{type: command, command: ./h.py}]\n"
    )
    hooks = merged_hooks(HooksSpec(), tmp_path, spec, tmp_path)
    site = Site(session_id="s", cwd=tmp_path, permission_mode="bypassPermissions")
    call = ToolCall(id="c", name="write_file", arguments="{}")
    out = await run_pre_hooks(
        hooks, tool=TOOLS["write_file"], call=call, args={"path": "a.env", "content": "x"}, site=site
    )
    assert (out.decision, out.args) == ("allow", {"path": str(tmp_path / "a.txt"), "content": "x"})
    stdin = seen(tmp_path, "h.py")["stdin"]
    assert (stdin["tool_name"], stdin["mm_tool_name"], stdin["permission_mode"]) == (
        "Write",
        "write_file",
        "bypassPermissions",
    )
    assert stdin["tool_input"] == {"file_path": str(tmp_path / "a.env"), "content": "x"}
    assert stdin["mm_tool_input"] == {"path": "a.env", "content": "x"}


def load_spec(folder: Path, hooks_yaml: str) -> HooksSpec:
    path = folder / "agent.yaml"
    path.write_text("hooks:\n" + "".join(f"  {line}\n" for line in hooks_yaml.splitlines()))
    return load_agent_file(path).hooks


def test_both_shapes_and_the_aliases_in_one_file(tmp_path):
    spec = load_spec(
        tmp_path,
        "preToolCall: [{matcher: bash, command: [./a.sh], timeout: 5}]\n"
        "PreToolUse:\n  - matcher: Bash\n    hooks:\n      - {type: command, command: 'echo hi', timeout: 7}\n"
        "Stop: [{hooks: [{type: command, command: ./s.sh}]}]\n",
    )
    hooks = merged_hooks(HooksSpec(), tmp_path, spec, tmp_path)
    assert [(h.label, h.timeout, h.claude) for h in hooks.pre] == [
        ("./a.sh", 5.0, False),
        ("echo hi", 7.0, True),
    ]
    assert hooks.pre[1].argv[1:] == ["-c", "echo hi"] and hooks.pre[1].argv[0].endswith("sh")
    [stop] = hooks.matching("Stop")
    assert (stop.label, stop.timeout) == ("./s.sh", 600.0)  # Claude Code's default for a command


# --- Claude Code's settings files -----------------------------------------------------------------


def test_settings_files_are_the_users_then_the_projects(tmp_path):
    assert claude_settings_files(tmp_path / "p", tmp_path / "h") == [
        tmp_path / "h" / ".claude" / "settings.json",
        tmp_path / "p" / ".claude" / "settings.json",
        tmp_path / "p" / ".claude" / "settings.local.json",
    ]


def test_a_settings_file_is_read_with_what_mm_does_not_run_skipped(tmp_path):
    path = tmp_path / "settings.json"
    assert claude_settings_hooks(path) == (None, [])
    path.write_text(
        json.dumps(
            {
                "permissions": {"allow": ["Bash(ls)"]},
                "hooks": {
                    "PreCompact": [{"hooks": [{"type": "command", "command": "x"}]}],
                    "Stop": [
                        {
                            "hooks": [
                                {"type": "prompt", "prompt": "done?"},
                                {"type": "command", "command": "y"},
                            ]
                        }
                    ],
                },
            },
            indent="\t",
        )
    )
    spec, warnings = claude_settings_hooks(path)
    assert spec is not None and [h.hooks[0].command for h in spec.stop if h.hooks] == ["y"]
    assert warnings == [
        f"{path}: PreCompact hooks are not run by mm (it runs SessionStart, UserPromptSubmit, PreToolUse, "
        "PostToolUse, Notification, Stop, SessionEnd)",
        f"{path}: a prompt hook of Stop is not run by mm (command hooks only)",
    ]


def test_a_settings_file_read_again_unchanged_is_not_built_again_and_is_still_trusted_or_not(
    tmp_path, monkeypatch
):
    # Every prompt of an agent with `import: claude` reads the settings files: the same text gives the
    # same hooks, built once; whether a project's file may run them is asked every time; an edit is seen.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    project = tmp_path / "p"
    path = project / ".claude" / "settings.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "y"}]}]}}))
    built: list[str] = []
    real = config_hooks._runnable
    monkeypatch.setattr(config_hooks, "_runnable", lambda p, h: built.append(str(p)) or real(p, h))
    first, _ = claude_settings_hooks(path)
    again, _ = claude_settings_hooks(path)
    assert first is not None and again is first and len(built) == 1
    nobody = Trust({})
    assert claude_settings_hooks(path, project=project, home=tmp_path, trust=nobody) == (None, [])
    assert [u.path for u in nobody.untrusted] == [str(path)] and nobody.untrusted[0].powers == [
        "hook at Stop: runs y"
    ]
    trusted = Trust({str(path): nobody.untrusted[0].digest})
    assert claude_settings_hooks(path, project=project, home=tmp_path, trust=trusted)[0] is first
    path.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "z"}]}]}}))
    edited, _ = claude_settings_hooks(path)
    assert edited is not None and edited.stop[0].hooks[0].command == "z" and len(built) == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"hooks": {\n"Stop": [}\n}', ":2: not valid JSON: Expecting value (column 10)"),
        ("[1]", ":1: expected a JSON object, found list"),
        (
            '{\n\t"hooks": {\n\t\t"Stop": [{"hooks": [{"type": "command"}]}]\n\t}\n}',
            ":3: hooks.Stop[0].hooks[0].command: missing",
        ),
        (
            '{"hooks": {"Stop": [{"matcher": 3, "hooks": []}]}}',
            'hooks.Stop[0].matcher: expected tool names like "bash|write_*"',
        ),
        ("{" * 200 + "}" * 200, "nested too deep"),
    ],
)
def test_a_malformed_settings_file_is_an_error_with_its_line(tmp_path, text, message):
    path = tmp_path / "settings.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        claude_settings_hooks(path)
    assert message in str(err.value) and str(path) in str(err.value)


def test_a_settings_file_that_is_a_device_or_a_fifo_is_never_read(tmp_path):
    # A cloned repository's .claude/settings.json may be a symbolic link to /dev/zero (read whole, it
    # would fill the daemon's memory) or a FIFO (opening it waits for a writer that never comes). Such a
    # path is no settings file; one that becomes such after that look is refused by the read itself.
    zero, fifo = tmp_path / "zero.json", tmp_path / "fifo.json"
    zero.symlink_to("/dev/zero")
    os.mkfifo(fifo)
    for path, kind in ((zero, "a character device"), (fifo, "a named pipe")):
        assert claude_settings_hooks(path) == (None, [])
        with pytest.raises(ConfigError) as err:
            config_hooks._read_json_text(path)
        assert f"{path}: cannot read it: not a regular file but {kind}" in str(err.value)


# --- events other than a tool call -------------------------------------------------------------------


async def event(tmp_path: Path, name: str, body: str, fields: dict[str, Any], subject: tuple[str, ...] = ()):
    bash_hook(tmp_path, "e.sh", body)
    spec = load_spec(tmp_path, f"{name}: [{{hooks: [{{type: command, command: ./e.sh}}]}}]\n")
    hooks = merged_hooks(HooksSpec(), tmp_path, spec, tmp_path)
    site = Site(session_id="s", cwd=tmp_path, transcript_path="/t.jsonl")
    return await run_event_hooks(hooks, name, site=site, fields=fields, subject=subject)


async def test_prompt_hooks_plain_stdout_is_context_and_exit_2_blocks(tmp_path):
    out = await event(
        tmp_path, "UserPromptSubmit", "cat > in.json\necho 'It is Tuesday.'\n", {"prompt": "hi"}
    )
    assert (out.context, out.blocked) == (["It is Tuesday."], None)
    got = json.loads((tmp_path / "in.json").read_text())
    assert {k: got[k] for k in ("hook_event_name", "prompt", "transcript_path", "session_id")} == {
        "hook_event_name": "UserPromptSubmit",
        "prompt": "hi",
        "transcript_path": "/t.jsonl",
        "session_id": "s",
    }
    out = await event(tmp_path, "UserPromptSubmit", "echo 'not today' >&2\nexit 2\n", {"prompt": "hi"})
    assert out.blocked == "not today"


async def test_a_stop_hooks_block_is_its_reason_and_plain_stdout_is_no_context(tmp_path):
    body = 'echo \'{"decision": "block", "reason": "run the tests first"}\'\n'
    out = await event(tmp_path, "Stop", body, {"stop_hook_active": False})
    assert (out.blocked, out.context) == ("run the tests first", [])
    out = await event(tmp_path, "Stop", "echo just words\n", {"stop_hook_active": True})
    assert (out.blocked, out.context) == (None, [])


async def test_session_start_and_notification_matchers_match_their_subject(tmp_path):
    bash_hook(tmp_path, "n.sh", "cat > n.json\n")
    spec = load_spec(
        tmp_path,
        "SessionStart: [{matcher: resume, hooks: [{type: command, command: 'echo resumed'}]}]\n"
        "Notification: [{matcher: permission_prompt, hooks: [{type: command, command: ./n.sh}]}]\n",
    )
    hooks = merged_hooks(HooksSpec(), tmp_path, spec, tmp_path)
    site = Site(session_id="s", cwd=tmp_path)
    started = await run_event_hooks(
        hooks, "SessionStart", site=site, fields={"source": "startup"}, subject=("startup",)
    )
    assert started.events == [] and started.context == []
    resumed = await run_event_hooks(
        hooks, "SessionStart", site=site, fields={"source": "resume"}, subject=("resume",)
    )
    assert resumed.context == ["resumed"]
    fields = {"message": "mm needs your permission to use bash", "notification_type": "permission_prompt"}
    await run_event_hooks(hooks, "Notification", site=site, fields=fields, subject=("permission_prompt",))
    assert json.loads((tmp_path / "n.json").read_text())["message"] == "mm needs your permission to use bash"
