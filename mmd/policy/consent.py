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

import os
import secrets
from pathlib import Path
from typing import Any, Protocol

import msgspec
import trio

from ..rpc import RPCError
from ..rpc.methods import ConsentAnswer
from ..store import SHELL_CONTROL, ConsentRow, Store
from ..tools.base import Tool, ToolContext

# Status and reason of a call denied because nobody could answer.
NO_ONE_TO_ASK = "no one to ask"
# The ledger's pseudo tool names of path rules (kind "path"), by access: one rule covers
# every file tool of that access. The ":" keeps them apart from any real tool's name.
OUTSIDE_TOOL = {"read": "outside:read", "write": "outside:write"}


class Verdict(msgspec.Struct, frozen=True):
    """What consent decided for one call; the call pipeline acts on it."""

    allow: bool
    message: str = ""  # what the model reads when the call is denied
    reason: str = ""
    stop_turn: bool = False  # nobody could answer: the turn ends after this call
    dry_run: bool = False  # the person asked for a dry run: show it, then check again
    answered: dict[str, Any] | None = None  # the consent_answered record when ledger rules decided


ALLOW = Verdict(allow=True)


class Request(msgspec.Struct, frozen=True):
    """One tool call as consent sees it. ``roots``: the folders file tools may touch freely."""

    tool: Tool
    args: dict[str, Any]
    echo: str
    call_id: str
    ctx: ToolContext
    roots: list[str]


class Answer(msgspec.Struct, frozen=True):
    """A person's answer to an ask, and who gave it."""

    decision: str
    origin: str
    reason: str = ""
    rule: str | None = None
    scope: str = "project"


class Asker(Protocol):
    """Who consent asks: the session's attached clients."""

    def can_ask(self) -> bool: ...

    async def ask(self, request: dict[str, Any], pending: Pending) -> Answer: ...


class Ledger:
    """The consent rules of the store as one session sees them."""

    def __init__(self, store: Store, session_id: str, project: str) -> None:
        self.store, self.session_id, self.project = store, session_id, project

    def find(self, tool: str, command: str | None) -> ConsentRow | None:
        return self.store.find_consent(
            tool=tool, command=command, session_id=self.session_id, project=self.project
        )

    def add(self, tool: str, kind: str, rule: str | None, answer: Answer) -> None:
        scope_key = {"session": self.session_id, "project": self.project, "global": ""}[answer.scope]
        self.store.add_consent(
            tool=tool, kind=kind, rule=rule, scope=answer.scope, scope_key=scope_key, origin=answer.origin
        )


def consent_command(tool: Tool, args: dict[str, Any]) -> str | None:
    """The command a bash rule matches against; other tools are allowed as a whole."""
    return str(args.get("command", "")) if tool.name == "bash" else None


def outside_paths(req: Request) -> list[str]:
    """The resolved paths a file tool's call would touch outside ``req.roots``.

    Symbolic links are resolved first: a link in the project that points outside
    is outside. A tool whose ``paths`` is empty touches no path of its own.
    """
    try:
        real = [os.path.realpath(p) for p in req.tool.paths(req.args, req.ctx)]
    except ValueError:  # a NUL in the path: no file has that name, the tool answers not_found
        return []
    return [p for p in dict.fromkeys(real) if not any(_inside(p, root) for root in req.roots)]


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


async def check(
    req: Request, *, ledger: Ledger, asker: Asker, yolo: bool, hook: str | None = None
) -> Verdict:
    """Whether the call may run: tiers, yolo, the ledger, then a person.

    ``hook`` is the preToolCall hooks' decision: "allow" skips the ask (a
    ledger deny still denies), "ask" asks even for a read tool, under yolo
    and over the ledger. Cancellation: a pending ask is withdrawn.
    """
    forced = hook == "ask"
    outside = outside_paths(req) if req.tool.tier != "destructive" else []
    if outside:
        return await _check_outside(req, outside, ledger, asker, yolo=yolo, hook=hook)
    if not forced and (req.tool.tier == "read" or (yolo and req.tool.tier == "write")):
        return ALLOW
    command = consent_command(req.tool, req.args)
    row = None if forced else ledger.find(req.tool.name, command)  # a hook's "ask" asks over the ledger
    if row is not None:
        message = f"Denied by the consent ledger (rule {row.id}). Do not run it again; take another way."
        return _by_ledger([row], req, message)
    if hook == "allow":
        return ALLOW
    if not asker.can_ask():
        return _nobody(_nobody_message(req.tool, forced=forced))
    return await _ask(req, asker, ledger, command)


async def _check_outside(
    req: Request, outside: list[str], ledger: Ledger, asker: Asker, *, yolo: bool, hook: str | None
) -> Verdict:
    """Consent for a file tool's call that touches *outside* paths: the ledger's path rules, then ask.

    Yolo lets it run, as it lets write tools run; a tool rule of the ledger does not.
    """
    forced = hook == "ask"
    if yolo and not forced:
        return ALLOW
    access = "read" if req.tool.tier == "read" else "write"
    rows = [] if forced else [ledger.find(OUTSIDE_TOOL[access], path) for path in outside]
    for row in rows:
        if row is not None and row.decision == "deny":
            message = (
                f"Denied by the consent ledger (rule {row.id}): {req.tool.name} may not {access} "
                f"{row.rule}. Do not try it again; stay inside the working directory or ask the user."
            )
            return _by_ledger([row], req, message)
    if rows and all(row is not None for row in rows):
        return _by_ledger(rows, req, "")  # type: ignore[arg-type]
    if hook == "allow":
        return ALLOW
    if not asker.can_ask():
        return _nobody(
            f"Denied: {NO_ONE_TO_ASK}. {req.tool.name} would {access} {', '.join(outside)}, outside the "
            f"working directory {req.ctx.cwd}, which needs consent, but no client that can answer is "
            "attached. Run mm in a terminal to be asked, or pass --yolo to allow it."
        )
    return await _ask(req, asker, ledger, None, outside=outside, access=access)


def _by_ledger(rows: list[ConsentRow], req: Request, deny_message: str) -> Verdict:
    answered = {
        "request_id": None,
        "call_id": req.call_id,
        "decision": rows[0].decision,
        "by": ", ".join(f"ledger rule {row.id}" for row in rows),
    }
    if rows[0].decision == "deny":
        return Verdict(
            allow=False, message=deny_message, reason=f"ledger rule {rows[0].id}", answered=answered
        )
    return Verdict(allow=True, answered=answered)


def _nobody(message: str) -> Verdict:
    return Verdict(allow=False, message=message, reason=NO_ONE_TO_ASK, stop_turn=True)


def _nobody_message(tool: Tool, *, forced: bool = False) -> str:
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


def ask_request(req: Request, command: str | None, outside: list[str], access: str) -> dict[str, Any]:
    """The ``consent_needed`` record of an ask (without its request id)."""
    options = ["allow_once", "allow_always", "deny"]
    if req.tool.has_dry_run and not outside:
        options.insert(2, "dry_run")
    ask: dict[str, Any] = {
        "call_id": req.call_id,
        "tool": req.tool.name,
        "tier": req.tool.tier,
        "echo": req.echo,
        "arguments": req.args,
        "command": command,
        "options": options,
        # The sandbox the call's processes will run under; None: the tool runs inside mm (file tools).
        "sandbox": req.tool.sandbox_label(req.ctx.sandbox),
    }
    if outside:
        # A path ask: "always" remembers a folder (rule), by default the path itself.
        ask.update(paths=outside, access=access, cwd=str(req.ctx.cwd))
    return ask


async def _ask(
    req: Request,
    asker: Asker,
    ledger: Ledger,
    command: str | None,
    *,
    outside: list[str] | None = None,
    access: str = "read",
) -> Verdict:
    ask = ask_request(req, command, outside or [], access)
    answer = await asker.ask(ask, Pending(options=ask["options"], paths=outside or []))
    if answer.decision == "deny":
        if answer.origin == NO_ONE_TO_ASK:
            return _nobody(_nobody_message(req.tool))
        reason = (answer.reason or "").strip()
        why = f" Their reason: {reason}{'' if reason.endswith(('.', '!', '?')) else '.'}" if reason else ""
        return Verdict(
            allow=False,
            message=f"The user denied this call.{why} Do not run it again; ask the user or take another way.",
            reason=answer.reason or "denied by the user",
        )
    if answer.decision == "dry_run":
        return Verdict(allow=False, dry_run=True)
    if answer.decision == "allow_always":
        _remember(req, ledger, answer, command, outside or [], access)
    return ALLOW


def _remember(
    req: Request, ledger: Ledger, answer: Answer, command: str | None, outside: list[str], access: str
) -> None:
    if outside:
        # One rule: the folder the user named (checked in Asks.answer), or each path asked about.
        folder = _path_rule(answer.rule) if answer.rule else None
        for rule in [folder] if folder else outside:
            ledger.add(OUTSIDE_TOOL[access], "path", rule, answer)
    elif command is None:
        ledger.add(req.tool.name, "tool", None, answer)
    else:
        kind, rule = ("prefix", answer.rule) if answer.rule else ("exact", command)
        ledger.add(req.tool.name, kind, rule, answer)


# --- asks waiting for a person ---------------------------------------------------------


class Pending(msgspec.Struct):
    """One ask waiting for its answer: the decisions it offered, the paths it is about."""

    options: list[str]
    paths: list[str] = msgspec.field(default_factory=list)
    done: trio.Event = msgspec.field(default_factory=trio.Event)
    answer: Answer | None = None


class Asks:
    """The asks of one session that wait for an answer, by request id."""

    def __init__(self) -> None:
        self.pending: dict[str, Pending] = {}

    async def wait(self, pending: Pending, announce: Any) -> tuple[str, Answer]:
        """Register *pending*, call ``announce(request_id)``, wait for the answer.

        Cancellation: the ask is withdrawn.
        """
        request_id = secrets.token_hex(4)
        self.pending[request_id] = pending
        try:
            announce(request_id)
            await pending.done.wait()
        finally:
            self.pending.pop(request_id, None)
        assert pending.answer is not None
        return request_id, pending.answer

    def answer(self, answer: ConsentAnswer, origin: str) -> None:
        """Give a client's answer to its ask.

        Errors: RPCError (unknown_request, invalid_params) while the ask still waits.
        """
        pending = self.pending.get(answer.request_id)
        if pending is None or pending.done.is_set():
            raise RPCError(
                "unknown_request",
                f"no pending consent ask {answer.request_id}; it was answered already or the turn ended",
            )
        _check_answer(answer, pending)
        pending.answer = Answer(
            decision=answer.decision,
            origin=origin,
            reason=answer.reason,
            rule=answer.rule,
            scope=answer.scope,
        )
        pending.done.set()

    def deny_all(self) -> None:
        """Nobody can answer any more: every waiting ask is denied as "no one to ask"."""
        for pending in self.pending.values():
            if not pending.done.is_set():
                pending.answer = Answer(decision="deny", origin=NO_ONE_TO_ASK)
                pending.done.set()


def _check_answer(answer: ConsentAnswer, pending: Pending) -> None:
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


def confined_roots(cwd: Path, session_dir: Path, skill_folders: list[Path]) -> list[str]:
    """The folders the file tools may touch without a path consent, resolved.

    The session's directory, its own folder (spill files the truncation marker names)
    and each skill's folder.
    """
    return [os.path.realpath(root) for root in [cwd, session_dir, *skill_folders]]


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
