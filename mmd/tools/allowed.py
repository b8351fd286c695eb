"""A skill's ``allowed-tools``: the only tools a turn may use once the skill is in use.

Claude Code reads ``allowed-tools`` as tools the skill may use *without asking*. mm reads it the other
way round, as a limit: while the skill is in use, the turn offers only these tools (and ``read_skill``
and ``next_phase``, which act on nothing), and a call of any other tool, or a bash command outside its
patterns, is refused with a message saying what the skill allows. Every allowed call still asks for
consent as usual. Why: a skill is text from wherever it was found, often a cloned repository, and text
from a repository must not switch off mm's consent; a limit can only make a turn do less.

Claude's names map to mm's built-ins (``CLAUDE_NAMES``); mm's own names (``bash``, a declared tool, an
MCP tool as the model sees it) are taken as they are; ``mcp__server__tool`` and ``mcp__server`` name an
MCP server's tool, or all of them. Entries:

- ``Bash`` — any command; ``Bash(git:*)`` — commands that are ``git`` or start with ``git ``;
  ``Bash(git diff *)`` — a glob over the whole command; ``Bash(npm test)`` — that command only.
  A command is split at ``;``, ``&``, ``|`` and newlines, and every part must match; ``$(``, backquotes
  and ``<(`` are refused, since they hide a command inside another.
- ``Read(src/**)`` and the like — only paths matching the glob, relative to the working directory
  (``~/`` the home folder, ``//`` the file system's root); a tool that names no path takes no pattern.

An entry that names no tool of this turn is dropped with a warning, never silently.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

from ..patterns import fnmatch
from .base import Tool

# Claude Code's tool names and the built-ins that do their work.
CLAUDE_NAMES: dict[str, tuple[str, ...]] = {
    "Bash": ("bash",),
    "Read": ("read_file",),
    "Write": ("write_file",),
    "Edit": ("edit_file",),
    "MultiEdit": ("edit_file",),
    "Grep": ("grep",),
    "Glob": ("list_files",),
    "LS": ("list_files",),
}
# Tools a limited turn keeps: they read a skill or move a phase, acting on nothing of the user's.
ALWAYS = ("read_skill", "next_phase")
# One entry: a name, then an optional pattern in parentheses.
_ENTRY = re.compile(r"([A-Za-z0-9_.-]+)(?:\((.*)\))?", re.DOTALL)
# Where a shell command holds another one; a pattern cannot see into these.
_HIDDEN = ("$(", "`", "<(", ">(")
# What separates the commands of a shell line.
_SPLIT = re.compile(r"&&|\|\||[;&|\n]")


class Limit(msgspec.Struct, frozen=True):
    """The tools a skill in use allows: tool name → its patterns (empty: any call of it)."""

    skill: str
    tools: dict[str, tuple[str, ...]]
    warnings: list[str] = msgspec.field(default_factory=list)

    def names(self) -> list[str]:
        return list(self.tools)

    def refusal(self, tool: Tool, args: dict[str, Any], cwd: Path, paths: list[Path]) -> str | None:
        """Why the call is refused, in words for the model; None when the skill allows it."""
        if tool.name in ALWAYS:
            return None
        if tool.name not in self.tools:
            return self.refusal_text(tool.name)
        patterns = self.tools[tool.name]
        if not patterns:
            return None
        if tool.name == "bash":
            return _bash_refusal(self.skill, str(args.get("command", "")), patterns)
        return _path_refusal(self.skill, tool.name, paths, patterns, cwd)

    def refusal_text(self, name: str) -> str:
        """The answer to a call of *name*, a tool this limit leaves out."""
        allowed = ", ".join(self.allowed_text()) or "no tool"
        return (
            f"The skill {self.skill} is in use and its allowed-tools do not include {name}: "
            f"it allows {allowed}. Do the task with those, or read another skill with read_skill."
        )

    def allowed_text(self) -> list[str]:
        return [f"{n}({', '.join(p)})" if p else n for n, p in self.tools.items()]


def limit_of(skill: str, entries: Iterable[str], offered: dict[str, Tool]) -> Limit:
    """The limit of *skill*'s allowed-tools *entries* among the *offered* tools (name → tool)."""
    tools: dict[str, list[str]] = {}
    warnings = []
    for entry in entries:
        m = _ENTRY.fullmatch(entry.strip())
        names = _resolve(m.group(1), offered) if m else []
        if not names:
            warnings.append(
                f"skill {skill}: allowed-tools entry {entry!r} names no tool of this turn "
                f"(tools: {', '.join(offered)}); it allows nothing"
            )
            continue
        pattern = (m.group(2) or "").strip() if m else ""
        for name in names:
            if pattern and name != "bash" and not _names_paths(offered[name]):
                warnings.append(
                    f"skill {skill}: allowed-tools entry {entry!r}: {name} names no path to match "
                    f"{pattern!r} against; every call of {name} is allowed"
                )
                pattern = ""
            current = tools.setdefault(name, [])
            if not pattern:
                current.clear()
                current.append("*")  # any call; kept as a marker so a later pattern cannot narrow it
            elif "*" not in current:
                current.append(pattern)
    return Limit(
        skill=skill,
        tools={n: () if "*" in p else tuple(p) for n, p in tools.items()},
        warnings=warnings,
    )


def _resolve(name: str, offered: dict[str, Tool]) -> list[str]:
    """mm's names of the tools *name* means, among those offered."""
    if name in offered:
        return [name]
    if name in CLAUDE_NAMES:
        return [n for n in CLAUDE_NAMES[name] if n in offered]
    if name.startswith("mcp__"):
        server, _, remote = name[len("mcp__") :].partition("__")
        return [
            n
            for n, tool in offered.items()
            if tool.source == f"mcp:{server}" and (not remote or getattr(tool, "remote_name", None) == remote)
        ]
    return []


def _names_paths(tool: Tool) -> bool:
    return type(tool).paths is not Tool.paths


def _bash_refusal(skill: str, command: str, patterns: tuple[str, ...]) -> str | None:
    shown = ", ".join(f"Bash({p})" for p in patterns)
    if any(h in command for h in _HIDDEN):
        return (
            f"The skill {skill} allows only some commands ({shown}), and this one hides a command "
            "inside $(...), backquotes or <(...): write each command out."
        )
    for part in _SPLIT.split(command):
        part = " ".join(part.split())
        if part and not any(_command_matches(part, p) for p in patterns):
            return f"The skill {skill} allows only the commands {shown}; {part!r} is not one of them."
    return None


def _command_matches(command: str, pattern: str) -> bool:
    pattern = " ".join(pattern.split())
    if pattern.endswith(":*"):
        prefix = pattern[:-2].strip()
        return command == prefix or command.startswith(prefix + " ")
    if "*" in pattern:
        return fnmatch(command, pattern)
    return command == pattern


def _path_refusal(
    skill: str, name: str, paths: list[Path], patterns: tuple[str, ...], cwd: Path
) -> str | None:
    globs = [_absolute(p, cwd) for p in patterns]
    for path in paths:
        real = os.path.realpath(path)
        if not any(fnmatch(real, g) for g in globs):
            return f"The skill {skill} allows {name} only on {', '.join(patterns)}; {path} is not among them."
    return None


def _absolute(pattern: str, cwd: Path) -> str:
    if pattern.startswith("//"):
        return pattern[1:]
    if pattern.startswith("~/"):
        return os.path.join(os.path.expanduser("~"), pattern[2:])
    if pattern.startswith("/"):
        return pattern
    return os.path.join(os.path.realpath(cwd), pattern.removeprefix("./"))
