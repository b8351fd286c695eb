"""The loop detector: a nudge first, then the turn stops; different arguments are never a loop.

The unit tests feed mmd.turn.loops directly; the end-to-end tests run the
real mm CLI and daemon against a scripted model that keeps repeating a call.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from mmd.config.turns import LoopLimits
from mmd.turn.loops import LoopDetector, call_key, error_code

from .conftest import run_mm
from .test_declared_e2e import of, session_events, tool_messages


def call(name: str, arguments: dict) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


# --- the detector alone ----------------------------------------------------------------


def test_canonical_key_ignores_spacing_and_key_order():
    assert call_key("grep", '{"b": 1, "a": "x"}') == call_key("grep", '{"a":"x","b":1}')
    assert call_key("grep", '"{\\"a\\": \\"x\\"}"') == call_key("grep", '{"a": "x"}')  # stringified
    assert call_key("grep", '{"a": "x"}') != call_key("grep", '{"a": "y"}')
    assert call_key("grep", "{broken") == ("grep", '"{broken"')


def test_repeat_nudges_at_the_threshold_then_stops_the_next_repeat():
    d = LoopDetector(LoopLimits(repeat=3))
    key = call_key("read_file", '{"path": "a"}')
    assert d.before(key) is None and d.after(key, None) is None
    assert d.before(key) is None and d.after(key, None) is None
    assert d.before(key) is None
    nudge = d.after(key, None)
    assert nudge is not None and nudge.kind == "repeat" and nudge.count == 3
    assert 'read_file with {"path":"a"} 3 times' in nudge.message
    stop = d.before(key)
    assert stop is not None and stop.kind == "repeat"
    assert stop.data("stop")["calls"] == [{"name": "read_file", "arguments": '{"path":"a"}'}]


def test_different_arguments_are_never_a_loop():
    d = LoopDetector(LoopLimits(repeat=2, same_error=2, cycle=2))
    for i in range(20):
        key = call_key("read_file", json.dumps({"path": f"f{i}"}))
        assert d.before(key) is None
        assert d.after(key, "not_found") is None  # the same error, but each time another file


def test_same_error_in_a_row():
    d = LoopDetector(LoopLimits(same_error=2, repeat=5))
    key = call_key("release", '{"version": "1.4.2 beta"}')
    assert d.after(key, "pattern_mismatch") is None
    nudge = d.after(key, "pattern_mismatch")
    assert nudge is not None and nudge.kind == "same_error"
    assert "failed 2 times in a row with the same error (pattern_mismatch)" in nudge.message
    assert d.before(key) is not None


def test_same_call_with_a_new_error_or_success_is_not_same_error():
    d = LoopDetector(LoopLimits(same_error=2, repeat=5))
    key = call_key("status", "{}")
    assert d.after(key, "timeout") is None
    assert d.after(key, "exit_code 1") is None
    assert d.after(key, None) is None


def test_a_b_a_b_cycle():
    d = LoopDetector(LoopLimits(cycle=2, repeat=5))
    a, b = call_key("read_file", '{"path": "a"}'), call_key("grep", '{"pattern": "x"}')
    assert d.after(a, None) is None
    assert d.after(b, None) is None
    assert d.after(a, None) is None
    nudge = d.after(b, None)
    assert nudge is not None and nudge.kind == "cycle" and set(nudge.keys) == {a, b}
    assert d.before(a) is not None and d.before(b) is not None
    assert d.before(call_key("grep", '{"pattern": "y"}')) is None


def test_disabled_detector_never_fires():
    d = LoopDetector(LoopLimits(enabled=False, repeat=2))
    key = call_key("bash", '{"command": "ls"}')
    for _ in range(5):
        assert d.before(key) is None and d.after(key, None) is None


def test_error_code_of_results():
    assert error_code(True, {"exit_code": 0}) is None
    assert error_code(False, {"ok": False, "error": {"code": "not_found"}}) == "not_found"
    assert error_code(False, {"exit_code": 2}) == "exit_code 2"
    assert error_code(False, None) == "failed"


# --- end to end -------------------------------------------------------------------------------


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
