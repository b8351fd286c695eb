"""The chat: ``mm`` (or ``mm chat``) in a terminal — one session, a message at a time.

A message is a turn of the session, shown as ``mm -p`` shows one (render.View, with its spinner).
A line that starts with ``/`` is a command (slash.py). Ctrl-C cancels a running turn and keeps the
chat; at a consent question it denies that one call; at an empty line it shows how to quit, and a
second one in a row quits, as Ctrl-D does. cli.py imports this module only for a chat, so ``mm -p``
never loads prompt_toolkit; and since cli.py imports it, the turn machinery comes in as ``Turns``.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from mmd import __version__
from mmd.rpc import RPCError, trust

from . import editor, slash, style, terminal
from .ask import Answer, answer_consent
from .connection import Client, DaemonError
from .render import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, View
from .trust_cmd import offer

# The first line of a chat.
BANNER = (
    f"mm {__version__} — Enter sends, Alt-Enter or Ctrl-J starts a new line, /help lists the commands; "
    "Ctrl-C cancels a turn, Ctrl-D quits."
)
# What a first Ctrl-C at an empty line says.
QUIT_HINT = "(Ctrl-C again to quit, or Ctrl-D)"
# Session ids /resume completes, newest first.
COMPLETE_SESSIONS = 20
# Ctrl-C at a consent question denies that call and the turn goes on.
ANSWER: Answer = functools.partial(answer_consent, interrupt_denies=True)


@dataclass(frozen=True)
class Turns:
    """What the chat takes from cli.py: the same connection, prompt and rendering as ``mm -p``."""

    connect: Callable[[], Client]  # a handshaken connection (exits with a message when none can be had)
    params: Callable[[str, dict[str, Any], str | None], dict[str, Any]]  # session.prompt's params
    # session.prompt sent: its result, and whether Ctrl-C cancelled the turn as it started
    start: Callable[[Client, dict[str, Any], View], tuple[dict[str, Any], bool]]
    follow: Callable[..., tuple[int, str]]  # renders a turn's events until it ends: (exit code, session)


class Chat:
    """The chat's state: its options, its session, the exit code of its last turn."""

    def __init__(self, opts: dict[str, Any], turns: Turns) -> None:
        self.turns = turns
        self.session_id: str | None = opts.pop("resume", None)  # None: the next message starts one
        self.opts = opts  # agent, model, yolo, continue_: what session.prompt is given
        self.code = EXIT_OK
        self.declined: set[tuple[str, str]] = set()  # project files not trusted: not asked about again

    def say(self, text: str) -> None:
        """A line for the person, on stderr (stdout carries only answers)."""
        terminal.echo(text, err=True)

    def call(self, method: str, params: dict[str, Any]) -> Any:
        """One request on a fresh connection. Errors: RPCError, DaemonError."""
        client = self.turns.connect()
        try:
            return client.call(method, params)
        finally:
            client.close()

    def send(self, text: str) -> None:
        """Run *text* as a turn of the session, to its end (Ctrl-C cancels it)."""
        view = View("text")
        client = self.turns.connect()
        try:
            params = self.turns.params(text, self.opts, self.session_id)
            offer(client, params, self.declined)  # before each turn: a file may have changed
            view.spinner.start("starting")  # session.prompt may start a local model server first
            started, cancelled = self.turns.start(client, params, view)
            self.session_id = started["session_id"]
            self.opts["continue_"] = False  # --continue picked the session once; the chat keeps it
            self.code, _ = self.turns.follow(client, self.session_id, started["after_seq"], view, ANSWER)
            self.code = EXIT_INTERRUPTED if cancelled else self.code
        except RPCError as exc:
            view.error(exc.message)
            self.code = EXIT_ERROR
        except DaemonError as exc:
            view.error(str(exc))
            self.code = EXIT_ERROR
        except KeyboardInterrupt:  # a second Ctrl-C while the turn started, or one before it was asked for
            view.note("interrupted")
            self.code = EXIT_INTERRUPTED
        finally:
            client.close()

    def arguments(self, command: str, typed: str) -> Iterable[str]:
        """What an argument of *command* may be, for completion: session ids for /resume."""
        if command != "/resume":
            return []
        try:  # never starts a daemon, never exits: completion runs while the person types
            client = Client.connect(autostart=False)
            try:
                rows = client.call("session.list", {"cwd": os.getcwd(), "limit": COMPLETE_SESSIONS})
            finally:
                client.close()
        except (DaemonError, RPCError, OSError):
            return []
        return [row["id"] for row in rows["sessions"]]


def run(opts: dict[str, Any], turns: Turns) -> int:
    """Chat until /exit, Ctrl-D, or two Ctrl-C at an empty line; the exit code of the last turn."""
    chat = Chat(opts, turns)
    reader = _reader(chat)
    chat.say(BANNER)
    interrupted = False  # the last key at the prompt was Ctrl-C at an empty line
    while True:
        try:
            text = reader.read()
        except KeyboardInterrupt:
            if interrupted:
                return chat.code
            interrupted = True
            chat.say(QUIT_HINT)
            continue
        except EOFError:
            return chat.code
        interrupted = False
        if _handle(chat, text):
            return chat.code


def _handle(chat: Chat, text: str) -> bool:
    """Run a command or send a message; True when the chat should end."""
    if not text.startswith("/"):
        if text.strip():
            chat.send(text)
        return False
    try:
        return slash.run(chat, text)
    except (RPCError, DaemonError) as exc:
        chat.say(f"mm: {exc.message if isinstance(exc, RPCError) else exc}")
    except KeyboardInterrupt:  # a command waiting on the daemon: give up on it, keep the chat
        chat.say("interrupted")
    return False


def _reader(chat: Chat) -> editor.Editor | editor.PlainReader:
    """The line editor on a terminal; lines of stdin otherwise."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return editor.PlainReader()
    try:
        history = editor.private_history(editor.history_path())
    except (trust.UnsafePath, OSError) as exc:
        chat.say(f"mm: warning: no history kept across chats: {exc}")
        history = None
    return editor.Editor(slash.COMMANDS, chat.arguments, history=history, color=style.enabled(sys.stdout))
