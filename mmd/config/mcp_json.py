"""Claude Code's MCP files, read beside mm's own ``mcp:``.

Claude Code keeps MCP servers in three scopes (its ``claude mcp add --scope``):
**project**, ``.mcp.json`` at the project's root, meant to be committed;
**local**, private to you and to one project; **user**, private to you, in
every project. The shape is one map::

    {"mcpServers": {"NAME": {"type": "stdio", "command": "npx", "args": [...], "env": {...}}}}
    {"mcpServers": {"NAME": {"type": "http", "url": "https://...", "headers": {...}}}}

mm reads the same shape from the same kinds of places (``mm mcp add`` writes them):

- project: ``<cwd>/.mcp.json`` (the folder a prompt runs in, where mm looks for
  mm.yaml too);
- local: ``mcp-local.json`` beside config.yaml, ``{"projects": {"/abs/cwd": {"mcpServers": ...}}}``
  (Claude Code keeps it in ``~/.claude.json`` under the project's path);
- user: ``mcp.json`` beside config.yaml.

Which wins on a name clash, from strongest: local; the agent file's ``mcp:``;
``.mcp.json``; config.yaml's ``mcp:``; ``mcp.json``. So Claude Code's order
(local, project, user) holds, and within a scope mm's own file wins over the
JSON one, since it can say more (allowlists, prefixes, tiers).

A project's ``.mcp.json`` comes with the repository, like its ``mm.yaml``,
and is trusted as its mm.yaml is: its servers are used only once the person
trusted the file as it is (config/trust.py, docs/security.md#project-trust). Its shape is not trusted: every file
here is read with the loader's limits, and each problem is a ConfigError
naming the file, line and field.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import msgspec

from .. import paths
from ..untrusted import (
    MAX_DEPTH,
    DuplicateKey,
    IntTooLarge,
    TooDeep,
    TooLarge,
    bounded_int,
    check_json,
    line_of,
    no_duplicate_keys,
)
from .loader import MAX_FILE_BYTES, ConfigError, Document, check_link, parse, remembered, text_digest
from .mcp import McpServerSpec, Transport, check_servers, server_commands
from .trust import Trust

# The project's file, in the folder a prompt runs in.
PROJECT_FILE = ".mcp.json"
# Beside config.yaml: your servers for every project, and your servers for one project.
USER_FILE = "mcp.json"
LOCAL_FILE = "mcp-local.json"
# The scopes of `mm mcp add --scope`, as Claude Code names them.
SCOPES = ("local", "project", "user")


class JsonServer(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """One entry of ``mcpServers``: Claude Code's keys (docs/mcp.md says which it follows)."""

    type: Annotated[Transport | None, msgspec.Meta(description='one of "stdio", "http", "sse"')] = None
    command: Annotated[str | None, msgspec.Meta(description='a program like "npx"')] = None
    args: list[str] = []
    env: dict[str, str] = {}
    url: Annotated[str | None, msgspec.Meta(description='a URL like "http://127.0.0.1:8000/mcp"')] = None
    headers: dict[str, str] = {}


class JsonServers(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    mcpServers: dict[str, JsonServer] = {}  # Claude Code's key


class JsonProjects(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    projects: dict[str, JsonServers] = {}


def scope_file(scope: str, cwd: Path, config_dir: Path) -> Path:
    """The file ``mm mcp add --scope SCOPE`` writes, for a prompt in *cwd*."""
    if scope == "project":
        return cwd / PROJECT_FILE
    return config_dir / (LOCAL_FILE if scope == "local" else USER_FILE)


def add_mcp_files(agent: Any, config: Any, cwd: Path, trust: Trust) -> tuple[Any, Any]:
    """*agent* and *config* with the servers of the three JSON files merged into their ``mcp:``.

    The user's ``mcp.json`` goes under config.yaml's servers (config.yaml wins);
    ``.mcp.json`` under the agent file's (the agent file wins), if *trust* admits it
    (config/trust.py); the local file's over both. Each spec keeps its file as ``origin``.

    Errors: ConfigError naming the file, line and field of the first problem.
    """
    folder = Path(config.path).parent if config.path else cwd
    user = read_servers(folder / USER_FILE, run_dir=paths.home())  # as config.yaml's servers
    project = read_servers(cwd / PROJECT_FILE, run_dir=cwd, shipped=True, trust=trust)
    local = read_servers(folder / LOCAL_FILE, run_dir=cwd, project=cwd)
    if user:
        config = msgspec.structs.replace(config, mcp={**user, **config.mcp})
    if project or local:
        agent = msgspec.structs.replace(agent, mcp={**project, **agent.mcp, **local})
    return agent, config


def read_servers(
    path: Path,
    *,
    run_dir: Path | None,
    project: Path | None = None,
    shipped: bool = False,
    trust: Trust | None = None,
) -> dict[str, McpServerSpec]:
    """The servers of one JSON file (of *project*'s section, for the local file); none if it is absent.
    *shipped*: the file comes with the project (``.mcp.json``), and is not read through a link out of it;
    its servers are none unless *trust* admits them (config/trust.py).

    Errors: ConfigError for a file that is not a regular UTF-8 file within the
    size limit, not JSON, nested too deep, of the wrong shape, or whose servers
    fail mm's checks (check_servers: names, transports, references, literal
    credentials); for a *shipped* file linked out of its project (loader.check_link).
    """
    if not os.path.lexists(path):  # a folder, a FIFO or a dangling link there is an error, not "none"
        return {}
    if shipped:
        check_link(
            path.absolute(), what="a project's .mcp.json", hint="copy the file here instead of linking it"
        )
    specs, digest = remembered(
        path,
        _servers,
        str(run_dir) if run_dir else None,
        str(project) if project else None,
        reader=json_document,
    )
    if shipped and trust is not None and not trust.admits(path, digest, server_commands(specs)):
        return {}
    return dict(specs)  # the kept map stays as it was read


def _servers(
    path: Path, doc: Document, run_dir: str | None, project: str | None
) -> tuple[dict[str, McpServerSpec], str]:
    """The servers of a JSON file's *doc* (of *project*'s section), checked, and the text's digest."""
    if project is None:
        at: tuple[Any, ...] = ("mcpServers",)
        servers = doc.convert(JsonServers).mcpServers
    else:
        at = ("projects", project, "mcpServers")
        section = doc.convert(JsonProjects).projects.get(project)
        servers = section.mcpServers if section else {}
    origin = str(path.absolute())
    specs = {
        name: McpServerSpec(
            type=entry.type,
            command=entry.command,
            args=entry.args,
            env=entry.env,
            url=entry.url,
            headers=entry.headers,
            origin=origin,
            run_dir=run_dir,
        )
        for name, entry in servers.items()
    }
    check_servers(doc, specs, at)
    return specs, doc.digest


def json_document(path: str | os.PathLike[str], text: str) -> Document:
    """The JSON *text* of the file at *path* (read by the loader: a regular file, at most MAX_FILE_BYTES,
    UTF-8) as a :class:`Document`: its values, and the line of each field where it can tell.

    Errors: ConfigError (see read_servers).
    """
    name = str(path)
    try:
        check_json(text, what="it is", max_depth=MAX_DEPTH, max_bytes=MAX_FILE_BYTES)
        data = json.loads(text, object_pairs_hook=no_duplicate_keys, parse_int=bounded_int)
    except (TooDeep, TooLarge) as exc:
        raise ConfigError(file=name, line=None, field="", problem=str(exc)) from None
    except IntTooLarge as exc:
        raise ConfigError(file=name, line=line_of(text, exc.text), field="", problem=str(exc)) from None
    except DuplicateKey as exc:
        line = _line_of(text, exc.key)
        raise ConfigError(
            file=name, line=line, field="", problem=f'the key "{exc.key}" is given twice', hint="keep one"
        ) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            file=name,
            line=exc.lineno,
            field="",
            problem=f"not valid JSON: {exc.msg} (column {exc.colno})",
            hint='it must be one JSON object like {"mcpServers": {"NAME": {"command": "..."}}}',
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            file=name,
            line=1,
            field="",
            expected='a JSON object like {"mcpServers": {...}}',
            found=type(data).__name__,
        )
    return Document(name, data, _lines(name, text), text_digest(text))


def _lines(name: str, text: str) -> dict[tuple[Any, ...], int]:
    """The line of each field, from the YAML parser (JSON is YAML); none where it cannot tell."""
    try:
        # Tabs indent JSON but not YAML; the lines stay the same.
        return parse(name, text.expandtabs(8)).lines
    except ConfigError:
        return {(): 1}


def _line_of(text: str, key: str) -> int | None:
    needle = json.dumps(key)
    first = text.find(needle)
    second = text.find(needle, first + 1) if first >= 0 else -1
    return text.count("\n", 0, second) + 1 if second >= 0 else None
