"""Phases and recovered tool calls end to end: a real mmd, the real mm CLI, a scripted model server.

Phase exposure is judged from the request bodies the scripted server
recorded: a tool outside the current phase is absent from the request.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from .. import paths
from .conftest import run_mm, write_config
from .test_declared import connect, interactive_turn, of, session_events, tool_messages

FIXTURES = paths.FIXTURES / "recovery"
PHASES = {
    "phases": [
        {"name": "plan", "tools": ["read_file", "grep"]},
        {"name": "act", "tools": ["read_file", "*_file"], "description": "Make the planned change"},
    ]
}


def offered(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request["body"].get("tools", [])]


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def turn(client: Any, work: Path, answer: str) -> list[dict[str, Any]]:
    """One turn as an interactive client (no yolo), answering every consent ask with *answer*."""
    return interactive_turn(
        client, work, None, lambda ask, sid: {"decision": answer}, "plan then act", yolo=False
    )


def test_only_the_phase_tools_are_in_the_request_until_next_phase_is_allowed(mm_home, scripted):
    work = mm_home / "work"
    (work / "mm.yaml").write_text(yaml.safe_dump(PHASES))
    (work / "a.txt").write_text("alpha\n")
    server = scripted(
        [
            call("read_file", {"path": "a.txt"}),
            call("next_phase", {"summary": "a.txt says alpha; plan: write b.txt"}),
            call("write_file", {"path": "b.txt", "content": "beta\n"}),
            {"text": "done"},
            {"text": "still acting"},
        ]
    )
    assert run_mm("daemon", "start", cwd=work).returncode == 0
    client = connect()
    try:
        events = turn(client, work, "allow_once")
    finally:
        client.close()
    kinds = [e["kind"] for e in events]
    assert kinds[-1] == "turn_ended" and events[-1]["data"]["status"] == "ok"
    asks = [e["data"] for e in events if e["kind"] == "consent_needed"]
    assert [a["tool"] for a in asks] == ["next_phase", "write_file"]  # the move is a write: it asks
    ask = asks[0]
    assert ask["echo"] == "next phase: plan → act — a.txt says alpha; plan: write b.txt"

    requests = server.requests()
    assert [offered(r) for r in requests[:4]] == [
        ["read_file", "grep", "next_phase"],
        ["read_file", "grep", "next_phase"],
        ["read_file", "write_file", "edit_file"],
        ["read_file", "write_file", "edit_file"],
    ]
    [moved] = tool_messages(requests[2])[-1:]
    assert moved == "Now in phase act. The tools of this phase: read_file, write_file, edit_file."
    described = {t["function"]["name"]: t["function"]["description"] for t in requests[0]["body"]["tools"]}
    assert "move to phase act. Make the planned change." in described["next_phase"]
    assert "The user is asked to approve the move." in described["next_phase"]
    assert (work / "b.txt").read_text() == "beta\n"

    # The session stays in its phase: the next turn offers act's tools from its first request.
    again = run_mm("--continue", "-p", "go on", cwd=work)
    assert again.returncode == 0, again.stderr
    assert offered(server.requests()[4]) == ["read_file", "write_file", "edit_file"]
    _, stored = session_events(work)
    assert of(stored, "phase_changed") == [{"from": "plan", "to": "act"}]


def test_a_denied_move_keeps_the_phase(mm_home, scripted):
    work = mm_home / "work"
    (work / "mm.yaml").write_text(yaml.safe_dump(PHASES))
    server = scripted([call("next_phase", {}), {"text": "staying"}, {"text": "still planning"}])
    result = run_mm("-p", "go", cwd=work)  # no terminal: no one can approve the move
    assert result.returncode == 3, result.stderr
    result = run_mm("--continue", "-p", "go", cwd=work)
    assert result.returncode == 0, result.stderr
    assert [offered(r) for r in server.requests()] == [["read_file", "grep", "next_phase"]] * 2


def test_a_call_outside_the_phase_is_answered_as_unknown(mm_home, scripted):
    work = mm_home / "work"
    (work / "mm.yaml").write_text(yaml.safe_dump(PHASES))
    server = scripted([call("write_file", {"path": "x", "content": "y"}), {"text": "ok"}])
    result = run_mm("--yolo", "-p", "go", cwd=work)
    assert result.returncode == 0, result.stderr
    assert not (work / "x").exists()
    [answer] = tool_messages(server.requests()[1])
    assert 'There is no tool named "write_file"' in answer


def test_without_consent_flag_the_move_needs_no_answer(mm_home, scripted):
    work = mm_home / "work"
    spec = json.loads(json.dumps(PHASES))
    spec["phases"][1]["requires_consent"] = False
    (work / "mm.yaml").write_text(yaml.safe_dump(spec))
    server = scripted([call("next_phase", {}), {"text": "moved"}])
    result = run_mm("-p", "go", cwd=work)
    assert result.returncode == 0, result.stderr
    assert offered(server.requests()[1]) == ["read_file", "write_file", "edit_file"]


# --- recovered tool calls ---------------------------------------------------------------------


def test_a_call_written_as_a_fenced_json_block_runs(mm_home, scripted):
    work = mm_home / "work"
    (work / "README.md").write_text("hello from the readme\n")
    server = scripted(
        [{"text": (FIXTURES / "fenced_json_prose.txt").read_text()}, {"text": "It says hello."}]
    )
    result = run_mm("--output-format", "json", "-p", "what is in the README?", cwd=work)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["result"] == "It says hello."
    assert [c["name"] for c in out["tool_calls"]] == ["read_file"]

    requests = server.requests()
    assert len(requests) == 2
    [assistant] = [m for m in requests[1]["body"]["messages"] if m["role"] == "assistant"]
    assert [c["function"]["name"] for c in assistant["tool_calls"]] == ["read_file"]
    assert "```" not in (assistant.get("content") or "")
    [read] = tool_messages(requests[1])
    assert "hello from the readme" in read
    _, events = session_events(work)
    [recovered] = of(events, "recovered_tool_call")
    assert recovered["name"] == "read_file" and json.loads(recovered["arguments"]) == {"path": "README.md"}


def test_stringified_arguments_in_tool_call_tags_go_through_the_contract(mm_home, scripted):
    work = mm_home / "work"
    (work / "README.md").write_text("hello\n")
    bad = '<tool_call>\n{"name": "read_file", "arguments": "{\\"file\\": \\"README.md\\"}"}\n</tool_call>'
    good = '<tool_call>\n{"name": "read_file", "arguments": "{\\"path\\": \\"README.md\\"}"}\n</tool_call>'
    server = scripted([{"text": bad}, {"text": good}, {"text": "read it"}])
    result = run_mm("-p", "read", cwd=work)
    assert result.returncode == 0, result.stderr
    [answer] = tool_messages(server.requests()[1])
    assert answer.startswith("read_file was not run.")  # answered by the contract, quoting the call back
    assert "file" in answer and "path" in answer
    assert "hello" in tool_messages(server.requests()[2])[-1]


def test_a_package_json_block_is_an_answer_not_a_call(mm_home, scripted):
    work = mm_home / "work"
    text = (FIXTURES / "package_json.txt").read_text()
    server = scripted([{"text": text}])
    result = run_mm("-p", "write me a package.json", cwd=work)
    assert result.returncode == 0, result.stderr
    assert '"name": "my-app"' in result.stdout
    assert len(server.requests()) == 1


def test_recovery_can_be_turned_off_per_provider(mm_home, scripted):
    work = mm_home / "work"
    text = (FIXTURES / "fenced_json_bare.txt").read_text()
    server = scripted([{"text": text}, {"text": "I would grep src for TODO."}])
    write_config(
        mm_home,
        {
            "providers": {
                "script": {"kind": "openai", "base_url": f"{server.url}/v1", "recover_tool_calls": False}
            },
            "default_model": "script/scripted",
        },
    )
    result = run_mm("-p", "grep", cwd=work)
    assert result.returncode == 0, result.stderr
    assert '"name": "grep"' in result.stderr  # shown as written, to the person: not run as a call
    # A call written as text is no answer: the model is asked once more, without tools, for words;
    # stdout gets only that answer.
    assert result.stdout == "I would grep src for TODO.\n"
    assert len(server.requests()) == 2 and "tools" not in server.requests()[1]["body"]


def test_a_second_phase_of_the_same_name_names_file_and_line(mm_home):
    work = mm_home / "work"
    (work / "mm.yaml").write_text(
        "phases:\n  - name: plan\n    tools: [read_file]\n  - name: plan\n    tools: [bash]\n"
    )
    result = run_mm("tools", "check", "mm.yaml", cwd=work)
    assert result.returncode == 1
    assert "mm.yaml:4: phases[1].name: a second phase named" in result.stderr
