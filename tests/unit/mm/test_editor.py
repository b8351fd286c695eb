"""The chat's line editor (clients/mm/editor.py): keys fed through prompt_toolkit's pipe input, in process.

The same keys on a real terminal, through a real daemon, are in tests/e2e/test_chat.py.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from mm import editor
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.input import PipeInput, create_pipe_input
from prompt_toolkit.output import DummyOutput

from mmd.rpc import trust

COMMANDS = [("/help", "", "the list"), ("/resume", "[ID]", "a session"), ("/model", "[NAME]", "the model")]


@pytest.fixture
def keys() -> Iterator[PipeInput]:
    with create_pipe_input() as pipe:
        yield pipe


def make(keys: PipeInput, history: InMemoryHistory | None = None) -> editor.Editor:
    return editor.Editor(
        COMMANDS,
        lambda command, typed: ["3fa2b1", "3fc0de"],
        history=history,
        input=keys,
        output=DummyOutput(),
    )


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        ("hello\r", "hello"),
        ("\x1b[200~first line\nsecond line\x1b[201~\r", "first line\nsecond line"),  # a bracketed paste
        ("\x1b[200~a\r\nb\x1b[201~\r", "a\nb"),  # a terminal that pastes CR LF
        ("one\x1b\rtwo\r", "one\ntwo"),  # Alt-Enter
        ("one\ntwo\r", "one\ntwo"),  # Ctrl-J
        ("one\\\rtwo\r", "one\ntwo"),  # a backslash, then Enter
    ],
)
def test_enter_sends_and_the_newline_keys_do_not(keys: PipeInput, typed: str, message: str) -> None:
    ed = make(keys)
    keys.send_text(typed)
    assert ed.read() == message


def test_ctrl_c_clears_a_line_with_text_and_interrupts_at_an_empty_one(keys: PipeInput) -> None:
    ed = make(keys)
    keys.send_text("half a thought\x03kept\r")
    assert ed.read() == "kept"
    keys.send_text("\x03")
    with pytest.raises(KeyboardInterrupt):
        ed.read()


def test_ctrl_d_at_an_empty_line_ends_the_input(keys: PipeInput) -> None:
    ed = make(keys)
    keys.send_text("\x04")
    with pytest.raises(EOFError):
        ed.read()


def test_up_recalls_the_history(keys: PipeInput) -> None:
    history = InMemoryHistory()
    history.append_string("from an earlier chat")
    ed = make(keys, history)
    keys.send_text("\x1b[A\r")
    assert ed.read() == "from an earlier chat"


def test_ctrl_r_searches_the_history_and_enter_takes_the_line_found(keys: PipeInput) -> None:
    history = InMemoryHistory()
    for line in ("buy the milk", "fix the build", "ask again"):
        history.append_string(line)
    ed = make(keys, history)
    keys.send_text("\x12milk\r\r")  # Ctrl-R, the text, Enter ends the search, Enter sends
    assert ed.read() == "buy the milk"


def test_the_history_file_is_private(tmp_path: Path) -> None:
    path = tmp_path / "state" / "mm" / "history"
    path.parent.mkdir(parents=True, mode=0o755)
    path.write_text("")
    path.chmod(0o644)  # made by someone careless: it is tightened
    editor.private_history(path).append_string("a secret plan")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert "a secret plan" in path.read_text()
    assert list(editor.private_history(path).load_history_strings()) == ["a secret plan"]


def test_a_history_folder_others_can_write_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "mm"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    with pytest.raises(trust.UnsafePath):
        editor.private_history(folder / "history")


def completions(text: str) -> list[str]:
    completer = editor.SlashCompleter(COMMANDS, lambda command, typed: ["3fa2b1", "3fc0de"])
    found = completer.get_completions(Document(text), CompleteEvent(text_inserted=True))
    return [text[: len(text) + c.start_position] + c.text for c in found]


def test_completion_of_commands_and_of_their_arguments() -> None:
    assert completions("/") == ["/help", "/resume", "/model"]
    assert completions("/re") == ["/resume"]
    assert completions("/resume 3fa") == ["/resume 3fa2b1"]
    assert completions("/resume ") == ["/resume 3fa2b1", "/resume 3fc0de"]
    assert completions("hello /re") == []  # only at the start of a message
    assert completions("/help\n/re") == []


def test_lines_typed_ahead_are_read_whole() -> None:
    read_end, write_end = os.pipe()
    try:
        assert editor.typed_ahead(read_end) == []
        os.write(write_end, "next question\n\nnächste\n".encode())
        assert editor.typed_ahead(read_end) == ["next question", "", "nächste"]
        os.close(write_end)  # what a terminal shows for Ctrl-D at the start of a line
        write_end = -1
        with pytest.raises(EOFError):
            editor.typed_ahead(read_end)
    finally:
        os.close(read_end)
        if write_end != -1:
            os.close(write_end)
