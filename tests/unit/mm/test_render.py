"""How `mm` prints the context budget's events and the files a call changed (clients/mm/render.py); the events are
tests/unit/turn/test_context.py's, `/compact` end to end tests/e2e/test_context.py's. And what a long answer costs."""

from __future__ import annotations

import io

from mm.render import View, compacted

from ...counting import Counted


def _view() -> tuple[View, io.StringIO]:
    err = io.StringIO()
    return View("text", out=io.StringIO(), err=err), err


def test_stubs_and_a_summary_made_by_the_daemon_are_one_line_each() -> None:
    view, err = _view()
    stubbed = {"stubbed": [{"call_id": "a"}, {"call_id": "b"}], "before": 6000, "after": 3000, "window": 8192}
    view.event({"kind": "context_stubbed", "data": stubbed})
    done = {"by": "auto", "before": 6000, "after": 900, "summarised": 12, "summary": "model", "window": 8192}
    view.event({"kind": "context_compacted", "data": done})
    assert err.getvalue().splitlines() == [
        "  context: 2 old tool outputs replaced by stubs to fit the 8,192-token window "
        "(about 6,000 → 3,000 tokens)",
        "  context: 12 earlier messages summarised by the model to fit the 8,192-token window "
        "(about 6,000 → 900 tokens)",
    ]


def test_what_compact_did_is_said_in_one_line() -> None:
    data = {"by": "user", "before": 900, "after": 300, "summarised": 4, "summary": "mm", "window": 4096}
    assert compacted(data) == (
        "4 earlier messages summarised by mm (the model gave none) to fit the 4,096-token window "
        "(about 900 → 300 tokens)"
    )
    assert compacted({**data, "summarised": 0}) == "nothing to summarise"


def test_the_files_a_call_changed_are_named_under_its_result_with_its_step() -> None:
    view, err = _view()
    view.event({"kind": "tool_call", "data": {"name": "bash", "arguments": "{}", "echo": "$ rm a"}})
    files = [{"path": "a", "change": "deleted"}, {"path": "new\nline", "change": "added"}]
    view.event({"kind": "files_changed", "data": {"call_id": "c", "step": 4, "files": files, "count": 12}})
    result = {
        "call_id": "c",
        "name": "bash",
        "ok": True,
        "content": "[exit code 0]",
        "data": {"exit_code": 0},
    }
    view.event({"kind": "tool_result", "data": result})
    assert err.getvalue().splitlines()[-2:] == [
        "  ✓ [exit code 0]",
        "  changed: D a, A 'new\\nline' and 10 more (step 4: mm undo)",
    ]


def test_a_long_answer_in_small_deltas_is_kept_as_it_came_not_copied_whole_at_each(monkeypatch) -> None:
    # The client added each delta to the answer so far: a copy of all of it a token, 139 s of CPU for an
    # answer at the daemon's bound (2 Mi characters) in 4-character deltas.
    monkeypatch.setattr(Counted, "built", 0)
    out = io.StringIO()
    view = View("text", out=out, err=io.StringIO(), hold=True)
    words = [Counted("word ")] * 5000
    for word in words:
        view.event({"kind": "text", "data": {"text": word}})
    view.finish("s1", {"status": "ok", "text": "", "error": None})
    assert out.getvalue() == "".join(words) + "\n"
    assert Counted.built <= 2 * len("".join(words))
