"""A session: its conversation, its subscribers, and the turn loop.

A turn is model → tool calls → results → model, until the model answers
without calling a tool or a limit is reached. Every step is an event,
committed to the store before it is sent, so a client that reconnects (or a
daemon that was killed) loses nothing that was announced.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ..models.base import Completion, Message, ModelError
from ..models.recovery import recover_completion
from ..policy.consent import ConsentGate
from ..rpc.methods import ConsentAnswer, Event
from . import phases
from .calls import CallRunner, StopTurn
from .loops import LoopDetector, call_key, error_code
from .plan import TurnSetup

if TYPE_CHECKING:
    from ..server.connection import Connection
    from ..server.daemon import Daemon
    from ..store import SessionRow

log = logging.getLogger(__name__)


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
        # trio.current_time() when it last stopped being in use (a turn, a client), for unloading.
        self.idle_since = trio.current_time()
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
        if not self.subscribers:
            self.idle_since = trio.current_time()

    def idle_for(self, now: float) -> float:
        """Seconds this session has been unused (no turn, no client, no ask); 0 while in use.

        An idle session can be dropped from memory and loaded again from the
        store: everything it holds is there.
        """
        if self.running or self.subscribers or self.consent.pending:
            return 0.0
        return max(0.0, now - self.idle_since)

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
        for warning in setup.warnings:
            self.emit("warning", {"message": warning})
        if not self.row.title:
            self.daemon.store.set_title(self.id, prompt)
            self.row.title = self.daemon.store.get_session(self.id).title
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
            self.idle_since = trio.current_time()
            self.daemon.store.touch_session(self.id)
            self.emit("turn_ended", {"status": status, "text": text, "error": error})
            self.turn_done.set()

    def start(self) -> None:
        self.running = True
        self.turn_done = trio.Event()

    def abort_start(self) -> None:
        """The turn could not be set up: the session is free again."""
        self.running = False
        self.idle_since = trio.current_time()
        self.turn_done.set()

    async def _steps(self, setup: TurnSetup) -> tuple[str, str]:
        runner = CallRunner(self, setup)
        phases.begin(self, setup)  # with phases: only the current phase's tools
        detector = LoopDetector(setup.loop)
        for _ in range(setup.max_steps):
            completion = await self._model_step(setup)
            if not completion.tool_calls:
                return "ok", completion.text
            for call in completion.tool_calls:
                key = call_key(call.name, call.arguments)
                try:
                    if (loop := detector.before(key)) is not None:  # told once already: stop, don't run
                        self.emit("loop_detected", loop.data("stop"))
                        raise StopTurn("loop", loop.message)
                    result = await runner.run(call)
                except StopTurn as stop:  # the call's own answer, before the turn ends
                    self._add_message(
                        Message(role="tool", tool_call_id=call.id, name=call.name, content=stop.text)
                    )
                    raise
                content = result.content
                if (loop := detector.after(key, error_code(result.ok, result.data))) is not None:
                    self.emit("loop_detected", loop.data("nudge"))
                    content = f"{content}\n\n{loop.message}"  # read right after the call
                self._add_message(Message(role="tool", tool_call_id=call.id, name=call.name, content=content))
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
            temperature=setup.temperature,
        )
        if not completion.tool_calls and setup.recover_tool_calls:  # a call written as text
            completion = recover_completion(completion, setup.recoverable_names())
            for c in completion.tool_calls:
                self.emit("recovered_tool_call", {"call_id": c.id, "name": c.name, "arguments": c.arguments})
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

    def answer_consent(self, conn: Connection, answer: ConsentAnswer) -> None:
        self.consent.answer(conn, answer)
