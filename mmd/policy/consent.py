"""Consent: who may let a tool call run, asked once and remembered in the ledger.

Read tools never ask. Write tools ask unless yolo. Destructive tools ask even
under yolo unless the ledger holds an explicit always-allow (seed 2's
approval gate). An ask is a ``consent_needed`` event any attached client
answers; when no client can answer, the call is denied with "no one to ask"
and the turn stops: never a hang, never a silent yes.

The file tools are confined to the session's directory, its spill files and
the skill folders: a path outside them (after resolving symbolic links, so a
link in the project that points out counts as outside) asks, for a read tool
too, and a write tool's "always" rule for the whole tool does not cover it.
Only a ``path`` rule of the ledger (a folder, for reads or for writes) or
yolo lets such a call run without asking.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
from typing import TYPE_CHECKING, Any

import trio

from ..rpc import RPCError
from ..rpc.methods import ConsentAnswer
from ..store import SHELL_CONTROL, ConsentRow
from ..tools.base import Tool, ToolContext, ToolError, ToolResult

if TYPE_CHECKING:
    from ..models.base import ToolCall
    from ..server.connection import Connection
    from ..turn.plan import TurnSetup
    from ..turn.session import Session

# Status and reason of a call denied because nobody could answer.
NO_ONE_TO_ASK = "no one to ask"
# The ledger's pseudo tool names of path rules (kind "path"), by access: one rule covers
# every file tool of that access. The ":" keeps them apart from any real tool's name.
OUTSIDE_TOOL = {"read": "outside:read", "write": "outside:write"}


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
        self.paths: list[str] = []  # for a path ask: the resolved paths outside the project


def consent_command(tool: Tool, args: dict[str, Any]) -> str | None:
    """The command a bash rule matches against; other tools are allowed as a whole."""
    return str(args.get("command", "")) if tool.name == "bash" else None


def confined_roots(ctx: ToolContext) -> list[str]:
    """The folders the file tools may touch without a path consent, resolved.

    The session's directory, its own folder (spill files the truncation marker names)
    and each skill's folder.
    """
    roots = [ctx.cwd, ctx.session_dir]
    catalogue = ctx.extra.get("skills")
    roots += [skill.folder for skill in getattr(catalogue, "skills", ())]
    return [os.path.realpath(root) for root in roots]


def outside_paths(tool: Tool, args: dict[str, Any], ctx: ToolContext) -> list[str]:
    """The resolved paths a file tool's call would touch outside :func:`confined_roots`.

    Symbolic links are resolved first: a link in the project that points outside
    is outside. A tool without a ``paths`` method touches no path of its own.
    """
    paths_of = getattr(tool, "paths", None)
    if paths_of is None:
        return []
    roots = confined_roots(ctx)
    try:
        real = [os.path.realpath(p) for p in paths_of(args, ctx)]
    except ValueError:  # a NUL in the path: no file has that name, the tool answers not_found
        return []
    return [p for p in dict.fromkeys(real) if not any(_inside(p, root) for root in roots)]


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


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
        outside = outside_paths(tool, args, ctx) if tool.tier != "destructive" else []
        if outside:
            await self._check_outside(tool, args, echo, call, setup, outside, hook)
            return
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

    async def _check_outside(
        self,
        tool: Tool,
        args: dict[str, Any],
        echo: str,
        call: ToolCall,
        setup: TurnSetup,
        outside: list[str],
        hook: str | None,
    ) -> None:
        """Consent for a file tool's call that touches *outside* paths: the ledger's path rules, then ask.

        Yolo lets it run, as it lets write tools run; a tool rule of the ledger does not.
        """
        forced = hook == "ask"
        if setup.yolo and not forced:
            return
        access = "read" if tool.tier == "read" else "write"
        if not forced:  # a hook's "ask" asks over the ledger
            rows = [self._path_rule_for(access, path) for path in outside]
            for row in rows:
                if row is not None and row.decision == "deny":
                    self._answered_by([row], call)
                    raise Denied(
                        f"Denied by the consent ledger (rule {row.id}): {tool.name} may not {access} "
                        f"{row.rule}. Do not try it again; stay inside the working directory or ask "
                        "the user.",
                        f"ledger rule {row.id}",
                        stop_turn=False,
                    )
            if all(row is not None for row in rows):
                self._answered_by(rows, call)
                return
        if hook == "allow":
            return
        where = ", ".join(outside)
        if not self.session.can_ask():
            raise Denied(
                f"Denied: {NO_ONE_TO_ASK}. {tool.name} would {access} {where}, outside the working "
                f"directory {self.session.cwd}, which needs consent, but no client that can answer is "
                "attached. Run mm in a terminal to be asked, or pass --yolo to allow it.",
                NO_ONE_TO_ASK,
                stop_turn=True,
            )
        await self._ask(tool, args, echo, call, None, outside=outside, access=access)

    def _path_rule_for(self, access: str, path: str) -> ConsentRow | None:
        return self.session.daemon.store.find_consent(
            tool=OUTSIDE_TOOL[access], command=path, session_id=self.session.id, project=str(self.session.cwd)
        )

    def _answered_by(self, rows: list[Any], call: ToolCall) -> None:
        self.session.emit(
            "consent_answered",
            {
                "request_id": None,
                "call_id": call.id,
                "decision": rows[0].decision,
                "by": ", ".join(f"ledger rule {row.id}" for row in rows),
            },
        )

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
        self,
        tool: Tool,
        args: dict[str, Any],
        echo: str,
        call: ToolCall,
        command: str | None,
        *,
        outside: list[str] | None = None,
        access: str = "read",
    ) -> str:
        request_id = secrets.token_hex(4)
        pending = self.pending[request_id] = _Pending()
        options = ["allow_once", "allow_always", "deny"]
        if getattr(tool, "has_dry_run", False) and not outside:
            options.insert(2, "dry_run")
        pending.options = options
        pending.paths = outside or []
        ask: dict[str, Any] = {
            "request_id": request_id,
            "call_id": call.id,
            "tool": tool.name,
            "tier": tool.tier,
            "echo": echo,
            "arguments": args,
            "command": command,
            "options": options,
        }
        if outside:
            # A path ask: "always" remembers a folder (rule), by default the path itself.
            ask.update(paths=outside, access=access, cwd=str(self.session.cwd))
        try:
            self.session.emit("consent_needed", ask)
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
            if outside:
                self._remember_path(access, outside, answer, pending.origin)
            else:
                self._remember(tool, command, answer, pending.origin)
        return answer.decision

    def _scope_key(self, answer: ConsentAnswer) -> str:
        return {"session": self.session.id, "project": str(self.session.cwd), "global": ""}[answer.scope]

    def _remember_path(self, access: str, outside: list[str], answer: ConsentAnswer, origin: str) -> None:
        # One rule: the folder the user named (checked in answer()), or the one path asked about.
        folder = _path_rule(answer.rule) if answer.rule else None
        for rule in [folder] if folder else outside:
            self.session.daemon.store.add_consent(
                tool=OUTSIDE_TOOL[access],
                kind="path",
                rule=rule,
                scope=answer.scope,
                scope_key=self._scope_key(answer),
                origin=origin,
            )

    def _remember(self, tool: Tool, command: str | None, answer: ConsentAnswer, origin: str) -> None:
        if command is None:
            kind, rule = "tool", None
        elif answer.rule:
            kind, rule = "prefix", answer.rule
        else:
            kind, rule = "exact", command
        self.session.daemon.store.add_consent(
            tool=tool.name,
            kind=kind,
            rule=rule,
            scope=answer.scope,
            scope_key=self._scope_key(answer),
            origin=origin,
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
        if pending.paths and answer.decision == "allow_always" and answer.rule is not None:
            _check_path_rule(answer.rule, pending.paths)
        # A prefix the ledger would refuse is refused here, while the ask still waits,
        # rather than failing the turn once it is stored.
        bad_rule = answer.rule is not None and (
            not answer.rule.strip() or not SHELL_CONTROL.isdisjoint(answer.rule)
        )
        if answer.decision == "allow_always" and bad_rule and not pending.paths:
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


def _path_rule(rule: str) -> str:
    """A folder as the user typed it (``~`` allowed), absolute and resolved as paths are checked."""
    return os.path.realpath(os.path.expanduser(rule.strip()))


def _check_path_rule(rule: str, paths: list[str]) -> None:
    """Refuse, while the ask waits, a folder that is not absolute or does not hold every asked path.

    Errors: RPCError invalid_params saying what to give instead.
    """
    typed = os.path.expanduser(rule.strip())
    if not os.path.isabs(typed):
        raise RPCError(
            "invalid_params",
            f"rule {rule!r} is not an absolute folder: give one like {os.path.dirname(paths[0])}, "
            "or leave rule out to allow only the path asked about; the ask is still pending",
        )
    folder = _path_rule(rule)
    missed = [p for p in paths if not _inside(p, folder)]
    if missed:
        raise RPCError(
            "invalid_params",
            f"folder {folder} does not hold {missed[0]} (the path asked about, symbolic links resolved): "
            f"give a folder above it, like {os.path.dirname(missed[0])}; the ask is still pending",
        )
