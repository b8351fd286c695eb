"""Phases: only the current phase's tools are in the request; ``next_phase`` moves on.

An agent file may split its tools into phases (``phases:``), for example
read tools until the user approves a plan, then write tools. A tool outside
the current phase is absent from the request, not merely discouraged. The
built-in ``next_phase`` tool, offered in every phase but the last, moves to the
next one; moving into a phase with ``requires_consent: true`` (the default)
is a write, so the user is asked (unless yolo). The move is a
``phase_changed`` event, so the session stays in its phase across turns and
daemon restarts; a phase name no longer in the agent file starts over at
the first phase.
"""

from __future__ import annotations

from typing import Any

from ..config.turns import PhaseSpec
from ..patterns import fnmatch
from ..tools.base import Tier, Tool, ToolContext, ToolResult
from ..tools.registry import Registry
from .calls import Conversation
from .plan import TurnSetup

NEXT_PHASE = "next_phase"
PHASE_CHANGED = "phase_changed"


def matches(name: str, patterns: list[str]) -> bool:
    return any(fnmatch(name, pattern) for pattern in patterns)


def stored_phase(session: Conversation) -> str | None:
    """The phase the session moved to last, from its events; None if it never moved."""
    name = None
    for event in session.store.events_after(session.id):
        if event.kind == PHASE_CHANGED:
            name = event.data.get("to")
    return name


def begin(session: Conversation, setup: TurnSetup) -> None:
    """Narrow ``setup.registry`` to the session's current phase; nothing without ``phases:``."""
    if not setup.phases:
        return
    phases = Phases(session, setup)
    for warning in phases.unmatched():
        session.emit("warning", {"message": warning})
    setup.registry = phases.registry()


class Phases:
    """The phases of one turn, the full catalogue they draw from, and the current one."""

    def __init__(self, session: Conversation, setup: TurnSetup) -> None:
        self.session = session
        self.setup = setup
        self.specs: list[PhaseSpec] = list(setup.phases)
        self.full: Registry = setup.registry
        names = [p.name for p in self.specs]
        current = stored_phase(session)
        self.index = names.index(current) if current in names else 0

    @property
    def current(self) -> PhaseSpec:
        return self.specs[self.index]

    def tool_names(self, index: int) -> list[str]:
        return [n for n in self.full.names() if n != NEXT_PHASE and matches(n, self.specs[index].tools)]

    def registry(self) -> Registry:
        tools = [self.full.tools[n] for n in self.tool_names(self.index)]
        if self.index + 1 < len(self.specs):
            tools.append(NextPhase(self, self.index))
        return Registry(tools, strict=self.full.strict, placeholders=self.full.placeholders)

    def unmatched(self) -> list[str]:
        names = self.full.names()
        return [
            f"phases[{i}] ({spec.name}): {pattern} matches no tool of this agent"
            for i, spec in enumerate(self.specs)
            for pattern in spec.tools
            if not any(fnmatch(n, pattern) for n in names)
        ]

    def advance(self, from_index: int) -> ToolResult:
        if from_index != self.index:
            return ToolResult(
                ok=False,
                content=f"Already in phase {self.current.name}; next_phase was called twice.",
                data={"phase": self.current.name},
            )
        before = self.current.name
        self.index += 1
        self.session.emit(PHASE_CHANGED, {"from": before, "to": self.current.name})
        self.setup.registry = self.registry()
        tools = ", ".join(self.setup.registry.names()) or "none"
        return ToolResult(
            ok=True,
            content=f"Now in phase {self.current.name}. The tools of this phase: {tools}.",
            data={"from": before, "to": self.current.name},
        )


class NextPhase(Tool):
    """The built-in tool that moves the session to the next phase."""

    name = NEXT_PHASE
    source = "builtin"
    example: dict[str, Any] = {"summary": "Read config.py and app.py; plan: rename the option in both."}
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "summary": {
                "type": "string",
                "description": "What this phase found or the plan for the next one; the user reads it "
                "when asked to approve.",
            }
        },
        "additionalProperties": False,
    }

    def __init__(self, phases: Phases, from_index: int) -> None:
        self.phases = phases
        self.from_index = from_index
        here, there = phases.specs[from_index], phases.specs[from_index + 1]
        self.target = there
        self.tier: Tier = "write" if there.requires_consent else "read"
        offered = ", ".join(phases.tool_names(from_index + 1)) or "none"
        purpose = there.description.rstrip(".") + ". " if there.description else ""
        asks = " The user is asked to approve the move." if there.requires_consent else ""
        self.description = (
            f"Finish phase {here.name} and move to phase {there.name}. {purpose}"
            f"Call it when the work of {here.name} is done; the tools of {there.name} are: {offered}.{asks}"
        )

    def echo(self, args: dict[str, Any]) -> str:
        head = f"next phase: {self.phases.specs[self.from_index].name} → {self.target.name}"
        summary = str(args.get("summary") or "").strip()
        return f"{head} — {summary}" if summary else head

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return self.phases.advance(self.from_index)
