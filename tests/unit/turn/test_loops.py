"""The loop detector: a nudge first, then the turn stops; different arguments are never a loop.

These feed mmd.turn.loops directly; a whole turn with the detector is in test_turn.py, and the real
mm CLI and daemon against a scripted model that keeps repeating a call in tests/e2e/test_loops.py.
"""

from __future__ import annotations

import json

import pytest

from mmd.config.turns import LoopLimits
from mmd.turn.loops import LoopDetector, call_key, error_code, parsed_key

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


@pytest.mark.parametrize("cycle", [2, 3])
def test_a_cycle_after_a_long_history_is_found_from_the_last_calls_alone(cycle: int) -> None:
    # The cycle is looked for among the last calls only (the history grows with the turn): after 50 other
    # calls an a-b-c cycle seen *cycle* times is still found, and one seen once less is not.
    d = LoopDetector(LoopLimits(cycle=cycle, repeat=99))
    for i in range(50):
        assert d.after(call_key("read_file", f'{{"path": "f{i}"}}'), None) is None
    unit = [call_key("grep", f'{{"pattern": "{p}"}}') for p in "abc"]
    found = [d.after(key, None) for key in unit * cycle]
    assert found[:-1] == [None] * (3 * cycle - 1)
    assert found[-1] is not None and found[-1].kind == "cycle" and found[-1].keys == unit


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


def test_a_turn_of_many_calls_finds_its_repeats_by_look_up() -> None:
    """Each call with an added field was weighed against every call that succeeded: quadratic in a turn's
    calls (20,000 of each would have taken minutes). One look-up now, with the same answer."""
    from mmd.contract import ToolResult
    from mmd.tools.builtin.files import ReadFile
    from mmd.turn.loop import Progress

    tool, progress = ReadFile(), Progress(detector=LoopDetector())
    for n in range(20_000):
        key = call_key("read_file", json.dumps({"path": f"f{n}"}))
        progress.record(key, "read_file", tool, ToolResult(ok=True, content=f"line of f{n}: ready"))
    echoes = [call_key("read_file", json.dumps({"path": f"f{n}", "status": "ready"})) for n in range(20_000)]
    assert all(
        progress.repeats(key, tool) == call_key("read_file", json.dumps({"path": f"f{n}"}))
        for n, key in enumerate(echoes)
    )
    other = call_key("read_file", json.dumps({"path": "f1", "status": "absent"}))
    assert progress.repeats(other, tool) is None


def test_repeats_takes_the_arguments_already_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The step's first call was parsed to make its key (loops.parsed_key): repeats takes that dict and does
    not parse the key's text again, with the same answers."""
    from mmd.contract import ToolResult
    from mmd.tools.builtin.files import ReadFile
    from mmd.turn import loop

    tool, progress = ReadFile(), loop.Progress(detector=LoopDetector())
    done = call_key("read_file", json.dumps({"path": "a"}))
    progress.record(done, "read_file", tool, ToolResult(ok=True, content="a: ready"))
    cases = [
        ({"path": "a", "status": "ready"}, done),
        ({"path": "a", "status": "gone"}, None),
        ({"path": "b"}, None),
    ]
    keys = [parsed_key("read_file", json.dumps(args)) for args, _ in cases]
    assert [progress.repeats(key, tool) for key, _ in keys] == [want for _, want in cases]
    monkeypatch.setattr(loop, "_object", lambda text: pytest.fail(f"parsed again: {text}"))
    assert [progress.repeats(key, tool, parsed) for key, parsed in keys] == [want for _, want in cases]
