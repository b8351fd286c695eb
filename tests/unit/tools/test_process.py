"""run_process (mmd/tools/process.py): a tool's process run for one call, and where its output spills."""

from __future__ import annotations

from pathlib import Path

from mmd.procs.output import OutputCapture
from mmd.tools.base import Limits, ToolContext
from mmd.tools.process import EchoLimiter, cut_text, run_process


async def test_the_sessions_folder_is_made_only_when_an_output_spills(tmp_path: Path) -> None:
    session = tmp_path / "state" / "sessions" / "s1"
    limits = Limits(max_bytes=200, max_lines=10)
    ctx = ToolContext(session_id="s1", call_id="short", cwd=tmp_path, session_dir=session, limits=limits)
    short = await run_process(["echo", "hi"], ctx, timeout=30)
    assert short.output == "hi\n" and short.spill_path is None
    assert not session.exists()

    ctx = ToolContext(session_id="s1", call_id="long", cwd=tmp_path, session_dir=session, limits=limits)
    long = await run_process(["seq", "1", "500"], ctx, timeout=30)
    assert long.truncated and long.spill_path == str(session / "output-long.log")
    assert (session / "output-long.log").read_text() == "".join(f"{i}\n" for i in range(1, 501))
    assert session.stat().st_mode & 0o777 == 0o700


def test_the_echo_names_the_spill_file_only_where_one_was_made(tmp_path: Path) -> None:
    # A spill that could not be made (a full disk: mmd/procs/spill.py) is named by no echo.
    class Ctx:
        call_id = "call_1"

        def __init__(self) -> None:
            self.echoed: list[str] = []

        def emit(self, kind: str, data: dict[str, str]) -> None:
            self.echoed.append(data["text"])

    missing, made = Ctx(), Ctx()
    EchoLimiter(missing, tmp_path / "output-call_1.log", limit=10)("stdout", "x" * 20)  # type: ignore[arg-type]
    assert missing.echoed == ["x" * 10 + "\n[echo stopped here; the rest is not kept]\n"]
    (tmp_path / "output-call_2.log").write_bytes(b"x" * 20)
    EchoLimiter(made, tmp_path / "output-call_2.log", limit=10)("stdout", "x" * 20)  # type: ignore[arg-type]
    assert made.echoed == [
        "x" * 10 + f"\n[echo stopped here; the whole output is in {tmp_path}/output-call_2.log]\n"
    ]


def _cut_by_capture(text: str, max_bytes: int, max_lines: int) -> str:
    """What cut_text gave before its shortcut: every text through an OutputCapture."""
    capture = OutputCapture(None, max_bytes=max_bytes, max_lines=max_lines)
    capture.feed("stdout", text.encode("utf-8", "replace"))
    capture.finish()
    return capture.render("spill.log", None) if capture.truncated else text


def test_cut_text_is_the_captures_cut_at_every_budget_edge() -> None:
    # A text within both budgets comes back without a capture made: the same text the capture gives, at and
    # around each edge (bytes of multi-byte characters, a last line with or without its newline).
    texts = [
        "",
        "a",
        "a\n",
        "a\nb",
        "a\nb\n",
        "\n\n",
        "é€😀\n" * 3,
        "x" * 40,
        "l\n" * 9 + "tail",
        "\ud800 lone",
    ]
    for text in texts:
        size = len(text.encode("utf-8", "replace"))
        lines = text.count("\n") + (text[-1:] not in ("", "\n"))
        for max_bytes in {1, 2, max(1, size - 1), max(1, size), size + 1}:
            for max_lines in {1, 2, max(1, lines - 1), max(1, lines), lines + 1}:
                got = cut_text(text, max_bytes=max_bytes, max_lines=max_lines, spill_name="spill.log")
                assert got == _cut_by_capture(text, max_bytes, max_lines), (text, max_bytes, max_lines)
