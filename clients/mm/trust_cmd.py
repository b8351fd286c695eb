"""``mm trust``: use a project's files that name commands — after you read them — and the question a prompt
on a terminal asks about them.

A cloned repository's ``mm.yaml``, ``.mcp.json`` and Claude Code settings can name commands mm would run
without asking: hooks, MCP servers, declared tools, a ``scripted:`` model, and keys that loosen its guards. The daemon goes
without such a file until you trust it, and trusts it only as it was then (its digest): an edit, a pull, a
command of a turn that rewrote it make it untrusted again (docs/security.md#project-trust). This module is
a thin client of ``trust.check``, ``trust.add``, ``trust.list`` and ``trust.forget`` (docs/protocol.md).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import sys
from typing import Any

import click

from mmd.rpc import RPCError

from . import terminal
from .connection import Client, DaemonError


def untrusted(client: Client, prompt: dict[str, Any]) -> list[dict[str, Any]]:
    """The files a ``session.prompt`` with the params *prompt* would go without (``trust.check``): of its
    folder, or of the session it continues."""
    keys = ("cwd", "agent", "session_id", "continue_last")
    return client.call("trust.check", {k: prompt[k] for k in keys if prompt.get(k)})["files"]


# A tab or a line feed in a command is shown as its escape too (every other control is, by terminal.code):
# one command is one run of text, and a row that goes on from the one above is one it wrapped.
_BREAKS = re.compile("[\t\n]")
# Where a command starts, and where the rows of one too long for the terminal's width go on.
_INDENT, _GOES_ON = 6, 8
# Why a file is not asked about, and what to do instead.
TOO_LONG = (
    "mm does not ask about a file whose commands are too long to show here whole: read it, then "
    "`mm trust --yes` in its folder trusts it as it is then; meanwhile mm goes without it"
)


def rows(power: str) -> list[str]:
    """*power* as the question shows it: every character, controls as escapes, in rows of the terminal's
    width when stderr is one (as it is, on one row, when it is not). Never cut: the person trusts what they
    read, and a tail past the edge (`./lint.sh --config=… ; curl … | sh`) is trusted too."""
    text = _BREAKS.sub(lambda m: f"\\x{ord(m.group()):02x}", terminal.code(power))
    if not terminal.is_terminal(sys.stderr):
        return [" " * _INDENT + text]
    columns = shutil.get_terminal_size().columns
    first, width = max(20, columns - _INDENT - 1), max(20, columns - _GOES_ON - 1)
    cut = [text[:first], *(text[i : i + width] for i in range(first, len(text), width))]
    return [" " * _INDENT + cut[0], *(" " * _GOES_ON + row for row in cut[1:])]


def describe(files: list[dict[str, Any]]) -> None:
    """What each file would make mm do, each command whole, on stderr (every name in it is the file's: shown
    inert)."""
    click.echo("These files of the project name what mm would run without asking you:", err=True)
    for f in files:
        changed = " (changed since you trusted it)" if f["changed"] else ""
        click.echo(f"  {terminal.code(f['path'])}{changed}", err=True)
        for power in f["powers"]:
            for row in rows(power):
                click.echo(row, err=True)


def offer(client: Client, prompt: dict[str, Any], declined: set[tuple[str, str]] | None = None) -> None:
    """Before a prompt (*prompt*: its params) on a terminal: ask about the files it would go without, and
    trust them on yes. With no terminal to ask on, nothing: the turn's warning says what it went without.
    *declined*: the (path, digest) the person said no to already (the chat's, for its life): not asked
    about again; a no adds to it.

    Errors: KeyboardInterrupt (Ctrl-C at the question); RPCError from the daemon (a bad agent file: the
    prompt says it the same way).
    """
    if not (terminal.is_terminal(sys.stdin) and terminal.is_terminal(sys.stderr)):
        return
    from .ask import read_reply  # prompt_toolkit: only when there is something to ask

    said_no = declined if declined is not None else set()
    files = [f for f in untrusted(client, prompt) if (f["path"], f["digest"]) not in said_no]
    if not files:
        return
    describe(files)
    shown_whole = [f for f in files if not f.get("too_long")]
    if len(shown_whole) < len(files):  # not asked about: the person could not see all they would trust
        click.echo(TOO_LONG, err=True)
        said_no.update((f["path"], f["digest"]) for f in files if f.get("too_long"))
        if not shown_whole:
            return
        files = shown_whole
    try:
        reply = read_reply("Read them first. Trust them as they are now? [y/N]", "n")
    except EOFError:
        reply = "n"
    if reply.strip().lower() in ("y", "yes"):
        _add(client, files)
        click.echo("trusted; `mm trust forget` takes it back", err=True)
    else:
        said_no.update((f["path"], f["digest"]) for f in files)
        click.echo("not trusted: mm goes without them (`mm trust` trusts them later)", err=True)


def _add(client: Client, files: list[dict[str, Any]]) -> None:
    client.call("trust.add", {"files": [{"path": f["path"], "digest": f["digest"]} for f in files]})


def _fail(message: str) -> None:
    terminal.echo(f"mm: {message}", err=True)
    sys.exit(1)


@click.group(invoke_without_command=True)
@click.option("--yes", "-y", is_flag=True, help="Trust without asking (you have read the files).")
@click.pass_context
def trust(ctx: click.Context, yes: bool) -> None:
    """Trust this project's files that name commands, as they are now.

    \b
    A cloned repository's mm.yaml (or .mm/agent.yaml), .mcp.json and Claude
    Code settings can name commands mm would run without asking: hooks, MCP
    servers, declared tools, a scripted: model (the project's script answering
    in place of your model); and yolo, pass_env, sandbox: off. mm goes without
    such a file until you trust it, and trusts it only as it is when you do:
    any change to it makes it untrusted again. Read the files, then trust them.
    `mm trust list` shows what you trusted; `mm trust forget` takes it back.
    A file you name with `mm --agent FILE` needs no `mm trust`: naming it
    trusts it as it is.
    """
    if ctx.invoked_subcommand is not None:
        return
    try:
        client = Client.connect()
        files = untrusted(client, {"cwd": os.getcwd()})
        if not files:
            click.echo(
                "nothing here needs trust: no file of this project names commands you have not trusted"
            )
            return
        describe(files)
        if not yes:
            if any(f.get("too_long") for f in files):
                _fail(TOO_LONG)
            if not sys.stdin.isatty():
                _fail("add --yes to trust them without a terminal to ask on")
            from .ask import read_reply

            if read_reply("Trust them as they are now? [y/N]", "n").strip().lower() not in ("y", "yes"):
                click.echo("not trusted", err=True)
                sys.exit(1)
        _add(client, files)
    except (DaemonError, RPCError) as exc:
        _fail(str(getattr(exc, "message", exc)))
    except (KeyboardInterrupt, EOFError):
        click.echo("not trusted", err=True)
        sys.exit(130)
    click.echo(f"trusted {len(files)} file{'s' if len(files) != 1 else ''} as they are now")


@trust.command("list")
@click.option("--json", "as_json", is_flag=True, help="Every field, as JSON.")
def trust_list(as_json: bool) -> None:
    """The files you trusted, and whether each is still as you trusted it."""
    try:
        listed = Client.connect().call("trust.list", {})["files"]
    except (DaemonError, RPCError) as exc:
        _fail(str(getattr(exc, "message", exc)))
        return
    if as_json:
        terminal.echo(json.dumps(listed, indent=2))
        return
    if not listed:
        click.echo("no file trusted (`mm trust` in a project trusts its files)")
        return
    for row in listed:
        when = datetime.datetime.fromtimestamp(row["trusted"]).strftime("%Y-%m-%d %H:%M")
        terminal.echo(f"{row['state']:<10}  {when}  {terminal.cell(row['path'])}")


@trust.command("forget")
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--all", "every", is_flag=True, help="Every trusted file.")
def trust_forget(paths: tuple[str, ...], every: bool) -> None:
    """Trust the files at PATHS no longer (or --all of them)."""
    if not paths and not every:
        _fail("name the files to forget (`mm trust list` shows them), or give --all")
    params = {} if every else {"paths": [os.path.abspath(p) for p in paths]}  # as trust.check names them
    try:
        forgotten = Client.connect().call("trust.forget", params)["forgotten"]
    except (DaemonError, RPCError) as exc:
        _fail(str(getattr(exc, "message", exc)))
        return
    click.echo(f"forgot {forgotten} file{'s' if forgotten != 1 else ''}")
