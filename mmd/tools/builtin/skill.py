"""The read_skill tool: the body of one skill from the catalogue in the system prompt.

The catalogue is the session's (a :class:`mmd.tools.skills.Catalogue`), given
when the turn's tools are made (:func:`mmd.tools.builtin.make_builtins`).
"""

from __future__ import annotations

from typing import Any

import trio

from mmd.contract import closest
from mmd.tools.base import Tool, ToolContext, ToolError, ToolResult
from mmd.tools.skills import Catalogue, Skill

# The most skill names put in read_skill's schema as an enum; a larger catalogue keeps a free string.
MAX_ENUM = 200


class ReadSkill(Tool):
    name = "read_skill"
    description = (
        "Read one skill from the skills list: its instructions, and the other files it comes with. "
        "Read a skill before doing a task it covers."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"name": {"type": "string", "description": "The skill's name, as in the skills list."}},
        "required": ["name"],
    }
    tier = "read"
    example: dict[str, Any] = {"name": "release-notes"}

    def __init__(self, catalogue: Catalogue | None = None) -> None:
        self.catalogue = catalogue
        names = catalogue.names() if catalogue else []
        if 0 < len(names) <= MAX_ENUM:
            # The names as an enum: a model whose calls mm constrains cannot ask for a skill that does not
            # exist (the 0.5B asked for "billing", the request's word, and repeated it until the loop
            # detector stopped the turn: 4 of 5 contrib/eval status runs, 92b252c), and any model's wrong
            # name is answered with the list by the contract.
            name = {**self.parameters["properties"]["name"], "enum": names}
            self.parameters = {**self.parameters, "properties": {"name": name}}
            self.example = {"name": names[0]}

    def echo(self, args: dict[str, Any]) -> str:
        return f"read_skill {args.get('name', '')}"

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        catalogue = self.catalogue
        if not catalogue:
            raise ToolError("no_skills", "This agent has no skills.", cls="terminal")
        skill = catalogue.get(args["name"])
        if skill is None:
            raise _unknown(args["name"], catalogue.names())
        others = await trio.to_thread.run_sync(skill.other_files)
        return ToolResult(ok=True, content=_render(skill, others), data={"folder": str(skill.folder)})


def _unknown(name: str, names: list[str]) -> ToolError:
    maybe = closest(name, names)
    return ToolError(
        "unknown_skill",
        f"There is no skill named {name}." + (f" Did you mean {maybe[0]}?" if maybe else ""),
        field="name",
        fix=f"Use one of: {', '.join(names)}.",
    )


def _render(skill: Skill, others: list[str]) -> str:
    parts = [f"Skill {skill.name} (folder {skill.folder})", "", skill.body.rstrip()]
    if others:
        parts += ["", f"Other files of this skill, relative to {skill.folder} (read them with read_file):"]
        parts += [f"- {rel}" for rel in others]
    return "\n".join(parts)
