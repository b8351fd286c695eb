"""mm's events as Claude Code's stream-json messages (clients/mm/stream_json.py), without a daemon.

A real run through a daemon and the scripted model, every line checked against Claude Code's documented
fields, is tests/e2e/test_stream_json.py.
"""

from __future__ import annotations

import io
import json

import pytest
from mm.stream_json import ClaudeView, InputError, Transcript, tool_input, user_message

from ...counting import Counted


def ev(kind: str, ts: float, **data: object) -> dict[str, object]:
    return {"session_id": "s1", "seq": 0, "ts": ts, "kind": kind, "data": data}


def test_tool_input_is_an_object_whatever_the_model_sent() -> None:
    assert tool_input('{"command": "ls"}') == {"command": "ls"}
    assert tool_input({"path": "."}) == {"path": "."}
    assert tool_input("[1, 2]") == {"_raw": "[1, 2]"}
    assert tool_input("{broken") == {"_raw": "{broken"}
    deep = '{"a": ' + "[" * 5000 + "]" * 5000 + "}"
    assert tool_input(deep) == {"_raw": deep}  # past json's recursion limit: text, not a crash
    nested = '{"a": ' + "[" * 100 + "]" * 100 + "}"
    assert tool_input(nested) == {"_raw": nested}


def test_model_time_counts_from_the_last_event_before_each_step() -> None:
    t = Transcript()
    t.feed(ev("turn_started", 10.0, prompt="p", model="m", cwd="/w"))
    t.feed(ev("text", 10.5, text="hi"))
    t.feed(ev("assistant", 11.0, text="hi", tool_calls=[{"id": "c1", "name": "bash", "arguments": "{}"}]))
    t.feed(ev("tool_call", 11.0, call_id="c1", name="bash", arguments="{}", echo="$", tier="write"))
    t.feed(ev("tool_result", 14.0, call_id="c1", name="bash", ok=True, content="ok", data=None))
    t.feed(
        ev(
            "assistant",
            14.25,
            text="done",
            tool_calls=[],
            finish_reason="stop",
            usage={"input": 5, "output": 2},
        )
    )
    result = t.result({"status": "ok", "text": "done", "error": None}, duration_ms=5000)
    assert result["duration_api_ms"] == 1250  # 1.0 s + 0.25 s; the tool's 3 s are not the model's
    assert (result["num_turns"], result["result"], result["stop_reason"]) == (2, "done", "end_turn")
    assert result["usage"]["input_tokens"] == 5


def test_a_call_with_no_tool_use_of_its_own_gets_one() -> None:
    t = Transcript()
    t.feed(ev("turn_started", 1.0, prompt="p", model="m", cwd="/w"))
    [message] = t.feed(
        ev("tool_call", 2.0, call_id="r1", name="grep", arguments='{"pattern": "x"}', echo="", tier="read")
    )
    assert message["message"]["content"] == [
        {"type": "tool_use", "id": "r1", "name": "grep", "input": {"pattern": "x"}}
    ]


def test_words_without_a_step_record_are_an_assistant_message_and_the_answer() -> None:
    t = Transcript()
    t.feed(ev("text", 1.0, text="in words"))
    [message] = t.feed(ev("turn_ended", 2.0, status="ok", text="in words", error=None))
    assert message["message"]["content"] == [{"type": "text", "text": "in words"}]
    assert t.result({"status": "ok", "text": "", "error": None}, duration_ms=1)["result"] == "in words"


def test_a_failure_before_the_turn_is_an_error_result() -> None:
    out, err = io.StringIO(), io.StringIO()
    ClaudeView("json", out=out, err=err).failed("cannot connect to /x: refused")
    record = json.loads(out.getvalue())
    assert (record["type"], record["subtype"], record["is_error"]) == (
        "result",
        "error_during_execution",
        True,
    )
    assert record["errors"] == ["cannot connect to /x: refused"] and record["session_id"] is None
    assert "cannot connect" in err.getvalue()


def test_a_line_holds_no_control_a_terminal_obeys_and_decodes_to_what_was_said() -> None:
    # ensure_ascii=False keeps non-ASCII text readable and left DEL and the C1 controls (U+009B is CSI on some
    # terminals) raw in each line; they are \\u escapes now, the same JSON to a program.
    out, err = io.StringIO(), io.StringIO()
    said = "caf\u00e9 \u009b2K\u007f \x1b]52;c;eA==\x07"
    ClaudeView("stream-json", out=out, err=err).failed(said)
    text = out.getvalue()
    assert not any((ord(c) < 32 and c != "\n") or 0x7F <= ord(c) <= 0x9F for c in text)
    assert "café" in text and "\\u009b" in text
    assert json.loads(text.splitlines()[-1])["errors"] == [said]


def test_user_messages_of_input_stream_json() -> None:
    assert user_message('{"type":"user","message":{"role":"user","content":"hi"}}') == "hi"
    blocks = {
        "type": "user",
        "message": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    }
    assert user_message(json.dumps(blocks)) == "a\nb"
    for bad, said in [
        ("nope", "not JSON"),
        ('{"type":"assistant"}', "type 'assistant'"),
        ('{"type":"user","message":{"content":[{"type":"image"}]}}', "type 'image'"),
        ('{"type":"user","message":{"content":3}}', "message.content is int"),
        ("[" * 100_000, "not JSON"),
    ]:
        with pytest.raises(InputError, match=said):
            user_message(bad)


def test_words_in_many_deltas_are_kept_as_they_came_not_copied_whole_at_each(monkeypatch) -> None:
    monkeypatch.setattr(Counted, "built", 0)
    t = Transcript()
    words = [Counted("word ")] * 5000
    for word in words:
        t.feed(ev("text", 1.0, text=word))
    [message] = t.feed(ev("turn_ended", 2.0, status="ok", text="", error=None))
    assert message["message"]["content"] == [{"type": "text", "text": "".join(words)}]
    assert Counted.built <= 2 * len("".join(words))
