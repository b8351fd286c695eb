"""Input nested deep or grown big, from a model, a client, a hook or an MCP server (issue 13, item 1).

Python's decoders recurse once per level, so a few kilobytes of ``[[[[…`` used to raise
RecursionError inside mmd: the daemon died with every running turn. Each decoder of input mm did
not write now runs a depth (and size) check first (mmd/untrusted.py, mmd/rpc/framing.py). The
decode layer, driven with thousands of generated nestings, is in tests/unit/test_untrusted.py;
these drive a real daemon over its real socket: the scripted model sends the hostile arguments, a raw socket sends
the hostile frames, a real hook and real MCP servers print the hostile JSON, a project nests its folders
1,500 deep (os.walk recursed too). Every case ends with ``assert_daemon_serves``.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from mmd.rpc import DEFAULT_MAX_DEPTH, Splitter
from mmd.untrusted import (
    MAX_ARGUMENTS_BYTES,
    MAX_DEPTH,
    MAX_DOCUMENT_DEPTH,
)

from ...folders import chain
from ..conftest import run_mm, socket_of, spawn_mm, write_config
from ..mcp_servers import SEED
from .serves import assert_daemon_serves

HERE = Path(__file__).resolve().parent
# A stand-in MCP server (raw JSON-RPC over stdio) that answers every call with a deep line.
DEEP_SERVER = HERE.parent / "mcp_servers" / "deep_server.py"
# The nesting of the report: tool-call arguments about 1,500 levels deep.
REPORTED = 1500


def nested(depth: int, leaf: str = '"x"') -> str:
    """``{"path": [[…leaf…]]}``: an arguments object whose path nests *depth* levels in all."""
    inner = "[" * (depth - 1) + leaf + "]" * (depth - 1)
    return '{"path": ' + inner + "}"


# --- the decode layer, generated ------------------------------------------------------------------


# --- end to end: tool-call arguments from the model -----------------------------------------------


def call(name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def prompt(work: Path, *extra: str) -> Any:
    return run_mm("--yolo", "--agent", "agent.yaml", *extra, "-p", "go", cwd=work, timeout=120)


def session_events(work: Path) -> list[dict[str, Any]]:
    rows = json.loads(run_mm("sessions", "list", "--json", cwd=work).stdout)
    shown = run_mm("sessions", "show", "--json", rows[0]["id"], cwd=work)
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)["events"]


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["kind"] == kind]


def use_model(home: Path, work: Path, scripted: Any, steps: list[dict[str, Any]], how: str) -> Any:
    """Serve *steps* the way *how* says; returns the external server, or None for the in-daemon one."""
    if how == "in-daemon":  # `scripted:` models are served inside mmd: a crash there is mmd's
        (work / "script.json").write_text(json.dumps({"responses": steps}))
        (work / "agent.yaml").write_text("model: scripted:script.json\n")
        return None
    server = scripted(steps, default=False)
    base = f"{server.url}/v1" if how == "openai" else server.url
    write_config(
        home, {"providers": {"s": {"kind": how, "base_url": base, "max_retries": 0}}, "default_model": "s/m"}
    )
    (work / "agent.yaml").write_text("system: test\n")
    return server


def tool_messages(server: Any, how: str) -> list[str]:
    body = server.requests()[-1]["body"]
    if how == "openai":
        return [m["content"] for m in body["messages"] if m["role"] == "tool"]
    return [b["content"] for b in blocks(body) if b.get("type") == "tool_result"]


def blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The content blocks of an Anthropic request's messages."""
    return [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]


@pytest.mark.parametrize("how", ["in-daemon", "openai", "anthropic"])
def test_arguments_nested_1500_deep_are_answered_and_the_turn_goes_on(mm_home, scripted, how):
    work = mm_home / "work"
    (work / "notes.txt").write_text("the notes\n")
    steps = [
        call("read_file", nested(REPORTED)),
        call("read_file", {"path": "notes.txt"}),
        {"text": "read them"},
    ]
    server = use_model(mm_home, work, scripted, steps, how)
    result = prompt(work)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "read them\n"
    results = of(session_events(work), "tool_result")
    assert [r["ok"] for r in results] == [False, True]
    answer = results[0]["content"]
    assert answer.startswith(
        f"read_file was not run. The arguments are nested too deep: {REPORTED:,} levels; "
        f"the limit is {MAX_DEPTH}.\nYou sent: read_file("
    )
    assert "Fix: Send a flatter object" in answer
    assert results[0]["data"]["error"]["code"] == "too_deep"
    if server is not None:  # what the model read, and the history it was sent back
        assert tool_messages(server, how)[0] == answer
    if how == "anthropic":  # the refused call goes back as an empty input, never decoded
        uses = [b for b in blocks(server.requests()[-1]["body"]) if b.get("type") == "tool_use"]
        assert [u["input"] for u in uses] == [{}, {"path": "notes.txt"}]
    assert_daemon_serves(mm_home)


def test_a_project_s_folders_nested_1500_deep_are_listed_and_searched_and_the_turn_goes_on(mm_home):
    """The red team's tree: list_files walked it with os.walk, which recursed (an internal error ended the
    turn). Its in-process half: the deep-tree tests of tests/unit/tools/test_file_tools.py."""
    work = mm_home / "work"
    (work / "main.py").write_text("print(1)\n")
    steps = [
        call("list_files", {"pattern": "**/*.py"}),
        call("grep", {"pattern": "secret", "glob": "*.py"}),
        {"text": "done"},
    ]
    use_model(mm_home, work, None, steps, "in-daemon")
    with chain(work, REPORTED) as bottom:
        (bottom / "deep.py").write_text("secret = 1\n")
        result = prompt(work)
        assert result.returncode == 0, result.stderr
        assert result.stdout == "done\n"
        results = of(session_events(work), "tool_result")
        deep = "d/" * REPORTED + "deep.py"
        assert [(r["ok"], r["content"]) for r in results] == [
            (True, f"{deep}\nmain.py"),
            (True, f"{deep}:1:secret = 1"),
        ]
    assert_daemon_serves(mm_home)


def test_oversized_arguments_are_answered_with_their_size(mm_home, scripted):
    work = mm_home / "work"
    content = "x" * (MAX_ARGUMENTS_BYTES + 1000)
    server = use_model(
        mm_home,
        work,
        scripted,
        [call("write_file", {"path": "big.txt", "content": content}), {"text": "ok"}],
        "openai",
    )
    result = prompt(work)
    assert result.returncode == 0, result.stderr
    [answer] = tool_messages(server, "openai")
    [sent] = [c for m in server.requests()[-1]["body"]["messages"] for c in m.get("tool_calls") or []]
    size = int(re.search(r"too large: ([\d,]+) bytes", answer).group(1).replace(",", ""))  # as written
    assert size > MAX_ARGUMENTS_BYTES
    # Not sent back whole: one such call would make every later request too big for the window.
    assert sent["function"]["arguments"] == (
        f"<{size:,} bytes of arguments, over the limit of {MAX_ARGUMENTS_BYTES:,}: not kept in the conversation>"
    )
    assert answer.startswith(
        f"write_file was not run. The arguments are too large: {size:,} bytes; "
        f"the limit is {MAX_ARGUMENTS_BYTES:,} bytes.\n"
    )
    assert not (work / "big.txt").exists()
    assert_daemon_serves(mm_home)


def test_deep_json_written_in_the_text_stays_text(mm_home, scripted):
    work = mm_home / "work"
    deep = "[" * 5000 + "]" * 5000
    tagged = '<tool_call>{"name": "read_file", "arguments": ' + deep + "}</tool_call>"
    fenced = '```json\n{"name": "read_file", "arguments": {"path": ' + deep + "}}\n```"
    bare = "and bare: {{{" + deep + " and " + '{"a":' * 3000
    text = "\n".join([tagged, fenced, bare])
    steps = [{"text": text}, {"text": "I could not make that call."}]
    use_model(mm_home, work, scripted, steps, "openai")  # recovery is on for 127.0.0.1
    result = prompt(work)
    assert result.returncode == 0, result.stderr
    # Shown to the person (stderr) as the model wrote it; no call in it is run, and as it is no answer, the
    # model is asked for one: stdout gets only that answer.
    assert text in result.stderr
    assert result.stdout == "I could not make that call.\n"
    assert of(session_events(work), "recovered_tool_call") == []
    assert_daemon_serves(mm_home)


def test_a_provider_answer_nested_too_deep_ends_the_turn_with_a_clear_error(mm_home, scripted):
    work = mm_home / "work"
    body = '{"choices": [{"message": {"content": ' + "[" * 100_000 + "]" * 100_000 + "}}]}"
    use_model(mm_home, work, scripted, [{"raw": body}], "openai")
    result = prompt(work)
    assert result.returncode == 1
    assert (
        f"the provider's answer is nested too deep: 100,004 levels; the limit is {MAX_DOCUMENT_DEPTH}"
        in result.stderr
    )
    assert "Try again; if it happens again, check that base_url in config.yaml" in result.stderr
    assert_daemon_serves(mm_home)


# --- end to end: raw frames on the socket ------------------------------------------------------


def deep_frames() -> dict[str, bytes]:
    """Hostile frames of about a kilobyte or less, each nested 1,000 levels or more."""
    handshake = msgspec.msgpack.encode([0, 1, "handshake", [{"protocol": 1}]])
    return {
        "fixarrays": b"\x91" * 1000 + b"\xc0",
        "array16s": b"\xdc\x00\x01" * 400 + b"\xc0",
        "maps": b"\x81\xa1k" * 1000 + b"\xc0",
        "deep params": handshake[:-1] + b"\x91" * 1000 + b"\xc0",
        "after a good frame": handshake + b"\x91" * 1000 + b"\xc0",
    }


def exchange(sock_path: Path, data: bytes) -> list[Any]:
    """Send *data* on a fresh connection and read every message until the daemon closes it."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(30)
        sock.connect(str(sock_path))
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return [msgspec.msgpack.decode(frame) for frame in Splitter().feed(received)]


def test_frames_nested_deep_get_an_error_and_the_daemon_serves_the_running_turn(mm_home, scripted, daemon):
    work = mm_home / "work"
    # A turn in flight on another connection: the model's answer comes after the frames are refused.
    server = use_model(mm_home, work, scripted, [{"text": "slow answer", "delay": 3}], "openai")
    running = spawn_mm("--agent", "agent.yaml", "-p", "go", cwd=work)
    try:
        deadline = time.monotonic() + 30
        while not server.requests() and time.monotonic() < deadline:  # the turn reached the model
            time.sleep(0.05)
        for name, data in deep_frames().items():
            messages = exchange(socket_of(mm_home), data)
            errors = [m for m in messages if m[:2] == [2, "error"]]
            assert len(errors) == 1, (name, messages)
            [error] = errors[0][2]
            assert error["code"] == "protocol_error", name
            assert f"frame nested more than {DEFAULT_MAX_DEPTH} levels deep" in error["message"], name
        out, err = running.communicate(timeout=60)
    finally:
        if running.poll() is None:
            running.kill()
            running.communicate()
    assert running.returncode == 0, err
    assert out == "slow answer\n"
    assert daemon.poll() is None
    assert_daemon_serves(mm_home)


# --- end to end: a hook, MCP servers --------------------------------------------------------------


def test_a_hook_printing_100k_deep_json_is_logged_and_the_call_goes_on(mm_home, scripted):
    work = mm_home / "work"
    (work / "notes.txt").write_text("the notes\n")
    hook = work / "hooks" / "deep.py"
    hook.parent.mkdir()
    hook.write_text(
        f"#!{sys.executable}\nimport sys\nsys.stdin.read()\n"
        "sys.stdout.write('{\"a\":' * 100_000 + '1' + '}' * 100_000)\n"
    )
    hook.chmod(0o755)
    server = use_model(
        mm_home, work, scripted, [call("read_file", {"path": "notes.txt"}), {"text": "done"}], "openai"
    )
    (work / "agent.yaml").write_text(
        yaml.safe_dump({"hooks": {"preToolCall": [{"matcher": "read_file", "command": ["./hooks/deep.py"]}]}})
    )
    result = prompt(work)
    assert result.returncode == 0, result.stderr
    [answer] = tool_messages(server, "openai")
    assert "the notes" in answer  # the tool ran
    events = session_events(work)
    [hook_event] = of(events, "hook")
    assert hook_event["decision"] == "error"
    # The hook's stdout is read up to 64 KiB: 65,536 bytes of {"a": open 13,108 braces.
    why = f"stdout is JSON nested too deep: 13,108 levels; the limit is {MAX_DOCUMENT_DEPTH}"
    assert hook_event["error"] == f"{why}; the answer was ignored"
    log = (mm_home / "state" / "mm" / "mmd.log").read_text()
    assert f"preToolCall hook './hooks/deep.py' for read_file: hook error: {why}" in log
    assert_daemon_serves(mm_home)


def test_an_mcp_error_whose_last_line_nests_deep_is_answered(mm_home, scripted, monkeypatch):
    work = mm_home / "work"
    monkeypatch.setenv("MM_MCP_LOG", str(mm_home / "mcp.jsonl"))
    deep = "[" * 50_000 + "]" * 50_000
    server = use_model(
        mm_home,
        work,
        scripted,
        [call("deploy", {"service": "billing\n" + deep}), {"text": "noted"}],
        "openai",
    )
    entry = {"command": sys.executable, "args": [str(SEED), "stdio"], "tools": {"include": ["deploy"]}}
    (work / "agent.yaml").write_text(yaml.safe_dump({"mcp": {"seed": entry}}))
    result = prompt(work)
    assert result.returncode == 0, result.stderr
    [answer] = tool_messages(server, "openai")
    # The server's message ends with a line nested 50,000 deep: read as text, never decoded.
    assert answer.startswith(
        "deploy failed. Error executing tool deploy: the deploy system refused billing\n"
    )
    # 100 KB of answer is more than its share of the window: the model reads it cut.
    [result_event] = of(session_events(work), "tool_result")
    error = result_event["data"]["error"]
    assert (error["code"], error["class"]) == ("tool_error", "fix_and_retry")
    assert result_event["data"]["cut_to_window"] is True
    assert_daemon_serves(mm_home)


def test_an_mcp_answer_line_nested_deep_is_answered_at_once(mm_home, scripted):
    work = mm_home / "work"
    server = use_model(
        mm_home,
        work,
        scripted,
        [call("echo", {"text": "hi"}), {"text": "the server answered badly"}],
        "openai",
    )
    entry = {"command": sys.executable, "args": [str(DEEP_SERVER), "100000"], "timeout": 600}
    (work / "agent.yaml").write_text(yaml.safe_dump({"mcp": {"deep": entry}}))
    result = prompt(work)  # well before the call's timeout of 600 s, or run_mm's 120 s
    assert result.returncode == 0, result.stderr
    [answer] = tool_messages(server, "openai")
    assert answer.startswith(
        "echo failed. The MCP server deep answered badly: mm refused its answer: "
        f"it is nested too deep: 100,003 levels; the limit is {MAX_DOCUMENT_DEPTH}."
    )
    assert "Sending the same call again will not help." in answer
    assert_daemon_serves(mm_home)


def test_an_mcp_tool_whose_schema_nests_too_deep_is_left_out_with_a_warning(mm_home, scripted):
    work = mm_home / "work"
    entry = {"command": sys.executable, "args": [str(DEEP_SERVER)]}
    (work / "agent.yaml").write_text(yaml.safe_dump({"mcp": {"deep": entry}}))
    listed = run_mm("tools", "list", "--agent", "agent.yaml", cwd=work, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert "echo" in listed.stdout and "nested" not in listed.stdout
    assert (
        "warning: MCP server deep: tool nested is left out: its inputSchema is nested more than "
        f"{MAX_DEPTH} levels deep" in listed.stderr
    )
    assert_daemon_serves(mm_home)
