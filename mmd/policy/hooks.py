"""Hooks: commands that see a turn's events (a tool call, a prompt, the end of an answer) and may change
their course, with Claude Code's contract (docs/hooks.md).

A hook is a child process run under the supervisor (own process group,
timeout, whole tree stopped at the end) in the session's working directory.
It reads one JSON object on stdin, as Claude Code gives its hooks
(https://code.claude.com/docs/en/hooks#hook-input-and-output): the common
fields, then the event's own; a tool is named as Claude Code names it
(mmd/policy/hooks_claude.py). How it ends says what happens:

- exit 0: go on; a JSON object on stdout may allow, deny or ask, replace the
  input (``updatedInput``), block (``decision: block``), add context for the
  model, or stop the turn (``continue: false``); plain text on stdout is
  context for ``UserPromptSubmit`` and ``SessionStart``;
- exit 2: block; the hook's stderr is the reason;
- any other exit, a timeout, a command that cannot start, or a stdout that
  starts with ``{`` but is no JSON object (or nests deeper than 128 levels,
  or gives an ``updatedInput`` deeper than 64: refused before decoding,
  mmd/untrusted.py): a hook error, logged and shown as a ``hook`` event; the
  turn goes on as if the hook had said nothing.

Several matching hooks run one after the other in a fixed order: the user
config's first, then Claude Code's settings files (``import: claude``), then the
agent file's, each in file order. Input updates chain (each hook sees the input
the previous one produced, checked by the contract each time). The first deny
ends the chain and wins over any allow or ask before it; otherwise ask wins
over allow. Contexts add up in order.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from .. import contract, patterns
from ..config.hooks import DEFAULT_TIMEOUT, EVENTS, HookSpec, HooksSpec
from ..procs.supervisor import spawn_error_message, supervised_process
from ..rpc.messages import packed
from ..sandbox import Sandbox, unavailable_reason
from ..tools.base import ToolError, ToolResult
from ..untrusted import MAX_DEPTH, MAX_DOCUMENT_DEPTH, TooDeep, check_json, check_value
from . import hooks_claude

if TYPE_CHECKING:
    from ..models.base import ToolCall
    from ..tools.base import Tool

log = logging.getLogger(__name__)

# mm's own names of Claude Code's two tool events (``mm_event`` on stdin, ``MM_HOOK_EVENT``).
_MM_NAMES = {"PreToolUse": "preToolCall", "PostToolUse": "postToolCall"}
# Bytes of a hook's stdout, and of its stderr, that are kept; the rest is read and dropped.
MAX_CAPTURE = 64 * 1024
# Seconds to read what is left in the pipes after the hook exited (a background child may hold them).
DRAIN_WAIT = 1.0
# A command string made only of these characters is one program path, not a shell line.
_PLAIN_PATH = re.compile(r"[\w./~+@%:,=-]+")
# Decisions a hook may give, with the older Claude Code spellings.
_DECISIONS = {"allow": "allow", "approve": "allow", "deny": "deny", "block": "deny", "ask": "ask"}


# --- configuration ------------------------------------------------------------------------


def mm_event(event: str) -> str:
    """mm's own name of *event*: ``preToolCall`` / ``postToolCall`` for the tool events."""
    return _MM_NAMES.get(event, event)


class Hook(msgspec.Struct, frozen=True):
    """One configured hook, its paths resolved."""

    event: str  # Claude Code's name: PreToolUse, Stop, …
    matcher: str
    argv: list[str]
    label: str  # the command as written, for events and messages
    timeout: float
    base_dir: Path  # folder of the file that declared it
    # Secret-looking variables of the daemon's environment the agent hands on (its pass_env).
    pass_env: tuple[str, ...] = ()
    # Written in Claude Code's shape: the matcher is a case-sensitive regex, not mm's globs.
    claude: bool = False

    def matches(self, *names: str) -> bool:
        """Whether one of *names* (a tool's Claude Code name and mm's, an event's source) matches.

        mm's shape: ``|``-separated globs, case-insensitive. Claude Code's shape:
        a regex that must match the whole name, case-sensitive, within mmd.patterns'
        deadline: a matcher that cannot decide by then does not match (warned once).
        ``*`` and "" match all.
        """
        if self.matcher.strip() in ("", "*"):
            return True
        if self.claude:
            return _regex_matches(self.matcher, names)
        globs = [g.strip().lower() or "*" for g in self.matcher.split("|")]
        return any(patterns.fnmatch(name.lower(), glob) for name in names for glob in globs)


# Claude-shape matchers already warned about as too slow: each is logged once per daemon.
_SLOW_MATCHERS: set[str] = set()


def _regex_matches(matcher: str, names: Sequence[str]) -> bool:
    """Whether the regex *matcher* matches one of *names* whole; False once its deadline passed."""
    try:
        regex = patterns.compile(matcher)  # checked when the file was loaded: re's syntax, the limits
        deadline = (
            patterns.Deadline()
        )  # after the compile (the first one imports regex): for the matches only
        return any(regex.fullmatch(name, deadline) for name in names)
    except patterns.TooSlow as e:
        if matcher not in _SLOW_MATCHERS:
            _SLOW_MATCHERS.add(matcher)
            log.warning(
                "hook matcher %r took longer than %g s on %s: taken as no match (warned once)",
                matcher,
                e.seconds,
                " or ".join(names),
            )
        return False


class Hooks(msgspec.Struct, frozen=True):
    """The hooks of one turn, by event, each list in the order they run."""

    by_event: dict[str, tuple[Hook, ...]] = msgspec.field(default_factory=dict)

    @property
    def pre(self) -> tuple[Hook, ...]:
        return self.by_event.get("PreToolUse", ())

    @property
    def post(self) -> tuple[Hook, ...]:
        return self.by_event.get("PostToolUse", ())

    def matching(self, event: str, *names: str) -> list[Hook]:
        """The hooks of *event* whose matcher matches one of *names* (no names: every hook)."""
        hooks = self.by_event.get(event, ())
        return [h for h in hooks if not names or h.matches(*names)]


def hook_argv(command: str | list[str], base_dir: Path) -> list[str]:
    """The argv of a hook command.

    A list is argv as written. A string of one word (no space, no shell
    character) is one program path. Any other string is a shell line, run by
    ``/bin/sh -c``. A program path that starts with ``./`` or ``../`` (or has
    a ``/`` without being absolute) is relative to *base_dir*; a bare name is
    looked up in PATH; ``~`` is expanded.
    """
    if isinstance(command, str):
        if not _PLAIN_PATH.fullmatch(command):
            return ["/bin/sh", "-c", command]
        command = [command]
    if not command:
        return []
    program = os.path.expanduser(command[0])
    if "/" in program and not os.path.isabs(program):
        program = os.path.normpath(base_dir / program)
    return [program, *command[1:]]


def claude_argv(command: str) -> list[str]:
    """A Claude Code-shape command: a shell line, run by bash as Claude Code runs it (else /bin/sh)."""
    return [shutil.which("bash") or "/bin/sh", "-c", command]


def _resolve(spec: HooksSpec, base_dir: Path, pass_env: tuple[str, ...]) -> dict[str, list[Hook]]:
    out: dict[str, list[Hook]] = {}
    present = spec.events()
    for event in EVENTS:
        if event not in present:
            continue
        for _key, entry in spec.entries(event):
            out.setdefault(event, []).extend(_entry_hooks(event, entry, base_dir, pass_env))
    return out


def _entry_hooks(event: str, entry: HookSpec, base_dir: Path, pass_env: tuple[str, ...]) -> list[Hook]:
    if entry.hooks is not None:  # Claude Code's shape
        return [
            Hook(event, entry.matcher, claude_argv(h.command), h.command, h.timeout, base_dir, pass_env, True)
            for h in entry.hooks
        ]
    assert entry.command is not None
    label = entry.command if isinstance(entry.command, str) else " ".join(entry.command)
    timeout = entry.timeout if entry.timeout is not None else DEFAULT_TIMEOUT
    return [
        Hook(event, entry.matcher, hook_argv(entry.command, base_dir), label, timeout, base_dir, pass_env)
    ]


def merged_hooks(
    user: HooksSpec,
    user_dir: Path,
    agent: HooksSpec,
    agent_dir: Path,
    *,
    pass_env: tuple[str, ...] = (),
    imported: Sequence[tuple[HooksSpec, Path]] = (),
) -> Hooks:
    """The hooks of one turn: config.yaml's first, then *imported* (Claude Code's settings files,
    ``import: claude``), then the agent file's, each in file order.

    Relative command paths start at the folder of the file that declared them.
    *pass_env* (the agent's) names the secret-looking variables every hook gets anyway.
    """
    merged: dict[str, list[Hook]] = {}
    for spec, folder in [(user, user_dir), *imported, (agent, agent_dir)]:
        for event, hooks in _resolve(spec, folder, pass_env).items():
            merged.setdefault(event, []).extend(hooks)
    return Hooks({event: tuple(hooks) for event, hooks in merged.items()})


# --- running one hook -----------------------------------------------------------------------


class HookRun(msgspec.Struct):
    """How one hook process ended."""

    exit_code: int | None
    stdout: str
    stderr: str
    error: str | None = None  # could not start, or timed out


class _Bounded:
    def __init__(self) -> None:
        self.data = bytearray()

    async def pump(self, stream: Any) -> None:
        while chunk := await stream.receive_some(65536):
            room = MAX_CAPTURE - len(self.data)
            if room > 0:
                self.data += chunk[:room]

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


async def run_hook(
    hook: Hook,
    payload: dict[str, Any],
    *,
    cwd: Path,
    env: dict[str, str],
    grace: float = 3.0,
    sandbox: Sandbox | None = None,
) -> HookRun:
    """Run *hook* with *payload* as JSON on stdin; never raises for what the hook does.

    The hook runs in *cwd* with the daemon's environment less its secrets
    (``hook.pass_env`` kept; mmd/procs/environ.py) updated by *env*, in its own
    process group, confined to *sandbox* like the turn's tools; when it exits or its timeout
    passes, its whole tree is stopped. stdout and stderr are kept up to MAX_CAPTURE bytes each.

    Cancellation: the tree is stopped (up to *grace* seconds), then Cancelled goes on.
    """
    if not hook.argv:
        return HookRun(exit_code=None, stdout="", stderr="", error="empty command")
    data = packed(payload, _json_bytes)  # a name that is not UTF-8, escaped
    out, err = _Bounded(), _Bounded()
    exit_code: int | None = None
    with trio.move_on_after(hook.timeout) as timer:
        try:
            async with (
                supervised_process(
                    hook.argv,
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    grace=grace,
                    pass_env=hook.pass_env,
                    sandbox=sandbox,
                ) as proc,
                trio.open_nursery() as nursery,
            ):
                drained = [trio.Event(), trio.Event()]
                for sink, stream, done in ((out, proc.stdout, drained[0]), (err, proc.stderr, drained[1])):
                    nursery.start_soon(_pump, sink, stream, done)
                await _feed(proc.stdin, data)
                exit_code = await proc.wait()
                with trio.move_on_after(DRAIN_WAIT):
                    for done in drained:
                        await done.wait()
                nursery.cancel_scope.cancel()
        except (OSError, ValueError) as exc:
            return HookRun(
                exit_code=None, stdout="", stderr="", error=spawn_error_message(exc, hook.argv, cwd)
            )
    if timer.cancelled_caught:
        return HookRun(
            exit_code=None,
            stdout=out.text(),
            stderr=err.text(),
            error=f"timed out after {hook.timeout:g} s (the hook and its children were stopped)",
        )
    return HookRun(exit_code=exit_code, stdout=out.text(), stderr=err.text())


async def _pump(sink: _Bounded, stream: Any, done: trio.Event) -> None:
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await sink.pump(stream)
    done.set()


async def _feed(stdin: Any, data: bytes) -> None:
    """Write the payload and close stdin; a hook that does not read it is fine."""
    try:
        await stdin.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await stdin.aclose()


# --- what a hook said -----------------------------------------------------------------------


class Verdict(msgspec.Struct):
    """One hook's answer, read from its exit code and stdout."""

    decision: str | None = None  # allow, deny, ask, or None
    reason: str | None = None
    updated_input: dict[str, Any] | None = None
    context: str | None = None
    stop: str | None = None  # continue: false → why the turn stops
    system_message: str | None = None
    error: str | None = None  # a hook error: logged, and the call goes on
    text: str | None = None  # plain text on stdout (context for UserPromptSubmit and SessionStart)


def read_verdict(run: HookRun) -> Verdict:
    """What a finished hook decided (see the module docstring for the rules)."""
    if run.error is not None:
        return Verdict(error=run.error)
    if run.exit_code == 2:
        reason = run.stderr.strip() or "blocked by a hook (exit code 2, nothing on stderr)"
        return Verdict(decision="deny", reason=reason)
    if run.exit_code != 0:
        tail = run.stderr.strip().splitlines()[-1:] if run.stderr.strip() else []
        detail = f": {tail[0]}" if tail else ""
        return Verdict(error=f"exit code {run.exit_code}{detail}")
    text = run.stdout.strip()
    if not text.startswith("{"):
        return Verdict(text=text or None)  # shown in the hook event; context for some events
    try:
        check_json(text, what="stdout is JSON", max_depth=MAX_DOCUMENT_DEPTH)  # before json.loads recurses
    except TooDeep as exc:
        return Verdict(error=f"{exc}; the answer was ignored")
    try:
        obj = json.loads(text)
    except ValueError as exc:
        return Verdict(error=f"stdout starts with {{ but is not valid JSON: {exc}")
    if not isinstance(obj, dict):
        return Verdict(error="stdout is JSON but not an object")
    return _fields(obj)


def _fields(obj: dict[str, Any]) -> Verdict:
    specific = obj.get("hookSpecificOutput")
    if specific is None:
        specific = {}
    if not isinstance(specific, dict):
        return Verdict(error="hookSpecificOutput is not an object")

    def pick(*names: str) -> Any:
        for where in (specific, obj):
            for name in names:
                if where.get(name) is not None:
                    return where[name]
        return None

    raw = pick("permissionDecision", "decision")
    decision = None
    if raw is not None:
        decision = _DECISIONS.get(str(raw).lower()) if isinstance(raw, str) else None
        if decision is None:
            return Verdict(error=f"unknown decision {raw!r}; expected allow, deny or ask")
    updated = pick("updatedInput")
    if updated is not None and not isinstance(updated, dict):
        return Verdict(error="updatedInput is not a JSON object")
    if updated is not None:
        try:
            check_value(updated, what="updatedInput is", max_depth=MAX_DEPTH)  # as the model's arguments
        except TooDeep as exc:
            return Verdict(error=f"{exc}; the answer was ignored")
    context = pick("additionalContext")
    reason = pick("permissionDecisionReason", "reason")
    stop = None
    if obj.get("continue") is False:
        stop = str(obj.get("stopReason") or "A hook stopped the turn.")
    message = obj.get("systemMessage")
    return Verdict(
        decision=decision,
        reason=str(reason) if reason is not None else None,
        updated_input=updated,
        context=str(context) if context else None,
        stop=stop,
        system_message=str(message) if message else None,
    )


# --- a whole chain, for one call or one event ---------------------------------------------------


class Site(msgspec.Struct, frozen=True):
    """Where a turn's hooks run, and what every hook reads of it (Claude Code's common input fields)."""

    session_id: str
    cwd: Path
    transcript_path: str = ""  # the session's JSONL transcript (mmd/turn/transcript.py)
    # Claude Code's name of mm's mode: "default", or "bypassPermissions" under yolo.
    permission_mode: str = "default"
    # The turn's sandbox: hooks run confined like its tools (mmd/sandbox); None: not confined.
    sandbox: Sandbox | None = None

    @classmethod
    def for_turn(cls, session: Any, *, yolo: bool, sandbox: Sandbox | None = None) -> Site:
        """The site of a turn of *session* (its id, cwd and ``transcript``); under yolo calls run
        without asking, which Claude Code calls bypassPermissions. Where the kernel cannot
        enforce *sandbox*, hooks run unconfined (mm warned once): they are the agent's own policy."""
        if sandbox is not None and unavailable_reason(sandbox) is not None:
            sandbox = None
        return cls(
            session_id=session.id,
            cwd=session.cwd,
            transcript_path=str(getattr(session, "transcript", "") or ""),
            permission_mode="bypassPermissions" if yolo else "default",
            sandbox=sandbox,
        )

    def common(self, event: str) -> dict[str, Any]:
        """The fields every hook of *event* reads first."""
        return {
            "session_id": self.session_id,
            "transcript_path": self.transcript_path,
            "cwd": str(self.cwd),
            "permission_mode": self.permission_mode,
            "hook_event_name": event,
            "mm_event": mm_event(event),
        }


class Outcome(msgspec.Struct):
    """What a chain of hooks decided, and what it reports; the turn acts on it.

    ``events`` are the ``hook`` and ``warning`` records to publish, in order; ``stop``
    is set when a hook answered ``continue: false``: the turn ends with that text.
    """

    events: list[tuple[str, dict[str, Any]]] = msgspec.field(default_factory=list)
    stop: str | None = None
    context: list[str] = msgspec.field(default_factory=list)


class PreOutcome(Outcome):
    """What the PreToolUse hooks decided for one call."""

    # To run with (updated by the hooks, validated).
    args: dict[str, Any] = msgspec.field(default_factory=dict)
    decision: str | None = None  # allow or ask for the consent gate; deny is ``answer``
    updated: bool = False
    answer: ToolResult | None = None  # set when the call must not run: what the model reads

    def with_context(self, result: ToolResult) -> ToolResult:
        """*result* with the hooks' additional context appended to what the model reads."""
        return add_context(result, self.context)


class PostOutcome(Outcome):
    """What the PostToolUse hooks made of a result: ``result`` is what the model reads."""

    result: ToolResult = msgspec.field(default_factory=lambda: ToolResult(ok=True, content=""))


class EventOutcome(Outcome):
    """What the hooks of an event other than a tool call decided.

    ``blocked`` is the reason when one blocked (exit 2, ``decision: block``): the
    prompt is refused (UserPromptSubmit), the model goes on (Stop).
    """

    blocked: str | None = None


def add_context(result: ToolResult, context: list[str]) -> ToolResult:
    if not context:
        return result
    return ToolResult(ok=result.ok, content="\n\n".join([result.content, *context]), data=result.data)


# Events whose hooks' plain stdout (exit 0, no JSON) is context for the model, as in Claude Code.
_TEXT_IS_CONTEXT = frozenset({"UserPromptSubmit", "SessionStart"})


def _tool_payload(event: str, site: Site, call: ToolCall, tool: Tool, args: dict[str, Any]) -> dict[str, Any]:
    return {
        **site.common(event),
        "tool_name": hooks_claude.claude_name(tool),
        "tool_input": hooks_claude.to_claude(tool, args, site.cwd),
        "tool_use_id": call.id,
        "mm_tool_name": tool.name,
        "mm_tool_input": args,
    }


def _env(hook: Hook, site: Site, call: ToolCall | None, tool_name: str | None) -> dict[str, str]:
    env = {
        "MM_SESSION_ID": site.session_id,
        "MM_HOOK_EVENT": mm_event(hook.event),
        "MM_HOOK_DIR": str(hook.base_dir),
        "CLAUDE_PROJECT_DIR": str(site.cwd),
    }
    if call is not None and tool_name is not None:
        env |= {"MM_TOOL_CALL_ID": call.id, "MM_TOOL_NAME": tool_name}
    return env


def _record(
    hook: Hook, run: HookRun, verdict: Verdict, call: ToolCall | None, tool_name: str | None
) -> dict[str, Any]:
    return {
        "event": mm_event(hook.event),
        "hook": hook.label,
        "call_id": call.id if call else None,
        "tool": tool_name,
        "exit_code": run.exit_code,
        "decision": "error" if verdict.error else verdict.decision,
        "reason": verdict.reason,
        "error": verdict.error,
        "updated_input": verdict.updated_input is not None,
        "context": verdict.context is not None,
        "stderr": run.stderr[-2000:],
        "stdout": run.stdout[-2000:],
    }


async def _one(
    hook: Hook,
    payload: dict[str, Any],
    site: Site,
    call: ToolCall | None,
    tool_name: str | None,
    grace: float,
    out: Outcome,
) -> Verdict:
    """Run one hook; its reports go to ``out.events``, a ``continue: false`` to ``out.stop``."""
    name = mm_event(hook.event)
    env = _env(hook, site, call, tool_name)
    run = await run_hook(hook, payload, cwd=site.cwd, env=env, grace=grace, sandbox=site.sandbox)
    verdict = read_verdict(run)
    if verdict.error is not None:
        log.warning(
            "%s hook %r for %s: hook error: %s", name, hook.label, tool_name or "the turn", verdict.error
        )
    out.events.append(("hook", _record(hook, run, verdict, call, tool_name)))
    if verdict.system_message:
        out.events.append(("warning", {"message": f"{name} hook {hook.label}: {verdict.system_message}"}))
    if verdict.stop is not None:
        out.stop = f"Stopped by the {name} hook {hook.label}: {verdict.stop}"
    return verdict


async def run_pre_hooks(
    hooks: Hooks | None, *, tool: Tool, call: ToolCall, args: dict[str, Any], site: Site, grace: float = 3.0
) -> PreOutcome:
    """Run the PreToolUse hooks that match *tool* (by Claude Code's name or mm's), in order, on
    arguments the contract validated.

    A hook that answers ``continue: false`` ends the chain with ``stop`` set. Every
    other failure of a hook is a hook error: logged, reported, and skipped.
    """
    outcome = PreOutcome(args=args)
    names = (hooks_claude.claude_name(tool), tool.name)
    for hook in hooks.matching("PreToolUse", *names) if hooks else []:
        payload = _tool_payload("PreToolUse", site, call, tool, outcome.args)
        verdict = await _one(hook, payload, site, call, tool.name, grace, outcome)
        if outcome.stop is not None or _apply_pre(outcome, verdict, tool, hook, site.cwd):
            break
    return outcome


def _apply_pre(outcome: PreOutcome, verdict: Verdict, tool: Tool, hook: Hook, cwd: Path) -> bool:
    """Fold one hook's verdict into *outcome*; True when the chain ends here."""
    if verdict.error is not None:
        return False
    if verdict.context:
        outcome.context.append(verdict.context)
    if verdict.decision == "deny":
        reason = verdict.reason or "no reason given"
        blocked = ToolResult(
            ok=False,
            content=f"{tool.name} was not run: blocked by the preToolCall hook {hook.label}.\n{reason}",
            data={"blocked": True, "hook": hook.label, "reason": reason},
        )
        outcome.answer = outcome.with_context(blocked)
        outcome.decision = "deny"
        return True
    if verdict.updated_input is not None:
        updated = hooks_claude.to_mm(tool, verdict.updated_input, outcome.args, cwd)
        try:
            outcome.args = contract.validate(tool.parameters, updated, example=tool.example)
        except ToolError as err:
            outcome.answer = _invalid_update(tool, hook, verdict.updated_input, err)
            return True
        outcome.updated = True
    if verdict.decision == "ask" or (verdict.decision == "allow" and outcome.decision is None):
        outcome.decision = verdict.decision
    return False


def _invalid_update(tool: Tool, hook: Hook, updated: dict[str, Any], err: ToolError) -> ToolResult:
    sent = json.dumps(updated, ensure_ascii=False)
    content = (
        f"{tool.name} was not run: the preToolCall hook {hook.label} replaced its arguments with "
        f"{sent}, which are not valid: {err.reason}"
    )
    log.warning(
        "preToolCall hook %r for %s: hook error: invalid updatedInput: %s", hook.label, tool.name, err.reason
    )
    return ToolResult(
        ok=False,
        content=content,
        data={
            "blocked": True,
            "hook": hook.label,
            "hook_error": "invalid updatedInput",
            "error": err.fields(),
        },
    )


async def run_post_hooks(
    hooks: Hooks | None,
    *,
    tool: Tool,
    call: ToolCall,
    args: dict[str, Any],
    result: ToolResult,
    site: Site,
    grace: float = 3.0,
) -> PostOutcome:
    """Run the PostToolUse hooks that match *tool* on its result.

    A deny (or exit 2, or ``decision: block``) replaces the result with a block
    message and ends the chain; contexts are appended; ``continue: false`` ends
    the chain with ``stop`` set.
    """
    out = PostOutcome(result=result)
    names = (hooks_claude.claude_name(tool), tool.name)
    for hook in hooks.matching("PostToolUse", *names) if hooks else []:
        payload = _tool_payload("PostToolUse", site, call, tool, args)
        payload["tool_response"] = {"ok": result.ok, "content": result.content, "data": result.data}
        verdict = await _one(hook, payload, site, call, tool.name, grace, out)
        if out.stop is not None:
            break
        if verdict.error is not None:
            continue
        if verdict.context:
            out.context.append(verdict.context)
        if verdict.decision == "deny":
            reason = verdict.reason or "no reason given"
            out.result = ToolResult(
                ok=False,
                content=f"{tool.name} ran, but the postToolCall hook {hook.label} withheld its result.\n{reason}",
                data={"blocked": True, "hook": hook.label, "reason": reason, "ran": True},
            )
            break
    out.result = add_context(out.result, out.context)
    return out


async def run_event_hooks(
    hooks: Hooks | None,
    event: str,
    *,
    site: Site,
    fields: dict[str, Any],
    subject: tuple[str, ...] = (),
    grace: float = 3.0,
) -> EventOutcome:
    """Run the hooks of *event* (not a tool event) with *fields* added to the common input.

    *subject* is what matchers match (SessionStart's source, Notification's
    type, SessionEnd's reason); none: every hook of the event runs, as Claude
    Code runs UserPromptSubmit and Stop hooks. The first block ends the chain.
    """
    out = EventOutcome()
    for hook in hooks.matching(event, *subject) if hooks else []:
        verdict = await _one(hook, {**site.common(event), **fields}, site, None, None, grace, out)
        if out.stop is not None:
            break
        if verdict.error is not None:
            continue
        if verdict.context:
            out.context.append(verdict.context)
        elif verdict.text and event in _TEXT_IS_CONTEXT:
            out.context.append(verdict.text)
        if verdict.decision == "deny":
            out.blocked = verdict.reason or f"blocked by the {event} hook {hook.label} (no reason given)"
            break
    return out
