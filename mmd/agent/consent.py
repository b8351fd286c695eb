"""Consent: who may let a tool call run, asked once and remembered in the ledger.

Read tools never ask. Write tools ask unless yolo. Destructive tools ask even
under yolo unless the ledger holds an explicit always-allow (seed 2's
approval gate). An ask is a ``consent_needed`` event any attached client
answers; when no client can answer, the call is denied with "no one to ask"
and the turn stops: never a hang, never a silent yes.
"""

from __future__ import annotations

import dataclasses
import secrets
from typing import TYPE_CHECKING, Any

import trio

from ..rpc import RPCError
from ..rpc.methods import ConsentAnswer
from ..store import SHELL_CONTROL
from ..tools.base import Tool, ToolContext, ToolError, ToolResult

if TYPE_CHECKING:
    from ..connection import Connection
    from ..models.base import ToolCall
    from .session import Session
    from .setup import TurnSetup

# Status and reason of a call denied because nobody could answer.
NO_ONE_TO_ASK = "no one to ask"


class Denied(Exception):
    """The call may not run. ``message`` is what the model reads."""

    def __init__(self, message: str, reason: str, *, stop_turn: bool) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.stop_turn = stop_turn


class _Pending:
    def __init__(self) -> None:
        self.done = trio.Event()
        self.answer: ConsentAnswer | None = None
        self.origin = ""
        self.options: list[str] = []  # the decisions this ask offered


def consent_command(tool: Tool, args: dict[str, Any]) -> str | None:
    """The command a bash rule matches against; other tools are allowed as a whole."""
    return str(args.get("command", "")) if tool.name == "bash" else None


class ConsentGate:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.pending: dict[str, _Pending] = {}

    async def check(
        self,
        tool: Tool,
        args: dict[str, Any],
        echo: str,
        call: ToolCall,
        setup: TurnSetup,
        ctx: ToolContext,
        hook: str | None = None,
    ) -> None:
        """Return when the call may run.

        ``hook`` is the preToolCall hooks' decision: "allow" skips the ask (a
        ledger deny still denies), "ask" asks even for a read tool, under yolo
        and over the ledger.

        Errors:
            Denied: the user said no, or nobody could answer.
        Cancellation: a pending ask is withdrawn.
        """
        forced = hook == "ask"
        if not forced and (tool.tier == "read" or (setup.yolo and tool.tier == "write")):
            return
        store = self.session.daemon.store
        command = consent_command(tool, args)
        row = None
        if not forced:  # a hook's "ask" asks over the ledger
            row = store.find_consent(
                tool=tool.name, command=command, session_id=self.session.id, project=str(self.session.cwd)
            )
        if row is not None:
            self.session.emit(
                "consent_answered",
                {
                    "request_id": None,
                    "call_id": call.id,
                    "decision": row.decision,
                    "by": f"ledger rule {row.id}",
                },
            )
            if row.decision == "deny":
                raise Denied(
                    f"Denied by the consent ledger (rule {row.id}). Do not run it again; take another way.",
                    f"ledger rule {row.id}",
                    stop_turn=False,
                )
            return
        if hook == "allow":
            return
        if not self.session.can_ask():
            raise Denied(self._nobody_message(tool, forced=forced), NO_ONE_TO_ASK, stop_turn=True)
        while await self._ask(tool, args, echo, call, command) == "dry_run":
            await self._dry_run(tool, args, ctx)

    def _nobody_message(self, tool: Tool, *, forced: bool = False) -> str:
        if forced:
            how = "A preToolCall hook asked for a person's decision; run mm in a terminal to give it."
        elif tool.tier == "destructive":
            how = (
                "Destructive tools ask even under --yolo: run mm in a terminal and answer [a] always "
                "to let this tool run unattended."
            )
        else:
            how = "Run mm in a terminal to be asked, or pass --yolo to allow write tools."
        return (
            f"Denied: {NO_ONE_TO_ASK}. {tool.name} is a {tool.tier} tool and needs consent, "
            f"but no client that can answer is attached. {how}"
        )

    async def _dry_run(self, tool: Tool, args: dict[str, Any], ctx: ToolContext) -> None:
        """Show the user what the call would do, then ask again; the model sees nothing of it."""
        dry_ctx = dataclasses.replace(ctx, call_id=ctx.call_id + "-dry-run", idempotency_key=None)
        try:
            result = await tool.dry_run(args, dry_ctx)  # type: ignore[attr-defined]
        except ToolError as err:
            result = ToolResult(ok=False, content=err.reason)
        self.session.emit("dry_run", {"call_id": ctx.call_id, "ok": result.ok, "content": result.content})

    async def _ask(
        self, tool: Tool, args: dict[str, Any], echo: str, call: ToolCall, command: str | None
    ) -> str:
        request_id = secrets.token_hex(4)
        pending = self.pending[request_id] = _Pending()
        options = ["allow_once", "allow_always", "deny"]
        if getattr(tool, "has_dry_run", False):
            options.insert(2, "dry_run")
        pending.options = options
        try:
            self.session.emit(
                "consent_needed",
                {
                    "request_id": request_id,
                    "call_id": call.id,
                    "tool": tool.name,
                    "tier": tool.tier,
                    "echo": echo,
                    "arguments": args,
                    "command": command,
                    "options": options,
                },
            )
            await pending.done.wait()
        finally:
            self.pending.pop(request_id, None)
        answer = pending.answer
        assert answer is not None
        self.session.emit(
            "consent_answered",
            {
                "request_id": request_id,
                "call_id": call.id,
                "decision": answer.decision,
                "reason": answer.reason,
                "by": pending.origin,
            },
        )
        if answer.decision == "deny":
            if pending.origin == NO_ONE_TO_ASK:
                raise Denied(self._nobody_message(tool), NO_ONE_TO_ASK, stop_turn=True)
            why = f" Their reason: {answer.reason}" if answer.reason else ""
            raise Denied(
                f"The user denied this call.{why} Do not run it again; ask the user or take another way.",
                answer.reason or "denied by the user",
                stop_turn=False,
            )
        if answer.decision == "allow_always":
            self._remember(tool, command, answer, pending.origin)
        return answer.decision

    def _remember(self, tool: Tool, command: str | None, answer: ConsentAnswer, origin: str) -> None:
        if command is None:
            kind, rule = "tool", None
        elif answer.rule:
            kind, rule = "prefix", answer.rule
        else:
            kind, rule = "exact", command
        scope_key = {"session": self.session.id, "project": str(self.session.cwd), "global": ""}[answer.scope]
        self.session.daemon.store.add_consent(
            tool=tool.name, kind=kind, rule=rule, scope=answer.scope, scope_key=scope_key, origin=origin
        )

    def answer(self, conn: Connection, answer: ConsentAnswer) -> None:
        pending = self.pending.get(answer.request_id)
        if pending is None or pending.done.is_set():
            raise RPCError(
                "unknown_request",
                f"no pending consent ask {answer.request_id} in session {self.session.id}; "
                "it was answered already or the turn ended",
            )
        if answer.decision not in pending.options:
            # e.g. dry_run for a tool that has none: refused while the ask still waits.
            raise RPCError(
                "invalid_params",
                f"decision {answer.decision!r} was not offered by ask {answer.request_id}; "
                f"options: {', '.join(pending.options)}",
            )
        # A prefix the ledger would refuse is refused here, while the ask still waits,
        # rather than failing the turn once it is stored.
        bad_rule = answer.rule is not None and (
            not answer.rule.strip() or not SHELL_CONTROL.isdisjoint(answer.rule)
        )
        if answer.decision == "allow_always" and bad_rule:
            raise RPCError(
                "invalid_params",
                f"rule {answer.rule!r} cannot be a command prefix: give the start of a command "
                "without shell control characters (; & | < > ` $ ( ) or a line break), such as "
                "git status, or leave rule out to allow the exact command; the ask is still pending",
            )
        pending.answer = answer
        pending.origin = f"{conn.client} (pid {conn.peer_pid})"
        pending.done.set()

    def subscribers_changed(self) -> None:
        """Deny pending asks when the last client that could answer went away."""
        if self.session.can_ask():
            return
        for pending in self.pending.values():
            if not pending.done.is_set():
                pending.answer = ConsentAnswer(session_id=self.session.id, request_id="", decision="deny")
                pending.origin = NO_ONE_TO_ASK
                pending.done.set()
