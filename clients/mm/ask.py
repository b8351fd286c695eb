"""Consent questions asked in the terminal: how ``mm -p`` and the chat answer a ``consent_needed`` event.

The daemon asks; any attached client may answer (docs/protocol.md, ``consent.answer``). Here the
person picks one of the choices the ask offers; a reply that is none of them asks again.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from mmd.rpc import RPCError

from . import terminal
from .connection import Client
from .render import View

# How a consent_needed event is answered: (client, session_id, the event's data, the turn's view).
Answer = Callable[[Client, str, dict[str, Any], View], None]


class Answered(Exception):
    """Another client answered the ask while the question waited for the person: the reply is not needed.
    Its message says who, and what."""


# While a question waits: (the client whose socket to watch, the request id of the ask it is about).
Watch = tuple[Client, str]


def read_reply(question: str, default: str, watch: Watch | None = None) -> str:
    """One reply typed on the terminal (on stderr's side: stdout carries only answers); empty: *default*.

    Read by the line editor in raw mode, where Ctrl-C is a key, not the terminal's SIGINT: read by
    input(), a question ignored Ctrl-C in about 1 run in 4 on a loaded machine (the process took the
    signal and the read went on), so a person could not leave it. prompt_toolkit loads only here.

    With *watch*, what the daemon sends meanwhile is read (and queued for later) as it comes: a
    ``consent_answered`` of the ask ends the question (another client, the editor, answered it: the
    terminal asked on, and the person's answer came back ``unknown_request``).

    Errors: KeyboardInterrupt (Ctrl-C), EOFError (Ctrl-D at an empty line), Answered, DaemonError.
    """
    import asyncio  # as prompt_toolkit: only when there is something to ask

    from prompt_toolkit import PromptSession
    from prompt_toolkit.output import create_output

    session: PromptSession[str] = PromptSession(output=create_output(stdout=sys.stderr))
    if watch is None:
        reply = session.prompt(f"{question}: ")
        return reply if reply.strip() else default
    client, request_id = watch
    if (said := _answered(client, request_id)) is not None:
        raise Answered(said)
    fd, loops = client.sock.fileno(), []

    def readable() -> None:
        try:
            client.read_ready()
            said = _answered(client, request_id)
        except Exception as exc:  # the connection broke: the question ends with it
            end: BaseException = exc
        else:
            if said is None:
                return
            end = Answered(said)
        loops[0].remove_reader(fd)  # once: the socket may stay readable until the prompt is gone
        session.app.exit(exception=end)

    def pre_run() -> None:
        loops.append(loop := asyncio.get_running_loop())
        loop.add_reader(fd, readable)

    try:
        reply = session.prompt(f"{question}: ", pre_run=pre_run)
    finally:
        for loop in loops:
            if not loop.is_closed():
                loop.remove_reader(fd)
    return reply if reply.strip() else default


def _answered(client: Client, request_id: str) -> str | None:
    """What became of the ask *request_id* (``allow_once by nvim (pid 4242)``), if its ``consent_answered`` is
    among the notifications read: they stay queued, for the turn's view."""
    for method, arg in client.notifications:
        if method == "event" and arg.get("kind") == "consent_answered":
            data = arg.get("data") or {}
            if data.get("request_id") == request_id:
                return f"{data.get('decision', 'answered')} by {data.get('by') or 'another client'}"
    return None


# The reason the model reads when the person pressed Ctrl-C at the question (in the chat).
INTERRUPTED = "the user pressed Ctrl-C instead of answering"


def answer_consent(
    client: Client, session_id: str, ask: dict[str, Any], view: View, *, interrupt_denies: bool = False
) -> None:
    """Ask the person about *ask* and send the answer; nothing when stdin is no terminal.

    Errors: KeyboardInterrupt when the person presses Ctrl-C (or Ctrl-D) at the question, so the caller
    cancels the turn as for a Ctrl-C anywhere else (``mm -p``: exit 130) — unless *interrupt_denies*:
    then that one call is denied and the turn goes on (the chat's way).
    """
    if not sys.stdin.isatty():
        return  # another attached client may answer; the daemon denies when none can
    describe(ask, view)
    try:
        decided = decide(ask, (client, ask["request_id"]))
    except Answered as answered:  # in the editor, another terminal: nothing left to ask
        view.note(f"  answered meanwhile: {answered}", code=True)
        return
    except (KeyboardInterrupt, EOFError):
        if not interrupt_denies:
            raise KeyboardInterrupt from None
        decided = {"decision": "deny", "reason": INTERRUPTED}
    answer = {"session_id": session_id, "request_id": ask["request_id"], **decided}
    try:
        client.call("consent.answer", answer)
    except RPCError as exc:
        view.error(exc.message)
        if exc.code == "invalid_params":  # a prefix holding `;`, a folder not above the path: ask again
            answer_consent(client, session_id, ask, view, interrupt_denies=interrupt_denies)


def describe(ask: dict[str, Any], view: View) -> None:
    """One line saying what the call wants to do."""
    paths = ask.get("paths") or []  # a file tool that would touch paths outside the project
    if paths:
        view.note(
            f"  {ask['tool']} wants to {ask.get('access', 'read')} outside {ask.get('cwd', 'the project')}: "
            f"{', '.join(paths)}",
            code=True,
        )
    else:
        box = f"  [sandbox: {ask['sandbox']}]" if ask.get("sandbox") else ""
        view.note(f"  {ask['tool']} ({ask['tier']}) wants to run: {ask['echo']}{box}", code=True)


def decide(ask: dict[str, Any], watch: Watch | None = None) -> dict[str, Any]:
    """Ask until the reply is one of the choices offered: the decision, with its rule or reason; *watch*: as
    :func:`read_reply`'s.

    Errors: KeyboardInterrupt on Ctrl-C, EOFError on Ctrl-D, Answered (:func:`read_reply`).
    """
    bash = ask.get("command") is not None
    paths = ask.get("paths") or []
    dry = "dry_run" in ask.get("options", [])
    always = "always this command" if bash else "always this path" if paths else f"always {ask['tool']}"
    choices = (
        f"[y] once  [a] {always}"
        + ("  [p] a command prefix" if bash else "")
        + ("  [f] a folder" if paths else "")
        + ("  [d] dry run first" if dry else "")
        + "  [n] deny"
    )
    while True:
        reply = read_reply(f"  allow? {choices}", "n", watch).strip().lower()
        answer = decision(reply, bash=bash, paths=paths, dry=dry, watch=watch)
        if answer is not None:
            return answer


def decision(
    reply: str, *, bash: bool, paths: list[str], dry: bool, watch: Watch | None = None
) -> dict[str, Any] | None:
    """The answer a reply stands for (asking for the rule or reason it needs), or None for no choice offered."""
    if reply in ("y", "yes"):
        return {"decision": "allow_once"}
    if reply in ("a", "always"):
        return {"decision": "allow_always"}
    if reply == "d" and dry:
        return {"decision": "dry_run"}
    if reply == "p" and bash:
        return {
            "decision": "allow_always",
            "rule": read_reply("  prefix to allow (e.g. git status)", "", watch).strip(),
        }
    if reply == "f" and paths:
        parent = os.path.dirname(paths[0])
        folder = read_reply(f"  folder to allow [{terminal.code(parent)}]", parent, watch).strip()
        return {"decision": "allow_always", "rule": folder}
    if reply in ("n", "no"):
        reason = read_reply("  reason for the model (optional)", "", watch)
        return {"decision": "deny", "reason": reason}
    return None
