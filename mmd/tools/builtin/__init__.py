"""The built-in tools, in one table: an agent enables them with ``builtins:`` (all by default).

``TABLE`` maps each built-in's name to its class, as ``"module:Class"`` under
this package, in the order the model is shown them. Adding a built-in takes
its module and one line here: the agent file's ``builtins:`` accepts the
names of ``BUILTIN_TOOLS``, and MCP tools may never take them.

The classes are imported when the tools are made, not with this package:
the agent-file loader (mmd/config) reads the names from here and must stay
light.

A disabled built-in is absent from the request, not merely discouraged.
``read_skill`` is offered only when the catalogue holds a skill: an empty
catalogue would make it a tool that can only fail.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..base import Tool
    from ..skills import Catalogue

TABLE: dict[str, str] = {
    "bash": "bash:Bash",
    "read_file": "files:ReadFile",
    "write_file": "files:WriteFile",
    "edit_file": "files:EditFile",
    "list_files": "search:ListFiles",
    "grep": "search:Grep",
    "read_skill": "skill:ReadSkill",
}
# Every built-in tool, in the order the model is shown them.
BUILTIN_TOOLS: tuple[str, ...] = tuple(TABLE)


@functools.cache  # the module is imported on first use; import_module again cost ~7 Python calls a built-in a prompt
def tool_class(name: str) -> type[Tool]:
    """The class of the built-in *name* (a key of TABLE)."""
    module, _, cls = TABLE[name].partition(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)


def make_builtins(enabled: Iterable[str] | None, skills: Catalogue | None = None) -> list[Tool]:
    """The built-ins *enabled* (None: all) for a turn whose skills are *skills* (read_skill only with some)."""
    offered = bool(skills)
    # Each name once: a list that repeats one (an agent file's builtins: needs no trust, and may name bash
    # 20,000 times) made a tool for each, every prompt, for the registry to keep one.
    names = list(TABLE) if enabled is None else list(dict.fromkeys(enabled))
    return [_make(n, skills) for n in names if n in TABLE and (n != "read_skill" or offered)]


def _make(name: str, skills: Catalogue | None) -> Tool:
    cls = tool_class(name)
    return cls(skills) if name == "read_skill" else cls()
