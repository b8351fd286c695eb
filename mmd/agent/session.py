"""A session: its conversation, its subscribers, and the turn loop.

A turn is model → tool calls → results → model, until the model answers
without calling a tool or a limit is reached. Every step is an event,
committed to the store before it is sent, so a client that reconnects (or a
daemon that was killed) loses nothing that was announced.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ..models.base import Completion, Message, ModelError, ToolCall
from ..rpc.methods import ConsentAnswer, Event
from ..tools import contract
from ..tools.base import ToolContext, ToolError, ToolResult
from .consent import ConsentGate, Denied
from .setup import TurnSetup

if TYPE_CHECKING:
    from ..connection import Connection
    from ..daemon import Daemon
    from ..store import SessionRow

log = logging.getLogger(__name__)


class StopTurn(Exception):
    """End the turn now with *status*; *text* tells the user why."""

    def __init__(self, status: str, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


class Session:
    def __init__(self, daemon: Daemon, row: SessionRow) -> None:
        self.daemon = daemon
        self.row = row
        self.id = row.id
        self.cwd = Path(row.cwd)
        self.dir = daemon.state_dir / "sessions" / row.id
        # Attached clients, and whether each can answer consent asks.
        self.subscribers: dict[Connection, bool] = {}
        self.messages: list[Message] = daemon.store.messages(row.id)
        self.running = False
        self.turn_done = trio.Event()
        self.turn_done.set()
        self._scope: trio.CancelScope | None = None
        self.consent = ConsentGate(self)
        self._close_open_calls("the daemon stopped before this call finished")

    # -- events and subscribers ------------------------------------------

    def emit(self, kind: str, data: dict[str, Any]) -> Event:
        """Commit an event, then send it to every subscriber."""
        event = self.daemon.store.append_event(self.id, kind, data)
        for conn in list(self.subscribers):
            conn.notify("event", event)
        return event

    def subscribe(self, conn: Connection, *, interactive: bool) -> None:
        self.subscribers[conn] = interactive or self.subscribers.get(conn, False)
        conn.subscriptions[self.id] = self.subscribers[conn]

    def unsubscribe(self, conn: Connection) -> None:
        self.subscribers.pop(conn, None)
        conn.subscriptions.pop(self.id, None)
        self.consent.subscribers_changed()

    def can_ask(self) -> bool:
        return any(self.subscribers.values())

    # -- the conversation --------------------------------------------------

    def _add_message(self, msg: Message) -> None:
        self.daemon.store.append_message(self.id, msg)
        self.messages.append(msg)

    def _close_open_calls(self, reason: str) -> None:
        """Answer tool calls left without a result, so the history stays valid for the model."""
        for index in range(len(self.messages) - 1, -1, -1):
            msg = self.messages[index]
            if msg.role == "assistant":
                answered = {m.tool_call_id for m in self.messages[index + 1 :] if m.role == "tool"}
                for call in msg.tool_calls:
                    if call.id not in answered:
                        self._add_message(
                            Message(
                                role="tool",
                                tool_call_id=call.id,
                                name=call.name,
                                content=f"Not run: {reason}.",
                            )
                        )
                return
            if msg.role == "user":
                return

    # -- turns ---------------------------------------------------------------

    def cancel(self) -> bool:
        """Cancel the running turn; its process groups are stopped before it ends."""
        if self._scope is None:
            return False
        self._scope.cancel()
        return True

    async def run_turn(self, prompt: str, setup: TurnSetup) -> None:
        """Run one turn to its end; never raises except on daemon shutdown.

        Cancellation: tool processes are stopped, unanswered calls get a
        "cancelled" result, and a ``turn_ended`` event with status
        ``cancelled`` is committed before this returns.
        """
        status, text, error = "cancelled", "", None
        self.emit("turn_started", {"prompt": prompt, "model": setup.model_name, "cwd": str(self.cwd)})
        if not self.row.title:
            self.daemon.store.set_title(
                self.id, prompt.strip().splitlines()[0][:80] if prompt.strip() else ""
            )
            self.row.title = prompt
        self._add_message(Message(role="user", content=prompt))
        try:
            with trio.CancelScope() as self._scope:
                status, text = await self._steps(setup)
        except StopTurn as stop:
            status, text = stop.status, stop.text
        except ModelError as exc:
            status, error = "error", str(exc)
        except Exception as exc:
            log.exception("session %s: turn failed", self.id)
            status, error = "error", f"internal error: {exc!r}; details are in {self.daemon.log_path}"
        finally:
            self._scope = None
            self._close_open_calls(
                "the turn was cancelled" if status == "cancelled" else "the turn ended first"
            )
            self.running = False
            self.daemon.store.touch_session(self.id)
            self.emit("turn_ended", {"status": status, "text": text, "error": error})
            self.turn_done.set()

    def start(self) -> None:
        self.running = True
        self.turn_done = trio.Event()

    async def _steps(self, setup: TurnSetup) -> tuple[str, str]:
        for _ in range(setup.max_steps):
            completion = await self._model_step(setup)
            if not completion.tool_calls:
                return "ok", completion.text
            for call in completion.tool_calls:
                result = await self._run_call(call, setup)
                self._add_message(
                    Message(role="tool", tool_call_id=call.id, name=call.name, content=result.content)
                )
        raise StopTurn(
            "max_steps",
            f"Stopped after {setup.max_steps} model steps (max_steps). "
            "Continue with `mm --continue -p ...` or raise max_steps in the agent file.",
        )

    async def _model_step(self, setup: TurnSetup) -> Completion:
        def on_retry(attempt: int, wait: float, reason: str) -> None:
            self.emit("model_retry", {"attempt": attempt, "wait": round(wait, 3), "reason": reason})

        completion = await setup.provider.complete(
            setup.request_messages(self.messages),
            setup.registry.specs(),
            on_text=lambda text: self.emit("text", {"text": text}),
            on_retry=on_retry,
        )
        self._add_message(
            Message(role="assistant", content=completion.text, tool_calls=completion.tool_calls)
        )
        self.emit(
            "assistant",
            {
                "text": completion.text,
                "tool_calls": [
                    {"id": c.id, "name": c.name, "arguments": c.arguments} for c in completion.tool_calls
                ],
                "finish_reason": completion.finish_reason,
                "usage": {"input": completion.usage.input_tokens, "output": completion.usage.output_tokens},
            },
        )
        return completion

    async def _run_call(self, call: ToolCall, setup: TurnSetup) -> ToolResult:
        started = time.monotonic()
        tool = setup.registry.get(call.name)
        echo = f"{call.name}({call.arguments})"
        args: dict[str, Any] | None = None
        if tool is not None:
            try:
                args = contract.validate(
                    tool.parameters, contract.parse_arguments(call.arguments), example=tool.example
                )
                echo = tool.echo(args)
            except ToolError as err:
                result = contract.answer(
                    call.name, call.arguments, err, schema=tool.parameters, example=tool.example
                )
                return self._finish_call(call, None, echo, result, started)
        self.emit(
            "tool_call",
            {
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments,
                "echo": echo,
                "tier": tool.tier if tool else None,
            },
        )
        if tool is None or args is None:
            return self._finish_call(
                call, None, echo, self._unknown_tool(call, setup), started, announced=True
            )
        try:
            await self.consent.check(tool, args, echo, call, setup)
        except Denied as denied:
            result = ToolResult(
                ok=False, content=denied.message, data={"denied": True, "reason": denied.reason}
            )
            self._finish_call(call, tool.tier, echo, result, started, announced=True)
            if denied.stop_turn:
                raise StopTurn("denied", denied.message) from None
            return result
        ctx = ToolContext(
            session_id=self.id,
            call_id=call.id,
            cwd=self.cwd,
            session_dir=self.dir,
            limits=setup.limits,
            emit=self.emit,
            extra={"skills": setup.skills},
        )
        try:
            result = await tool.run(args, ctx)
        except ToolError as err:
            result = contract.answer(
                call.name, call.arguments, err, schema=tool.parameters, example=tool.example
            )
        return self._finish_call(call, tool.tier, echo, result, started, announced=True)

    def _unknown_tool(self, call: ToolCall, setup: TurnSetup) -> ToolResult:
        close = setup.registry.suggest(call.name)
        hint = f' Did you mean "{close}"?' if close else ""
        err = ToolError(
            "unknown_tool",
            f'There is no tool named "{call.name}".{hint} Available tools: {", ".join(setup.registry.names())}.',
            fix="Call one of the available tools by its exact name.",
        )
        return contract.answer(call.name, call.arguments, err, schema=None, example=None)

    def _finish_call(
        self,
        call: ToolCall,
        tier: str | None,
        echo: str,
        result: ToolResult,
        started: float,
        *,
        announced: bool = False,
    ) -> ToolResult:
        if not announced:
            self.emit(
                "tool_call",
                {
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": call.arguments,
                    "echo": echo,
                    "tier": tier,
                },
            )
        self.emit(
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

    def answer_consent(self, conn: Connection, answer: ConsentAnswer) -> None:
        self.consent.answer(conn, answer)
