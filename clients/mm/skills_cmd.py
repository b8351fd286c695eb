"""``mm skills list``: the skills a prompt here would be offered, where each is from, and what it costs.

A thin client of the daemon's ``skills.list`` (docs/protocol.md), like ``mm tools list``: the daemon
resolves the folders and reads the files, so the list and a turn agree.
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

# Characters of a description shown in the table; --json has it whole.
DESCRIPTION_WIDTH = 70


@click.group()
def skills() -> None:
    """List the skills the model is offered here."""


@skills.command("list")
@click.option(
    "--agent", type=click.Path(dir_okay=False), help="Agent file (default: ./mm.yaml, then .mm/agent.yaml)."
)
@click.option("--json", "as_json", is_flag=True, help="Every field of every skill, as JSON.")
def skills_list(agent: str | None, as_json: bool) -> None:
    """The skills a prompt here would be offered, in priority order.

    \b
    mm looks in the agent file's skills: folders, then ~/.config/mm/skills and
    ~/.claude/skills, then .mm/skills, .claude/skills and .agents/skills of every
    folder from here up to the repository root (nearest first). The first skill
    of a name wins. TOKENS is the skill's line in the system prompt, sent with
    every request, then its body, read when the skill is used (estimates: UTF-8
    bytes / 4).
    """
    params: dict[str, Any] = {"cwd": os.getcwd()}
    if agent:
        params["agent"] = os.path.abspath(agent)
    try:
        client = Client.connect()
        listed = client.call("skills.list", params)
    except (DaemonError, RPCError) as exc:
        terminal.echo(f"mm: {getattr(exc, 'message', exc)}", err=True)
        sys.exit(1)
    for warning in listed["warnings"]:
        terminal.echo(f"warning: {terminal.cell(warning, err=True)}", err=True)
    if as_json:
        terminal.echo(json.dumps(listed["skills"], indent=2))
        return
    if not listed["skills"]:
        terminal.echo("no skills here; mm looks in:")
        for folder in listed["folders"]:
            terminal.echo(f"  {terminal.cell(_short(folder))}")
        return
    _table(listed["skills"])


def _table(rows: list[dict[str, Any]]) -> None:
    # A project's skills name themselves and their folders: every cell a terminal.cell, measured as shown.
    rows = [
        {**r, "name": terminal.cell(r["name"]), "description": terminal.cell(r["description"])} for r in rows
    ]
    where = {r["name"]: terminal.cell(f"{r['source']}: {_short(r['folder'])}") for r in rows}
    cost = {r["name"]: f"{r['tokens']}+{r['body_tokens']}" for r in rows}
    name_w = max(4, *(len(r["name"]) for r in rows))
    where_w = max(5, *(len(w) for w in where.values()))
    cost_w = max(6, *(len(c) for c in cost.values()))
    terminal.echo(f"{'NAME':<{name_w}}  {'FROM':<{where_w}}  {'TOKENS':>{cost_w}}  DESCRIPTION")
    for r in rows:
        text = r["description"]
        if len(text) > DESCRIPTION_WIDTH:
            text = text[: DESCRIPTION_WIDTH - 1] + "…"
        terminal.echo(
            f"{r['name']:<{name_w}}  {where[r['name']]:<{where_w}}  {cost[r['name']]:>{cost_w}}  {text}"
        )
        if r["allowed_tools"] is not None:
            allowed = terminal.cell(", ".join(r["allowed_tools"]) or "(none)")
            terminal.echo(f"{'':<{name_w}}  allowed-tools: {allowed}")


def _short(path: str) -> str:
    """*path* relative to the working directory when inside it, else with ~ for the home folder."""
    cwd, home = os.getcwd(), os.path.expanduser("~")
    if path == cwd or path.startswith(cwd + os.sep):
        return os.path.relpath(path, cwd)
    if path.startswith(home + os.sep):
        return "~" + path[len(home) :]
    return path
