"""``mm diff`` and ``mm undo``: what a session's steps changed in the working tree, and taking it back.

Thin clients of ``session.diff`` and ``session.undo`` (docs/protocol.md, docs/undo.md): the daemon keeps
the snapshots and does the restoring. The chat's ``/diff`` and ``/undo`` (slash.py) share the lines
shown here (render.step_line, render.undone_text).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from mmd.rpc import RPCError

from . import terminal
from .connection import Client, DaemonError
from .render import step_line, undone_text

# A line of `mm diff`'s output and its colour on a terminal.
DIFF_COLOURS = (("+++", "bold"), ("---", "bold"), ("+", "green"), ("-", "red"), ("@@", "cyan"))


def _client() -> Client:
    try:
        return Client.connect()
    except DaemonError as exc:
        _fail(str(exc))
        raise  # unreachable


def _fail(message: str) -> None:
    terminal.echo(f"mm: {message}", err=True)
    sys.exit(1)


def _session(client: Client, given: str | None) -> str:
    """The session named, else the newest of this directory (as ``mm --continue`` picks it)."""
    if given:
        return given
    try:
        cwd = os.getcwd()
    except FileNotFoundError:
        _fail("the current directory no longer exists: cd to an existing one, or name the session")
    rows = client.call("session.list", {"cwd": cwd, "limit": 1})["sessions"]
    if not rows:
        _fail(f"no session in {cwd}: name one (mm sessions list shows them)")
    return rows[0]["id"]


def _call(method: str, params: dict[str, Any], session: str | None) -> dict[str, Any]:
    client = _client()
    try:
        return client.call(method, {"session_id": _session(client, session), **params})
    except RPCError as exc:
        _fail(exc.message)
        raise  # unreachable


@click.command("diff")
@click.argument("session", required=False)
@click.option("--step", type=click.IntRange(min=1), metavar="N", help="Only what step N changed.")
@click.option("--json", "as_json", is_flag=True, help="The steps and the diff as JSON.")
def diff(session: str | None, step: int | None, as_json: bool) -> None:
    """What a session's steps changed in the working tree.

    \b
    SESSION defaults to the newest session of this directory.
    The steps are listed on stderr, the unified diff goes to stdout (mm diff > x.patch).
    Every call that may write is a step; mm undo --to N takes the files back to before step N.
    """
    shown = _call("session.diff", {"step": step} if step else {}, session)
    if as_json:
        terminal.echo(json.dumps(shown, indent=2))
        return
    for row in shown["steps"]:
        if step is None or row["step"] == step:
            terminal.echo(step_line(row), err=True)
    for line in map(terminal.inert, shown["diff"].splitlines()):
        colour = next((c for prefix, c in DIFF_COLOURS if line.startswith(prefix)), None)
        click.echo(click.style(line, bold=True) if colour == "bold" else click.style(line, fg=colour))
    if shown["truncated"]:
        terminal.echo("mm: the diff was cut at 4 MiB; mm diff --step N shows one step", err=True)


@click.command("undo")
@click.argument("session", required=False)
@click.option("--to", "to_step", type=click.IntRange(min=1), metavar="STEP", help="Back to before STEP.")
@click.option("--force", is_flag=True, help="Also overwrite files something else changed since.")
def undo(session: str | None, to_step: int | None, force: bool) -> None:
    """Take back what a session's last steps changed.

    \b
    Restores the files the last step (with --to STEP: steps STEP and after) changed.
    SESSION defaults to the newest session of this directory; mm diff lists its steps.
    The undo is a step too: mm undo again puts the files back. Files changed since by
    something else are not overwritten without --force.
    """
    params: dict[str, Any] = {"force": force, **({"to_step": to_step} if to_step else {})}
    terminal.echo(undone_text(_call("session.undo", params, session)))
