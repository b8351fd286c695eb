"""The chat's input line: prompt_toolkit with history, multi-line messages and slash-command completion.

Enter sends. A bracketed paste stays one message, newlines and all; Alt-Enter (Esc then Enter),
Ctrl-J, or a backslash at the end of the line followed by Enter, insert a newline (Claude Code's
keys). Up and Down walk the history, kept in ``$XDG_STATE_HOME/mm/history`` (0600) across runs.
Ctrl-C clears a line that holds text and raises ``KeyboardInterrupt`` at an empty one; Ctrl-D at
an empty line raises ``EOFError``.

A line typed while a turn runs, Enter included, is the next message: the terminal is not in
prompt_toolkit's raw mode then, so it holds the line (Enter turned into a newline, which would
otherwise read as Ctrl-J) until ``Editor.read`` takes it.

Without a terminal (``mm chat < file``) ``PlainReader`` reads one message per line instead.
"""

from __future__ import annotations

import os
import select
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.enums import DEFAULT_BUFFER
from prompt_toolkit.filters import has_focus
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.input import Input
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.output import ColorDepth, Output

from mmd import paths
from mmd.rpc import trust

# What the chat shows before the cursor, and before each further line of a multi-line message.
PROMPT = "› "
CONTINUATION = "  "

# (name, what it takes, what it does) of each slash command, for completion.
Commands = Iterable[tuple[str, str, str]]
# The values an argument of a command may take, given the command and what is typed so far.
Arguments = Callable[[str, str], Iterable[str]]


def history_path() -> Path:
    """``$XDG_STATE_HOME/mm/history``: what was typed in the chat, kept across runs."""
    return paths.state_dir() / "history"


def private_history(path: Path) -> FileHistory:
    """The history file, created 0600 in a folder only the user can write (and made 0600 if it was not).

    Errors: ``trust.UnsafePath`` when the folder belongs to someone else or others can write it.
    """
    trust.ensure_private_dir(path.parent, fix=trust.STATE_FIX)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)  # a file made before, or by another program, may be readable by others
    finally:
        os.close(fd)
    return FileHistory(str(path))


class SlashCompleter(Completer):
    """Completes a slash command's name at the start of the message, then its argument."""

    def __init__(self, commands: Commands, arguments: Arguments) -> None:
        self.commands = list(commands)
        self.arguments = arguments

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterator[Completion]:
        typed = document.text_before_cursor
        if not typed.startswith("/") or "\n" in typed:
            return
        name, space, arg = typed.partition(" ")
        if not space:
            for command, takes, does in self.commands:
                if command.startswith(name):
                    yield Completion(
                        command, -len(name), display=f"{command} {takes}".strip(), display_meta=does
                    )
            return
        for value in self.arguments(name, arg):
            if value.startswith(arg):
                yield Completion(value, -len(arg))


def key_bindings() -> KeyBindings:
    """Enter sends; Alt-Enter, Ctrl-J and a trailing backslash make a newline; Ctrl-C clears or interrupts."""
    kb = KeyBindings()
    typing = has_focus(DEFAULT_BUFFER)  # not in Ctrl-R's search field, which keeps its own keys

    @kb.add("enter", filter=typing)
    def _send(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        if buffer.complete_state and buffer.complete_state.current_completion:
            buffer.apply_completion(buffer.complete_state.current_completion)
            return
        if buffer.document.text_before_cursor.endswith("\\"):  # `\` + Enter: a newline, everywhere
            buffer.delete_before_cursor()
            buffer.newline(copy_margin=False)
            return
        buffer.validate_and_handle()

    @kb.add("escape", "enter", filter=typing)
    @kb.add("c-j", filter=typing)
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.newline(copy_margin=False)

    @kb.add("c-c", filter=typing)
    def _interrupt(event: KeyPressEvent) -> None:
        if event.current_buffer.text:
            event.current_buffer.reset()  # Ctrl-C at a line with text: clear it, as a shell does
        else:
            event.app.exit(exception=KeyboardInterrupt())

    return kb


class Editor:
    """The chat's line editor on the terminal (or on *input*/*output*, for tests)."""

    def __init__(
        self,
        commands: Commands,
        arguments: Arguments,
        *,
        history: History | None = None,
        color: bool = True,
        input: Input | None = None,
        output: Output | None = None,
    ) -> None:
        self.session: PromptSession[str] = PromptSession(
            PROMPT,
            multiline=True,  # a message may hold newlines; Enter is bound to send it
            prompt_continuation=CONTINUATION,
            history=history if history is not None else InMemoryHistory(),
            completer=SlashCompleter(commands, arguments),
            complete_while_typing=True,
            key_bindings=key_bindings(),
            color_depth=None if color else ColorDepth.DEPTH_1_BIT,
            enable_history_search=False,
            input=input,
            output=output,
        )
        self._fd = sys.stdin.fileno() if input is None else None  # the terminal, for lines typed ahead
        self._ahead: list[str] = []  # lines typed ahead, not read yet

    def read(self) -> str:
        """The next message, as typed (newlines kept).

        Errors: KeyboardInterrupt (Ctrl-C at an empty line), EOFError (Ctrl-D at an empty line).
        """
        if not self._ahead and self._fd is not None:
            self._ahead = typed_ahead(self._fd)
        if not self._ahead:
            return self.session.prompt()
        line = self._ahead.pop(0)
        self.session.history.append_string(line)
        print(PROMPT + line, flush=True)  # the terminal echoed it amid the turn's output: show what is sent
        return line


def typed_ahead(fd: int) -> list[str]:
    """The whole lines typed on the terminal *fd* while no prompt read it (an empty list: none).

    Errors: EOFError when Ctrl-D was typed at the start of a line.
    """
    data = b""
    while select.select([fd], [], [], 0)[0]:
        chunk = os.read(fd, 65536)
        if not chunk:
            if data:
                break
            raise EOFError
        data += chunk
    lines = data.decode("utf-8", "replace").split("\n")
    if not lines[-1]:
        lines.pop()  # nothing after the last newline (the terminal hands over whole lines)
    return lines


class PlainReader:
    """One message per line of stdin, for a chat without a terminal (``mm chat < prompts.txt``)."""

    def read(self) -> str:
        """The next line. Errors: EOFError at the end of the input."""
        return input()
