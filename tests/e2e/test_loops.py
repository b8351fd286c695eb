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


def test_repeating_model_is_nudged_then_the_turn_stops_with_exit_4(mm_home, scripted):
    work = mm_home / "work"
    (work / "a.txt").write_text("alpha\n")
    same = call("read_file", {"path": "a.txt"})
    server = scripted([same, same, same, same, {"text": "never reached"}])
    result = run_mm("-p", "read a.txt", cwd=work)
    assert result.returncode == 4, (result.stdout, result.stderr)
    assert "never reached" not in result.stdout
    assert "loop" in result.stderr

    requests = server.requests()
    assert len(requests) == 4  # the fourth call ended the turn; the model was not asked again
    # Calls one and two were answered plainly, the third with the nudge appended.
    assert all("Loop:" not in m for m in tool_messages(requests[2]))
    nudged = tool_messages(requests[3])[-1]
    assert nudged.startswith("    1\talpha\n")
    assert 'Loop: you have called read_file with {"path":"a.txt"} 3 times in this turn' in nudged
    assert "If you call it once more unchanged, the turn ends." in nudged

    _, events = session_events(work)
    loops = of(events, "loop_detected")
    assert [(e["action"], e["kind"]) for e in loops] == [("nudge", "repeat"), ("stop", "repeat")]
    assert len(of(events, "tool_call", name="read_file")) == 3  # the fourth never ran
    [ended] = of(events, "turn_ended")
    assert ended["status"] == "loop" and "Stopped" in ended["text"]

    shown = run_mm("--output-format", "json", "--continue", "-p", "again", cwd=work)
    assert shown.returncode == 0, shown.stderr  # the next turn starts afresh: the script's text step


def test_a_model_that_follows_the_nudge_goes_on(mm_home, scripted):
    work = mm_home / "work"
    (work / "a.txt").write_text("alpha\n")
    same = call("read_file", {"path": "a.txt"})
    server = scripted([same, same, same, {"text": "a.txt says alpha."}])
    result = run_mm("-p", "read a.txt", cwd=work)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "a.txt says alpha.\n"
    assert len(server.requests()) == 4
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
    (work / "a.txt").write_text("alpha\n")
    (work / "mm.yaml").write_text(yaml.safe_dump({"loop": {"repeat": 2}}))
    same = call("read_file", {"path": "a.txt"})
    server = scripted([same, same, same, {"text": "never reached"}])
    result = run_mm("-p", "read a.txt", cwd=work)
    assert result.returncode == 4, result.stderr
    assert len(server.requests()) == 3
    assert "2 times in this turn" in tool_messages(server.requests()[2])[-1]


def test_bad_loop_config_names_file_and_line(mm_home: Path):
    work = mm_home / "work"
    (work / "mm.yaml").write_text("model: scripted:x.yaml\nloop:\n  repeat: 1\n")
    result = run_mm("tools", "check", "mm.yaml", cwd=work)
    assert result.returncode == 1
    assert "mm.yaml:3" in result.stderr and "loop.repeat" in result.stderr
