"""Hook protocol: real bash and Python hook scripts run as real processes by mmd.policy.hooks.

Each exit code and each JSON field, and the rules for several hooks on one
call (deny wins, input updates chain, contexts add up), are checked against
what the scripts really received and printed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mmd.config import load_agent_file, load_user_config
from mmd.config.hooks import HookSpec, HooksSpec
from mmd.config.loader import ConfigError
from mmd.models.base import ToolCall
from mmd.policy.hooks import Hooks, Site, hook_argv, merged_hooks, run_post_hooks, run_pre_hooks
from mmd.tools.base import ToolResult
from mmd.tools.builtin import make_builtins

from ...paths import ROOT

GUARD = ROOT / "contrib" / "hooks" / "guard.sh"
TOOLS = {t.name: t for t in make_builtins(None)}
CALL = ToolCall(id="call-1", name="bash", arguments='{"command": "ls"}')


@dataclass
class Session:
    """Where hooks run (its Site), and the events their outcomes reported (recorded here)."""

    cwd: Path
    id: str = "s-hooks"
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    @property
    def site(self) -> Site:
        return Site(session_id=self.id, cwd=self.cwd)

    def saw(self, outcome: Any) -> Any:
        self.events.extend(outcome.events)
        return outcome

    def hooks(self) -> list[dict[str, Any]]:
        return [d for k, d in self.events if k == "hook"]


def bash_hook(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(0o755)
    return path


def py_hook(folder: Path, name: str, body: str) -> Path:
    """A Python hook; ``data`` holds the JSON it read, and it is saved to ``<name>.in``."""
    path = folder / name
    path.write_text(
        f"#!{sys.executable}\nimport json, os, sys\ndata = json.load(sys.stdin)\n"
        f"open({str(folder / (name + '.in'))!r}, 'w').write(json.dumps({{'stdin': data, 'env': dict(os.environ), "
        "'cwd': os.getcwd()}))\n" + body
    )
    path.chmod(0o755)
    return path


def seen(folder: Path, name: str) -> dict[str, Any]:
    return json.loads((folder / (name + ".in")).read_text())


def hooks_of(folder: Path, pre: list[dict[str, Any]] = (), post: list[dict[str, Any]] = ()) -> Hooks:  # type: ignore[assignment]
    spec = HooksSpec(pre_tool_call=[HookSpec(**h) for h in pre], post_tool_call=[HookSpec(**h) for h in post])
    return merged_hooks(HooksSpec(), folder, spec, folder)


async def pre(folder: Path, hooks: Hooks, args: dict[str, Any] | None = None, tool: str = "bash"):
    session = Session(cwd=folder)
    outcome = await run_pre_hooks(
        hooks, tool=TOOLS[tool], call=CALL, args=args or {"command": "ls"}, site=session.site
    )
    return session.saw(outcome), session


# --- exit codes --------------------------------------------------------------------------------


async def test_exit_0_without_output_lets_the_call_go_on_and_gets_the_claude_code_payload(tmp_path):
    py_hook(tmp_path, "h.py", "")
    work = tmp_path / "work"
    work.mkdir()
    session = Session(cwd=work)
    outcome = session.saw(
        await run_pre_hooks(
            hooks_of(tmp_path, pre=[{"command": ["./h.py"]}]),
            tool=TOOLS["bash"],
            call=CALL,
            args={"command": "ls"},
            site=session.site,
        )
    )
    assert outcome.answer is None and outcome.decision is None and outcome.args == {"command": "ls"}
    got = seen(tmp_path, "h.py")
    assert got["stdin"] == {
        "session_id": "s-hooks",
        "transcript_path": "",
        "cwd": str(work),
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "mm_event": "preToolCall",
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
        "tool_use_id": "call-1",
        "mm_tool_name": "bash",
        "mm_tool_input": {"command": "ls"},
    }
    assert got["cwd"] == str(work)
    env = got["env"]
    assert (env["MM_SESSION_ID"], env["MM_TOOL_CALL_ID"], env["MM_TOOL_NAME"]) == (
        "s-hooks",
        "call-1",
        "bash",
    )
    assert (env["MM_HOOK_EVENT"], env["MM_HOOK_DIR"], env["CLAUDE_PROJECT_DIR"]) == (
        "preToolCall",
        str(tmp_path),
        str(work),
    )
    [event] = session.hooks()
    assert (event["event"], event["hook"], event["exit_code"], event["decision"]) == (
        "preToolCall",
        "./h.py",
        0,
        None,
    )


async def test_exit_2_blocks_and_stderr_is_what_the_model_reads(tmp_path):
    bash_hook(tmp_path, "deny.sh", 'cat >/dev/null\necho "no deploys on Friday" >&2\nexit 2\n')
    outcome, session = await pre(tmp_path, hooks_of(tmp_path, pre=[{"command": "./deny.sh"}]))
    assert outcome.answer is not None and outcome.answer.ok is False
    assert outcome.answer.content.startswith("bash was not run: blocked by the preToolCall hook ./deny.sh.")
    assert outcome.answer.content.endswith("no deploys on Friday")
    assert outcome.answer.data == {"blocked": True, "hook": "./deny.sh", "reason": "no deploys on Friday"}
    assert [(e["exit_code"], e["decision"]) for e in session.hooks()] == [(2, "deny")]


@pytest.mark.parametrize("code", [1, 3, 127])
async def test_other_exit_codes_are_hook_errors_and_the_call_goes_on(tmp_path, code):
    bash_hook(tmp_path, "broken.sh", f'echo "something broke" >&2\nexit {code}\n')
    outcome, session = await pre(tmp_path, hooks_of(tmp_path, pre=[{"command": "./broken.sh"}]))
    assert outcome.answer is None and outcome.decision is None and outcome.args == {"command": "ls"}
    [event] = session.hooks()
    assert (event["exit_code"], event["decision"]) == (code, "error")
    assert event["error"] == f"exit code {code}: something broke"


async def test_timeout_is_a_hook_error_and_the_hook_tree_is_stopped(tmp_path):
    pid_file = tmp_path / "child.pid"
    bash_hook(tmp_path, "slow.sh", f"sleep 300 &\necho $! > {pid_file}\nwait\n")
    outcome, session = await pre(tmp_path, hooks_of(tmp_path, pre=[{"command": "./slow.sh", "timeout": 0.5}]))
    assert outcome.answer is None
    [event] = session.hooks()
    assert event["decision"] == "error" and event["exit_code"] is None
    assert event["error"].startswith("timed out after 0.5 s")
    import psutil

    assert (
        not psutil.pid_exists(int(pid_file.read_text()))
        or psutil.Process(int(pid_file.read_text())).status() == psutil.STATUS_ZOMBIE
    )


async def test_a_command_that_cannot_start_is_a_hook_error(tmp_path):
    outcome, session = await pre(tmp_path, hooks_of(tmp_path, pre=[{"command": ["./missing.sh"]}]))
    assert outcome.answer is None
    [event] = session.hooks()
    assert event["decision"] == "error" and "missing.sh" in event["error"]


# --- JSON fields ---------------------------------------------------------------------------------


def decide(output: dict[str, Any]) -> str:
    return f"print(json.dumps({output!r}))\n"


@pytest.mark.parametrize(
    ("output", "decision"),
    [
        ({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}}, "allow"),
        ({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "ask"}}, "ask"),
        ({"permissionDecision": "ask"}, "ask"),
        ({"decision": "approve"}, "allow"),
        ({}, None),
    ],
)
async def test_allow_and_ask_go_to_the_consent_gate(tmp_path, output, decision):
    py_hook(tmp_path, "h.py", decide(output))
    outcome, session = await pre(tmp_path, hooks_of(tmp_path, pre=[{"command": ["./h.py"]}]))
    assert outcome.answer is None and outcome.decision == decision
    assert session.hooks()[0]["decision"] == decision


@pytest.mark.parametrize(
    "output",
    [
        {"hookSpecificOutput": {"permissionDecision": "deny", "permissionDecisionReason": "not here"}},
        {"decision": "block", "reason": "not here"},
        {"permissionDecision": "deny", "permissionDecisionReason": "not here"},
    ],
)
async def test_deny_in_json_blocks_with_its_reason(tmp_path, output):
    py_hook(tmp_path, "h.py", decide(output))
    outcome, _ = await pre(tmp_path, hooks_of(tmp_path, pre=[{"command": ["./h.py"]}]))
    assert outcome.answer is not None and outcome.answer.content.endswith("\nnot here")


async def test_updated_input_replaces_the_arguments_after_the_contract(tmp_path):
    py_hook(
        tmp_path,
        "h.py",
        decide({"hookSpecificOutput": {"updatedInput": {"command": "ls -la", "timeout": "5"}}}),
    )
    outcome, session = await pre(tmp_path, hooks_of(tmp_path, pre=[{"command": ["./h.py"]}]))
    assert outcome.answer is None and outcome.updated
    assert outcome.args == {"command": "ls -la", "timeout": 5}  # coerced by the contract, like a model's
    assert session.hooks()[0]["updated_input"] is True


async def test_invalid_updated_input_is_answered_and_nothing_runs(tmp_path):
    py_hook(tmp_path, "h.py", decide({"updatedInput": {"cmd": "ls"}}))
    outcome, _ = await pre(tmp_path, hooks_of(tmp_path, pre=[{"command": ["./h.py"]}]))
    assert outcome.answer is not None and outcome.answer.ok is False
    assert outcome.answer.content.startswith(
        'bash was not run: the preToolCall hook ./h.py replaced its arguments with {"cmd": "ls"}, which are not valid:'
    )
    assert outcome.answer.data["hook_error"] == "invalid updatedInput"


async def test_additional_context_is_appended_to_the_result(tmp_path):
    py_hook(tmp_path, "h.py", decide({"hookSpecificOutput": {"additionalContext": "Tests live in t/."}}))
    outcome, _ = await pre(tmp_path, hooks_of(tmp_path, pre=[{"command": ["./h.py"]}]))
    result = outcome.with_context(ToolResult(ok=True, content="a\nb"))
    assert result.content == "a\nb\n\nTests live in t/."


async def test_continue_false_stops_the_turn_and_system_message_is_a_warning(tmp_path):
    py_hook(tmp_path, "h.py", decide({"continue": False, "stopReason": "quota used", "systemMessage": "bye"}))
    session = Session(cwd=tmp_path)
    outcome = await run_pre_hooks(
        hooks_of(tmp_path, pre=[{"command": ["./h.py"]}]),
        tool=TOOLS["bash"],
        call=CALL,
        args={"command": "ls"},
        site=session.site,
    )
    # The verdict says stop; the call pipeline ends the turn with it (tests/e2e/test_hooks.py).
    assert outcome.stop == "Stopped by the preToolCall hook ./h.py: quota used"
    assert ("warning", {"message": "preToolCall hook ./h.py: bye"}) in outcome.events


@pytest.mark.parametrize(
    ("stdout", "error"),
    [
        ("{not json", "stdout starts with { but is not valid JSON"),
        ('{"decision": "maybe"}', "unknown decision 'maybe'"),
        ('{"updatedInput": "ls"}', "updatedInput is not a JSON object"),
    ],
)
async def test_bad_json_is_a_hook_error(tmp_path, stdout, error):
    bash_hook(tmp_path, "h.sh", f"cat >/dev/null\nprintf '%s' '{stdout}'\n")
    outcome, session = await pre(tmp_path, hooks_of(tmp_path, pre=[{"command": "./h.sh"}]))
    assert outcome.answer is None and outcome.decision is None
    assert session.hooks()[0]["error"].startswith(error)


async def test_plain_text_on_stdout_is_only_shown(tmp_path):
    bash_hook(tmp_path, "h.sh", "cat >/dev/null\necho checked\n")
    outcome, session = await pre(tmp_path, hooks_of(tmp_path, pre=[{"command": "./h.sh"}]))
    assert outcome.answer is None and session.hooks()[0]["stdout"] == "checked\n"


# --- several hooks on one call --------------------------------------------------------------------


async def test_updates_chain_in_order_and_contexts_add_up(tmp_path):
    py_hook(
        tmp_path,
        "a.py",
        'print(json.dumps({"updatedInput": {"command": data["tool_input"]["command"] + " a"}, "additionalContext": "from a"}))\n',
    )
    py_hook(
        tmp_path,
        "b.py",
        'print(json.dumps({"updatedInput": {"command": data["tool_input"]["command"] + " b"}, "additionalContext": "from b"}))\n',
    )
    hooks = hooks_of(tmp_path, pre=[{"command": ["./a.py"]}, {"command": ["./b.py"]}])
    outcome, _ = await pre(tmp_path, hooks)
    assert seen(tmp_path, "b.py")["stdin"]["tool_input"] == {"command": "ls a"}
    assert outcome.args == {"command": "ls a b"} and outcome.context == ["from a", "from b"]


async def test_deny_wins_over_an_earlier_allow_and_ends_the_chain(tmp_path):
    py_hook(tmp_path, "allow.py", decide({"permissionDecision": "allow"}))
    bash_hook(tmp_path, "deny.sh", "cat >/dev/null\necho no >&2\nexit 2\n")
    py_hook(tmp_path, "after.py", "")
    hooks = hooks_of(
        tmp_path,
        pre=[{"command": ["./allow.py"]}, {"command": "./deny.sh"}, {"command": ["./after.py"]}],
    )
    outcome, session = await pre(tmp_path, hooks)
    assert outcome.decision == "deny" and outcome.answer is not None
    assert [e["decision"] for e in session.hooks()] == ["allow", "deny"]
    assert not (tmp_path / "after.py.in").exists()


async def test_ask_wins_over_allow_in_either_order_and_errors_are_skipped(tmp_path):
    py_hook(tmp_path, "allow.py", decide({"permissionDecision": "allow"}))
    py_hook(tmp_path, "ask.py", decide({"permissionDecision": "ask"}))
    bash_hook(tmp_path, "err.sh", "exit 1\n")
    for order in (["./allow.py", "./err.sh", "./ask.py"], ["./ask.py", "./err.sh", "./allow.py"]):
        outcome, session = await pre(tmp_path, hooks_of(tmp_path, pre=[{"command": c} for c in order]))
        assert outcome.decision == "ask"
        assert [e["decision"] for e in session.hooks()].count("error") == 1


async def test_matchers_are_globs_with_alternatives_and_ignore_case(tmp_path):
    bash_hook(tmp_path, "deny.sh", "cat >/dev/null\necho no >&2\nexit 2\n")
    hooks = hooks_of(tmp_path, pre=[{"matcher": "Bash|write_*", "command": "./deny.sh"}])
    [hook] = hooks.pre
    assert [hook.matches(n) for n in ("bash", "write_file", "read_file", "bashful")] == [
        True,
        True,
        False,
        False,
    ]
    outcome, _ = await pre(tmp_path, hooks, {"path": "x"}, tool="read_file")
    assert outcome.answer is None
    outcome, _ = await pre(tmp_path, hooks, {"path": "x", "content": ""}, tool="write_file")
    assert outcome.answer is not None


# --- postToolCall ---------------------------------------------------------------------------------


async def test_post_hook_reads_the_response_and_may_add_context_or_withhold_it(tmp_path):
    py_hook(tmp_path, "ctx.py", decide({"hookSpecificOutput": {"additionalContext": "Lint: clean."}}))
    bash_hook(tmp_path, "block.sh", 'cat >/dev/null\necho "output holds a secret" >&2\nexit 2\n')
    result = ToolResult(ok=True, content="hello", data={"exit_code": 0})
    session = Session(cwd=tmp_path)
    kept = await run_post_hooks(
        hooks_of(tmp_path, post=[{"command": ["./ctx.py"]}]),
        tool=TOOLS["bash"],
        call=CALL,
        args={"command": "echo hello"},
        result=result,
        site=session.site,
    )
    kept = kept.result
    assert kept.ok and kept.content == "hello\n\nLint: clean."
    payload = seen(tmp_path, "ctx.py")["stdin"]
    assert payload["hook_event_name"] == "PostToolUse" and payload["tool_input"] == {"command": "echo hello"}
    assert payload["tool_response"] == {"ok": True, "content": "hello", "data": {"exit_code": 0}}
    withheld = await run_post_hooks(
        hooks_of(tmp_path, post=[{"command": "./block.sh"}, {"command": ["./ctx.py"]}]),
        tool=TOOLS["bash"],
        call=CALL,
        args={"command": "echo hello"},
        result=result,
        site=session.site,
    )
    withheld = withheld.result
    assert not withheld.ok and "hello" not in withheld.content
    assert (
        withheld.content
        == "bash ran, but the postToolCall hook ./block.sh withheld its result.\noutput holds a secret"
    )


async def test_a_result_naming_a_file_that_is_not_utf8_reaches_a_post_hook_escaped(tmp_path):
    # os.walk gives a Latin-1 name with surrogate escapes: the hook's JSON could not be encoded, and the call
    # failed. Every encoder of the daemon's output escapes such text (messages.packed), this one too.
    py_hook(tmp_path, "ctx.py", decide({}))
    name = os.fsdecode(b"caf\xe9.txt")
    result = ToolResult(ok=True, content=f"{name}\nplain.txt", data={"files": [name]})
    kept = await run_post_hooks(
        hooks_of(tmp_path, post=[{"command": ["./ctx.py"]}]),
        tool=TOOLS["list_files"],
        call=CALL,
        args={"pattern": "*"},
        result=result,
        site=Session(cwd=tmp_path).site,
    )
    assert kept.result.ok
    payload = seen(tmp_path, "ctx.py")["stdin"]
    assert payload["tool_response"] == {
        "ok": True,
        "content": "caf\\xe9.txt\nplain.txt",
        "data": {"files": ["caf\\xe9.txt"]},
    }


# --- configuration ------------------------------------------------------------------------------


def test_command_forms_and_relative_paths(tmp_path):
    assert hook_argv(["./hooks/guard.sh", "--strict"], tmp_path) == [
        str(tmp_path / "hooks/guard.sh"),
        "--strict",
    ]
    assert hook_argv("../guard.sh", tmp_path / "agent") == [str(tmp_path / "guard.sh")]
    assert hook_argv("guard", tmp_path) == ["guard"]  # a bare name is looked up in PATH
    assert hook_argv("/abs/guard.sh", tmp_path) == ["/abs/guard.sh"]
    assert hook_argv("jq -r .tool_name | grep -q bash", tmp_path) == [
        "/bin/sh",
        "-c",
        "jq -r .tool_name | grep -q bash",
    ]


def test_user_hooks_run_before_the_agent_files_each_from_its_own_folder(tmp_path):
    (tmp_path / "agent").mkdir()
    (tmp_path / "config").mkdir()
    agent_file = tmp_path / "agent" / "agent.yaml"
    agent_file.write_text(
        "hooks:\n  preToolCall:\n    - {matcher: bash, command: [./a.sh], timeout: 10}\n"
        "  postToolCall:\n    - {command: ./p.sh}\n"
    )
    config_file = tmp_path / "config" / "config.yaml"
    config_file.write_text("hooks:\n  preToolCall:\n    - {command: ./u.sh}\n")
    agent, user = load_agent_file(agent_file), load_user_config(config_file)
    hooks = merged_hooks(user.hooks, config_file.parent, agent.hooks, agent_file.parent)
    assert [(h.argv, h.matcher, h.timeout) for h in hooks.pre] == [
        ([str(tmp_path / "config" / "u.sh")], "*", 60.0),
        ([str(tmp_path / "agent" / "a.sh")], "bash", 10.0),
    ]
    assert [h.argv for h in hooks.post] == [[str(tmp_path / "agent" / "p.sh")]]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "hooks:\n  PreTooluse: []\n",
            "2: hooks.PreTooluse: unknown key; expected one of Notification, PostToolUse, PreToolUse, "
            "SessionEnd, SessionStart, Stop, UserPromptSubmit, import, postToolCall, preToolCall — "
            'did you mean "PreToolUse"?',
        ),
        (
            "hooks:\n  Stop:\n    - hooks:\n        - {type: prompt, command: x}\n",
            '4: hooks.Stop[0].hooks[0].type: expected "command" (mm runs command hooks only), found a string',
        ),
        (
            "hooks:\n  PreToolUse:\n    - matcher: 'Edit|(Write'\n      hooks: [{type: command, command: x}]\n",
            "3: hooks.PreToolUse[0].matcher: not a regular expression",
        ),
        (  # regex would build a million items compiling it
            "hooks:\n  PreToolUse:\n    - matcher: '(?:Bash{1000}){1000}'\n      hooks: [{type: command, command: x}]\n",
            "3: hooks.PreToolUse[0].matcher: not a regular expression: too complex: compiled, it would unroll",
        ),
        (
            "hooks:\n  PreToolUse:\n    - {timeout: 3, hooks: [{type: command, command: x}]}\n",
            "3: hooks.PreToolUse[0].timeout: a timeout beside hooks:",
        ),
        (
            "hooks:\n  PreToolUse:\n    - {command: x, hooks: [{type: command, command: x}]}\n",
            "3: hooks.PreToolUse[0]: both command and hooks",
        ),
        ("hooks:\n  import: codex\n", '2: hooks.import: expected one of "claude", found a string ("codex")'),
        (
            "hooks:\n  preToolCall:\n    - {command: 3}\n",
            '3: hooks.preToolCall[0].command: expected a list like ["./hooks/guard.sh"] or a string',
        ),
        (
            "hooks:\n  preToolCall:\n    - {command: x, timeout: 0}\n",
            "3: hooks.preToolCall[0].timeout: expected a number, more than 0",
        ),
        (
            "hooks:\n  preToolCall:\n    - {matcher: bash}\n",
            "3: hooks.preToolCall[0]: neither command nor hooks; expected command: (mm's shape) or hooks:",
        ),
    ],
)
def test_config_errors_name_the_line(tmp_path, text, message):
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_agent_file(path)
    assert message in str(err.value)


# --- the contrib guard, unchanged ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "command", "code"),
    [
        ("Bash", "rm -rf /", 2),
        ("bash", "true || rm -rf /", 2),
        ("bash", "rm -fr ~", 2),
        ("bash", 'rm -r -f "$HOME"', 2),
        ("bash", "rm --recursive --force /*", 2),
        ("bash", "rm -rf ./build", 0),
        ("bash", "ls -la /", 0),
        ("write_file", "rm -rf /", 0),
    ],
)
def test_guard_as_claude_code_runs_it(tool, command, code):
    payload = {
        "session_id": "abc",
        "transcript_path": "/tmp/t.jsonl",
        "cwd": "/tmp",
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": {"command": command},
    }
    done = subprocess.run([str(GUARD)], input=json.dumps(payload), capture_output=True, text=True, timeout=30)
    assert done.returncode == code, done.stderr
    assert ("Blocked by guard.sh" in done.stderr) == (code == 2)


@pytest.mark.parametrize(
    ("stdout", "error"),
    [
        ('{"a":' * 5000 + "1" + "}" * 5000, "stdout is JSON nested too deep: 5,000 levels; the limit is 128"),
        (
            '{"hookSpecificOutput": {"updatedInput": {"command": ' + "[" * 70 + '"ls"' + "]" * 70 + "}}}",
            "updatedInput is nested too deep: 71 levels; the limit is 64",
        ),
    ],
)
def test_an_answer_nested_too_deep_is_a_hook_error_and_never_decoded(stdout, error):
    from mmd.policy.hooks import HookRun, read_verdict

    verdict = read_verdict(HookRun(exit_code=0, stdout=stdout, stderr=""))
    assert verdict.error == f"{error}; the answer was ignored"
    assert (verdict.decision, verdict.updated_input) == (None, None)
