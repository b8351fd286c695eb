"""One tool call, from the model's raw arguments to the result the model reads.

Every tool kind takes the same path: parse and validate against the
contract (an invalid call is answered, quoting it back), record selection
telemetry, replay a stored result for a repeated write (idempotency), ask for
consent, run under the supervisor, and verify a write with its named read.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import TYPE_CHECKING, Any

from ..models.base import ToolCall
from ..policy.consent import Denied
from ..policy.hooks import run_post_hooks, run_pre_hooks
from ..tools import contract
from ..tools.base import Tool, ToolContext, ToolError, ToolResult

if TYPE_CHECKING:
    from .plan import TurnSetup
    from .session import Session


class StopTurn(Exception):
    """End the turn now with *status*; *text* tells the user why."""

    def __init__(self, status: str, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


def canonical(args: dict[str, Any]) -> str:
    """The arguments as one canonical JSON text: same values, same text."""
    return json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def idempotency_key(session_id: str, tool: str, args: dict[str, Any]) -> str:
    """Bound to the step, not the attempt: same session, tool and arguments give the same key."""
    digest = hashlib.sha256(f"{session_id}\0{tool}\0{canonical(args)}".encode()).hexdigest()
    return f"mm-{digest[:32]}"


class CallRunner:
    """Runs the tool calls of one turn; remembers invalid calls to count recoveries."""

    def __init__(self, session: Session, setup: TurnSetup) -> None:
        self.session = session
        self.setup = setup
        self.store = session.daemon.store
        self._invalid: dict[str, int] = {}  # tool → telemetry row of its last invalid call

    async def run(self, call: ToolCall) -> ToolResult:
        started = time.monotonic()
        tool = self.setup.registry.get(call.name)
        try:
            if tool is None:
                raise self._unknown_tool(call)
            args = contract.validate(
                tool.parameters,
                contract.parse_arguments(call.arguments, example=tool.example),
                example=tool.example,
            )
            echo = tool.echo(args)
        except ToolError as err:
            self._telemetry(call.name, err.code)
            self._announce(call, tool, f"{call.name}({call.arguments})")
            schema, example = (tool.parameters, tool.example) if tool else (None, None)
            return self._finish(
                call, contract.answer(call.name, call.arguments, err, schema=schema, example=example), started
            )
        self._telemetry(call.name, None)
        self._announce(call, tool, echo)
        # Hooks (mmd/policy/hooks.py): after the contract, before replay and consent.
        hooks, grace = self.setup.hooks, self.setup.limits.grace
        pre = await run_pre_hooks(hooks, tool=tool, call=call, args=args, session=self.session, grace=grace)
        if pre.answer is not None:
            return self._finish(call, pre.answer, started)
        echo = tool.echo(pre.args) if pre.updated else echo
        result = await self._execute(call, tool, pre.args, echo, pre.decision)
        if not (result.data or {}).get("denied"):
            result = await run_post_hooks(
                hooks, tool=tool, call=call, args=pre.args, result=result, session=self.session, grace=grace
            )
        return self._finish(call, pre.with_context(result), started)

    async def _execute(
        self, call: ToolCall, tool: Tool, args: dict[str, Any], echo: str, hook: str | None = None
    ) -> ToolResult:
        key = idempotency_key(self.session.id, tool.name, args) if tool.tier != "read" else None
        replays = key is not None and getattr(tool, "idempotent", False)
        if replays and (stored := self.store.idempotent_result(key)) is not None:
            return _replayed(stored)
        ctx = self._context(call, key)
        try:
            await self.session.consent.check(tool, args, echo, call, self.setup, ctx, hook=hook)
        except Denied as denied:
            result = ToolResult(
                ok=False, content=denied.message, data={"denied": True, "reason": denied.reason}
            )
            if denied.stop_turn:
                self._finish(call, result, time.monotonic())
                raise StopTurn("denied", denied.message) from None
            return result
        try:
            result = await tool.run(args, ctx)
        except ToolError as err:
            return contract.answer(
                call.name, call.arguments, err, schema=tool.parameters, example=tool.example
            )
        if result.ok and getattr(tool, "verify", None) is not None:
            result = await self._verify(call, tool, args, result)
        if replays and result.ok:
            self.store.save_idempotent(
                key,
                session_id=self.session.id,
                tool=tool.name,
                arguments=canonical(args),
                result=_stored(result),
            )
        return result

    def _context(self, call: ToolCall, key: str | None, suffix: str = "") -> ToolContext:
        return ToolContext(
            session_id=self.session.id,
            call_id=call.id + suffix,
            cwd=self.session.cwd,
            session_dir=self.session.dir,
            limits=self.setup.limits,
            emit=self.session.emit,
            extra={"skills": self.setup.skills},
            idempotency_key=key,
            pass_env=self.setup.pass_env,
        )

    async def _verify(
        self, call: ToolCall, tool: Tool, args: dict[str, Any], result: ToolResult
    ) -> ToolResult:
        """Run the write's named read; a failed verification is never reported as success."""
        from ..tools.declared import fill_verify_args

        spec = tool.verify  # type: ignore[attr-defined]
        reader = self.setup.registry.get(spec.tool)
        vcall = ToolCall(
            id=f"{call.id}-verify", name=spec.tool, arguments=json.dumps(fill_verify_args(spec, args))
        )
        if reader is None:
            vresult = ToolResult(
                ok=False, content=f"The verification tool {spec.tool} is not available in this turn."
            )
        else:
            try:
                vargs = contract.validate(
                    reader.parameters, json.loads(vcall.arguments), example=reader.example
                )
                self._announce(vcall, reader, reader.echo(vargs))
                vresult = await reader.run(vargs, self._context(vcall, None))
            except ToolError as err:
                vresult = contract.answer(vcall.name, vcall.arguments, err, schema=reader.parameters)
            self._finish(vcall, vresult, time.monotonic())
        verdict = "passed" if vresult.ok else "FAILED: the change is not confirmed"
        content = f"{result.content}\n\nVerification with {spec.tool}: {verdict}.\n{vresult.content}"
        data = {**(result.data or {}), "verified": vresult.ok, "verification": vresult.content}
        return ToolResult(ok=vresult.ok, content=content, data=data)

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


def _stored(result: ToolResult) -> dict[str, Any]:
    return {"ok": result.ok, "content": result.content, "data": result.data}


def _replayed(stored: dict[str, Any]) -> ToolResult:
    data = {**(stored.get("data") or {}), "replayed": True}
    content = (
        "This exact call already ran in this session; its first result is replayed, nothing ran again.\n"
        + stored["content"]
    )
    return ToolResult(ok=stored["ok"], content=content, data=data)
