"""Consent: who may let a tool call run, asked once and remembered in the ledger.

Read tools never ask. Write tools ask unless yolo. Destructive tools ask even
under yolo unless the ledger holds an explicit always-allow (seed 2's
approval gate). An ask is a ``consent_needed`` event any attached client
answers; when no client can answer, the call is denied with "no one to ask"
and the turn stops: never a hang, never a silent yes.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

import trio

from ..rpc import RPCError
from ..rpc.methods import ConsentAnswer
from ..tools.base import Tool

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


def consent_command(tool: Tool, args: dict[str, Any]) -> str | None:
    """The command a bash rule matches against; other tools are allowed as a whole."""
    return str(args.get("command", "")) if tool.name == "bash" else None


class ConsentGate:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.pending: dict[str, _Pending] = {}

    async def check(
        self, tool: Tool, args: dict[str, Any], echo: str, call: ToolCall, setup: TurnSetup
    ) -> None:
        """Return when the call may run.

        Errors:
            Denied: the user said no, or nobody could answer.
        Cancellation: a pending ask is withdrawn.
        """
        if tool.tier == "read" or (setup.yolo and tool.tier == "write"):
            return
        store = self.session.daemon.store
        command = consent_command(tool, args)
        row = store.find_consent(
            tool=tool.name, command=command, session_id=self.session.id, project=str(self.session.cwd)
        )
        if row is not None:
            self.session.emit(
                "consent_answered",
                {"request_id": None, "call_id": call.id, "decision": "allow", "by": f"ledger rule {row.id}"},
            )
            return
        if not self.session.can_ask():
            raise Denied(self._nobody_message(tool), NO_ONE_TO_ASK, stop_turn=True)
        await self._ask(tool, args, echo, call, command)

    def _nobody_message(self, tool: Tool) -> str:
        return (
            f"Denied: {NO_ONE_TO_ASK}. {tool.name} is a {tool.tier} tool and needs consent, but no client "
            "that can answer is attached. Run mm in a terminal to be asked, or pass --yolo to allow write tools."
        )

    async def _ask(
        self, tool: Tool, args: dict[str, Any], echo: str, call: ToolCall, command: str | None
    ) -> None:
        request_id = secrets.token_hex(4)
        pending = self.pending[request_id] = _Pending()
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
                    "options": ["allow_once", "allow_always", "deny"],
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
