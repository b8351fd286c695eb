"""The chat's slash commands. A line that starts with ``/`` is one of them and never reaches the model.

Each asks the daemon with the methods of docs/protocol.md: ``tools.list`` (tools and skills),
``session.list``/``session.show`` (sessions, and the usage their events record), ``session.compact``,
``session.diff`` and ``session.undo`` (what the session's steps changed in the working tree).
A command mm does not have is answered with the list of those it has.
"""

from __future__ import annotations

import difflib
import os
import time
from collections.abc import Callable
from typing import Any, Protocol

from mmd.rpc import RPCError

from .connection import shown_with_events
from .render import compacted, step_line, tool_table, undone_text

# (name, what it takes, what it does), in the order /help shows them.
COMMANDS = [
    ("/help", "", "this list, and the keys of the chat"),
    ("/model", "[NAME]", "the model; with NAME, use that model from the next message on"),
    ("/tools", "", "the tools the model is offered here, with their tiers"),
    ("/skills", "", "the skills the model may read here"),
    ("/clear", "", "start a new session (the last one is kept: /resume goes back)"),
    ("/resume", "[ID]", "this folder's sessions; with ID (a prefix will do), continue that one"),
    ("/compact", "", "summarise the session so far into one note, so the next turn starts small"),
    ("/diff", "[STEP]", "what this session's steps (or step STEP) changed in the files"),
    ("/undo", "[STEP] [--force]", "take back the last step (or steps STEP on); /undo again puts them back"),
    ("/usage", "", "model steps, tool calls and tokens of this session (also /cost)"),
    ("/exit", "", "quit (also /quit, or Ctrl-D)"),
]
ALIASES = {"/cost": "/usage", "/quit": "/exit"}
# The keys, as /help lists them.
KEYS = (
    "Enter sends. Alt-Enter, Ctrl-J, or \\ then Enter: a new line (a paste stays one message).\n"
    "Up/Down: earlier messages, also from earlier chats; Ctrl-R searches them. Tab: complete a command.\n"
    "Ctrl-C: cancel the running turn; at a consent question, deny that call; at an empty line\n"
    "twice in a row, quit. Ctrl-D: quit. Start a message with a space to send one that begins with /."
)
# Sessions /resume lists, newest first.
RESUME_LIST = 10


class Host(Protocol):
    """What a command may use of the chat (chat.Chat)."""

    opts: dict[str, Any]
    session_id: str | None

    def say(self, text: str) -> None: ...

    def call(self, method: str, params: dict[str, Any]) -> Any: ...


def run(chat: Host, line: str) -> bool:
    """Run the command on *line*; True when the chat should end.

    Errors: ``RPCError`` from the daemon propagates (the chat shows it and goes on).
    """
    name, _, arg = line.strip().partition(" ")
    name = ALIASES.get(name, name)
    if name == "/exit":
        return True
    handler = HANDLERS.get(name)
    if handler is None:
        chat.say(unknown(name))
    else:
        handler(chat, arg.strip())
    return False


def unknown(name: str) -> str:
    """The answer to a command mm does not have: the closest one, and the list."""
    names = [command for command, _, _ in COMMANDS] + list(ALIASES)
    close = difflib.get_close_matches(name, names, n=1)
    hint = f" — did you mean {close[0]}?" if close else ""
    return (
        f"unknown command {name}{hint} (nothing was sent to the model)\n"
        f"commands: {', '.join(command for command, _, _ in COMMANDS)}; /help says more"
    )


def help_(chat: Host, arg: str) -> None:
    width = max(len(f"{name} {takes}") for name, takes, _ in COMMANDS)
    rows = [f"  {f'{name} {takes}'.strip():<{width}}  {does}" for name, takes, does in COMMANDS]
    chat.say("\n".join(["commands:", *rows, "", KEYS]))


def model(chat: Host, arg: str) -> None:
    if arg:
        chat.opts["model"] = arg
        chat.say(f"model: {arg} from your next message on (an unknown name is reported then)")
        return
    if chat.opts.get("model"):
        chat.say(f"model: {chat.opts['model']} (chosen in this chat; /model NAME changes it)")
    elif chat.session_id:
        row = chat.call("session.show", {"session_id": chat.session_id})["session"]
        chat.say(f"model: {row['model']} (this session's; /model NAME changes it)")
    else:
        chat.say(
            "model: the default — --model, else the agent file's model:, else config.yaml's "
            "default_model (/model NAME changes it)"
        )


def _listing(chat: Host) -> dict[str, Any]:
    params: dict[str, Any] = {"cwd": os.getcwd()}
    if chat.opts.get("agent"):
        params["agent"] = os.path.abspath(chat.opts["agent"])
    return chat.call("tools.list", params)


def tools(chat: Host, arg: str) -> None:
    listed = _listing(chat)
    lines = [f"warning: {w}" for w in listed["warnings"]] + tool_table(listed["tools"], cut=80)
    chat.say("\n".join(lines) or "no tools here")


def skills(chat: Host, arg: str) -> None:
    names = _listing(chat)["skills"]
    if not names:
        chat.say(
            "no skills here: mm looks in ./.mm/skills, ~/.config/mm/skills and the agent file's skills: folders"
        )
        return
    chat.say(
        f"skills ({len(names)}): {', '.join(names)}\n"
        "(names only: the daemon lists no descriptions; the model reads a skill with read_skill)"
    )


def clear(chat: Host, arg: str) -> None:
    chat.session_id = None
    chat.opts["continue_"] = False
    chat.say("new session: your next message starts it (the last one is kept: /resume lists it)")


def resume(chat: Host, arg: str) -> None:
    if not arg:
        rows = chat.call("session.list", {"cwd": os.getcwd(), "limit": RESUME_LIST})["sessions"]
        if not rows:
            chat.say("no sessions in this folder yet")
            return
        lines = [_session_line(row, current=row["id"] == chat.session_id) for row in rows]
        chat.say("\n".join([*lines, "/resume ID continues one (a unique prefix is enough)"]))
        return
    row = chat.call("session.show", {"session_id": arg})["session"]
    chat.session_id = row["id"]
    chat.opts["continue_"] = False
    chat.say(f"resumed {_session_line(row, current=False).strip()}")


def _session_line(row: dict[str, Any], *, current: bool) -> str:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(row["updated"]))
    turns = f"{row['turns']} turn{'s' if row['turns'] != 1 else ''}"
    mark = "*" if current else " "
    return f"{mark} {row['id']}  {when}  {row['title'] or '(untitled)'}  ({turns}, {row['model']})"


def compact(chat: Host, arg: str) -> None:
    if chat.session_id is None:
        chat.say("nothing to compact yet: this chat has no session")
        return
    model_ = chat.opts.get("model")
    done = chat.call(
        "session.compact", {"session_id": chat.session_id, **({"model": model_} if model_ else {})}
    )
    chat.say(f"compacted: {compacted(done)}")


def _step(chat: Host, arg: str) -> int | None:
    """STEP of /diff and /undo: None when not given; an error said when not a number."""
    if not arg:
        return None
    if not arg.isdigit() or int(arg) < 1:
        raise RPCError("invalid_params", f"{arg} is not a step number: /diff lists the steps (1, 2, …)")
    return int(arg)


def diff(chat: Host, arg: str) -> None:
    if chat.session_id is None:
        chat.say("no session yet: nothing has changed any file")
        return
    step = _step(chat, arg)
    shown = chat.call("session.diff", {"session_id": chat.session_id, **({"step": step} if step else {})})
    steps = [step_line(row) for row in shown["steps"] if step is None or row["step"] == step]
    cut = ["(cut at 4 MiB: mm diff > file.patch has it too)"] if shown["truncated"] else []
    chat.say("\n".join([*steps, "", shown["diff"].rstrip() or "(no difference)", *cut]))


def undo(chat: Host, arg: str) -> None:
    if chat.session_id is None:
        chat.say("no session yet: there is nothing to undo")
        return
    words = arg.split()
    force = "--force" in words
    step = _step(chat, " ".join(w for w in words if w != "--force"))
    params = {"session_id": chat.session_id, "force": force, **({"to_step": step} if step else {})}
    chat.say(undone_text(chat.call("session.undo", params), again="/undo"))


def usage(chat: Host, arg: str) -> None:
    if chat.session_id is None:
        chat.say("no session yet: usage counts start with your first message")
        return
    events = shown_with_events(chat.call, chat.session_id)["events"]
    chat.say(usage_report(chat.session_id, events))


def usage_report(session_id: str, events: list[dict[str, Any]]) -> str:
    """Turns, model steps, tool calls and tokens, from a session's stored events."""
    steps = [e["data"] for e in events if e["kind"] == "assistant"]
    tokens_in = sum((s.get("usage") or {}).get("input") or 0 for s in steps)
    tokens_out = sum((s.get("usage") or {}).get("output") or 0 for s in steps)
    cached = sum((s.get("timings") or {}).get("cached_tokens") or 0 for s in steps)
    turns = sum(e["kind"] == "turn_ended" for e in events)
    calls = sum(e["kind"] == "tool_call" for e in events)
    cache = f" ({cached:,} of the input from the server's prompt cache)" if cached else ""
    return (
        f"session {session_id}: {turns} turn{'s' if turns != 1 else ''}, {len(steps)} model step{'s' if len(steps) != 1 else ''}, "
        f"{calls} tool call{'s' if calls != 1 else ''}\n"
        f"tokens: {tokens_in:,} in{cache}, {tokens_out:,} out, as the model server counted them "
        "(mm puts no price on them)"
    )


HANDLERS: dict[str, Callable[[Host, str], None]] = {
    "/help": help_,
    "/model": model,
    "/tools": tools,
    "/skills": skills,
    "/clear": clear,
    "/resume": resume,
    "/compact": compact,
    "/diff": diff,
    "/undo": undo,
    "/usage": usage,
}
