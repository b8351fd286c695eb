"""The built-in tools an agent enables with ``builtins:`` (all of them by default).

A disabled built-in is absent from the request, not merely discouraged.
``read_skill`` is offered only when the catalogue holds a skill: an empty
catalogue would make it a tool that can only fail.
"""

from __future__ import annotations

from collections.abc import Iterable

from .base import Tool
from .builtin import FILE_TOOLS, SKILL_TOOLS
from .builtin.bash import Bash

BUILTINS: dict[str, Tool] = {"bash": Bash(), **FILE_TOOLS, **SKILL_TOOLS}


def make_builtins(enabled: Iterable[str] | None, *, has_skills: bool) -> list[Tool]:
    names = list(BUILTINS) if enabled is None else list(enabled)
    return [BUILTINS[n] for n in names if n in BUILTINS and (n != "read_skill" or has_skills)]
