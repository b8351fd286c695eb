"""What every tool is: a name, a contract, a tier, and an async run.

Built-in, declared and MCP tools all implement :class:`Tool` and go through
the same registry, contract, consent, supervision and truncation.
A tool that cannot do what was asked raises :class:`ToolError`; the registry
turns it into an answer the model reads (the call quoted back, what to fix),
never a crash of the turn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import msgspec

Tier = Literal["read", "write", "destructive"]
# Error classes of the seeds: what the model should do next.
ErrorClass = Literal["fix_and_retry", "retry_after", "terminal"]


class ToolResult(msgspec.Struct, kw_only=True, omit_defaults=True):
    ok: bool
    content: str  # the text the model reads
    data: dict[str, Any] | None = None  # machine-readable fields (error, exit code, spill file)


class ToolError(Exception):
    """An answered failure: the model gets ``reason`` and ``fix``, and the turn goes on."""

    def __init__(
        self,
        code: str,
        reason: str,
        *,
        cls: ErrorClass = "fix_and_retry",
        field: str | None = None,
        fix: str | None = None,
        example: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason
        self.cls = cls
        self.field = field
        self.fix = fix
        self.example = example

    def fields(self) -> dict[str, Any]:
        err: dict[str, Any] = {
            "code": self.code,
            "field": self.field,
            "reason": self.reason,
            "class": self.cls,
        }
        if self.fix:
            err["fix"] = self.fix
        if self.example is not None:
            err["example"] = self.example
        return {"ok": False, "error": err}


@dataclass(kw_only=True)
class Limits:
    """Per-call limits for child processes and what the model reads of them."""

    timeout: float = 120.0  # seconds before the process group is stopped
    grace: float = 3.0  # seconds between SIGTERM and SIGKILL
    max_bytes: int = 30_000  # bytes of output the model reads (head + tail)
    max_lines: int = 400  # lines of output the model reads (head + tail)


@dataclass(kw_only=True)
class ToolContext:
    session_id: str
    call_id: str
    cwd: Path
    session_dir: Path  # per-session folder: spill files live here
    limits: Limits = field(default_factory=Limits)
    # emit(kind, data) publishes a session event, e.g. emit("tool_output", {...}).
    emit: Callable[[str, dict[str, Any]], None] = lambda kind, data: None
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. the skills catalogue
    # Minted by the harness for write and destructive calls, never by the model.
    idempotency_key: str | None = None
    # Variables of the daemon's environment handed on to the call's processes although
    # they look like secrets: the agent file's pass_env (mmd/procs/environ.py).
    pass_env: tuple[str, ...] = ()

    def env(self) -> dict[str, str]:
        """Variables every child of this call gets on top of the daemon's environment (less its secrets)."""
        env = {"MM_SESSION_ID": self.session_id, "MM_TOOL_CALL_ID": self.call_id}
        if self.idempotency_key:
            env["MM_IDEMPOTENCY_KEY"] = self.idempotency_key
        return env


class Tool(Protocol):
    name: str
    description: str  # one-line purpose, then what the model must know
    parameters: dict[str, Any]  # JSON Schema (type: object)
    tier: Tier
    example: dict[str, Any]
    source: str  # "builtin", "declared", "mcp:<server>"

    def echo(self, args: dict[str, Any]) -> str:
        """One line that shows the user what will run, e.g. ``$ ls -la``."""
        ...

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Do the work. Raise ToolError for an answered failure.

        Cancellation: a tool that started a process stops its whole group
        before the Cancelled exception leaves ``run``.
        """
        ...
