"""How `mm`'s words are read (clients/mm/invocation.py): prompt or command, and stdin; in process, no daemon."""

from __future__ import annotations

import io
import os

import click
import pytest
from mm import invocation
from mm.cli import main
from mm.invocation import PROMPT_WORDS, first_word, read_prompt


def _parse(*args: str) -> click.Context:
    return main.make_context("mm", list(args))


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["-p", "--yolo", "Deploy it"], ["Deploy it"]),
        (["Deploy it", "-p", "--yolo"], ["Deploy it"]),
        (["--model", "daemon", "-p", "x"], ["x"]),  # an option's value is no command
        (["-m", "sessions", "x", "-p"], ["x"]),
        (["-p", "daemon"], ["daemon"]),  # -p first: every word is the prompt
        (["--", "sessions", "list"], ["sessions", "list"]),
        (["-cp", "what", "now"], ["what", "now"]),
        (["-p", "--", "--not-an-option"], ["--not-an-option"]),
    ],
)
def test_prompt_words_in_any_order(args: list[str], words: list[str]) -> None:
    ctx = _parse(*args)
    assert ctx.meta[PROMPT_WORDS] == words
    assert ctx.args == [] and not ctx._protected_args  # no command is invoked


def test_a_command_name_first_is_the_command() -> None:
    ctx = _parse("--yolo", "sessions", "list")
    assert PROMPT_WORDS not in ctx.meta
    assert ctx._protected_args == ["sessions"] and ctx.args == ["list"]


def test_options_after_the_prompt_are_read() -> None:
    ctx = _parse("fix it", "--output-format", "json", "-p", "--agent", "a.yaml")
    assert (ctx.params["print_"], ctx.params["output_format"], ctx.params["agent"]) == (
        True,
        "json",
        "a.yaml",
    )


def test_a_near_miss_of_a_command_is_refused() -> None:
    with pytest.raises(click.UsageError, match="Did you mean 'sessions'"):
        _parse("sesions")
    assert _parse("-p", "sesions").meta[PROMPT_WORDS] == ["sesions"]  # -p says it is a prompt


def test_first_word_skips_option_values() -> None:
    assert first_word(main.params, ["--resume", "abc", "daemon"]) == ("daemon", False)
    assert first_word(main.params, ["--resume=abc", "-p", "daemon"]) == ("daemon", True)
    assert first_word(main.params, ["-mdaemon", "x"]) == ("x", False)
    assert first_word(main.params, ["--yolo"]) == (None, False)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_stdin_follows_the_prompt_after_a_newline() -> None:
    assert read_prompt(["summarise"], io.StringIO("line one\n")) == "summarise\nline one\n"
    assert read_prompt([], io.StringIO("only stdin\n")) == "only stdin\n"
    assert read_prompt(["just", "words"], io.StringIO("")) == "just words"
    assert read_prompt(["typed"], _Tty("never read")) == "typed"


def test_a_pipe_that_sends_nothing_is_left_unread_when_a_prompt_was_given(monkeypatch) -> None:
    monkeypatch.setattr(invocation, "STDIN_WAIT", 0)
    read_end, write_end = os.pipe()
    warnings: list[str] = []
    try:
        with os.fdopen(read_end, "r") as stdin:
            assert read_prompt(["go"], stdin, warn=warnings.append) == "go"
    finally:
        os.close(write_end)
    assert len(warnings) == 1 and "/dev/null" in warnings[0]


def test_bytes_that_are_not_utf8_are_replaced() -> None:
    read_end, write_end = os.pipe()
    os.write(write_end, b"caf\xe9\n")
    os.close(write_end)
    with os.fdopen(read_end, "r") as stdin:
        assert read_prompt(["x"], stdin) == "x\ncaf\ufffd\n"


def test_a_word_that_is_not_utf8_is_replaced() -> None:
    """argv under LANG=C: a Latin-1 byte arrives as a surrogate escape, which no message can carry."""
    word = os.fsdecode(b"caf\xe9")
    assert read_prompt([word, "ok"], io.StringIO("")) == "caf\ufffd ok"
