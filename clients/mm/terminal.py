"""Text mm did not write, made inert before a terminal shows it.

The model's words, a command's output, the command itself, a tool's name and description from an MCP
server, a file's name: any of them may hold bytes a terminal obeys. Under prompt injection the model
writes them on purpose: ``ESC [2K`` and a carriage return erase the line and write another over it, so a
consent ask showed ``echo hello`` for a command that was something else; OSC 52 puts text in the
clipboard; a colour equal to the background hides a word. So, on a terminal, every such character is
shown as its escape (``\\x1b``), never sent as itself. A pipe or a file gets the bytes as they are: a
program reading ``mm -p``'s answer gets it exact.

- :func:`text`: prose and output — every C0 control but tab, line feed and carriage return (a progress
  bar redraws its line), DEL, and the C1 controls (U+0080–U+009F: ``\\x9b`` is CSI on some terminals).
- :func:`code`: what a person decides on — a command, its arguments, a path, a name: carriage returns too,
  and the bidirectional overrides and isolates (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F), which show
  the characters of a line in another order than they run.
- :func:`line`: one cell of a listing's row — a name, a description, a path, a server's error:
  :func:`code`, and line feeds and tabs too, so that it stays in its row and its column (an MCP tool named
  ``ok\r\n\u202eevil`` began a row of its own and wrote it backwards).
- :func:`echo`: ``click.echo`` of text, made inert when the stream is a terminal; :func:`inert` the same for
  text styled after; :func:`cell` is :func:`line` on a terminal.
- :func:`json_text`: JSON that keeps non-ASCII text readable (``ensure_ascii=False``) with DEL and the C1
  controls written as ``\\u`` escapes: the same JSON to a program, nothing a terminal obeys (json.dumps
  escapes the C0 controls itself).

Only the standard library and click: the client imports this for every command.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, TextIO

import click

_TEXT = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_JSON_RAW = re.compile("[\x7f-\x9f]")  # what json.dumps(ensure_ascii=False) leaves as it is
_CODE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    point = ord(match.group())
    return f"\\x{point:02x}" if point < 0x100 else f"\\u{point:04x}"


def text(value: str) -> str:
    """*value* with the controls a terminal would obey shown as escapes; tab and line ends kept."""
    return _TEXT.sub(_escape, value)


def code(value: str) -> str:
    """*value* as a command or a name to decide on: :func:`text`, and carriage returns and bidirectional
    controls shown as escapes too."""
    return _CODE.sub(_escape, value)


def line(value: str) -> str:
    """*value* as one cell of a row: :func:`code`, and line feeds and tabs shown as escapes too."""
    return _LINE.sub(_escape, value)


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def inert(value: str, *, err: bool = False, as_code: bool = False) -> str:
    """*value* as :func:`text` (or :func:`code`) when stdout (or stderr) is a terminal, else as it is: for a
    line that is styled after."""
    if not is_terminal(sys.stderr if err else sys.stdout):
        return value
    return code(value) if as_code else text(value)


def cell(value: Any, *, err: bool = False) -> str:
    """``str(value)`` as :func:`line` when stdout (or stderr) is a terminal, else as it is: a string of a
    server's or a project's in a listing, escaped before the columns are measured."""
    value = str(value)
    return line(value) if is_terminal(sys.stderr if err else sys.stdout) else value


def echo(message: str = "", *, err: bool = False, nl: bool = True) -> None:
    """``click.echo`` of *message*, which holds text mm did not write: made inert on a terminal."""
    click.echo(inert(message, err=err), err=err, nl=nl)


def json_text(value: Any, **options: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, **options)`` with DEL and the C1 controls as ``\\u`` escapes."""
    return _JSON_RAW.sub(_json_escape, json.dumps(value, ensure_ascii=False, **options))


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"
