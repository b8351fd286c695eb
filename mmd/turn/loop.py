"""The turn loop: model step → tool calls → results → model step, until the model answers.

A turn ends when the model answers without calling a tool, when a limit is
reached (``max_steps``), when the loop detector stops a repeated call, or when
a verdict ends it (:class:`StopTurn`). Calls the model wrote as text are
recovered for models that need it (mmd/models/recovery.py); with ``phases:``
only the current phase's tools are offered (mmd/turn/phases.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgspec

from ..contract import ToolResult, canonical
from ..models.base import Completion, Lead, Message, ModelError, ToolCall
from ..models.recovery import HeldText, recover_completion
from ..tools.base import Tool
from ..untrusted import MAX_ARGUMENTS_BYTES
from . import answers, context, hookpoints, phases, skillpick
from .calls import CallRunner, Conversation, StopTurn
from .loops import Key, LoopDetector, call_key, error_code, parsed_key
from .plan import TurnSetup

__all__ = ["StopTurn", "model_step", "run_steps"]


async def run_steps(session: Conversation, setup: TurnSetup) -> tuple[str, str]:
    """Run model steps until the model answers; returns (status, text).

    Errors: StopTurn (loop, max_steps, denied), ModelError.
    """
    runner = CallRunner(session, setup)
    phases.begin(session, setup)  # with phases: only the current phase's tools
    await skillpick.begin(session, setup)  # small local models: the skill chosen and given to them
    progress = Progress(detector=LoopDetector(setup.loop), request=runner.request)
    lead: Lead = "call" if setup.act_first else "free"
    stop_blocks = 0  # times a Stop hook made the model go on in this turn (stop_hook_active once any)

    def opening(completion: Completion) -> None:
        _open_first(runner, progress, completion)

    for _ in range(setup.max_steps):
        completion = await model_step(session, setup, lead=lead, then=opening)
        if not completion.tool_calls and (again := _retry_lead(session, setup, completion, progress)):
            completion = await model_step(session, setup, lead=again, then=opening)  # not against max_steps
        if not completion.tool_calls:
            status, text = await _final(session, setup, completion, progress)
            go_on = await hookpoints.stop_blocked(session, setup, text, stop_blocks)
            if go_on is None:
                return status, text
            stop_blocks += 1  # a Stop hook asks the model to go on: its reason is the next message
            session.add_message(Message(role="user", content=go_on))
            lead = "free"
            continue
        before = len(progress.ran)
        for call in completion.tool_calls:
            await _one_call(session, runner, progress, call)
        if completion.dropped_calls:  # calls left out of the step: the model is told once the rest ran
            session.add_message(Message(role="user", content=_dropped_note(completion.dropped_calls)))
        # Measured: after a call that worked, small models repeat it rather than answer. Their next step
        # must open with words; a call may still follow them.
        ran = progress.ran[before:]
        lead = _next_lead(setup, ran)
    raise StopTurn(
        "max_steps",
        f"Stopped after {setup.max_steps} model steps (max_steps). "
        "Continue with `mm --continue -p ...` or raise max_steps in the agent file.",
    )


class Progress(msgspec.Struct):
    """What a turn has done so far: the loop detector, and the calls that ran and succeeded."""

    detector: LoopDetector
    ran: list[tuple[str, ToolResult]] = msgspec.field(default_factory=list)
    # Successful calls since the last successful write, by key; a repeat is not run again.
    succeeded: dict[Key, ToolResult] = msgspec.field(default_factory=dict)
    ok_names: set[str] = msgspec.field(default_factory=set)  # tools that succeeded in this turn
    told: set[Key] = msgspec.field(default_factory=set)  # repeats answered "already succeeded"
    wrote: bool = False  # a write (not a read) succeeded in this turn
    acted: bool = False  # a declared or MCP tool succeeded in this turn
    # Calls that never ran and cannot be the action asked for: a value nobody gave (grounding), or arguments
    # the contract refused for a tool that already succeeded in this turn. A loop on one ends the turn ok.
    refused: set[Key] = msgspec.field(default_factory=set)
    retold: bool = False  # a reply that did nothing was answered and the step taken again (once a turn)
    opened: tuple[ToolCall, Key] | None = None  # the call _open_first checked and opened, with its key
    request: str = ""  # the user's message the turn answers

    def record(
        self, key: Key, name: str, tool: Tool | None, result: ToolResult, *, invalid: bool = False
    ) -> None:
        self.ran.append((name, result))
        if result.ok:
            self.ok_names.add(name)
            if tool is not None and tool.tier != "read":
                self.succeeded.clear()  # a write may change what a read returns
                self.wrote = True
            self.acted = self.acted or (tool is not None and tool.source != "builtin")
            self.succeeded[key] = result
        elif error_code(result.ok, result.data) == "ungrounded_value":
            self.refused.add(key)
        elif invalid and name in self.ok_names:  # a set: a look through every call ran was quadratic
            # The contract refused it, and the same tool already succeeded in this turn: seen, the 0.5B
            # sent `pkgtest` its own past call and a made-up tool_response as arguments after `pkgtest
            # greet` ran, until stopped (status loop although the action had run).
            self.refused.add(key)

    def repeats(self, key: Key, tool: Tool | None, args: dict[str, Any] | None = None) -> Key | None:
        """The call that already succeeded which *key* repeats: the same call, or — measured with the 0.5B
        on MCP tools, which then called ``backup {"database": "orders", "file": "backups/orders-0412.dump",
        "size": "2.3 GB"}`` for up to 139 s — the same call, every argument as it was, with fields of its
        result added (fields the tool does not have, whose names or values its result holds). A call that
        leaves an argument out or changes one is not a repeat: the contract answers its unknown fields
        (``echo {"text": "hi"}`` after ``echo {"message": "hi"}`` is a wrong name, not an echo). None: not
        a repeat. *args*: the arguments *key* was made from, when the caller has them parsed (else its text
        is parsed again)."""
        if key in self.succeeded:
            return key
        name, text = key
        props = tool.parameters.get("properties") if tool is not None else None
        if not isinstance(props, dict):
            return None
        args = args if isinstance(args, dict) else _object(text)
        if args is None:
            return None
        added = {k: v for k, v in args.items() if k not in props}
        given = {k: v for k, v in args.items() if k in props}
        if not added:
            return None
        # The call it would repeat has the given arguments alone, and keys are canonical: one look-up (a look
        # through every call that succeeded was quadratic in a turn's calls).
        done_key = (name, canonical(given))
        result = self.succeeded.get(done_key)
        if result is None:
            return None
        content = result.content.lower()
        if any(k.lower() in content or _scalar(v).lower() in content for k, v in added.items()):
            return done_key
        return None


def _object(text: str) -> dict[str, Any] | None:
    try:  # the canonical text of arguments that parsed (loops.call_key), else the raw text: any depth
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _scalar(value: Any) -> str:
    """A value as a result's text would show it ("" for a structure: it matches only through its key)."""
    if isinstance(value, str):
        return value.strip() or "\0"
    return "\0" if isinstance(value, dict | list) else json.dumps(value)


def _open_first(runner: CallRunner, progress: Progress, completion: Completion) -> None:
    """The step's first call's contract stage, in the step's own commit (model_step's *then*): its record
    and tool_call event join the assistant message's, one commit and one write to each client instead of
    two a call. Only where :func:`_one_call` would go straight to it: the call repeats none that succeeded
    and continues no loop (both checks only read: nothing can change their answer before _one_call takes the call)."""
    if not completion.tool_calls:
        return
    call = completion.tool_calls[0]
    key, parsed = parsed_key(call.name, call.arguments)
    if (
        progress.repeats(key, runner.setup.registry.get(call.name), parsed) is None
        and progress.detector.before(key) is None
    ):
        runner.open(call, parsed)
        progress.opened = (call, key)


async def _one_call(session: Conversation, runner: CallRunner, progress: Progress, call: ToolCall) -> None:
    """Run one call and add its result to the conversation, with a loop nudge when one is seen."""
    opened, progress.opened = progress.opened, None
    checked = opened is not None and opened[0] is call  # by _open_first, in the step's commit
    key = opened[1] if opened is not None and checked else call_key(call.name, call.arguments)
    try:
        if not checked and (done := progress.repeats(key, runner.setup.registry.get(call.name))) is not None:
            content = _repeat_after_success(session, progress, done, call, echoed=done != key)
            session.add_message(Message(role="tool", tool_call_id=call.id, name=call.name, content=content))
        else:
            await _run(session, runner, progress, key, call, checked=checked)
    except StopTurn as stop:  # the call's own answer, before the turn ends
        session.add_message(Message(role="tool", tool_call_id=call.id, name=call.name, content=stop.text))
        raise


async def _run(
    session: Conversation, runner: CallRunner, progress: Progress, key: Key, call: ToolCall, *, checked: bool
) -> None:
    # The call's result event, a loop's nudge and the call's message are committed together.
    if not checked and (loop := progress.detector.before(key)) is not None:  # told once already: stop
        session.emit("loop_detected", loop.data("stop"))
        # The action may be done: a write succeeded, or a declared or MCP tool did and the call repeated
        # never ran and cannot be what was asked for (Progress.refused; contrib/eval: `pkgtest greet` ran,
        # then the 0.5B sent a refused `release 1.4.2 stable` until stopped, status `loop`).
        done = answers.summary(progress.ran)
        if done is not None and (progress.wrote or (progress.acted and key in progress.refused)):
            raise StopTurn("ok", done)
        raise StopTurn("loop", loop.message + answers.last_failure(progress.ran))
    done = await runner.run(call)
    result, tool = done.result, runner.setup.registry.get(call.name)
    progress.record(key, call.name, tool, result, invalid=call.id in runner.invalid)
    loop = progress.detector.after(key, error_code(result.ok, result.data))
    with session.together():
        runner.publish(done)
        content = result.content
        if loop is not None:
            session.emit("loop_detected", loop.data("nudge"))
            content = f"{result.content}\n\n{loop.message}"  # read right after the call
        session.add_message(Message(role="tool", tool_call_id=call.id, name=call.name, content=content))


def _retry_lead(
    session: Conversation, setup: TurnSetup, completion: Completion, progress: Progress
) -> Lead | None:
    """How the step after a reply that did nothing opens, once mm has told the model why (once a turn,
    and only while nothing has run in it); None: the reply stands as the turn's answer (or is judged by
    _final). Two such replies, both seen with the 0.5B in the long-session test after a summary:

    - it says a tool was called (answers.claimed_call): "I called the bash tool with the command …" and
      no call. It is told nothing ran, and the next step must be the call;
    - it is empty. Asked for words without tools, it then wrote "I called the bash tool …" or "I'm sorry,
      but I can't assist with that.", which later turns copied. It is told so, and the next step is free:
      the request may need a tool, or only words.
    """
    if progress.ran or progress.retold:
        return None
    if (tool := _claimed(session, setup, progress, completion.text)) is not None:
        reason, action, lead = answers.CLAIMED, "ask_for_call", "call"
        told = f"You wrote that you called {tool}, but {answers.NOT_CALLED}"
    elif not completion.text.strip() and completion.finish_reason != "echo":
        reason, action, lead, told = "empty", "ask_again_with_tools", "free", answers.EMPTY_REPLY
    else:
        return None
    progress.retold = True
    data = {"text": completion.text, "reason": reason, "action": action}
    session.emit("unusable_answer", {**data, "tool": tool} if tool else data)
    session.add_message(Message(role="user", content=told))
    return lead


def _claimed(session: Conversation, setup: TurnSetup, progress: Progress, text: str) -> str | None:
    """The tool *text* says was called (answers.claimed_call) though nothing ran in this turn: one the
    user's request names, or one never called in the conversation. Otherwise the reply may be telling what
    an earlier turn's call did ("I used grep to find it", asked how a file was found): it stands."""
    if progress.ran:
        return None
    tool = answers.claimed_call(text, setup.registry.names())
    if tool is None or tool.lower() in progress.request.lower():
        return tool
    called = any(c.name == tool for m in session.messages for c in m.tool_calls)
    return None if called else tool


def _next_lead(setup: TurnSetup, ran: list[tuple[str, ToolResult]]) -> Lead:
    """How the step after calls that ran opens (for the models mm constrains; others are free)."""
    if not setup.words_after_success or not all(r.ok for _, r in ran):  # repeats only: all ok too
        return "free"
    # Reading a skill is not the job done: the step after it acts, as after a skill chosen with confidence
    # (skillpick.py), when the skill names commands. Words first there made the 0.5B describe the skill or
    # make the result up ("the billing service is running") in 5 of 5 runs that had read the right skill.
    if all(name == skillpick.READ_SKILL for name, _ in ran):
        commands = setup.skill_commands
        return "call" if commands is not None and commands.templates else "free"
    return "words"


def _repeat_after_success(
    session: Conversation, progress: Progress, key: Key, call: ToolCall, *, echoed: bool = False
) -> str:
    """A call that already succeeded is not run again: answered once, then the turn ends as done."""
    first = progress.succeeded[key]
    data = {
        "action": "stop" if key in progress.told else "nudge",
        "kind": "after_success",
        "calls": [{"name": key[0], "arguments": key[1]}],
    }
    session.emit("loop_detected", data)
    if key in progress.told:
        raise StopTurn("ok", f"{call.name} succeeded:\n{first.content}")
    progress.told.add(key)
    what = (
        f"this {call.name} call already succeeded in this turn, and the fields you added are from its "
        "result, not parameters"
        if echoed
        else f"this exact {call.name} call already succeeded in this turn"
    )
    return f"Not run again: {what} (its result is above). {answers.ANSWER_NOW}"


async def _final(
    session: Conversation, setup: TurnSetup, completion: Completion, progress: Progress
) -> tuple[str, str]:
    """The turn's answer: the model's text, or — when that is no answer — a sentence asked for or written."""
    text = completion.text
    reason = _unusable(session, setup, completion, progress)
    if reason is None:
        return "ok", text
    session.emit("unusable_answer", {"text": text, "reason": reason, "action": "ask_again"})
    retry = await _ask_for_words(session, setup, nothing_ran=not progress.ran)
    still = _unusable(session, setup, retry, progress)
    if still is None:
        session.add_message(Message(role="assistant", content=retry.text))
        session.emit("text", {"text": retry.text})
        return "ok", retry.text
    written = answers.summary(progress.ran)
    session.emit(
        "unusable_answer",
        {
            "text": retry.text,
            "reason": still,
            "action": "summarised" if written else "none",
        },
    )
    if written is None:
        raise StopTurn(
            "no_answer",
            "The model gave no answer in words, and no call of this turn succeeded. "
            "Ask again more plainly, or try a larger model.",
        )
    return "ok", written


def _unusable(
    session: Conversation, setup: TurnSetup, completion: Completion, progress: Progress
) -> str | None:
    """Why a step's reply is no answer (answers.unusable), that it was cut for repeating the prompt, or
    that it reports a call when nothing ran in the turn."""
    if completion.finish_reason == "echo":
        return answers.ECHO
    if _claimed(session, setup, progress, completion.text) is not None:
        return answers.CLAIMED
    return answers.unusable(completion.text)


async def model_step(
    session: Conversation,
    setup: TurnSetup,
    *,
    lead: Lead = "free",
    then: Callable[[Completion], None] | None = None,
) -> Completion:
    """Ask the model for its next step; its text streams out as ``text`` events. *then* is called with the
    step's completion within the commit of its message (it must not await)."""

    def on_retry(attempt: int, wait: float, reason: str) -> None:
        session.emit("model_retry", {"attempt": attempt, "wait": round(wait, 3), "reason": reason})

    def shown(text: str) -> None:
        session.emit("text", {"text": text})

    # Where calls may be written as text, a step that starts like one is held until it ends: the person
    # sees the call run, not its JSON streamed out ahead of the answer.
    held = HeldText(shown) if setup.recover_tool_calls else None
    await context.fit(session, setup)  # stubs or a summary when the window nears; never a request too big
    completion = await setup.provider.complete(
        setup.request_messages(session.messages),
        setup.registry.specs(),
        on_text=held.feed if held else shown,
        on_retry=on_retry,
        temperature=setup.temperature,
        lead=lead,
    )
    written, recovered = completion.text, False
    # A call written as text; not in a reply cut for repeating the prompt (the tools' JSON is in it).
    if not completion.tool_calls and setup.recover_tool_calls and completion.finish_reason != "echo":
        completion = recover_completion(completion, setup.recoverable_names())
        recovered = bool(completion.tool_calls)
        for c in completion.tool_calls:
            session.emit("recovered_tool_call", {"call_id": c.id, "name": c.name, "arguments": c.arguments})
    if held:
        held.finish(was_call=bool(completion.tool_calls))
    completion = _at_most_calls(completion)
    dropped = completion.dropped_calls
    kept = [_kept(c) for c in completion.tool_calls]
    # Calls read from the text: the text is kept as written (Message.said), unless an argument was too big
    # or the text is (it is stored beside the message's content and sent again with every later step).
    whole = recovered and kept == completion.tool_calls and len(written) <= 2 * KEPT_ARGUMENTS
    said = written if whole else None
    with session.together():  # the message and its event: one commit
        session.add_message(Message(role="assistant", content=completion.text, tool_calls=kept, said=said))
        session.emit("assistant", _assistant_record(completion))
        if dropped:
            session.emit("warning", {"message": _dropped_note(dropped)})
        if then is not None:
            then(completion)
    return completion


# Tool calls one model step may make; those past it are left out of the step and the model told. Each call
# is two events to every client and a message sent back with every later step: 10,000 calls of one answer
# (the 2 Mi-character bound of a step allows ~100,000) filled a client's queue, and the daemon dropped it.
MAX_STEP_CALLS = 64


def _at_most_calls(completion: Completion) -> Completion:
    """*completion* with its first MAX_STEP_CALLS calls, how many were left out in ``dropped_calls``."""
    dropped = len(completion.tool_calls) - MAX_STEP_CALLS
    if dropped <= 0:
        return completion
    calls = completion.tool_calls[:MAX_STEP_CALLS]
    return msgspec.structs.replace(completion, tool_calls=calls, dropped_calls=dropped)


def _dropped_note(dropped: int) -> str:
    return (
        f"[mm] That step made {MAX_STEP_CALLS + dropped} tool calls; a step may make {MAX_STEP_CALLS}. "
        f"The first {MAX_STEP_CALLS} ran; the other {dropped} were left out and did not run: make those "
        f"you still need in later steps, at most {MAX_STEP_CALLS} a step."
    )


# Bytes of one call's arguments the history keeps and sends back with every later request.
KEPT_ARGUMENTS = 16 * 1024


def _kept(call: ToolCall) -> ToolCall:
    """The call as the history keeps it: arguments past KEPT_ARGUMENTS are not sent back with every later
    request (one call of 100 KB of brackets, or of a megabyte the contract refuses, made every later
    request too big for the window); the call itself runs with all of them."""
    size = len(call.arguments.encode())
    if size <= KEPT_ARGUMENTS:
        return call
    over = f", over the limit of {MAX_ARGUMENTS_BYTES:,}" if size > MAX_ARGUMENTS_BYTES else ""
    marker = f"<{size:,} bytes of arguments{over}: not kept in the conversation>"
    return msgspec.structs.replace(call, arguments=marker)


async def _ask_for_words(session: Conversation, setup: TurnSetup, *, nothing_ran: bool) -> Completion:
    """One more step, without tools, asking for an answer in words; a failed request is no answer."""
    ask = answers.ASK_FOR_WORDS_NOTHING_RAN if nothing_ran else answers.ASK_FOR_WORDS
    try:
        await context.fit(session, setup)
        messages = [*setup.request_messages(session.messages), Message(role="user", content=ask)]
        return await setup.provider.complete(
            messages,
            [],
            on_text=lambda chunk: None,
            on_retry=lambda attempt, wait, why: None,
            temperature=setup.temperature,
        )
    except ModelError as exc:
        session.emit("warning", {"message": f"asking the model for an answer in words failed: {exc}"})
        return Completion(text="")


def _assistant_record(completion: Completion) -> dict[str, object]:
    record: dict[str, object] = {
        "text": completion.text,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in completion.tool_calls],
        "finish_reason": completion.finish_reason,
        "usage": {"input": completion.usage.input_tokens, "output": completion.usage.output_tokens},
    }
    if completion.timings is not None:  # llama-server's: where the step's time went
        record["timings"] = msgspec.to_builtins(completion.timings)
    return record
