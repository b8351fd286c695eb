"""The turn loop: model step → tool calls → results → model step, until the model answers.

A turn ends when the model answers without calling a tool, when a limit is
reached (``max_steps``), when the loop detector stops a repeated call, or when
a verdict ends it (:class:`StopTurn`). Calls the model wrote as text are
recovered for models that need it (mmd/models/recovery.py); with ``phases:``
only the current phase's tools are offered (mmd/turn/phases.py).
"""

from __future__ import annotations

from ..models.base import Completion, Message, ToolCall
from ..models.recovery import recover_completion
from . import phases
from .calls import CallRunner, Conversation, StopTurn
from .loops import LoopDetector, call_key, error_code
from .plan import TurnSetup

__all__ = ["StopTurn", "model_step", "run_steps"]


async def run_steps(session: Conversation, setup: TurnSetup) -> tuple[str, str]:
    """Run model steps until the model answers; returns (status, text).

    Errors: StopTurn (loop, max_steps, denied), ModelError.
    """
    runner = CallRunner(session, setup)
    phases.begin(session, setup)  # with phases: only the current phase's tools
    detector = LoopDetector(setup.loop)
    for _ in range(setup.max_steps):
        completion = await model_step(session, setup)
        if not completion.tool_calls:
            return "ok", completion.text
        for call in completion.tool_calls:
            await _one_call(session, runner, detector, call)
    raise StopTurn(
        "max_steps",
        f"Stopped after {setup.max_steps} model steps (max_steps). "
        "Continue with `mm --continue -p ...` or raise max_steps in the agent file.",
    )


async def _one_call(
    session: Conversation, runner: CallRunner, detector: LoopDetector, call: ToolCall
) -> None:
    """Run one call and add its result to the conversation, with a loop nudge when one is seen."""
    key = call_key(call.name, call.arguments)
    try:
        if (loop := detector.before(key)) is not None:  # told once already: stop, don't run
            session.emit("loop_detected", loop.data("stop"))
            raise StopTurn("loop", loop.message)
        result = await runner.run(call)
    except StopTurn as stop:  # the call's own answer, before the turn ends
        session.add_message(Message(role="tool", tool_call_id=call.id, name=call.name, content=stop.text))
        raise
    content = result.content
    if (loop := detector.after(key, error_code(result.ok, result.data))) is not None:
        session.emit("loop_detected", loop.data("nudge"))
        content = f"{content}\n\n{loop.message}"  # read right after the call
    session.add_message(Message(role="tool", tool_call_id=call.id, name=call.name, content=content))


async def model_step(session: Conversation, setup: TurnSetup) -> Completion:
    """Ask the model for its next step; its text streams out as ``text`` events."""

    def on_retry(attempt: int, wait: float, reason: str) -> None:
        session.emit("model_retry", {"attempt": attempt, "wait": round(wait, 3), "reason": reason})

    completion = await setup.provider.complete(
        setup.request_messages(session.messages),
        setup.registry.specs(),
        on_text=lambda text: session.emit("text", {"text": text}),
        on_retry=on_retry,
        temperature=setup.temperature,
    )
    if not completion.tool_calls and setup.recover_tool_calls:  # a call written as text
        completion = recover_completion(completion, setup.recoverable_names())
        for c in completion.tool_calls:
            session.emit("recovered_tool_call", {"call_id": c.id, "name": c.name, "arguments": c.arguments})
    session.add_message(Message(role="assistant", content=completion.text, tool_calls=completion.tool_calls))
    session.emit("assistant", _assistant_record(completion))
    return completion


def _assistant_record(completion: Completion) -> dict[str, object]:
    return {
        "text": completion.text,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in completion.tool_calls],
        "finish_reason": completion.finish_reason,
        "usage": {"input": completion.usage.input_tokens, "output": completion.usage.output_tokens},
    }
