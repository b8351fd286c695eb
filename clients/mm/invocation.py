"""How ``mm``'s words are read: a prompt or a command, and the text piped on stdin.

As in Claude Code, ``-p`` is a flag and the prompt is the positional word, so
options come in any order (``mm -p --yolo "fix it"``, ``mm "fix it" -p``).
``mm`` is also a group of commands (``mm daemon …``): its first word is a
command when it names one, and the prompt otherwise. A prompt that is
exactly a command's name is sent with ``-p`` before it or after ``--``
(``mm -p daemon``, ``mm -- sessions``).
"""

from __future__ import annotations

import difflib
import importlib
import io
import os
import select
from typing import Any, TextIO

import click

# Where PromptGroup leaves the prompt's words for the group's callback.
PROMPT_WORDS = "mm.prompt_words"
# Seconds to wait for the first byte of a pipe when a prompt was given (Claude Code waits 3 s too):
# a pipe inherited from a parent that never writes must not hang mm.
STDIN_WAIT = 3.0
# How close a word must be to a command's name to be taken for a mistyped command (difflib's ratio).
NEAR_MISS = 0.8


class PromptGroup(click.Group):
    """A click group whose first word may be a prompt rather than a command.

    Commands named in ``lazy`` (name: module, attribute, one line of help) are imported when
    they run, not when ``mm`` starts: ``mm --help`` lists them from that line alone.
    """

    def __init__(
        self, *args: Any, lazy: dict[str, tuple[str, str, str]] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            module, attr, _ = self.lazy[cmd_name]
            self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # The help lists lazy commands by their line in the table, importing nothing.
        rows = []
        for name in self.list_commands(ctx):
            if name in self.commands:
                cmd = self.commands[name]
                if not cmd.hidden:
                    rows.append((name, cmd.get_short_help_str(formatter.width - 6 - len(name))))
            else:
                rows.append((name, self.lazy[name][2]))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        word, forced = first_word(self.params, args)
        if word is None or (not forced and self.get_command(ctx, word) is not None):
            return super().parse_args(ctx, args)
        if not forced:
            self._refuse_near_miss(ctx, word)
        # A prompt: options may follow it, and every positional word is part of it.
        ctx.allow_interspersed_args = True
        ctx.allow_extra_args = True
        ctx.meta[PROMPT_WORDS] = click.Command.parse_args(self, ctx, args)
        ctx.args = []
        return []

    def _refuse_near_miss(self, ctx: click.Context, word: str) -> None:
        """`mm sesions list` is a typo, not a question for the model."""
        close = difflib.get_close_matches(word, self.list_commands(ctx), n=1, cutoff=NEAR_MISS)
        if close and not any(c.isspace() for c in word):
            raise click.UsageError(
                f"no such command '{word}'. Did you mean '{close[0]}'? "
                f"(To send '{word}' to the model as a prompt: mm -p {word})",
                ctx,
            )


def first_word(params: list[click.Parameter], args: list[str]) -> tuple[str | None, bool]:
    """The first positional word of *args*, and whether it must be a prompt (``-p`` or ``--`` before it)."""
    takes_value = {
        opt for p in params if isinstance(p, click.Option) and not p.is_flag and not p.count for opt in p.opts
    }
    forced = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return (args[i + 1] if i + 1 < len(args) else None), True
        if arg == "--print":
            forced = True
        elif arg.startswith("--"):
            i += arg in takes_value  # `--model x`: skip its value (`--model=x` is one word)
        elif arg.startswith("-") and len(arg) > 1:
            for n, letter in enumerate(arg[1:], 1):  # a cluster of short flags: `-cp`
                forced = forced or letter == "p"
                if f"-{letter}" in takes_value:
                    i += n == len(arg) - 1  # `-m x` takes the next word; `-mx` holds its value
                    break
        else:
            return arg, forced
        i += 1
    return None, forced


def read_prompt(words: list[str], stdin: TextIO, warn: Any = None) -> str:
    """The prompt: the words given, then the text piped on stdin after a newline, as Claude Code joins them.

    With a prompt given, a pipe that sends nothing for STDIN_WAIT seconds is
    left unread (*warn* is told why); with none, stdin is the prompt and is
    read to its end. Bytes that are not UTF-8 are replaced, never fatal.
    """
    # A word the locale could not decode (a Latin-1 é typed under LANG=C) holds a surrogate escape, which no
    # message to the daemon can carry: replaced, as bytes that are not UTF-8 on stdin are.
    prompt = os.fsencode(" ".join(words)).decode("utf-8", "replace")
    if stdin.isatty():
        return prompt
    if prompt and not _readable(stdin, STDIN_WAIT):
        if warn is not None:
            warn(
                f"no text on stdin within {STDIN_WAIT:.0f} s; going on without it "
                "(redirect stdin from /dev/null to skip the wait)"
            )
        return prompt
    raw = getattr(stdin, "buffer", None)
    piped = raw.read().decode("utf-8", "replace") if raw is not None else stdin.read()
    return "\n".join(part for part in (prompt, piped) if part)


def _readable(stdin: TextIO, timeout: float) -> bool:
    try:
        fd = stdin.fileno()
    except (OSError, ValueError, io.UnsupportedOperation):
        return True  # not a file (a test's StringIO): read it
    ready, _, _ = select.select([fd], [], [], timeout)
    return bool(ready)
