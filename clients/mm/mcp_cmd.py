"""``mm mcp``: the MCP servers configured here — list, test, add, remove (docs/mcp.md).

``add`` and ``remove`` follow ``claude mcp add/remove``: the same arguments and
the same three scopes, written in Claude Code's JSON shape to mm's files
(mmd/config/mcp_json.py reads them): ``project`` is ``.mcp.json`` in this
folder, ``local`` (the default) and ``user`` are ``mcp-local.json`` and
``mcp.json`` beside the daemon's config.yaml. The client writes the file,
then asks the daemon to read it back (``mcp.list``): a server the daemon
refuses is taken out again and the error shown, so a bad entry never stays.

Like the rest of the client, this imports no daemon module: the file names
are repeated here (a unit test checks they match mcp_json's).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, NoReturn

import click

from mmd.rpc import RPCError

from . import terminal
from .connection import Client, DaemonError
from .render import EXIT_ERROR, EXIT_OK

# mmd/config/mcp_json.py's PROJECT_FILE, LOCAL_FILE, USER_FILE and SCOPES.
PROJECT_FILE = ".mcp.json"
LOCAL_FILE = "mcp-local.json"
USER_FILE = "mcp.json"
SCOPES = ("local", "project", "user")
_AGENT_HELP = "Agent file (default: ./mm.yaml, then .mm/agent.yaml)."


def _fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    terminal.echo(f"mm: {message}", err=True)
    sys.exit(code)


def _connect() -> Client:
    try:
        return Client.connect()
    except DaemonError as exc:
        _fail(str(exc))


@click.group()
def mcp() -> None:
    """MCP servers: list, test, add and remove (.mcp.json too)."""


def _params(agent: str | None, **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"cwd": os.getcwd(), **extra}
    if agent:
        params["agent"] = os.path.abspath(agent)
    return params


def _call(method: str, params: dict[str, Any]) -> dict[str, Any]:
    client = _connect()
    try:
        return client.call(method, params)
    except RPCError as exc:
        _fail(exc.message)
    finally:
        client.close()


@mcp.command("list")
@click.option("--agent", type=click.Path(dir_okay=False), help=_AGENT_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the servers as JSON.")
def mcp_list(agent: str | None, as_json: bool) -> None:
    """The MCP servers configured here and their state.

    From every source, weakest first: mcp.json (user), config.yaml's mcp:, .mcp.json (project), the agent
    file's mcp:, mcp-local.json (local). Lists only: a server is "not connected" until a prompt or `mm mcp
    test` uses it. Connections live in the daemon and are shared by every session that uses the same server.
    """
    listed = _call("mcp.list", _params(agent))
    for warning in listed.get("warnings", []):
        terminal.echo(f"warning: {terminal.cell(warning, err=True)}", err=True)
    if as_json:
        terminal.echo(json.dumps(listed["servers"], indent=2))
        return
    if not listed["servers"]:
        terminal.echo(
            "no MCP servers configured here (add one with `mm mcp add NAME -- COMMAND ARGS...`, "
            "or write .mcp.json or mcp: in the agent file or config.yaml; see docs/mcp.md)"
        )
        return
    rows = [_list_row(s) for s in listed["servers"]]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for s, row in zip(listed["servers"], rows, strict=True):
        terminal.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + f"  {row[3]}"
        )
        if s.get("error"):
            terminal.echo(f"{'':<{widths[0]}}  error: {terminal.cell(s['error'])}")


def _list_row(s: dict[str, Any]) -> list[str]:
    """name, transport, state (with its facts), then target and where it is configured: each cell as
    :func:`terminal.cell` (a project's .mcp.json names them)."""
    state = s["state"] if s["enabled"] else "disabled"
    facts = [f"pid {s['pid']}" if s.get("pid") else ""]
    if s.get("tools_offered") is not None:
        facts.append(f"{s['tools_offered']} tools offered")
    if s.get("connects"):
        facts.append(f"{s['connects']} connects" if s["connects"] != 1 else "1 connect")
    detail = ", ".join(f for f in facts if f)
    origin = Path(s.get("origin") or "").name
    where = f"  ({origin})" if origin else ""
    row = [s["name"], s["transport"], state + (f" ({detail})" if detail else ""), f"{s['target']}{where}"]
    return [terminal.cell(value) for value in row]


@mcp.command("test")
@click.argument("name")
@click.option("--agent", type=click.Path(dir_okay=False), help=_AGENT_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def mcp_test(name: str, agent: str | None, as_json: bool) -> None:
    """Connect to server NAME; print the tools it exposes.

    Exactly the tools the model would be offered. Each tool comes with its tier and its estimated cost in
    every model request: the characters of its entry in the request body (compact JSON) divided by 4,
    rounded up — a rule of thumb; real counts vary by tokenizer. Warnings (allowlist names the server
    lacks, name clashes) go to stderr. Exits 1 when the server cannot be reached.
    """
    result = _call("mcp.test", _params(agent, name=name))
    if as_json:
        terminal.echo(json.dumps(result, indent=2))
        sys.exit(EXIT_OK if result["ok"] else EXIT_ERROR)
    if not result["ok"]:
        for warning in result["warnings"]:
            terminal.echo(f"warning: {terminal.cell(warning, err=True)}", err=True)
        where, error = (terminal.cell(result[key], err=True) for key in ("target", "error"))
        _fail(f"MCP server {terminal.cell(name, err=True)} ({result['transport']}: {where}) failed: {error}")
    server = result["server"]
    ident = terminal.cell(" ".join(str(v) for v in (server.get("name"), server.get("version")) if v))
    how = (
        "reused the daemon's open connection"
        if result["reused"]
        else f"connected in {result['connect_seconds']:.2f} s"
    )
    terminal.echo(f"{terminal.cell(name)}: ok — {result['transport']} {terminal.cell(result['target'])}")
    terminal.echo(f"server {ident or '?'}, protocol {result['protocol']}; {how}")
    terminal.echo(f"{len(result['tools'])} of {result['offered']} tools exposed:")
    for line in tool_lines(result["tools"], shutil.get_terminal_size((100, 24)).columns):
        terminal.echo(line)
    terminal.echo(f"total ~{result['tokens']} tokens in every request (characters of the tools' JSON / 4)")
    for warning in result["warnings"]:
        terminal.echo(f"warning: {terminal.cell(warning, err=True)}", err=True)


def tool_lines(tools: list[dict[str, Any]], columns: int) -> list[str]:
    """One aligned line per tool: name (and the server's name when it differs), tier, tokens, description.

    The columns are as wide as their longest cell, so a long prefixed name never
    pushes its row out of line; the description is cut to what the terminal has left. Names and
    descriptions are the server's: each is a :func:`terminal.cell`, measured as it is shown.
    """
    labels = [
        terminal.cell(t["name"] if t["name"] == t["remote_name"] else f"{t['name']} ({t['remote_name']})")
        for t in tools
    ]
    name_width = max((len(label) for label in labels), default=0)
    tier_width = max((len(t["tier"]) for t in tools), default=0)
    token_width = max((len(str(t["tokens"])) for t in tools), default=0)
    lines = []
    for label, tool in zip(labels, tools, strict=True):
        head = (
            f"  {label:<{name_width}}  {tool['tier']:<{tier_width}}  ~{tool['tokens']:>{token_width}} tokens"
        )
        first = terminal.cell(tool["description"].split(". ")[0].rstrip("."))
        room = columns - len(head) - 2
        if room < 12:  # no room to say anything useful: the description goes whole on the line
            room = len(first)
        lines.append(f"{head}  {first if len(first) <= room else first[: room - 1] + '…'}".rstrip())
    return lines


# -- add and remove -----------------------------------------------------------------------


@mcp.command("add", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("name")
@click.argument("target", nargs=-1, required=True)
@click.option(
    "-t",
    "--transport",
    type=click.Choice(["stdio", "http", "sse"]),
    default="stdio",
    show_default=True,
    help="stdio: TARGET is a command and its arguments (after --); http or sse: TARGET is the URL.",
)
@click.option(
    "-s", "--scope", type=click.Choice(SCOPES), default="local", show_default=True, help="Where to write it."
)
@click.option("-e", "--env", "env", multiple=True, metavar="KEY=VALUE", help="A variable for a stdio server.")
@click.option("-H", "--header", "headers", multiple=True, metavar="'NAME: VALUE'", help="An HTTP header.")
def mcp_add(
    name: str,
    target: tuple[str, ...],
    transport: str,
    scope: str,
    env: tuple[str, ...],
    headers: tuple[str, ...],
) -> None:
    """Add server NAME, as `claude mcp add` does.

    \b
      mm mcp add files -- npx -y @modelcontextprotocol/server-filesystem .
      mm mcp add --transport http notion https://mcp.notion.com/mcp
      mm mcp add -t sse -H 'Authorization: Bearer ${API_TOKEN}' api https://api.example.com/sse

    Scopes: local (default: you, in this folder; mcp-local.json beside config.yaml), project (.mcp.json
    here, for everyone who clones it), user (you, in every folder; mcp.json beside config.yaml). Values
    may hold ${VAR} and ${VAR:-default}, expanded from the daemon's environment; a credential header must
    be such a reference (quote it in single quotes so the shell leaves it).
    """
    entry = _entry(transport, target, env, headers)
    listed = _call("mcp.list", _params(None))
    path = _scope_path(scope, listed)
    document, servers = _read_scope(path, scope)
    if name in servers:
        _fail(
            f"MCP server {name} already exists in {path} ({scope}); remove it first: mm mcp remove {name} -s {scope}"
        )
    servers[name] = entry
    _write_checked(path, document)
    terminal.echo(f"Added {transport} MCP server {name} to {path} ({scope} scope)")


def _entry(
    transport: str, target: tuple[str, ...], env: tuple[str, ...], headers: tuple[str, ...]
) -> dict[str, Any]:
    """The server's entry in Claude Code's shape, or a usage error."""
    entry: dict[str, Any] = {"type": transport}
    if transport == "stdio":
        if headers:
            _fail("--header applies to an http or sse server; pass values to a stdio server with --env", 2)
        entry.update(command=target[0], args=list(target[1:]))
        if env:
            entry["env"] = dict(_pair(item, "=", "--env", "KEY=VALUE") for item in env)
        return entry
    if len(target) != 1:
        _fail(f"--transport {transport} takes one URL, got {len(target)} arguments: {' '.join(target)}", 2)
    if env:
        _fail("--env applies to a stdio server; an http or sse server takes --header", 2)
    entry["url"] = target[0]
    if headers:
        entry["headers"] = dict(_pair(item, ":", "--header", "'Name: value'") for item in headers)
    return entry


def _pair(item: str, sep: str, option: str, shape: str) -> tuple[str, str]:
    key, found, value = item.partition(sep)
    if not found or not key.strip():
        _fail(f"{option} {item!r}: expected {shape}", 2)
    return key.strip(), value.strip() if sep == ":" else value


def _scope_path(scope: str, listed: dict[str, Any]) -> Path:
    """The file of *scope*, beside the config.yaml the daemon reads (``mcp.list`` says which)."""
    if scope == "project":
        return Path(os.getcwd()) / PROJECT_FILE
    folder = Path(listed["config"]).parent
    return folder / (LOCAL_FILE if scope == "local" else USER_FILE)


def _read_scope(path: Path, scope: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The file's whole JSON document (created empty) and its ``mcpServers`` map for this folder, to edit in place."""
    document: dict[str, Any] = {}
    if path.exists():
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            _fail(f"{path}: cannot read it as JSON ({exc}); fix or remove it first")
    if not isinstance(document, dict):
        _fail(f"{path}: expected a JSON object; fix or remove it first")
    section = document
    if scope == "local":
        projects = document.setdefault("projects", {})
        section = projects.setdefault(os.getcwd(), {}) if isinstance(projects, dict) else None
    servers = section.setdefault("mcpServers", {}) if isinstance(section, dict) else None
    if not isinstance(servers, dict):
        _fail(f"{path}: mcpServers is not a JSON object; fix or remove it first")
    return document, servers


def _write_checked(path: Path, document: dict[str, Any]) -> None:
    """Write *document*, then have the daemon read it; put the old file back if the daemon refuses it."""
    old = path.read_bytes() if path.exists() else None
    before = _untrusted_here(path)
    _write(path, json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    client = _connect()
    try:
        client.call("mcp.list", _params(None))
    except RPCError as exc:
        if old is None:
            path.unlink()
        else:
            _write(path, old.decode("utf-8"))
        _fail(f"not added: {exc.message}")
    finally:
        client.close()
    _keep_trust(path, before)


def _untrusted_here(path: Path) -> set[str] | None:
    """For the project's .mcp.json: the files here the daemon would go without (``trust.check``); None for
    another file, or when the daemon cannot say."""
    if path.name != PROJECT_FILE:
        return None
    try:
        return {f["path"] for f in _call_quietly("trust.check", {"cwd": os.getcwd()})["files"]}
    except (RPCError, DaemonError):
        return None


def _keep_trust(path: Path, before: set[str] | None) -> None:
    """After mm itself changed the project's .mcp.json: trust its new text where its old one was trusted
    (or there was none) — the change is yours; else say that it waits for `mm trust` (docs/security.md)."""
    if before is None:
        return
    real = os.path.abspath(path)  # as trust.check names it
    if real in before:
        terminal.echo(
            f"{path} is not trusted here: `mm trust` after reading it, to use its servers", err=True
        )
        return
    try:
        for f in _call_quietly("trust.check", {"cwd": os.getcwd()})["files"]:
            if f["path"] == real:
                _call_quietly("trust.add", {"files": [{"path": real, "digest": f["digest"]}]})
    except (RPCError, DaemonError) as exc:
        terminal.echo(f"{path} waits for `mm trust` to be used: {getattr(exc, 'message', exc)}", err=True)


def _call_quietly(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One call; its errors raised, not printed. Errors: RPCError, DaemonError."""
    client = Client.connect()
    try:
        return client.call(method, params)
    finally:
        client.close()


def _write(path: Path, text: str) -> None:
    """Replace the file at once (a crash leaves the old one or the new one, never half of either)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        else:
            os.chmod(tmp, 0o644 if path.name == PROJECT_FILE else 0o600)  # yours, unless it is the project's
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@mcp.command("remove")
@click.argument("name")
@click.option(
    "-s", "--scope", type=click.Choice(SCOPES), help="Only from this scope (default: the one that has it)."
)
def mcp_remove(name: str, scope: str | None) -> None:
    """Remove server NAME from the file `mm mcp add` wrote.

    Without --scope, from the one scope that has it (local, project, user); a server in two scopes needs
    --scope. A server of an agent file's or config.yaml's mcp: is edited there by hand.
    """
    listed = _call("mcp.list", _params(None))
    found = []
    for candidate in (scope,) if scope else SCOPES:
        path = _scope_path(candidate, listed)
        if path.exists():
            document, servers = _read_scope(path, candidate)
            if name in servers:
                found.append((candidate, path, document, servers))
    if not found:
        elsewhere = [s["origin"] for s in listed["servers"] if s["name"] == name]
        where = f"; it is configured in {elsewhere[-1]}: edit that file" if elsewhere else ""
        _fail(f"no MCP server {name} in the {scope or 'local, project or user'} scope{where}")
    if len(found) > 1:
        scopes = ", ".join(f[0] for f in found)
        _fail(f"MCP server {name} is in several scopes ({scopes}); say which with --scope")
    chosen, path, document, servers = found[0]
    del servers[name]
    if chosen == "local" and not servers:  # no section left behind for a folder with no server
        del document["projects"][os.getcwd()]
    before = _untrusted_here(path)
    _write(path, json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    _keep_trust(path, before)
    terminal.echo(f"Removed MCP server {name} from {path} ({chosen} scope)")
