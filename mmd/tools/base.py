"""What every tool is: a name, a contract, a tier, an async run, and its optional capabilities.

Built-in, declared and MCP tools all subclass :class:`Tool` and go through
the same registry, contract, consent, supervision and truncation.
A tool that cannot do what was asked raises :class:`ToolError`; the registry
turns it into an answer the model reads (the call quoted back, what to fix),
never a crash of the turn.

The capabilities a tool may have beyond ``run`` are attributes and methods of
:class:`Tool` with defaults that mean "not this tool": the call pipeline and
consent read them directly, never by ``getattr`` with a fallback.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import msgspec

from ..config.declared import VerifySpec
from ..contract import ErrorClass, ToolError, ToolResult
from ..sandbox import Sandbox

# ToolResult, ToolError and ErrorClass are the contract's (mmd/contract.py); every tool module
# imports them from here with Tool.
__all__ = ["ErrorClass", "Limits", "Tier", "Tool", "ToolContext", "ToolError", "ToolResult", "spill_path"]

Tier = Literal["read", "write", "destructive"]


class Limits(msgspec.Struct, kw_only=True):
    """Per-call limits for child processes and what the model reads of them."""

    timeout: float = 120.0  # seconds before the process group is stopped
    grace: float = 3.0  # seconds between SIGTERM and SIGKILL
    max_bytes: int = 30_000  # bytes of output the model reads (head + tail)
    max_lines: int = 400  # lines of output the model reads (head + tail)


class ToolContext(msgspec.Struct, kw_only=True, dict=True):  # a __dict__ for the cached spill_path
    session_id: str
    call_id: str
    cwd: Path
    session_dir: Path  # per-session folder: spill files live here
    limits: Limits = msgspec.field(default_factory=Limits)
    # emit(kind, data) publishes a session event, e.g. emit("tool_output", {...}).
    emit: Callable[[str, dict[str, Any]], None] = lambda kind, data: None
    # The folders of the session's skills: the file tools may touch them without a path consent.
    skill_folders: tuple[Path, ...] = ()
    # Minted by the harness for write and destructive calls, never by the model.
    idempotency_key: str | None = None
    # Variables of the daemon's environment handed on to the call's processes although
    # they look like secrets: the agent file's pass_env (mmd/procs/environ.py).
    pass_env: tuple[str, ...] = ()
    # What the call's processes may write and reach; None: not confined (mmd/sandbox).
    sandbox: Sandbox | None = None
    # The agent file, named in the answer that says how to allow a path the sandbox refused.
    agent_file: str | None = None

    def env(self) -> dict[str, str]:
        """Variables every child of this call gets on top of the daemon's environment (less its secrets)."""
        env = {"MM_SESSION_ID": self.session_id, "MM_TOOL_CALL_ID": self.call_id}
        if self.idempotency_key:
            env["MM_IDEMPOTENCY_KEY"] = self.idempotency_key
        return env

    @functools.cached_property
    def spill_path(self) -> Path:
        """The file that keeps this call's whole output when the model reads only part of it (made once: the
        tool and the output's cap both name it, and a path join is a dozen Python calls)."""
        return spill_path(self.session_dir, self.call_id)


def spill_path(session_dir: Path, call_id: str) -> Path:
    """The file that keeps the whole output of call *call_id* of the session whose folder is *session_dir*."""
    return session_dir / f"output-{call_id}.log"


class Tool(abc.ABC):
    """The base of every tool: set the class (or instance) attributes, implement ``echo`` and ``run``.

    The optional capabilities default to "none": a tool that has one sets the
    attribute or overrides the method.
    """

    name: str
    description: str  # one-line purpose, then what the model must know
    parameters: dict[str, Any]  # JSON Schema (type: object)
    tier: Tier
    source: str = "builtin"  # "builtin", "declared", "mcp:<server>"
    example: dict[str, Any] | None = None  # None: the model is never shown "Example: {}"
    # A call the model should make first (a tool name, or a sentence), said in the description.
    prerequisite: str | None = None
    # A read tool mm calls after a successful call, to check it; a failed check fails the call.
    verify: VerifySpec | None = None
    # A repeated write call of a session replays the stored first result instead of running again.
    idempotent: bool = False
    # dry_run can show what a call would do: the consent ask then offers it.
    has_dry_run: bool = False
    # The call runs a process under the turn's sandbox (bash, declared tools): see sandbox_label.
    turn_sandboxed: bool = False

    @abc.abstractmethod
    def echo(self, args: dict[str, Any]) -> str:
        """One line that shows the user what will run, e.g. ``$ ls -la``."""

    @abc.abstractmethod
    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Do the work. Raise ToolError for an answered failure.

        Cancellation: a tool that started a process stops its whole group
        before the Cancelled exception leaves ``run``.
        """

    def paths(self, args: dict[str, Any], ctx: ToolContext) -> list[Path]:
        """The paths a call would touch, for consent to ask about those outside the project.

        Empty for a tool that names no file of its own (bash, declared and MCP tools:
        what they touch is theirs to say, and their tier asks for them).
        """
        return []

    def sandbox_label(self, turn: Sandbox | None) -> str | None:
        """The sandbox the call's processes run under, as the ask and ``mm tools list`` show it.

        None for a tool that starts no process (the file tools run inside mm,
        under its own path checks); an MCP tool says its server's.
        """
        if not self.turn_sandboxed:
            return None
        return turn.label if turn is not None else "off"

    async def dry_run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """What the call would do, without doing it; only when ``has_dry_run``."""
        raise ToolError("no_dry_run", f"{self.name} cannot show what a call would do.", cls="terminal")
