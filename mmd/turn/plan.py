"""Everything one turn needs, resolved from the prompt, the agent file and the user config.

Resolved afresh for every prompt, so an edited agent file or config.yaml
applies to the next turn without restarting the daemon.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import paths
from ..config import AgentFile
from ..config.turns import LoopLimits, PhaseSpec
from ..mcp.tool import McpTool, admit, taken_names
from ..models.base import Message, Provider
from ..tools.base import Limits
from ..tools.builtins import make_builtins
from ..tools.declared import declared_tools
from ..tools.registry import Registry
from ..tools.skills import Catalogue, load_skills

DEFAULT_SYSTEM = (
    "You are mm, an assistant that acts on the user's machine through tools. "
    "Use a tool when the request needs one; give each parameter as its own field. "
    "When you are done, answer briefly in plain text."
)


@dataclass(kw_only=True)
class TurnSetup:
    provider: Provider
    model_name: str
    system: str
    registry: Registry
    yolo: bool = False
    max_steps: int = 50
    temperature: float | None = None  # the agent file's; None: the server's default
    limits: Limits = field(default_factory=Limits)
    skills: Any = None
    warnings: list[str] = field(default_factory=list)  # e.g. a skipped skill; sent as warning events
    # Loops, text-written calls and phases (docs/loops-and-recovery.md).
    recover_tool_calls: bool = False  # the model's; see mmd.models.recovery
    loop: LoopLimits = field(default_factory=LoopLimits)
    phases: list[PhaseSpec] = field(default_factory=list)  # mmd.turn.phases narrows the registry
    hooks: Any = None  # mmd.policy.hooks.Hooks: the turn's preToolCall / postToolCall hooks
    # Secret-looking variables of the daemon's environment the agent hands on to its children.
    pass_env: tuple[str, ...] = ()

    def request_messages(self, history: list[Message]) -> list[Message]:
        return [Message(role="system", content=self.system), *history]

    def skill_names(self) -> list[str]:
        """The skills the model can read now (none when read_skill is not offered)."""
        if self.skills is None or "read_skill" not in self.registry.names():
            return []
        return self.skills.names()

    def recoverable_names(self) -> list[str]:
        """Names a call written as text may carry: the tools, and the skills, which small models
        call as if they were tools; such a call is answered with how to read the skill."""
        return [*self.registry.names(), *self.skill_names()]


def system_prompt(base: str | None, cwd: Path, skills_text: str) -> str:
    parts = [base or DEFAULT_SYSTEM, f"Working directory: {cwd}"]
    if skills_text:
        parts.append(skills_text)
    return "\n\n".join(parts)


def build_tools(
    agent: AgentFile, cwd: Path, mcp_tools: list[McpTool] | None = None
) -> tuple[Registry, Catalogue, list[str]]:
    """The tools and skills an agent offers in *cwd*, and warnings about skipped skills.

    Built-ins first, then declared tools; the agent file's load-time checks
    already refused a declared tool that takes a built-in's name. Then the
    MCP tools the daemon's pool fetched (``McpPool.tools``): one whose name is
    taken by a built-in (even off) or a declared tool is skipped with a warning.
    """
    skill_dirs = [*(Path(s) for s in agent.skills), cwd / ".mm" / "skills", paths.config_dir() / "skills"]
    skills, warnings = load_skills(skill_dirs)
    base_dir = agent.base_dir or cwd
    tools = [
        *make_builtins(agent.builtins, has_skills=bool(skills.skills)),
        *declared_tools(agent.tools, base_dir),
    ]
    kept, clashes = admit(mcp_tools or [], taken_names(tools))
    return Registry([*tools, *kept], strict=agent.schema == "strict"), skills, [*warnings, *clashes]
