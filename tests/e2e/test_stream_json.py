"""`mm -p --output-format json|stream-json` against a real daemon and the scripted model: Claude Code's shapes.

The field lists below are written from Claude Code's Agent SDK reference (the TypeScript ``SDKMessage``
types: ``SDKSystemMessage``, ``SDKAssistantMessage``, ``SDKUserMessage``, ``SDKResultMessage``,
``SDKPermissionDeniedMessage``, ``SDKPermissionDenial``, and the Anthropic ``Message`` / ``Usage`` they carry);
docs/cli.md cites them and says which fields mm leaves out (``claude_code_version``) and adds.
"""

from __future__ import annotations

import json
from typing import Any

from .conftest import run_mm

# SDKSystemMessage, subtype "init" (claude_code_version left out: mm is not Claude Code; mm_version instead).
INIT = {
    "type": str,
    "subtype": str,
    "uuid": str,
    "session_id": str,
    "apiKeySource": str,
    "cwd": str,
    "tools": list,
    "mcp_servers": list,
    "model": str,
    "permissionMode": str,
    "slash_commands": list,
    "output_style": str,
    "skills": list,
    "plugins": list,
}
PERMISSION_MODES = {"default", "acceptEdits", "bypassPermissions", "plan", "dontAsk"}
# SDKAssistantMessage and the Anthropic Message in it.
ASSISTANT = {"type": str, "uuid": str, "session_id": str, "message": dict, "parent_tool_use_id": type(None)}
MESSAGE = {
    "id": str,
    "type": str,
    "role": str,
    "model": str,
    "content": list,
    "stop_reason": (str, type(None)),
    "stop_sequence": type(None),
    "usage": dict,
}
USAGE = {
    "input_tokens": int,
    "output_tokens": int,
    "cache_creation_input_tokens": int,
    "cache_read_input_tokens": int,
}
# SDKUserMessage (uuid is optional there; mm sends one).
USER = {"type": str, "session_id": str, "message": dict, "parent_tool_use_id": type(None)}
BLOCKS = {
    "text": {"type": str, "text": str},
    "tool_use": {"type": str, "id": str, "name": str, "input": dict},
    "tool_result": {"type": str, "tool_use_id": str, "content": (str, list), "is_error": bool},
}
# SDKResultMessage: the fields of both variants, then each variant's own.
RESULT = {
    "type": str,
    "subtype": str,
    "uuid": str,
    "session_id": (str, type(None)),
    "duration_ms": int,
    "duration_api_ms": int,
    "is_error": bool,
    "num_turns": int,
    "stop_reason": (str, type(None)),
    "total_cost_usd": float,
    "usage": dict,
    "modelUsage": dict,
    "permission_denials": list,
}
RESULT_SUCCESS = {**RESULT, "result": str}
RESULT_ERROR = {**RESULT, "errors": list}
SUBTYPES = {"success", "error_max_turns", "error_during_execution"}
# SDKPermissionDeniedMessage and SDKPermissionDenial.
DENIED = {"type": str, "subtype": str, "tool_name": str, "tool_use_id": str, "message": str, "uuid": str}
DENIAL = {"tool_name": str, "tool_use_id": str, "tool_input": dict}


def has(record: dict[str, Any], fields: dict[str, Any], what: str) -> None:
    for name, kind in fields.items():
        assert name in record, f"{what} lacks {name}: {record}"
        assert isinstance(record[name], kind), f"{what}.{name} is {record[name]!r}: {record}"


def check_line(record: dict[str, Any]) -> None:
    """One stream-json line, checked against the documented fields of its type."""
    kind = record["type"]
    if kind == "system" and record["subtype"] == "init":
        has(record, INIT, "init")
        assert record["permissionMode"] in PERMISSION_MODES
        for server in record["mcp_servers"]:
            has(server, {"name": str, "status": str}, "mcp_servers[]")
    elif kind == "system" and record["subtype"] == "permission_denied":
        has(record, DENIED, "permission_denied")
    elif kind == "assistant":
        has(record, ASSISTANT, "assistant")
        has(record["message"], MESSAGE, "assistant.message")
        assert (record["message"]["type"], record["message"]["role"]) == ("message", "assistant")
        has(record["message"]["usage"], USAGE, "assistant.message.usage")
        for block in record["message"]["content"]:
            assert block["type"] in ("text", "tool_use"), block
            has(block, BLOCKS[block["type"]], block["type"])
    elif kind == "user":
        has(record, USER, "user")
        assert record["message"]["role"] == "user"
        for block in record["message"]["content"]:
            assert block["type"] == "tool_result", block
            has(block, BLOCKS["tool_result"], "tool_result")
    elif kind == "result":
        has(record, RESULT_ERROR if record["is_error"] else RESULT_SUCCESS, "result")
        assert record["subtype"] in SUBTYPES
        assert record["is_error"] == (record["subtype"] != "success")
        has(record["usage"], USAGE, "result.usage")
        for denial in record["permission_denials"]:
            has(denial, DENIAL, "permission_denials[]")
    else:
        assert kind == "system", record  # informational, compact_boundary: mm sends no other type
        has(record, {"subtype": str, "uuid": str, "session_id": str}, "system")


def lines(stdout: str) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in stdout.splitlines()]
    for record in records:
        check_line(record)
    return records


STEPS = [
    {
        "text": "Let me look.",
        "tool_calls": [{"name": "bash", "arguments": {"command": "echo hi from bash"}}],
        "usage": {"input_tokens": 100, "output_tokens": 10},
    },
    {
        "tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}],
        "usage": {"input_tokens": 150, "output_tokens": 7},
    },
    {"text": "The notes say alpha.", "usage": {"input_tokens": 200, "output_tokens": 5}},
]


def test_every_stream_json_line_of_a_run_with_tool_calls_has_claude_codes_fields(mm_home, scripted):
    work = mm_home / "work"
    (work / "notes.txt").write_text("alpha\n")
    scripted(STEPS)
    result = run_mm(
        "-p", "--yolo", "--verbose", "--output-format", "stream-json", "what do the notes say?", cwd=work
    )
    assert result.returncode == 0, result.stderr
    records = lines(result.stdout)
    assert [r["type"] for r in records] == [
        "system",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
        "result",
    ]
    init, result_record = records[0], records[-1]
    assert init["subtype"] == "init" and init["cwd"] == str(work) and init["model"] == "script/scripted"
    assert {"bash", "read_file", "write_file"} <= set(init["tools"])
    assert init["permissionMode"] == "bypassPermissions"  # --yolo
    assert {r["session_id"] for r in records} == {init["session_id"]} and len(init["session_id"]) == 12
    # Tool input is a JSON object, and every tool_result answers a tool_use sent before it.
    uses = [
        b
        for r in records
        if r["type"] == "assistant"
        for b in r["message"]["content"]
        if b["type"] == "tool_use"
    ]
    assert [(u["name"], u["input"]) for u in uses] == [
        ("bash", {"command": "echo hi from bash"}),
        ("read_file", {"path": "notes.txt"}),
    ]
    results = [b for r in records if r["type"] == "user" for b in r["message"]["content"]]
    assert [b["tool_use_id"] for b in results] == [u["id"] for u in uses]
    assert "hi from bash" in results[0]["content"] and "alpha" in results[1]["content"]
    assert records[1]["message"]["content"][0] == {"type": "text", "text": "Let me look."}
    assert records[1]["message"]["stop_reason"] == "tool_use"
    assert records[5]["message"]["stop_reason"] == "end_turn"
    assert result_record["subtype"] == "success" and result_record["is_error"] is False
    assert result_record["result"] == "The notes say alpha."
    assert result_record["num_turns"] == 3
    assert result_record["usage"]["input_tokens"] == 450 and result_record["usage"]["output_tokens"] == 22
    assert result_record["total_cost_usd"] == 0.0
    assert result_record["duration_ms"] >= result_record["duration_api_ms"] >= 0


def test_json_prints_the_single_result_object(mm_home, scripted):
    work = mm_home / "work"
    (work / "notes.txt").write_text("alpha\n")
    scripted(STEPS)
    result = run_mm("--output-format", "json", "--yolo", "-p", "what do the notes say?", cwd=work)
    assert result.returncode == 0, result.stderr
    [record] = lines(result.stdout)
    assert record["type"] == "result" and record["subtype"] == "success"
    assert record["result"] == "The notes say alpha." and record["num_turns"] == 3
    assert record["usage"]["input_tokens"] == 450
    # mm's own fields beside Claude's: the turn's status and every call, its arguments an object.
    assert record["status"] == "ok" and record["error"] is None
    assert record["tool_calls"] == [
        {"name": "bash", "arguments": {"command": "echo hi from bash"}},
        {"name": "read_file", "arguments": {"path": "notes.txt"}},
    ]


def test_a_denied_call_is_a_permission_denial_and_an_error_result(mm_home, scripted):
    work = mm_home / "work"
    scripted([{"tool_calls": [{"name": "bash", "arguments": {"command": "touch nope"}}]}])
    result = run_mm("--output-format", "stream-json", "-p", "make a file", cwd=work)
    assert result.returncode == 3, result.stderr
    records = lines(result.stdout)
    [denied] = [r for r in records if r.get("subtype") == "permission_denied"]
    assert denied["tool_name"] == "bash"
    final = records[-1]
    assert final["type"] == "result" and final["is_error"] is True
    assert final["subtype"] == "error_during_execution" and final["status"] == "denied"
    assert final["permission_denials"] == [
        {"tool_name": "bash", "tool_use_id": denied["tool_use_id"], "tool_input": {"command": "touch nope"}}
    ]
    assert not (work / "nope").exists()


def test_max_steps_is_error_max_turns(mm_home, scripted):
    work = mm_home / "work"
    (work / "mm.yaml").write_text("max_steps: 1\n")
    scripted([{"tool_calls": [{"name": "list_files", "arguments": {"path": "."}}]}, {"text": "never"}])
    result = run_mm("--output-format", "json", "-p", "look", cwd=work)
    assert result.returncode == 1, result.stderr
    [record] = lines(result.stdout)
    assert (record["subtype"], record["is_error"], record["status"]) == ("error_max_turns", True, "max_steps")


def test_setup_errors_still_print_an_error_result(mm_home, scripted):
    work = mm_home / "work"
    scripted([{"text": "never"}])
    (work / "agent.yaml").write_text("modle: x/y\n")
    for fmt in ("json", "stream-json"):
        bad_agent = run_mm("--output-format", fmt, "--agent", "agent.yaml", "-p", "hi", cwd=work)
        assert bad_agent.returncode == 1
        [record] = lines(bad_agent.stdout)
        assert record["is_error"] is True and record["subtype"] == "error_during_execution"
        assert "agent.yaml:1" in record["errors"][0] and "modle" in record["errors"][0]
        assert "agent.yaml:1" in bad_agent.stderr  # people still read it on stderr
    unknown = run_mm("--output-format", "json", "-m", "nosuch/model", "-p", "hi", cwd=work)
    assert unknown.returncode == 1
    [record] = lines(unknown.stdout)
    assert record["is_error"] is True and "nosuch" in record["errors"][0]


def test_an_unreachable_daemon_is_an_error_result(mm_home, tmp_path, monkeypatch):
    # A socket path in a folder that cannot be created: the client cannot start a daemon there.
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("MM_SOCKET", str(blocker / "mmd.sock"))
    result = run_mm("--output-format", "json", "-p", "hi", cwd=mm_home / "work")
    assert result.returncode == 1
    [record] = lines(result.stdout)
    assert record["is_error"] is True and record["session_id"] is None and record["errors"][0]


def test_input_format_stream_json_runs_each_user_message_as_a_turn_of_one_session(mm_home, scripted):
    server = scripted([{"text": "one"}, {"text": "two"}])
    stdin = (
        json.dumps({"type": "user", "message": {"role": "user", "content": "first"}})
        + "\n"
        + json.dumps(
            {"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": "second"}]}}
        )
        + "\n"
    )
    result = run_mm(
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        input=stdin,
        cwd=mm_home / "work",
    )
    assert result.returncode == 0, result.stderr
    records = lines(result.stdout)
    results = [r for r in records if r["type"] == "result"]
    assert [r["result"] for r in results] == ["one", "two"]
    assert results[0]["session_id"] == results[1]["session_id"]
    sent = [m["content"] for m in server.requests()[1]["body"]["messages"] if m["role"] != "system"]
    assert sent == ["first", "one", "second"]


def test_input_format_stream_json_refuses_a_bad_line_with_its_number(mm_home, scripted):
    scripted([{"text": "one"}])
    stdin = json.dumps({"type": "user", "message": {"role": "user", "content": "first"}}) + "\nnot json\n"
    result = run_mm(
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        input=stdin,
        cwd=mm_home / "work",
    )
    assert result.returncode == 1
    final = lines(result.stdout)[-1]
    assert final["type"] == "result" and final["is_error"] is True
    assert "stdin line 2: not JSON" in final["errors"][0] and "stdin line 2" in result.stderr
    needs = run_mm("-p", "--input-format", "stream-json", input="", cwd=mm_home / "work")
    assert needs.returncode == 2 and "--output-format stream-json" in needs.stderr


def test_a_models_deeply_nested_arguments_do_not_stop_the_stream(mm_home, scripted):
    deep = '{"path": ' + "[" * 5000 + "]" * 5000 + "}"
    scripted([{"tool_calls": [{"name": "read_file", "arguments": deep}]}, {"text": "gave up"}])
    result = run_mm("--output-format", "stream-json", "-p", "read it", cwd=mm_home / "work")
    assert result.returncode == 0, result.stderr
    records = lines(result.stdout)
    [use] = [
        b
        for r in records
        if r["type"] == "assistant"
        for b in r["message"]["content"]
        if b["type"] == "tool_use"
    ]
    assert use["input"] == {"_raw": deep}
    assert records[-1]["result"] == "gave up"
