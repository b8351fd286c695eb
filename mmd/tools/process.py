"""What bash, declared and MCP tools share: a child run for one call, its echo, what the model reads.

- :func:`run_process` runs an argv under the supervisor (mmd.procs): its own
  process group, a timeout, the output echoed to the user as ``tool_output``
  events and truncated for the model, the whole kept in the call's spill file.
- :func:`process_answer` is what the model reads of a finished process: its
  output, then how it ended.
- :func:`capped_text` cuts any long text a tool returns (an MCP answer) the
  same way, the whole written to the spill file; :func:`cut_text` and
  :func:`write_spill` are its two halves (the context budget cuts any tool's
  result with them, mmd/turn/context.py).
- :class:`EchoLimiter` caps the echo of one call's output, so a flood never
  fills the store.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from ..procs import OutputCapture, ProcResult, run_tool_process
from ..procs.spill import write_whole
from ..sandbox.explain import refusal_note
from .base import ToolContext, ToolResult

# Echoed bytes per tool call; the rest is in the spill file.
ECHO_LIMIT = 256 * 1024


class EchoLimiter:
    """``on_output`` callback that emits tool_output events up to ECHO_LIMIT."""

    def __init__(self, ctx: ToolContext, spill: Path, limit: int = ECHO_LIMIT) -> None:
        self.ctx = ctx
        self.spill = spill
        self.left = limit

    def __call__(self, stream: str, text: str) -> None:
        if self.left <= 0:
            return
        if len(text) >= self.left:
            # The spill is made when the output is first cut, long before: none now is none at all (a full disk).
            where = f"the whole output is in {self.spill}" if self.spill.exists() else "the rest is not kept"
            text = text[: self.left] + f"\n[echo stopped here; {where}]\n"
            self.left = 0
        else:
            self.left -= len(text)
        self.ctx.emit("tool_output", {"call_id": self.ctx.call_id, "stream": stream, "text": text})


async def run_process(
    argv: list[str],
    ctx: ToolContext,
    *,
    timeout: float,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> ProcResult:
    """Run *argv* for the call *ctx*: in *cwd* (default the session's), with *env* under the call's variables.

    Cancellation: the process group is stopped before Cancelled leaves. The session's folder is made
    only when the output is cut and spills (mmd/procs/spill.py).
    """
    spill = ctx.spill_path
    return await run_tool_process(
        argv,
        cwd=cwd or ctx.cwd,
        env={**(env or {}), **ctx.env()},
        spill_path=spill,
        on_output=EchoLimiter(ctx, spill),
        timeout=timeout,
        grace=ctx.limits.grace,
        max_bytes=ctx.limits.max_bytes,
        max_lines=ctx.limits.max_lines,
        pass_env=ctx.pass_env,
        sandbox=ctx.sandbox,
    )


def process_answer(result: ProcResult, ctx: ToolContext | None = None) -> ToolResult:
    """What the model reads of a finished process: its output, then how it ended.

    A failed process of a confined call whose output shows a refusal (EACCES,
    EXDEV...) gets a note saying the sandbox refused it and how a person allows
    it (mmd/sandbox/explain.py), and ``data.sandbox``. A confined call that
    changed git's own files gets a note naming what mm put back
    (mmd/sandbox/gitguard.py), ``data.git_put_back``, and a ``warning`` event
    for the person.
    """
    data: dict[str, Any] = {
        "exit_code": result.exit_code,
        "signal": result.signal,
        "timed_out": result.timed_out,
        "duration": round(result.duration, 6),  # µs: the bench subtracts it from a gap of about a ms
    }
    if result.spill_path:
        data["output_file"] = result.spill_path
    elif result.spill_error:
        data["output_not_kept"] = result.spill_error  # what was cut is gone: nothing may claim to hold it
    if result.spawn_error:
        data["error"] = result.spawn_error
        return ToolResult(ok=False, content=result.spawn_error, data=data)
    body = result.output if result.output.endswith("\n") or not result.output else result.output + "\n"
    ok = result.exit_code == 0 and not result.timed_out
    status = _status(result)
    box = ctx.sandbox if ctx is not None else None
    if box is not None and box.confined and not ok:
        found = refusal_note(result.output, box, str(ctx.cwd), ctx.agent_file) if ctx else None
        if found is not None:
            note, refused = found
            status = f"{status}\n{note}"
            data["sandbox"] = {"mode": box.label, "refused": refused}
    if result.git_put_back:
        status = f"{status}\n{git_note(result.git_put_back)}"
        data["git_put_back"] = list(result.git_put_back)
        if ctx is not None:
            ctx.emit("warning", {"message": git_note(result.git_put_back, to_person=True)})
    return ToolResult(ok=ok, content=f"{body}{status}", data=data)


# What a note names of the git files put back, at most.
_SHOWN_PUT_BACK = 5


def git_note(put_back: tuple[str, ...], *, to_person: bool = False) -> str:
    """What the model (or, *to_person*, the person) reads of git's files a confined call changed and mm
    put back: git would run them with the person's rights, outside the sandbox, and no diff shows them."""
    shown = "; ".join(put_back[:_SHOWN_PUT_BACK]) + (" …" if len(put_back) > _SHOWN_PUT_BACK else "")
    why = "git would run them with your rights, outside the sandbox, and no diff shows them"
    if to_person:
        return f"a sandboxed command changed git's own files, and mm put them back ({why}): {shown}"
    return (
        f"[mm: this command changed git's own files, which git runs with the user's rights outside the "
        f"sandbox; mm put them back: {shown}. Do not try again; if the repository needs it, tell the user "
        "what to run themselves.]"
    )


def _status(result: ProcResult) -> str:
    if result.timed_out:
        return f"[timed out after {result.duration:.0f} s; the process group was stopped]"
    if result.signal:
        return f"[killed by signal {signal.Signals(result.signal).name}]"
    return f"[exit code {result.exit_code}]"


def cut_text(text: str, *, max_bytes: int, max_lines: int, spill_name: str, lost: str | None = None) -> str:
    """*text* as bash's output is cut: head, a marker naming *spill_name* (which holds the whole), tail; or,
    with *lost*, a marker that says the whole was not kept, and why.

    Nothing is written or echoed; a text within both budgets comes back whole.
    """
    raw = text.encode("utf-8", "replace")
    # Within both budgets (lines as HeadTail counts them: an unterminated last one too): whole, as the capture
    # would find it, without making one (every call's result is looked at here: ~20 Python calls).
    lines = raw.count(b"\n") + (raw[-1:] not in (b"", b"\n"))
    if 1 <= max_bytes >= len(raw) and 1 <= max_lines >= lines:
        return text
    capture = OutputCapture(None, max_bytes=max_bytes, max_lines=max_lines)
    capture.feed("stdout", raw)
    capture.finish()
    return capture.render(spill_name, lost) if capture.truncated else text


def write_spill(path: Path, text: str) -> str | None:
    """Write *text* to the spill file *path* (mode 0600, as every spill file), its folder made; None once it
    is there whole, else why it is not (a full disk, or the disk's reserve: mmd/procs/spill.py)."""
    return write_whole(path, text.encode("utf-8", "replace"))


def capped_text(text: str, ctx: ToolContext) -> tuple[str, dict[str, Any]]:
    """What the model reads of *text*: bash's head/tail within the limits, the whole in the spill file.

    Also echoed to the user, as a child's output is. Returns the text and its data
    fields (``bytes``, ``truncated``, and ``output_file`` when cut).
    """
    spill = ctx.spill_path
    capture = OutputCapture(
        None,
        max_bytes=ctx.limits.max_bytes,
        max_lines=ctx.limits.max_lines,
        on_output=EchoLimiter(ctx, spill),
    )
    raw = text.encode("utf-8", "replace")
    capture.feed("stdout", raw)
    capture.finish()
    data: dict[str, Any] = {"bytes": capture.total_bytes, "truncated": capture.truncated}
    if not capture.truncated:
        return capture.render(None), data
    if (lost := write_spill(spill, text)) is not None:
        data["output_not_kept"] = lost
        return capture.render(None, lost), data
    data["output_file"] = str(spill)
    return capture.render(str(spill)), data
