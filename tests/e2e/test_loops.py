"""The loop detector end to end: the real mm CLI and daemon against a scripted model that keeps repeating a call.

The detector alone is tested in tests/unit/turn/test_loops.py.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from .conftest import run_mm
from .test_declared import of, session_events, tool_messages


def call(name: str, arguments: dict) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def test_a_failing_call_repeated_is_nudged_then_the_turn_stops_with_exit_4(mm_home, scripted):
    work = mm_home / "work"
    same = call("read_file", {"path": "missing.txt"})
    server = scripted([same, same, same, {"text": "never reached"}])
    result = run_mm("-p", "read missing.txt", cwd=work)
    assert result.returncode == 4, (result.stdout, result.stderr)
    assert "never reached" not in result.stdout
    assert "loop" in result.stderr

    requests = server.requests()
    assert len(requests) == 3  # the third call ended the turn; the model was not asked again
    assert all("Loop:" not in m for m in tool_messages(requests[1]))
    nudged = tool_messages(requests[2])[-1]
    assert 'Loop: read_file with {"path":"missing.txt"} failed 2 times in a row' in nudged
    assert "If you send this call once more unchanged, the turn ends." in nudged

    _, events = session_events(work)
    loops = of(events, "loop_detected")
    assert [(e["action"], e["kind"]) for e in loops] == [("nudge", "same_error"), ("stop", "same_error")]
    assert len(of(events, "tool_call", name="read_file")) == 2  # the third never ran
    [ended] = of(events, "turn_ended")
    assert ended["status"] == "loop" and "Stopped" in ended["text"]

    shown = run_mm("--output-format", "json", "--continue", "-p", "again", cwd=work)
    assert shown.returncode == 0, shown.stderr  # the next turn starts afresh: the script's text step


def test_a_call_repeated_after_it_succeeded_is_not_run_again_and_the_turn_ends_ok(mm_home, scripted):
    work = mm_home / "work"
    (work / "a.txt").write_text("alpha\n")
    same = call("read_file", {"path": "a.txt"})
    server = scripted([same, same, same, {"text": "never reached"}])
    result = run_mm("-p", "read a.txt", cwd=work)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert result.stdout.startswith("read_file succeeded:\n    1\talpha\n")  # the first result is the answer
    assert len(server.requests()) == 3
    answered = tool_messages(server.requests()[2])[-1]
    assert answered.startswith("Not run again: this exact read_file call already succeeded")
    _, events = session_events(work)
    assert [(e["action"], e["kind"]) for e in of(events, "loop_detected")] == [
        ("nudge", "after_success"),
        ("stop", "after_success"),
    ]
    assert len(of(events, "tool_call", name="read_file")) == 1
    [ended] = of(events, "turn_ended")
    assert ended["status"] == "ok"


def test_a_model_that_follows_the_nudge_goes_on(mm_home, scripted):
    work = mm_home / "work"
    (work / "a.txt").write_text("alpha\n")
    same = call("read_file", {"path": "a.txt"})
    server = scripted([same, same, {"text": "a.txt says alpha."}])
    result = run_mm("-p", "read a.txt", cwd=work)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "a.txt says alpha.\n"
    assert len(server.requests()) == 3
    _, events = session_events(work)
    assert [e["action"] for e in of(events, "loop_detected")] == ["nudge"]


def test_different_arguments_run_to_the_end(mm_home, scripted):
    work = mm_home / "work"
    for i in range(5):
        (work / f"{i}.txt").write_text(f"{i}\n")
    steps = [call("read_file", {"path": f"{i}.txt"}) for i in range(5)]
    scripted([*steps, {"text": "read them all"}])
    result = run_mm("-p", "read all", cwd=work)
    assert result.returncode == 0, result.stderr
    _, events = session_events(work)
    assert of(events, "loop_detected") == []


def test_thresholds_come_from_the_agent_file(mm_home, scripted):
    work = mm_home / "work"
    (work / "mm.yaml").write_text(yaml.safe_dump({"loop": {"same_error": 3}}))
    same = call("read_file", {"path": "missing.txt"})
    server = scripted([same, same, same, same, {"text": "never reached"}])
    result = run_mm("-p", "read missing.txt", cwd=work)
    assert result.returncode == 4, result.stderr
    assert len(server.requests()) == 4
    assert "failed 3 times in a row" in tool_messages(server.requests()[3])[-1]


def test_bad_loop_config_names_file_and_line(mm_home: Path):
    work = mm_home / "work"
    (work / "mm.yaml").write_text("model: scripted:x.yaml\nloop:\n  repeat: 1\n")
    result = run_mm("tools", "check", "mm.yaml", cwd=work)
    assert result.returncode == 1
    assert "mm.yaml:3" in result.stderr and "loop.repeat" in result.stderr
