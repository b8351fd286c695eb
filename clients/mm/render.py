"""Showing a turn's events: answer text on stdout, tool echo on stderr.

The echo is dim on a terminal and plain otherwise, so piping ``mm -p`` into
another program gets only the answer. ``text`` and ``events`` (mm's own
event lines) are here; Claude Code's ``json`` and ``stream-json`` are in
stream_json.py.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

from . import style, terminal
from .spinner import Spinner

# Exit codes of ``mm``; docs/cli.md lists them.
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_DENIED = 3  # a tool call needed consent and it was refused (or no one could answer)
EXIT_LOOP = 4  # the loop detector stopped the turn: the model kept repeating a call
EXIT_INTERRUPTED = 130  # Ctrl-C

STATUS_EXIT = {"ok": EXIT_OK, "denied": EXIT_DENIED, "loop": EXIT_LOOP, "cancelled": EXIT_INTERRUPTED}

DIM, RED, RESET = "\033[2m", "\033[31m", "\033[0m"


class View:
    """Renders events as ``text`` (the answer) or ``events`` (every event as a JSON line).

    With ``hold`` (``mm -p``), a model step's text is held until the step
    ends: the text of a step that called tools is narration and goes to
    stderr, and stdout gets the final answer alone, once, at the end. Without
    it (the chat) the answer streams to stdout as the model writes it.
    """

    def __init__(
        self, fmt: str = "text", out: TextIO | None = None, err: TextIO | None = None, *, hold: bool = False
    ) -> None:
        self.fmt = fmt
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.color = style.enabled(self.err)
        # On a terminal, what the model, a command or a server wrote is shown inert (terminal.py).
        self._inert_out = terminal.is_terminal(self.out)
        self._inert_err = terminal.is_terminal(self.err)
        self.hold = hold and fmt == "text"
        self.spinner = Spinner(self.err, color=self.color)  # while the model works; stopped before output
        self._open_line = False  # the answer text has no final newline yet
        self._echo_open = False  # tool output left without a final newline
        self.result: dict[str, Any] = {"tool_calls": [], "text": ""}  # "text": the answer, once finished
        # The words streamed since the last step that called tools, as they came: joined when read, not
        # copied whole at every delta (a long answer in small deltas cost the client minutes of CPU).
        self._words: list[str] = []
        self._shown = ""  # the last tool result shown, so that a turn ending with it does not repeat it
        self._changed = ""  # the files the running call changed (files_changed), shown after its result

    # -- helpers ---------------------------------------------------------------

    def _echo(self, text: str, style: str = DIM, *, code: bool = False) -> None:
        """*text* (which mm may not have written) on stderr; *code*: a command or a name to decide on."""
        if self._inert_err:
            text = terminal.code(text) if code else terminal.text(text)
        if self.color:
            text = f"{style}{text}{RESET}"
        self.err.write(text)
        self.err.flush()

    def note(self, text: str, *, code: bool = False) -> None:
        """A line for the person, on stderr (*code*: it shows a command or names to decide on)."""
        self._end_answer_line()
        self._echo(text + "\n", code=code)

    def error(self, text: str) -> None:
        self._end_answer_line()
        self._echo(f"mm: {text}\n", RED)

    def _end_answer_line(self) -> None:
        self.spinner.stop()
        if self._open_line:
            self.out.write("\n")
            self.out.flush()
            self._open_line = False

    def _said(self) -> str:
        """The words streamed since the last step that called tools."""
        if len(self._words) > 1:
            self._words = ["".join(self._words)]
        return self._words[0] if self._words else ""

    # -- events ------------------------------------------------------------------

    def failed(self, message: str, session_id: str | None = None) -> None:
        """The turn could not start: the daemon unreachable, a bad agent file, an unknown model."""
        self.error(message)

    def lost(self, message: str) -> None:
        """The turn's end will not be seen (the daemon went away, a second Ctrl-C)."""
        self.error(message)

    def event(self, ev: dict[str, Any]) -> None:
        self.spinner.stop()
        if self.fmt == "events":
            self.out.write(json.dumps(ev, default=str) + "\n")
            self.out.flush()
        handler = getattr(self, "_on_" + ev["kind"], None)
        if handler is not None:
            handler(ev["data"])
        self.spinner.after(ev, line_free=not (self._open_line or self._echo_open))

    def _write_out(self, text: str) -> None:
        self.out.write(terminal.text(text) if self._inert_out else text)

    def _on_text(self, data: dict[str, Any]) -> None:
        self._words.append(data["text"])
        if self.fmt == "text" and not self.hold:
            self._write_out(data["text"])
            self.out.flush()
            self._open_line = not data["text"].endswith("\n")

    def _on_assistant(self, data: dict[str, Any]) -> None:
        # A step that called tools may have said something first; keep only the final answer.
        if data["tool_calls"]:
            if self.hold and self._said().strip():
                self._echo(self._said().strip() + "\n")  # narration: for the person, not the pipe
            self._words = []

    def _on_tool_call(self, data: dict[str, Any]) -> None:
        self.result["tool_calls"].append({"name": data["name"], "arguments": data["arguments"]})
        if self.fmt == "text":
            self._end_answer_line()
            self._echo(f"● {data['echo']}\n", code=True)

    def _on_tool_output(self, data: dict[str, Any]) -> None:
        if self.fmt == "text":
            self._echo(data["text"])
            self._echo_open = not data["text"].endswith("\n")

    def _on_tool_result(self, data: dict[str, Any]) -> None:
        if self.fmt != "text":
            return
        if self._echo_open:
            self._echo("\n")
            self._echo_open = False
        self._echo(f"  {summary(data)}\n", DIM if data["ok"] else RED)
        if self._changed:
            self._echo(self._changed, DIM)
            self._changed = ""
        self._shown = data["content"].strip()

    def _on_files_changed(self, data: dict[str, Any]) -> None:
        if self.fmt == "text" and data["files"]:
            self._changed = f"  {changed_files(data)} (step {data['step']}: mm undo)\n"

    def _on_snapshot_skipped(self, data: dict[str, Any]) -> None:
        self.note(f"note: {data['message']}")

    def _on_unusable_answer(self, data: dict[str, Any]) -> None:
        # The final reply was no answer (empty, braces, a call as text): the turn's answer comes next.
        if self.hold and self._said().strip():
            self._echo(self._said().strip() + "\n")  # held: shown as written, to the person
        self._words = []
        if self.fmt == "text" and data.get("action") == "ask_again":
            self.note(
                f"  (the model's reply was not an answer: {data['reason']}; asking it for one in words)"
            )
        elif self.fmt == "text" and data.get("action") == "ask_again_with_tools":
            self.note("  (the model's reply was empty; asking it again)")
        elif self.fmt == "text" and data.get("action") == "ask_for_call":
            self.note(
                f"  (the model said it called {data.get('tool')}, but no tool ran; asking it to make the call)"
            )

    def _on_model_retry(self, data: dict[str, Any]) -> None:
        self.note(f"model: {data['reason']}; retrying in {data['wait']:.1f} s (attempt {data['attempt']})")

    def _on_warning(self, data: dict[str, Any]) -> None:
        self.note(f"warning: {data['message']}")

    def _on_recovered_tool_call(self, data: dict[str, Any]) -> None:
        if self.fmt == "text":
            self.note(f"  (the model wrote a {data['name']} call as text; running it as a call)")

    def _on_loop_detected(self, data: dict[str, Any]) -> None:
        if self.fmt == "text" and data.get("action") == "nudge":
            self.note(f"  loop: {data['kind']}; the model was told to stop repeating")

    def _on_skill_chosen(self, data: dict[str, Any]) -> None:
        # The skill mm chose for a small local model this turn (mmd/turn/skillpick.py); none is not news.
        if self.fmt == "text" and data.get("skill"):
            self.note(
                f"  skill: {data['skill']} (chosen for this request; its instructions are in the context)"
            )

    def _on_phase_changed(self, data: dict[str, Any]) -> None:
        if self.fmt == "text":
            self.note(f"  phase: {data['from']} → {data['to']}")

    def _on_context_stubbed(self, data: dict[str, Any]) -> None:
        if self.fmt == "text":
            n = len(data["stubbed"])
            self.note(
                f"  context: {n} old tool output{'s' if n != 1 else ''} replaced by stubs to fit the "
                f"{data['window']:,}-token window (about {data['before']:,} → {data['after']:,} tokens)"
            )

    def _on_context_compacted(self, data: dict[str, Any]) -> None:
        if self.fmt == "text" and data["by"] == "auto":
            self.note(f"  context: {compacted(data)}")

    def _on_hook(self, data: dict[str, Any]) -> None:
        # A hook that let the call through says nothing; one that changed or stopped it is shown.
        decision = data.get("decision")
        if self.fmt == "text" and decision not in (None, "", "allow", "continue"):
            detail = data.get("reason") or data.get("error")
            why = f": {detail}" if detail else ""
            self.note(f"  hook {data['hook']} ({data['event']}): {decision}{why}")

    def _on_dry_run(self, data: dict[str, Any]) -> None:
        self.note("  dry run:")
        self._echo(data["content"].rstrip() + "\n")

    def answer(self, ended: dict[str, Any]) -> str | None:
        """The turn's answer: the model's last words, or what mm wrote in their place; None unless ok."""
        if ended["status"] != "ok":
            return None
        return ended.get("text") or self._said()

    def finish(self, session_id: str, ended: dict[str, Any]) -> int:
        """Print the end of a turn and return the exit code."""
        status = ended["status"]
        answer = self.answer(ended)
        if self.fmt == "text" and answer and (self.hold or answer.strip() != self._said().strip()):
            # Held, or an answer mm wrote or took from a result (not streamed as the model's text).
            self._end_answer_line()
            self._write_out(answer.rstrip("\n") + "\n")
        elif self.hold and self._said().strip():
            # The words of a turn that gave no answer: for the person, not the pipe.
            self._echo(self._said().strip() + "\n")
        self.result["text"] = answer or ""
        self._words = [answer] if answer else []
        self._end_answer_line()
        if ended.get("error"):
            self.error(ended["error"])
        elif status != "ok" and ended.get("text") and ended["text"].strip() != self._shown:
            self.note(ended["text"])
        return STATUS_EXIT.get(status, EXIT_ERROR)


def compacted(data: dict[str, Any]) -> str:
    """One line for a compaction (a ``context_compacted`` event, or ``session.compact``'s result)."""
    if not data["summarised"]:
        return "nothing to summarise"
    by = "the model" if data["summary"] == "model" else "mm (the model gave none)"
    return (
        f"{data['summarised']} earlier messages summarised by {by} to fit the {data['window']:,}-token window "
        f"(about {data['before']:,} → {data['after']:,} tokens)"
    )


# How each change of a file is marked, as git status marks them.
CHANGE_MARKS = {"added": "A", "modified": "M", "deleted": "D", "type": "T"}


def changed_files(data: dict[str, Any], most: int = 8) -> str:
    """``changed: M a.txt, D b.txt`` from a ``files_changed`` event (or an undo's result)."""
    files = data["files"]
    names = [f"{CHANGE_MARKS.get(f['change'], '?')} {_one_line(f['path'])}" for f in files[:most]]
    rest = data.get("count", len(files)) - len(names)
    return "changed: " + ", ".join(names) + (f" and {rest} more" if rest > 0 else "")


def step_line(step: dict[str, Any]) -> str:
    """One step of ``session.diff``'s list: number, time, what ran, what it changed."""
    when = time.strftime("%H:%M:%S", time.localtime(step["ts"]))
    what = step["echo"] if step["tool"] == "undo" else f"{step['tool']}: {step['echo']}"
    files = changed_files({"files": step["files"]}) if step["files"] else "changed nothing"
    return f"step {step['step']:>3}  {when}  {what[:80]}\n           {files}"


def undone_text(done: dict[str, Any], again: str = "mm undo") -> str:
    """What an undo did, and how to take it back (*again*: the command that does)."""
    if not done["files"]:
        return f"nothing to restore: the files are already as they were before step {done['undone']}"
    return (
        f"restored to before step {done['undone']}: {changed_files(done).removeprefix('changed: ')}\n"
        f"(this undo is step {done['step']}: {again} puts the files back)"
    )


def _one_line(path: str) -> str:
    """A file name as one line: quoted when it holds a line break or another control character."""
    return repr(path) if any(ord(c) < 32 for c in path) else path


def summary(result: dict[str, Any]) -> str:
    """One line for a finished tool call: how a process ended, or what a failure says."""
    lines = result["content"].rstrip().splitlines() or [""]
    if "exit_code" in (result.get("data") or {}):
        return ("✓ " if result["ok"] else "✗ ") + lines[-1][:200]  # "[exit code N]" and kin
    if result["ok"]:
        return f"✓ {len(lines)} line{'s' if len(lines) != 1 else ''}"
    if (result.get("data") or {}).get("denied"):
        return "✗ " + lines[0]  # who denied it and why: said once, whole
    return "✗ " + lines[0][:200]


def tool_table(tools: list[dict[str, Any]], cut: int | None = None) -> list[str]:
    """`tools.list`'s tools as lines, by source: name, tier, sandbox, the description's first sentence (cut short).

    The sandbox is the one the tool's processes run under; ``-`` for a tool that runs inside mm.
    """
    by_source: dict[str, list[dict[str, Any]]] = {}
    for tool in tools:
        by_source.setdefault(tool["source"], []).append(tool)
    lines = []
    for source, group in by_source.items():
        lines.append(f"{terminal.cell(source)}:")
        for tool in group:
            # The name and description may be an MCP server's or a project's: each a terminal.cell.
            first = terminal.cell(tool["description"].split(". ")[0].rstrip("."))
            box = tool.get("sandbox") or "-"
            lines.append(f"  {terminal.cell(tool['name']):<18} {tool['tier']:<12} {box:<10} {first[:cut]}")
    return lines
