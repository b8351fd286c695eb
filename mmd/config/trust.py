"""Which of a project's own files may make mm run commands: those you trusted, as they were when you did.

A cloned repository's agent file (``mm.yaml``, ``.mm/agent.yaml``), its ``.mcp.json`` and its Claude Code
settings (under ``import: claude``) can name commands mm would run without asking anyone — hooks, MCP
servers, declared tools, a ``scripted:`` model whose script would answer in place of the person's — and keys
that loosen mm's guards (``yolo``, ``pass_env``, ``sandbox: off``, ``sandbox.writable``, a
``skills:`` folder outside the project, which the file tools read unasked). Such a file is
used only once the person trusted it (``mm trust``), and only as it was then: trust is kept by the file's
path and the SHA-256 of its text, so a ``git pull`` or a sandboxed command that changes it makes it
untrusted again. A file that names none of these is used as it is; a file the person names on the command
line (``--agent``) is trusted for that request.

An untrusted file is not read at all (the prompt runs as if it were absent) and is listed in
:attr:`Trust.untrusted`, which the turn turns into a warning and ``trust.check`` into a question.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path

import msgspec


class Untrusted(msgspec.Struct, frozen=True):
    """A project file left out: its path (:func:`where`), the digest of its text, what it would have made
    mm do (each line whole: :func:`shown`), whether an older text of it was trusted (it changed since),
    whether the request found it by a name (a continued session's agent file) rather than by looking in its
    folder, and whether what it would make mm do is too long to show whole (then it is not offered for
    trust: the person reads the file)."""

    path: str
    digest: str
    powers: list[str]
    changed: bool = False
    by_name: bool = False
    too_long: bool = False


class Trust:
    """The files trusted (path → digest) for one request, and the untrusted ones it met.

    *named*: the agent file the person named on this request (``--agent``), trusted as it is.
    """

    def __init__(self, trusted: Mapping[str, str] | None, *, named: Path | None = None) -> None:
        self._trusted = trusted  # None: every file (everything())
        self._named = where(named) if named is not None else None
        self.untrusted: list[Untrusted] = []

    def holds(self, path: Path | str, digest: str) -> bool:
        """Whether the file at *path* was trusted with the text of *digest*."""
        return self._trusted is not None and self._trusted.get(where(path)) == digest

    def admits(self, path: Path | str, digest: str, powers: list[str], *, by_name: bool = False) -> bool:
        """Whether the file at *path*, whose text has *digest* and names *powers*, may be used; an
        untrusted one is recorded in :attr:`untrusted`."""
        if not powers or self._trusted is None:
            return True
        key = where(path)
        if key == self._named or self.holds(key, digest):
            return True
        if all(u.path != key for u in self.untrusted):
            lines, too_long = shown(powers)
            self.untrusted.append(Untrusted(key, digest, lines, key in self._trusted, by_name, too_long))
        return False


def where(path: Path | str) -> str:
    """The key a file is trusted by: its absolute path as mm found it, links not followed. A file's
    relative commands run from the folder it was found in, so the same text linked in elsewhere (a link a
    sandboxed command made, to a trusted file whose hook is ``./check.sh``) is another file to trust."""
    return os.path.abspath(path)


def everything() -> Trust:
    """A trust that admits every file: for what only reads a file the person named and runs none of it
    (``tools.check``), and for tests."""
    return Trust(None)


def named_file(cwd: Path, agent: str | None) -> Path | None:
    """The file an ``--agent`` value names, as the agent file's discovery reads it (relative to *cwd*,
    ``~`` allowed); None for none."""
    return cwd / Path(agent).expanduser() if agent else None


def listing(names: list[str], most: int = 4) -> str:
    """Up to *most* names, then how many more."""
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


# What a file would run is shown command by command and each command whole, so that the person judges every
# character of what they trust without opening the file: a line cut at 160 characters hid the tail of
# `./lint.sh --config=… ; curl … | sh`, and `y` trusted it. A file whose lines are more than SHOWN_CHARS in
# all (a 1 MB command, hundreds of tools) is not shown in part: it is not offered for trust, and the question
# says to read the file.
SHOWN_CHARS = 8000


def command_text(command: str | list[str] | None, args: list[str] | None = None) -> str:
    """A command as a shell would show it: a list (argv) quoted word by word, a string as it is."""
    if command is None:
        return "(nothing)"
    if isinstance(command, str) and not args:
        return command
    words = [command] if isinstance(command, str) else list(command)
    return shlex.join([*words, *(args or [])])


def settings_text(cwd: str | None, env: dict[str, str]) -> str:
    """What else decides what a command does, as a power's line ends: `` in DIR, with NAME=VALUE …``; "" when
    nothing. A project's NODE_OPTIONS=--require ./x.js behind a harmless ``npx …`` runs its own code."""
    text = f" in {cwd}" if cwd else ""
    if env:
        text += ", with " + " ".join(f"{key}={shlex.quote(value)}" for key, value in env.items())
    return text


def shown(lines: list[str]) -> tuple[list[str], bool]:
    """*lines* as the person is shown them, and whether they are too long to show: every line whole while
    they fit in SHOWN_CHARS; past that, the lines that fit, whole, and one saying how many more there are.
    A line is never cut."""
    kept: list[str] = []
    room = SHOWN_CHARS
    for line in lines:
        if len(line) > room:
            more = len(lines) - len(kept)
            return [*kept, f"and {more} more, too long to show here: read the file"], True
        kept.append(line)
        room -= len(line)
    return kept, False


def warning(untrusted: Untrusted, cwd: Path) -> str:
    """What a request in *cwd* says of a file it went without, and how to use it."""
    what = "; ".join(untrusted.powers)
    how = (
        "name it with --agent to use it (naming a file trusts it as it is)"
        if untrusted.by_name  # `mm trust` in cwd looks for the files there, not for this one
        else f"run `mm trust{' --yes' if untrusted.too_long else ''}` in {cwd} to use it"
    )
    if untrusted.changed:
        return (
            f"{untrusted.path} changed since you trusted it and names what mm would run ({what}): "
            f"mm went without it. Read the change, then {how}"
        )
    return (
        f"{untrusted.path} names what mm would run ({what}) and you have not trusted it: mm went "
        f"without it. Read it, then {how}"
    )
