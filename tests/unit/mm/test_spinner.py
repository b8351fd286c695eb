"""The spinner (clients/mm/spinner.py) and its place in render.View: frames, labels, a clean line.

A spinner seen on a real terminal while a slow scripted model thinks is in tests/e2e/test_chat.py.
"""

from __future__ import annotations

import io
import threading
from typing import Any

from mm.render import View
from mm.spinner import Spinner


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def ev(kind: str, **data: Any) -> dict[str, Any]:
    return {"kind": kind, "data": data, "session_id": "s", "seq": 1, "ts": 0.0}


def test_a_frame_says_what_runs_for_how_long_and_the_tokens_so_far() -> None:
    spinner = Spinner(Terminal(), color=False)
    assert spinner.frame(spinner.began + 3.7, 0) == "⠋ thinking… 3 s · Ctrl-C to cancel"
    spinner.after(ev("assistant", usage={"input": 900, "output": 1234}, tool_calls=[]), line_free=True)
    spinner.after(ev("tool_call", name="bash", call_id="c1"), line_free=True)
    assert spinner.frame(spinner.began + 12, 1) == "⠙ running bash… 12 s · 1,234 tokens · Ctrl-C to cancel"
    spinner.after(ev("tool_result", call_id="c1", ok=True), line_free=True)
    assert spinner.doing == "thinking"
    spinner.stop()


def test_no_spinner_after_the_turn_ends_at_a_question_or_on_an_open_line() -> None:
    for kind in ("turn_ended", "consent_needed"):
        spinner = Spinner(Terminal())
        spinner.after(ev(kind), line_free=True)
        assert spinner._stop is None
    spinner = Spinner(Terminal())
    spinner.after(ev("text", text="half a sen"), line_free=False)
    assert spinner._stop is None


def test_no_spinner_off_a_terminal() -> None:
    spinner = Spinner(io.StringIO())
    spinner.start()
    assert spinner._stop is None
    spinner.stop()


def test_stop_leaves_a_clean_line() -> None:
    err = Terminal()
    spinner = Spinner(err)
    spinner.start()
    spinner.stop()
    assert err.getvalue() == "" or err.getvalue().endswith("\r\033[K")  # a frame, if any, is wiped
    spinner._stop, spinner._drawn = threading.Event(), True  # as when a frame is on the line
    spinner.stop()
    assert err.getvalue().endswith("\r\033[K") and not spinner._drawn


def test_the_view_stops_the_spinner_before_it_prints() -> None:
    out, err = io.StringIO(), Terminal()
    view = View("text", out=out, err=err)
    view.event(ev("turn_started", prompt="hi", model="m", cwd="/"))
    assert view.spinner._stop is not None  # the model works: the spinner runs
    view.event(ev("text", text="Hello"))
    assert view.spinner._stop is None  # an answer line is open: no spinner on it
    assert out.getvalue() == "Hello"
    view.event(ev("text", text=" there.\n"))
    assert view.spinner._stop is not None
    view.finish("s", {"status": "ok", "text": "Hello there.\n", "error": None})
    assert view.spinner._stop is None
    assert "⠋" not in out.getvalue()
