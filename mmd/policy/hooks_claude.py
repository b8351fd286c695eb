"""mm's tools as Claude Code names them, for the JSON a hook reads and the ``updatedInput`` it answers.

A hook written from Claude Code's documentation tests ``tool_name == "Bash"``
and reads ``tool_input.file_path``; so where a built-in has a Claude Code
equivalent (https://code.claude.com/docs/en/hooks#pretooluse-input), the hook
sees that tool's name and parameters, with mm's own beside them
(``mm_tool_name``, ``mm_tool_input``). An MCP tool is named as Claude Code names
one: ``mcp__<server>__<tool>``. Other tools (declared, ``read_skill``) keep their
name. :func:`to_mm` maps an answer written in Claude Code's names back.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from ..tools.base import Tool


class ClaudeTool(msgspec.Struct, frozen=True):
    """A built-in's Claude Code equivalent."""

    name: str
    params: dict[str, str]  # mm's parameter → Claude Code's
    # Claude Code's parameters mm has no use for: dropped from an updatedInput rather than refused.
    dropped: frozenset[str] = msgspec.field(default_factory=frozenset)


# The built-ins with a Claude Code equivalent; a parameter not listed keeps its mm name.
TOOLS: dict[str, ClaudeTool] = {
    "bash": ClaudeTool(
        "Bash", {"command": "command", "timeout": "timeout"}, frozenset({"description", "run_in_background"})
    ),
    "read_file": ClaudeTool("Read", {"path": "file_path", "offset": "offset", "limit": "limit"}),
    "write_file": ClaudeTool("Write", {"path": "file_path", "content": "content"}),
    "edit_file": ClaudeTool(
        "Edit",
        {
            "path": "file_path",
            "old_text": "old_string",
            "new_text": "new_string",
            "replace_all": "replace_all",
        },
    ),
    "grep": ClaudeTool(
        "Grep",
        {"pattern": "pattern", "path": "path", "glob": "glob", "ignore_case": "-i"},
        frozenset({"output_mode", "multiline", "head_limit", "type", "-n", "-A", "-B", "-C"}),
    ),
    "list_files": ClaudeTool("Glob", {"pattern": "pattern", "path": "path"}),
}


def claude_name(tool: Tool) -> str:
    """The name a Claude Code hook knows *tool* by (its own where Claude Code has none)."""
    if tool.source == "builtin" and tool.name in TOOLS:
        return TOOLS[tool.name].name
    if tool.source.startswith("mcp:"):
        return f"mcp__{tool.source[4:]}__{getattr(tool, 'remote_name', tool.name)}"
    return tool.name


def _mapping(tool: Tool) -> ClaudeTool | None:
    return TOOLS.get(tool.name) if tool.source == "builtin" else None


def to_claude(tool: Tool, args: dict[str, Any], cwd: Path) -> dict[str, Any]:
    """*args* (mm's, validated) in Claude Code's parameter names and units.

    ``file_path`` is absolute, as Claude Code gives it; ``Bash``'s ``timeout``
    is in milliseconds (mm's is in seconds).
    """
    mapping = _mapping(tool)
    if mapping is None:
        return dict(args)
    return {mapping.params.get(k, k): _forward(mapping, k, v, cwd) for k, v in args.items()}


def to_mm(tool: Tool, updated: dict[str, Any], sent: dict[str, Any], cwd: Path) -> dict[str, Any]:
    """An ``updatedInput`` back in mm's parameters; *sent* are the mm arguments the hook was shown.

    Keys in Claude Code's names are renamed and converted back (a value the
    hook left as it was gives back the original); keys already in mm's names
    pass as they are; Claude Code's parameters mm has no use for are dropped.
    The contract validates the result.
    """
    mapping = _mapping(tool)
    if mapping is None:
        return dict(updated)
    back = {claude: mm for mm, claude in mapping.params.items()}
    out: dict[str, Any] = {}
    for key, value in updated.items():
        if key in mapping.dropped:
            continue
        mm_key = back.get(key, key)
        out[mm_key] = _backward(mapping, mm_key, value, sent, cwd) if key in back else value
    return out


def _forward(mapping: ClaudeTool, key: str, value: Any, cwd: Path) -> Any:
    if mapping.params.get(key) == "file_path" and isinstance(value, str):
        return os.path.normpath(cwd / os.path.expanduser(value))
    if mapping.name == "Bash" and key == "timeout" and isinstance(value, int | float):
        return value * 1000
    return value


def _backward(mapping: ClaudeTool, key: str, value: Any, sent: dict[str, Any], cwd: Path) -> Any:
    if key in sent and _forward(mapping, key, sent[key], cwd) == value:
        return sent[key]  # unchanged: the original, relative path and all
    if (
        mapping.name == "Bash"
        and key == "timeout"
        and isinstance(value, int | float)
        and not isinstance(value, bool)
    ):
        return max(1, math.ceil(value / 1000))
    return value
