"""One tool call, from the model's raw arguments to the result the model reads.

Every tool kind takes the same path, a fixed list of stages that each call goes
through once (:data:`STAGES`):

1. ``contract``: parse and validate against the tool's schema (an invalid call
   is answered, quoting it back), record selection telemetry, announce the call;
2. ``pre_hooks``: the PreToolUse hooks may block, update the input or decide consent;
3. ``replay``: a repeated write of an idempotent tool gets its stored first result;
4. ``consent``: the policy's verdict (ledger, yolo, or a person asked);
5. ``execute``: the tool runs under the supervisor; its output is echoed live, truncated for
   the model and kept whole in a spill file as it streams, by one module all process and MCP
   tools share (mmd/tools/process.py), so no stage after it can do that part; a write's
   working tree is snapshotted right before and right after it (mmd/undo: ``mm undo``);
6. ``verify``: a write with a named verification read runs that read;
7. ``remember``: an idempotent write's result is stored under its key;
8. ``post_hooks``: the PostToolUse hooks may withhold the result or add context.

Right after ``contract``, ``skill_limit`` refuses a call that the allowed-tools of the skill in use do
not allow; last, ``skill_read`` puts a skill that read_skill just read in use (mmd/turn/skilluse.py).

Policy (mmd/policy) only returns verdicts; this module acts on them: it
publishes their events and ends the turn (:class:`StopTurn`) when one says so.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import msgspec

from .. import contract
from ..config.declared import VerifySpec
from ..models.base import Message, ToolCall
from ..policy import consent
from ..policy.hooks import Outcome, PreOutcome, Site, run_post_hooks, run_pre_hooks
from ..rpc.methods import Event
from ..sandbox import Sandbox
from ..store import Store
from ..tools.base import Tool, ToolContext, ToolError, ToolResult, spill_path
from ..tools.declared import fill_verify_args
from ..undo import Recorder
from . import answers, grounding, skilluse
from .context import cap_output
from .plan import TurnSetup

BASH = "bash"  # the built-in whose commands a skill in use checks (skill_commands, skill_hint)
READ_SKILL = skilluse.READ_SKILL


class StopTurn(Exception):
    """End the turn now with *status*; *text* tells the user why."""

    def __init__(self, status: str, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


class Conversation(consent.Asker, Protocol):
    """What a turn needs of its session (mmd.turn.session.Session is one)."""

    id: str
    cwd: Path
    dir: Path
    store: Store
    ledger: consent.Ledger
    messages: list[Message]

    def emit(self, kind: str, data: dict[str, Any]) -> Event: ...

    def together(self) -> contextlib.AbstractContextManager[None]: ...

    def add_message(self, msg: Message) -> None: ...

    def replace_messages(self, messages: list[Message]) -> None: ...


def canonical(args: dict[str, Any]) -> str:
    """The arguments as one canonical JSON text: same values, same text."""
    return contract.canonical(args)


def idempotency_key(session_id: str, tool: str, args: dict[str, Any]) -> str:
    """Bound to the step, not the attempt: same session, tool and arguments give the same key."""
    digest = hashlib.sha256(f"{session_id}\0{tool}\0{canonical(args)}".encode()).hexdigest()
    return f"mm-{digest[:32]}"


class Call(msgspec.Struct):
    """One call on its way through the stages."""

    call: ToolCall
    tool: Tool | None
    started: float
    args: dict[str, Any] = msgspec.field(default_factory=dict)
    echo: str = ""
    key: str | None = None  # the idempotency key of a write
    pre: PreOutcome = msgspec.field(default_factory=PreOutcome)
    answer: ToolResult | None = None  # set when the call is answered before it could run
    result: ToolResult | None = None  # set once the call ran (or was replayed, or denied)
    denied: bool = False
    # The context it runs with, made once its key is known: the consent's and the run's (CallRunner._ctx).
    ctx: ToolContext | None = None
    contracted: bool = False  # the contract stage ran (CallRunner.open: in the model step's commit)

    @property
    def replays(self) -> bool:
        return self.key is not None and self.tool is not None and self.tool.idempotent


class Finished(msgspec.Struct, frozen=True):
    """A call that went through every stage: the result its tool_result event and the model are given."""

    call: ToolCall
    result: ToolResult
    started: float  # time.monotonic() when it began


class CallRunner:
    """Runs the tool calls of one turn; remembers invalid calls to count recoveries."""

    def __init__(self, session: Conversation, setup: TurnSetup) -> None:
        self.session = session
        self.setup = setup
        self.store = session.store
        self._invalid: dict[str, int] = {}  # tool → telemetry row of its last invalid call
        # Where a value may come from (grounding.py): the session so far, then each result that really ran;
        # the system message too for grounding. A skill's example values count only where someone other than
        # the skill said them (_told: no read_skill result; skill_commands, grounding). Both are made by the
        # turn's first call that needs them (most prompts make no call), from the history as the turn began:
        # the list and its length now (the session appends to that list; a compaction makes a new one).
        self._began = (session.messages, len(session.messages))
        self.invalid: set[str] = set()  # ids of the calls the contract refused (loop.py reads it)
        self._resolved_roots: list[str] | None = None  # _roots
        self._turn_site: Site | None = None  # _site
        self._opened: Call | None = None  # the call open() ran the contract stage of, for run() to go on
        self.request = next((m.content for m in reversed(session.messages) if m.role == "user"), "")

    @functools.cached_property
    def _said(self) -> str:
        messages, count = self._began
        return grounding.corpus(messages[:count])

    @functools.cached_property
    def _told(self) -> str:
        messages, count = self._began
        return grounding.corpus(messages[:count], skip=(READ_SKILL,))

    @functools.cached_property
    def _system(self) -> str:
        return self.setup.system.lower()

    @functools.cached_property
    def checkpoints(self) -> Recorder:
        """Snapshots around each write call (mmd/undo), in the state folder beside the sessions: made by the
        turn's first write call."""
        session, setup = self.session, self.setup
        return Recorder(
            store=session.store,
            session_id=session.id,
            project=session.cwd,
            snapshots=session.dir.parent.parent / "snapshots",
            max_files=setup.snapshot_max_files,
            watch=setup.snapshot_watch,
            emit=session.emit,
            timeout=setup.limits.timeout,
        )

    def open(self, call: ToolCall, parsed: dict[str, Any] | None = None) -> None:
        """Run *call*'s contract stage now (no await: within the caller's ``together()``), for :meth:`run`
        to take it from there: the call's record and tool_call event then join the caller's commit.
        *parsed*: its arguments as ``contract.parse_arguments`` gave them already (loops.parsed_key), read
        only; None parses them here."""
        c = Call(call=call, tool=self.setup.registry.get(call.name), started=time.monotonic())
        self._contract(c, parsed)
        self._opened = c

    async def run(self, call: ToolCall) -> Finished:
        """Take *call* through every stage; the result is what the model reads. Its tool_result event is
        not emitted yet: :meth:`publish` emits it, where the caller writes the call's message (one commit).

        Errors: StopTurn when a verdict ends the turn (nobody to ask, a hook's stop).
        """
        c, self._opened = self._opened, None
        if c is None or c.call is not call:
            c = Call(call=call, tool=self.setup.registry.get(call.name), started=time.monotonic())
        for stage in STAGES:
            if c.answer is not None:
                break
            await stage(self, c)
        result = c.answer or c.pre.with_context(c.result or _NOTHING)
        if c.answer is None and c.result is not None and not c.denied:
            self._said += "\n" + c.result.content.lower()
            if c.call.name != READ_SKILL:
                self._told += "\n" + c.result.content.lower()
        # Within its share of the model's window (the whole in the spill file), as the model reads it.
        spill = c.ctx.spill_path if c.ctx is not None else spill_path(self.session.dir, c.call.id)
        result = await cap_output(result, self.setup.budget, self.setup.limits, spill)
        return Finished(c.call, result, c.started)

    def publish(self, done: Finished) -> None:
        """Emit the tool_result event of a call :meth:`run` finished."""
        self._finish(done.call, done.result, done.started)

    # -- the stages, in order ---------------------------------------------------

    async def contract(self, c: Call) -> None:
        if not c.contracted:
            self._contract(c)

    def _contract(self, c: Call, parsed: dict[str, Any] | None = None) -> None:
        c.contracted = True
        try:
            if c.tool is None:
                raise self._unknown_tool(c.call)
            # The example only words a refusal: arguments that parsed without it parse the same with it, and
            # validate makes it only for a problem's fix (a write tool's is a shape made from its schema).
            example = functools.partial(_answer_example, c.tool)
            raw = (
                parsed
                if parsed is not None
                else contract.parse_arguments(c.call.arguments, example=example())
            )
            c.args = contract.validate(
                c.tool.parameters, raw, example=example, full=getattr(c.tool, "full_check", None)
            )
            c.echo = c.tool.echo(c.args)
        except ToolError as err:
            with self.session.together():  # the call's record and its event: one commit
                self._telemetry(c.call.name, err.code)
                self._announce(c.call, c.tool, f"{c.call.name}({c.call.arguments})")
            c.answer = self._invalid_answer(c.call, c.tool, err)
            return
        with self.session.together():
            self._telemetry(c.call.name, None)
            self._announce(c.call, c.tool, c.echo)

    async def skill_limit(self, c: Call) -> None:
        assert c.tool is not None
        if self.setup.skill_limit is None:  # the usual case: no context to make for nothing
            return
        if (why := skilluse.refusal(self.setup, c.tool, c.args, self._context(c.call, None))) is not None:
            c.answer = ToolResult(ok=False, content=why, data={"error": {"code": "not_allowed_by_skill"}})

    async def grounding(self, c: Call) -> None:
        assert c.tool is not None
        if not self.setup.ground_values or c.tool.source == "builtin":
            return
        missing = grounding.ungrounded(c.args, c.tool.parameters, f"{self._said}\n{self._system}")
        # mm's own answer sent back as a value (seen: ticket {"id": "Not run again: this exact ticket call …"}).
        missing += [(n, v) for n, v in c.args.items() if isinstance(v, str) and answers.mm_words(v)]
        # Read in a skill only as one of its examples (`./actions/status search`): the 0.5B ran `status
        # search` for "the status of billing" after reading the skill, in 4 of 5 runs.
        if (commands := self.setup.skill_commands) is not None and (examples := commands.example_values()):
            missing += [
                (name, value)
                for name, value in grounding.ungrounded(c.args, c.tool.parameters, self._told)
                if value in examples and (name, value) not in missing
            ]
        if missing:
            content = grounding.answer(c.call.name, missing, self.request)
            data = {"error": {"code": "ungrounded_value", "values": [v for _, v in missing]}}
            c.answer = ToolResult(ok=False, content=content, data=data)

    async def skill_commands(self, c: Call) -> None:
        """A small model's bash call under a skill: no placeholder left in, no example value run as asked for."""
        commands = self.setup.skill_commands
        if commands is None or not self.setup.ground_values or c.tool is None or c.tool.name != BASH:
            return
        if (why := commands.refusal(str(c.args.get("command", "")), self._told)) is not None:
            # grounding's opening, so that the quoted value never grounds a later turn (grounding.corpus)
            content = f"{c.call.name} was not run: {why} The user's request: {grounding.quote(self.request)}."
            c.answer = ToolResult(ok=False, content=content, data={"error": {"code": "skill_command"}})

    async def pre_hooks(self, c: Call) -> None:
        assert c.tool is not None
        if (hooks := self.setup.hooks) is not None and hooks.pre:
            c.pre = await run_pre_hooks(
                hooks, tool=c.tool, call=c.call, args=c.args, site=self._site(), grace=self.setup.limits.grace
            )
            self._publish(c.pre, c.call)
            c.answer = c.pre.answer
            if c.pre.updated:
                c.args, c.echo = c.pre.args, c.tool.echo(c.pre.args)
        else:
            c.pre = PreOutcome(args=c.args)  # what a chain of no hook gives
        if c.tool.tier != "read":
            c.key = idempotency_key(self.session.id, c.tool.name, c.args)

    async def replay(self, c: Call) -> None:
        if c.replays and (stored := self.store.idempotent_result(c.key or "")) is not None:
            c.result = _replayed(stored)

    async def consent(self, c: Call) -> None:
        if c.result is not None:
            return
        assert c.tool is not None
        if (refused := self._unconfinable(c.tool)) is not None:
            c.denied, c.result = True, refused
            return
        request = consent.Request(
            tool=c.tool,
            args=c.args,
            echo=c.echo,
            call_id=c.call.id,
            ctx=self._ctx(c),
            roots=self._roots(),
        )
        verdict = await self._verdict(request, c.pre.decision)
        if verdict.allow:
            return
        c.denied = True
        c.result = ToolResult(
            ok=False, content=verdict.message, data={"denied": True, "reason": verdict.reason}
        )
        if verdict.stop_turn:
            self._finish(c.call, c.result, time.monotonic())
            raise StopTurn("denied", verdict.message)

    async def execute(self, c: Call) -> None:
        if c.result is not None:
            return
        assert c.tool is not None
        # A write may change any file (bash above all): its step is what the tree was before and after.
        before = await self.checkpoints.before(c.call.id) if c.tool.tier != "read" else None
        try:
            c.result = await c.tool.run(c.args, self._ctx(c))
        except ToolError as err:
            c.result = self._invalid_answer(c.call, c.tool, err)
        finally:
            if before is not None:
                await self.checkpoints.after(c.call.id, c.tool.name, c.echo, before)

    async def verify(self, c: Call) -> None:
        spec = c.tool.verify if c.tool else None
        if (
            c.denied
            or spec is None
            or c.result is None
            or not c.result.ok
            or "replayed" in (c.result.data or {})
        ):
            return
        c.result = await self._verify(c.call, spec, c.args, c.result)

    async def remember(self, c: Call) -> None:
        if (
            c.denied
            or not c.replays
            or c.result is None
            or not c.result.ok
            or "replayed" in (c.result.data or {})
        ):
            return
        assert c.tool is not None and c.key is not None
        stored = {"ok": c.result.ok, "content": c.result.content, "data": c.result.data}
        self.store.save_idempotent(
            c.key, session_id=self.session.id, tool=c.tool.name, arguments=canonical(c.args), result=stored
        )

    async def post_hooks(self, c: Call) -> None:
        if c.denied or c.result is None or (hooks := self.setup.hooks) is None or not hooks.post:
            return  # a chain of no hook leaves the result as it is
        assert c.tool is not None
        post = await run_post_hooks(
            self.setup.hooks,
            tool=c.tool,
            call=c.call,
            args=c.args,
            result=c.result,
            site=self._site(),
            grace=self.setup.limits.grace,
        )
        self._publish(post, c.call)
        c.result = post.result

    async def skill_hint(self, c: Call) -> None:
        """A bash call under a skill failed without running any of the skill's commands: say which they are."""
        commands = self.setup.skill_commands
        if commands is None or c.tool is None or c.tool.name != BASH or c.result is None or c.result.ok:
            return
        if c.denied or (hint := commands.hint(str(c.args.get("command", "")))) is None:
            return
        c.result = ToolResult(ok=False, content=f"{c.result.content.rstrip()}\n{hint}", data=c.result.data)

    async def skill_read(self, c: Call) -> None:
        if c.tool is not None and c.tool.name == READ_SKILL and not c.denied and c.result and c.result.ok:
            skilluse.after_read(self.session, self.setup, c.args["name"])  # its allowed-tools apply now

    # -- what the stages share ----------------------------------------------------

    async def _verdict(self, request: consent.Request, hook: str | None) -> consent.Verdict:
        """The consent verdict; a person who asks for a dry run sees it, then is asked again."""
        while True:
            verdict = await consent.check(
                request, ledger=self.session.ledger, asker=self.session, yolo=self.setup.yolo, hook=hook
            )
            if verdict.answered is not None:
                self.session.emit("consent_answered", verdict.answered)
            if not verdict.dry_run:
                return verdict
            await self._dry_run(request)

    async def _dry_run(self, request: consent.Request) -> None:
        """Show the user what the call would do; the model sees nothing of it."""
        ctx = msgspec.structs.replace(
            request.ctx, call_id=request.ctx.call_id + "-dry-run", idempotency_key=None
        )
        try:
            result = await request.tool.dry_run(request.args, ctx)
        except ToolError as err:
            result = ToolResult(ok=False, content=err.reason)
        self.session.emit("dry_run", {"call_id": request.call_id, "ok": result.ok, "content": result.content})

    def _publish(self, outcome: Outcome, call: ToolCall) -> None:
        """Publish what a hook chain reported; end the turn when a hook said stop."""
        for kind, data in outcome.events:
            self.session.emit(kind, data)
        if outcome.stop is not None:
            raise StopTurn("denied", outcome.stop)

    def _site(self) -> Site:
        # The same for every call of the turn (the session, yolo, the sandbox and whether the kernel
        # enforces it): made once, by the first call that has a hook to run.
        if self._turn_site is None:
            self._turn_site = Site.for_turn(self.session, yolo=self.setup.yolo, sandbox=self.setup.sandbox)
        return self._turn_site

    def _unconfinable(self, tool: Tool) -> ToolResult | None:
        """The answer to a write tool that would run a process the kernel cannot confine; None: it may run.

        Where the kernel offers no sandbox, only ``sandbox: off`` (or ``--sandbox off``)
        lets write tools run unconfined; read tools run unconfined, as mm says once per session.
        """
        box, missing = self.setup.sandbox, self.setup.sandbox_missing
        if box is None or missing is None or not tool.turn_sandboxed or tool.tier == "read":
            return None
        text = (
            f"{tool.name} was not run: it would run under the sandbox ({box.label}), which this machine "
            f"cannot enforce: {missing}. Do not retry; tell the user. A person who accepts running it "
            "unconfined can pass --sandbox off, or write sandbox: off in the agent file."
        )
        return ToolResult(ok=False, content=text, data={"denied": True, "reason": "sandbox unavailable"})

    def _sandbox(self) -> Sandbox | None:
        """The sandbox the call's processes run under: the turn's, unless the kernel cannot enforce it
        (write tools were refused in the consent stage then; a read tool runs unconfined)."""
        return self.setup.sandbox if self.setup.sandbox_missing is None else None

    def _roots(self) -> list[str]:
        # Resolved once a turn (~100 Python calls and a dozen lstat each time): a call's paths are resolved
        # afresh and compared with these, so a folder link swapped during the turn only makes more paths
        # outside, never fewer.
        if self._resolved_roots is None:
            folders = self.setup.skills.folders() if self.setup.skills else ()
            self._resolved_roots = consent.confined_roots(self.session.cwd, self.session.dir, list(folders))
        return self._resolved_roots

    def _ctx(self, c: Call) -> ToolContext:
        """The context *c* runs with (its key known): made once, for the consent and the run."""
        if c.ctx is None:
            c.ctx = self._context(c.call, c.key)
        return c.ctx

    def _context(self, call: ToolCall, key: str | None, suffix: str = "") -> ToolContext:
        return ToolContext(
            sandbox=self._sandbox(),
            agent_file=(self.setup.sandbox.source or None) if self.setup.sandbox else None,
            session_id=self.session.id,
            call_id=call.id + suffix,
            cwd=self.session.cwd,
            session_dir=self.session.dir,
            limits=self.setup.limits,
            emit=self.session.emit,
            skill_folders=self.setup.skills.folders() if self.setup.skills else (),
            idempotency_key=key,
            pass_env=self.setup.pass_env,
        )

    def _invalid_answer(self, call: ToolCall, tool: Tool | None, err: ToolError) -> ToolResult:
        schema, example = (tool.parameters, _answer_example(tool)) if tool else (None, None)
        self.invalid.add(call.id)  # answered by the contract: it never ran
        return contract.answer(call.name, call.arguments, err, schema=schema, example=example)

    async def _verify(
        self, call: ToolCall, spec: VerifySpec, args: dict[str, Any], result: ToolResult
    ) -> ToolResult:
        """Run the write's named read; a failed verification is never reported as success."""
        vcall = ToolCall(
            id=f"{call.id}-verify", name=spec.tool, arguments=json.dumps(fill_verify_args(spec, args))
        )
        reader = self.setup.registry.get(spec.tool)
        if reader is None:
            vresult = ToolResult(
                ok=False, content=f"The verification tool {spec.tool} is not available in this turn."
            )
        else:
            vresult = await self._read(vcall, reader)
        verdict = "passed" if vresult.ok else "FAILED: the change is not confirmed"
        content = f"{result.content}\n\nVerification with {spec.tool}: {verdict}.\n{vresult.content}"
        data = {**(result.data or {}), "verified": vresult.ok, "verification": vresult.content}
        return ToolResult(ok=vresult.ok, content=content, data=data)

    async def _read(self, vcall: ToolCall, reader: Tool) -> ToolResult:
        try:
            vargs = contract.validate(reader.parameters, json.loads(vcall.arguments), example=reader.example)
            self._announce(vcall, reader, reader.echo(vargs))
            vresult = await reader.run(vargs, self._context(vcall, None))
        except ToolError as err:
            vresult = contract.answer(vcall.name, vcall.arguments, err, schema=reader.parameters)
        return self._finish(vcall, vresult, time.monotonic())

    def _telemetry(self, tool: str, error: str | None) -> None:
        retry = tool in self._invalid
        row = self.store.record_tool_call(
            session_id=self.session.id, tool=tool, valid=error is None, error=error, retry=retry
        )
        if error is None:
            if retry:
                self.store.mark_recovered(self._invalid.pop(tool))
        elif not retry:
            self._invalid[tool] = row

    def _unknown_tool(self, call: ToolCall) -> ToolError:
        if (limited := skilluse.unknown(self.setup, call.name)) is not None:
            return limited
        if call.name in self.setup.skill_names():
            return ToolError(
                "unknown_tool",
                f'"{call.name}" is a skill, not a tool: skills are read, not called.',
                fix=f'Call read_skill with {{"name": "{call.name}"}}, then do what the skill says '
                "with the tools it names.",
            )
        close = self.setup.registry.suggest(call.name)
        hint = f' Did you mean "{close}"?' if close else ""
        return ToolError(
            "unknown_tool",
            f'There is no tool named "{call.name}".{hint} Available tools: {", ".join(self.setup.registry.names())}.',
            fix="Call one of the available tools by its exact name.",
        )

    def _announce(self, call: ToolCall, tool: Tool | None, echo: str) -> None:
        self.session.emit(
            "tool_call",
            {
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments,
                "echo": echo,
                "tier": tool.tier if tool else None,
            },
        )

    def _finish(self, call: ToolCall, result: ToolResult, started: float) -> ToolResult:
        self.session.emit(
            "tool_result",
            {
                "call_id": call.id,
                "name": call.name,
                "ok": result.ok,
                "content": result.content,
                "data": result.data,
                "duration": round(time.monotonic() - started, 6),
            },
        )
        return result


Stage = Callable[[CallRunner, Call], Awaitable[None]]
# Every call goes through these, once each, in this order (the module's docstring says what each does).
STAGES: tuple[Stage, ...] = (
    CallRunner.contract,
    CallRunner.skill_limit,
    CallRunner.grounding,
    CallRunner.skill_commands,
    CallRunner.pre_hooks,
    CallRunner.replay,
    CallRunner.consent,
    CallRunner.execute,
    CallRunner.verify,
    CallRunner.remember,
    CallRunner.post_hooks,
    CallRunner.skill_hint,
    CallRunner.skill_read,
)


def _answer_example(tool: Tool) -> dict[str, Any] | None:
    """The example an invalid call's answer shows: a read tool's own, a write's shape only."""
    if tool.tier == "read":
        return tool.example
    return contract.shape_example(tool.parameters) if tool.parameters.get("properties") else tool.example


_NOTHING = ToolResult(ok=False, content="The call produced no result.")


def _replayed(stored: dict[str, Any]) -> ToolResult:
    data = {**(stored.get("data") or {}), "replayed": True}
    content = (
        "This exact call already ran in this session; its first result is replayed, nothing ran again.\n"
        + stored["content"]
    )
    return ToolResult(ok=stored["ok"], content=content, data=data)
