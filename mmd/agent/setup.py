"""Everything one turn needs, resolved from the prompt, the agent file and the user config.

Resolved afresh for every prompt, so an edited agent file or config.yaml
applies to the next turn without restarting the daemon.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..models.base import Message, Provider
from ..tools.base import Limits
from ..tools.registry import Registry

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
    limits: Limits = field(default_factory=Limits)
    skills: Any = None

    def request_messages(self, history: list[Message]) -> list[Message]:
        return [Message(role="system", content=self.system), *history]


def system_prompt(base: str | None, cwd: Path, skills_text: str) -> str:
    parts = [base or DEFAULT_SYSTEM, f"Working directory: {cwd}"]
    if skills_text:
        parts.append(skills_text)
    return "\n\n".join(parts)
