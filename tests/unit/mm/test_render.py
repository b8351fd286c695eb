"""How `mm` prints the context budget's events (clients/mm/render.py); the events themselves are
tests/unit/turn/test_context.py's, `/compact` end to end tests/e2e/test_context.py's."""

from __future__ import annotations

import io

from mm.render import View, compacted


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
