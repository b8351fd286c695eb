"""The skill in use: once read (read_skill) or chosen (skillpick.py), its allowed-tools limit the turn.

mmd/tools/allowed.py says what an allowed-tools entry allows and why mm reads it as a limit, not as
consent given. This module applies it to one turn: the registry narrows to the allowed tools, so the
next request offers only those, and :func:`refusal` answers a call outside them (a model may still
call a tool it saw earlier in the turn). The skill read last decides: one without allowed-tools lifts
the limit. The limit lasts for the turn; the next prompt starts with every tool, and chooses again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from ..tools.allowed import ALWAYS, limit_of
from ..tools.base import Tool, ToolContext, ToolError
from ..tools.declared import DeclaredTool
from ..tools.registry import Registry
from ..tools.skillcmds import commands, tool_specs
from ..tools.skills import Skill
from .plan import TurnSetup

READ_SKILL = "read_skill"
# The event that says which of the skill in use's commands the turn offers as tools (docs/protocol.md).
SKILL_COMMANDS = "skill_commands"
# The event that says which tools a skill in use leaves the turn (docs/protocol.md).
SKILL_TOOLS = "skill_tools"


class Conversation(Protocol):
    """What this module needs of the session (calls.Conversation, which imports this module, has it)."""

    cwd: Path

    def emit(self, kind: str, data: dict[str, Any]) -> Any: ...


def use(session: Conversation, setup: TurnSetup, skill: Skill) -> None:
    """*skill* is now in use: narrow the turn's tools to its allowed-tools, or lift an earlier limit; the
    commands it names are checked (skillcmds.py) and, for the models mm constrains, offered as tools."""
    setup.skill_commands = commands(skill.name, skill.body)
    _limit(session, setup, skill)
    offer_commands(session, setup, skill)


def _limit(session: Conversation, setup: TurnSetup, skill: Skill) -> None:
    base = setup.unlimited or setup.registry
    if skill.allowed_tools is None:
        if setup.skill_limit is not None:
            setup.registry, setup.unlimited, setup.skill_limit = base, None, None
            session.emit(SKILL_TOOLS, {"skill": skill.name, "tools": None})
        return
    limit = limit_of(skill.name, skill.allowed_tools, base.tools)
    for warning in limit.warnings:
        session.emit("warning", {"message": warning})
    kept = [t for t in base.tools.values() if t.name in limit.tools or t.name in ALWAYS]
    setup.unlimited, setup.skill_limit = base, limit
    setup.registry = Registry(kept, strict=base.strict, placeholders=base.placeholders)
    session.emit(SKILL_TOOLS, {"skill": skill.name, "tools": limit.allowed_text()})


def offer_commands(session: Conversation, setup: TurnSetup, skill: Skill) -> None:
    """For the models mm constrains, the commands *skill* names become typed tools of the turn (those of a
    skill used before are taken away). Measured on both eval fixtures' skill mode: with the skill's text
    and bash alone, the 0.5B ran the right command in 13 of 30 and 13 of 45 runs, guessing (`pg_dump
    orders`, `scale checkout 7`) or running the skill's examples; as typed tools the same actions are
    calls valid by construction, with grounded values (docs/loops-and-recovery.md#the-skills-commands).
    A skill with allowed-tools keeps to them: its commands are not added."""
    if not setup.skill_tools:
        return
    registry = setup.registry
    for name in setup.skill_tool_names:  # a skill used before: its commands go with it
        registry = registry.without(name)
        if setup.unlimited is not None:
            setup.unlimited = setup.unlimited.without(name)
    setup.skill_tool_names = ()
    found = setup.skill_commands
    if skill.allowed_tools is None and found is not None and found.templates:
        specs = tool_specs(found, registry.names())
        added = [DeclaredTool(spec, Path(session.cwd)) for spec in specs]
        registry = Registry(
            [*registry.tools.values(), *added], strict=registry.strict, placeholders=registry.placeholders
        )
        setup.skill_tool_names = tuple(t.name for t in added)
        session.emit(SKILL_COMMANDS, {"skill": skill.name, "tools": list(setup.skill_tool_names)})
    setup.registry = registry


def after_read(session: Conversation, setup: TurnSetup, name: str) -> None:
    """A read_skill call of *name* succeeded: that skill is in use.

    For the small models mm constrains (``words_after_success``), read_skill then leaves the turn, as after
    a skill chosen for them (skillpick.py): the step after a read must act (loop.py), and the 0.5B's one
    call then was read_skill again, in 4 of the 5 runs in which it had read the right skill."""
    skill = setup.skills.get(name) if setup.skills else None
    if skill is not None:
        use(session, setup, skill)
        if setup.words_after_success:
            setup.registry = setup.registry.without(READ_SKILL)
            if setup.unlimited is not None:
                setup.unlimited = setup.unlimited.without(READ_SKILL)


def refusal(setup: TurnSetup, tool: Tool, args: dict[str, Any], ctx: ToolContext) -> str | None:
    """Why the skill in use refuses this call; None without a limit or when it allows the call."""
    limit = setup.skill_limit
    if limit is None:
        return None
    try:
        paths = tool.paths(args, ctx)
    except ToolError:
        paths = []  # the tool's own run answers a bad path
    return limit.refusal(tool, args, ctx.cwd, paths)


def unknown(setup: TurnSetup, name: str) -> ToolError | None:
    """The answer to a call of a tool the skill's limit took out of the turn (None: not such a tool)."""
    limit = setup.skill_limit
    if limit is None or setup.unlimited is None or name not in setup.unlimited:
        return None
    return ToolError(
        "not_allowed_by_skill",
        limit.refusal_text(name),
        fix=f"Use one of: {', '.join(setup.registry.names())}.",
    )
