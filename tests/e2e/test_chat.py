"""The chat in a real terminal: ``mm`` on a pseudo-terminal, keys in, the screen's bytes out.

Each test runs the real client on a pty of its own (its controlling terminal, so Ctrl-C is the
terminal's SIGINT where the line is cooked), a real daemon it starts, and the scripted model
server. Every wait is for something on the screen, with a generous timeout for a loaded machine;
nothing sleeps. The in-process half (the editor's keys, the commands, the spinner's frames) is in
tests/unit/mm/.
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import os
import pty
import re
import select
import signal
import stat
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import run_mm

# What the chat shows before the cursor.
PROMPT = "›"
# Keys, as a terminal sends them.
ENTER, UP, CTRL_C, CTRL_D = "\r", "\x1b[A", "\x03", "\x04"
PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"  # bracketed paste (xterm)
# Seconds any one thing may take to appear on a loaded two-core machine.
WAIT = 90
# Escape sequences, taken out of what the screen shows before matching (colours, cursor moves).
ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[()][0-9A-Za-z]|\x1b[=>]|\r")
DIM = "\x1b[2m"


class Terminal:
    """``mm ARGS`` on a pseudo-terminal of 40 rows and 160 columns."""

    def __init__(self, *args: str, cwd: Path, env: dict[str, str] | None = None) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mm.cli", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=cwd,
            env={**os.environ, "TERM": "xterm", **(env or {})},
            start_new_session=True,  # its own session and process group, killed as one at the end
            preexec_fn=_take_terminal,
        )
        os.close(slave)
        self.fd = master
        self.raw = ""  # everything the program wrote, escapes and all
        self.screen = ""  # the same without escape sequences
        self.seen = 0  # where in screen the next expect starts
        self._decode = codecs.getincrementaldecoder("utf-8")("replace")
        self.closed = False

    def send(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def expect(self, pattern: str, timeout: float = WAIT) -> re.Match[str]:
        """Wait until *pattern* (a regex) shows after what the last expect matched."""
        wanted = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            found = wanted.search(self.screen, self.seen)
            if found:
                self.seen = found.end()
                return found
            left = deadline - time.monotonic()
            if left <= 0 or self.closed:
                state = "mm exited" if self.closed else f"not within {timeout} s"
                raise AssertionError(f"{pattern!r}: {state}; the screen since: {self.screen[self.seen :]!r}")
            self._read(left)

    def wait(self, timeout: float = WAIT) -> int:
        """Read to the end of the program's output; its exit code."""
        deadline = time.monotonic() + timeout
        while not self.closed and time.monotonic() < deadline:
            self._read(deadline - time.monotonic())
        return self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        os.close(self.fd)

    def _read(self, timeout: float) -> None:
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if not ready:
            return
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: no process has the terminal open any more
            data = b""
        if not data:
            self.closed = True
            return
        if b"\x1b[6n" in data:  # a cursor position request: a terminal answers where the cursor is
            self.send("\x1b[1;1R")
        text = self._decode.decode(data)
        self.raw += text
        self.screen += ESCAPES.sub("", text)

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _take_terminal() -> None:
    # In the child, after setsid: the pty becomes its controlling terminal, and Ctrl-C interrupts it
    # even when the test run itself ignores SIGINT (a suite started in the background does).
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def completions(server: Any) -> list[dict[str, Any]]:
    return [r["body"] for r in server.requests() if r["path"] == "/v1/chat/completions"]


def last_user_message(body: dict[str, Any]) -> str:
    return next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")


def quit_chat(term: Terminal) -> int:
    term.expect(PROMPT)
    term.send(CTRL_D)
    return term.wait()


def test_a_pasted_text_of_two_lines_is_one_message(mm_home: Path, scripted: Any) -> None:
    server = scripted([{"text": "Got both lines."}])
    with Terminal("chat", cwd=mm_home / "work") as term:
        term.expect("/help lists the commands")
        term.expect(PROMPT)
        term.send(PASTE_START + "first line\nsecond line" + PASTE_END)
        term.send(ENTER)
        term.expect("Got both lines.")
        assert quit_chat(term) == 0
    [request] = completions(server)
    assert last_user_message(request) == "first line\nsecond line"


def test_alt_enter_and_ctrl_j_insert_newlines_into_one_message(mm_home: Path, scripted: Any) -> None:
    server = scripted([{"text": "Three lines."}])
    with Terminal(cwd=mm_home / "work") as term:  # plain `mm` is the chat too
        term.expect(PROMPT)
        term.send("one\x1b" + ENTER + "two\n" + "three" + ENTER)
        term.expect("Three lines.")
        assert quit_chat(term) == 0
    [request] = completions(server)
    assert last_user_message(request) == "one\ntwo\nthree"


def test_history_is_kept_across_chats_and_up_recalls_the_last_line(mm_home: Path, scripted: Any) -> None:
    server = scripted([{"text": "Noted."}, {"text": "Noted."}])
    work = mm_home / "work"
    with Terminal("chat", cwd=work) as first:
        first.expect(PROMPT)
        first.send("remember the milk" + ENTER)
        first.expect("Noted.")
        assert quit_chat(first) == 0
    history = mm_home / "state" / "mm" / "history"
    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    assert "remember the milk" in history.read_text()
    with Terminal("chat", cwd=work) as second:
        second.expect(PROMPT)
        second.send(UP)
        second.expect("remember the milk")
        second.send(ENTER)
        second.expect("Noted.")
        assert quit_chat(second) == 0
    assert [last_user_message(r) for r in completions(server)] == ["remember the milk"] * 2


def test_slash_commands_answer_in_the_chat_and_never_reach_the_model(mm_home: Path, scripted: Any) -> None:
    server = scripted([{"text": "Hello back."}])
    with Terminal("chat", cwd=mm_home / "work") as term:
        term.expect(PROMPT)
        term.send("/help" + ENTER)
        term.expect(r"/resume \[ID\]")
        term.expect("Alt-Enter")
        term.expect(PROMPT)
        term.send("/frobnicate" + ENTER)
        term.expect(r"unknown command /frobnicate \(nothing was sent to the model\)")
        term.expect("commands: /help, /model")
        term.expect(PROMPT)
        term.send("/tools" + ENTER)
        term.expect(r"read_file\s+read")
        term.expect(PROMPT)
        term.send("/usage" + ENTER)
        term.expect("no session yet")
        assert completions(server) == []
        term.expect(PROMPT)
        term.send("hello" + ENTER)
        term.expect("Hello back.")
        term.expect(PROMPT)
        term.send("/cost" + ENTER)
        term.expect(r"1 turn, 1 model step, 0 tool calls")
        term.expect(PROMPT)
        term.send("/clear" + ENTER)
        term.expect("new session")
        term.expect(PROMPT)
        term.send("/quit" + ENTER)
        assert term.wait() == 0
    assert len(completions(server)) == 1


def test_a_spinner_shows_while_the_model_thinks(mm_home: Path, scripted: Any) -> None:
    scripted([{"text": "Slow answer.", "delay": 3}])
    with Terminal("chat", cwd=mm_home / "work") as term:
        term.expect(PROMPT)
        term.send("take your time" + ENTER)
        term.expect(r"[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] thinking… \d+ s · Ctrl-C to cancel")
        term.expect("Slow answer.")
        assert quit_chat(term) == 0


def test_a_line_typed_while_a_turn_runs_is_the_next_message(mm_home: Path, scripted: Any) -> None:
    server = scripted([{"text": "First answer.", "delay": 3}, {"text": "Second answer."}])
    with Terminal("chat", cwd=mm_home / "work") as term:
        term.expect(PROMPT)
        term.send("first" + ENTER)
        term.expect("thinking…")  # the turn runs: the prompt is gone, the terminal holds what is typed
        term.send("second" + ENTER)
        term.expect("First answer.")
        term.expect("Second answer.")
        assert quit_chat(term) == 0
    assert [last_user_message(r) for r in completions(server)] == ["first", "second"]


def test_mm_p_shows_the_spinner_on_a_terminal_only(mm_home: Path, scripted: Any) -> None:
    scripted([{"text": "Slow answer.", "delay": 3}, {"text": "Slow answer.", "delay": 3}])
    work = mm_home / "work"
    with Terminal("-p", "take your time", cwd=work) as term:
        term.expect(r"thinking… \d+ s")
        term.expect("Slow answer.")
        assert term.wait() == 0
    piped = run_mm("-p", "take your time", cwd=work)  # stderr is a pipe here: no spinner
    assert piped.returncode == 0 and piped.stdout == "Slow answer.\n"
    assert "thinking" not in piped.stderr and "\x1b" not in piped.stderr


def test_ctrl_c_at_a_consent_question_denies_that_call_and_the_chat_goes_on(
    mm_home: Path, scripted: Any
) -> None:
    server = scripted(
        [
            {"tool_calls": [{"name": "bash", "arguments": {"command": "echo hi > made.txt"}}]},
            {"text": "Understood, I did not write it."},
            {"text": "Second answer."},
        ]
    )
    work = mm_home / "work"
    with Terminal("chat", cwd=work) as term:
        term.expect(PROMPT)
        term.send("write the file" + ENTER)
        term.expect(r"allow\? \[y\] once")
        term.send(CTRL_C)
        term.expect("The user denied this call. Their reason: the user pressed Ctrl-C instead of answering.")
        term.expect("Understood, I did not write it.")
        term.expect(PROMPT)
        term.send("and now?" + ENTER)
        term.expect("Second answer.")
        assert quit_chat(term) == 0
    assert not (work / "made.txt").exists()
    tool_message = next(m for m in completions(server)[1]["messages"] if m["role"] == "tool")
    assert "The user denied this call" in tool_message["content"]
    assert "Ctrl-C" in tool_message["content"]


def test_ctrl_c_at_a_consent_question_of_mm_p_cancels_the_turn_with_exit_130(
    mm_home: Path, scripted: Any
) -> None:
    """In `mm -p` there is no next message: Ctrl-C at the question cancels the turn, as anywhere else."""
    scripted([{"tool_calls": [{"name": "bash", "arguments": {"command": "echo hi > made.txt"}}]}])
    work = mm_home / "work"
    with Terminal("-p", "write the file", cwd=work) as term:
        term.expect(r"allow\? \[y\] once")
        term.send(CTRL_C)
        assert term.wait() == 130
    assert "Aborted" not in term.screen
    assert not (work / "made.txt").exists()


def test_ctrl_c_during_a_turn_cancels_it_and_the_chat_goes_on(mm_home: Path, scripted: Any) -> None:
    server = scripted([{"text": "Too late.", "delay": 60}, {"text": "Right away."}])
    with Terminal("chat", cwd=mm_home / "work") as term:
        term.expect(PROMPT)
        term.send("take forever" + ENTER)
        term.expect("thinking…")
        term.send(CTRL_C)
        term.expect("cancelling the turn")
        term.expect(PROMPT)
        term.send("quick one" + ENTER)
        term.expect("Right away.")
        assert quit_chat(term) == 0
    assert "Too late." not in term.screen
    assert [last_user_message(r) for r in completions(server)] == ["take forever", "quick one"]


def test_ctrl_c_at_an_empty_line_hints_then_quits(mm_home: Path, scripted: Any) -> None:
    scripted([])
    with Terminal("chat", cwd=mm_home / "work") as term:
        term.expect(PROMPT)
        term.send("half a thought" + CTRL_C)  # Ctrl-C at a line with text clears it, and no more
        term.send(CTRL_C)
        term.expect(r"\(Ctrl-C again to quit, or Ctrl-D\)")
        term.expect(PROMPT)  # a new prompt: the chat goes on
        term.send(CTRL_C)
        assert term.wait() == 0
    assert term.screen.count("Ctrl-C again to quit") == 1


@pytest.mark.parametrize("how", ["NO_COLOR", "--no-color"])
def test_no_color_turns_the_colour_off(mm_home: Path, scripted: Any, how: str) -> None:
    steps = [{"tool_calls": [{"name": "list_files", "arguments": {"path": "."}}]}, {"text": "Listed."}]
    scripted(steps + steps)
    work = mm_home / "work"
    with Terminal("-p", "list", cwd=work) as coloured:
        coloured.expect("Listed.")
        assert coloured.wait() == 0
    assert DIM in coloured.raw  # the tool's echo is dim on a terminal
    env, args = ({"NO_COLOR": "1"}, []) if how == "NO_COLOR" else ({}, ["--no-color"])
    with Terminal(*args, "-p", "list", cwd=work, env=env) as plain:
        plain.expect("Listed.")
        assert plain.wait() == 0
    assert "● " in plain.screen and "\x1b[" not in plain.raw.replace("\x1b[K", "")


def test_skills_model_and_resume_commands(mm_home: Path, scripted: Any) -> None:
    server = scripted([{"text": "One."}, {"text": "Two."}])
    work = mm_home / "work"
    skill = work / ".mm" / "skills" / "release-notes"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: release-notes\ndescription: Write the notes.\n---\nSteps.\n")
    first = run_mm("-p", "the first question", cwd=work)
    assert first.returncode == 0, first.stderr
    with Terminal("chat", cwd=work) as term:
        term.expect(PROMPT)
        term.send("/skills" + ENTER)
        term.expect(r"skills \(1\): release-notes")
        term.expect(PROMPT)
        term.send("/model" + ENTER)
        term.expect("model: the default")
        term.expect(PROMPT)
        term.send("/resume" + ENTER)
        session_id = term.expect(r"([0-9a-f]{6,})\s+\S+ \S+\s+the first question").group(1)
        term.expect(PROMPT)
        term.send(f"/resume {session_id[:4]}" + ENTER)
        term.expect(f"resumed {session_id}")
        term.expect(PROMPT)
        term.send("/model" + ENTER)
        term.expect(r"model: script/scripted \(this session's")
        term.expect(PROMPT)
        term.send("and the second?" + ENTER)
        term.expect("Two.")
        term.expect(PROMPT)
        term.send("/model nowhere/nothing" + ENTER)
        term.expect("model: nowhere/nothing from your next message on")
        term.expect(PROMPT)
        term.send("third" + ENTER)
        term.expect(r"mm: .*nowhere")
        assert quit_chat(term) != 0  # the last turn failed
    second = completions(server)[1]["messages"]
    assert [m["content"] for m in second if m["role"] == "user"] == ["the first question", "and the second?"]


def test_mm_p_and_mm_version_never_load_the_line_editor(mm_home: Path, scripted: Any) -> None:
    scripted([{"text": "Quick."}])
    for args in (["--version"], ["-p", "hi"]):
        run = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "mm.cli", *args],
            cwd=mm_home / "work",
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=WAIT,
        )
        assert run.returncode == 0, run.stderr
        imported = [line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines() if "|" in line]
        assert "click" in imported and not [m for m in imported if m.startswith("prompt_toolkit")]
