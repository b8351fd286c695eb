"""``mcp:`` in the agent file and in config.yaml: which MCP servers to connect, and how.

A server is a map entry under ``mcp:``, keyed by its name::

    mcp:
      release:                       # streamable HTTP
        url: https://release.example/mcp
        headers: {Authorization: "Bearer ${RELEASE_TOKEN}"}
        tools: {include: [release, status]}
      files:                         # stdio: the server runs under mm's supervisor
        command: npx
        args: ["-y", "@modelcontextprotocol/server-filesystem", "./docs"]
        prefix: true

This module declares those entries (msgspec Structs, checked by the config
loader with file:line errors), checks what the types cannot say
(:func:`check_servers`), merges the user's and the agent's servers
(:func:`servers_for`) and expands ``${VAR}`` references into a
:class:`ResolvedServer`, whose ``key`` says which connections may be shared.

It imports no MCP SDK: the agent file loader uses it, and mmd/mcp/ (the
daemon's connections) resolves the servers of a turn with it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import msgspec

from .. import paths
from .loader import Document
from .sandbox import SandboxSpec
from .trust import command_text, settings_text

Effects = Literal["read", "write", "destructive"]
Transport = Literal["stdio", "http", "sse"]

# A server's name: it goes into tool-name prefixes and log file names.
SERVER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")
# ${VAR} or ${VAR:-default}. Run it through references() and sub_references(), which stop at the text's last
# "}": past it a default's scan can only fail, and "${a:-" repeated through a cloned repository's .mcp.json
# (read before its trust is checked) once cost 5 s at 64 KiB, quadratic.
REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def references(text: str) -> Iterator[re.Match[str]]:
    """Each ``${VAR}`` / ``${VAR:-default}`` in *text*, in linear time."""
    return REFERENCE.finditer(text, 0, text.rfind("}") + 1)


def sub_references(repl: str | Callable[[re.Match[str]], str], text: str) -> str:
    """*text* with each reference replaced by *repl*, in linear time."""
    end = text.rfind("}") + 1
    return REFERENCE.sub(repl, text[:end]) + text[end:]


# The start of an http(s) URL with a host.
_HTTP_URL = re.compile(r"https?://[^/\s]+")
# Headers that carry credentials: their values must come from the environment.
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie"})
# What a stdio server gets of the daemon's environment, besides its own ``env:``
# (as the SDK, Codex and Hermes do): API keys in the daemon's environment stay there.
INHERITED_ENV = (
    "HOME",
    "LOGNAME",
    "PATH",
    "SHELL",
    "TERM",
    "USER",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TMPDIR",
    "TZ",
)
# Seconds to wait for a server to answer the handshake and list its tools.
DEFAULT_CONNECT_TIMEOUT = 30.0
# Said of Claude Code's .mcp.json shape written where mm's own is read.
MCP_JSON_HINT = (
    "that is the shape of Claude Code's .mcp.json: mm reads .mcp.json at the project's root as it is "
    "(docs/mcp.md); in mm.yaml or config.yaml, write each server under mcp: instead, as mcp: {NAME: {command: ..., args: [...]}}"
)
# Hints for keys written where mm's files have none (config.loader reads a Struct's key_hints):
# for the agent file and config.yaml, and, under an entry of mcp:, for Claude Code's own keys.
KEY_HINTS = {"mcpServers": MCP_JSON_HINT, "mcp_servers": MCP_JSON_HINT}


class McpToolsFilter(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """Which of a server's tools the model is offered."""

    # None: every tool the server offers. A list: exactly these (by the server's names).
    include: Annotated[
        list[str] | None, msgspec.Meta(description="a list of the server's tool names, like [read_file]")
    ] = None
    exclude: list[str] = []  # left out even when included
    resources: bool = False  # offer <server>_list_resources and <server>_read_resource
    prompts: bool = False  # offer <server>_list_prompts and <server>_get_prompt


class McpServerSpec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    # The transport, as Claude Code's .mcp.json says it; None: http with url:, stdio with command:.
    type: Annotated[Transport | None, msgspec.Meta(description='one of "stdio", "http", "sse"')] = None
    # Streamable HTTP (or SSE with type: sse): the endpoint, and headers (values may hold ${VAR}).
    url: Annotated[str | None, msgspec.Meta(description='a URL like "http://127.0.0.1:8000/mcp"')] = None
    headers: dict[str, str] = {}
    # stdio: the program, its arguments and extra environment (values may hold ${VAR}).
    command: Annotated[str | None, msgspec.Meta(description='a program like "npx" or "./server.py"')] = None
    args: list[str] = []
    env: dict[str, str] = {}
    cwd: str | None = None  # relative to the file's folder; default: that folder (config.yaml: $HOME)
    enabled: bool = True
    timeout: Annotated[float, msgspec.Meta(gt=0)] | None = None  # seconds per call; None: daemon.tool_timeout
    connect_timeout: Annotated[float, msgspec.Meta(gt=0)] = DEFAULT_CONNECT_TIMEOUT
    tools: McpToolsFilter = msgspec.field(default_factory=McpToolsFilter)
    # false: tools keep their names; true: "<server>_<tool>"; a string: that prefix.
    prefix: Annotated[bool | str, msgspec.Meta(description='true, false or a prefix like "gh_"')] = False
    # Tier per tool (the server's tool name), overriding its annotations.
    effects: dict[str, Effects] = {}
    # A stdio server's sandbox (config/sandbox.py); its mode None means off, today's behaviour.
    sandbox: SandboxSpec = msgspec.field(default_factory=SandboxSpec)
    # Where the entry was read when it is not the file whose mcp: holds it (.mcp.json, mcp.json,
    # mcp-local.json: mmd/config/mcp_json.py), and the folder a stdio server runs in. Not keys.
    origin: str | None = None
    run_dir: str | None = None

    set_by_loader: ClassVar[frozenset[str]] = frozenset({"origin", "run_dir"})
    key_hints: ClassVar[dict[str, str]] = {
        **KEY_HINTS,
        "disabled": "write enabled: false",
        "transport": "write type: stdio, http or sse",
        "transportType": "write type: stdio, http or sse",
    }

    @property
    def transport(self) -> str:
        """``stdio``, ``http`` (streamable HTTP) or ``sse``."""
        if self.type is not None:
            return self.type
        return "http" if self.url is not None else "stdio"


def server_commands(servers: dict[str, McpServerSpec]) -> list[str]:
    """What *servers* would start or reach, one line each, with everything that decides what it does: ``MCP
    server fs: runs npx -y … in ./srv, with NODE_OPTIONS=…``; ``MCP server web: reaches URL, sending
    Authorization: Bearer ${GITHUB_TOKEN}`` (a header names what of your environment it sends where)."""
    lines = []
    for name, spec in servers.items():
        if spec.url:
            sent = ", ".join(f"{key}: {value}" for key, value in spec.headers.items())
            lines.append(f"MCP server {name}: reaches {spec.url}" + (f", sending {sent}" if sent else ""))
        else:
            line = f"MCP server {name}: runs {command_text(spec.command, spec.args)}"
            lines.append(line + settings_text(spec.cwd, spec.env))
    return lines


def check_servers(doc: Document, servers: dict[str, McpServerSpec], at: tuple[Any, ...] = ("mcp",)) -> None:
    """The checks of ``mcp:`` that the types cannot express, each error with its line.

    Errors:
        ConfigError: a bad server name, neither or both of url and command,
        an option of the other transport, a URL that is not http(s), a
        malformed ``${`` reference, a credential header given literally, a
        bad prefix, a tool both included and excluded.
    """
    for name, spec in servers.items():
        here = (*at, name)
        if not SERVER_NAME.fullmatch(str(name)):
            raise doc.error(
                here,
                problem="not a server name",
                expected="letters, digits, _ or -, starting with a letter, at most 32 characters",
            )
        if (spec.url is None) == (spec.command is None):
            raise doc.error(
                here,
                problem="both url and command" if spec.url is not None else "neither url nor command",
                hint="give url: for a streamable HTTP server, or command: (and args:) for a stdio server",
            )
        _check_type(doc, here, spec)
        _check_transport(doc, here, spec)
        _check_references(doc, here, spec)
        if isinstance(spec.prefix, str) and not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", spec.prefix):
            raise doc.error(
                (*here, "prefix"),
                problem="not a tool-name prefix",
                expected='true, false, or letters, digits, _ or - like "gh_"',
            )
        both = sorted(set(spec.tools.include or ()) & set(spec.tools.exclude))
        if both:
            raise doc.error(
                (*here, "tools", "exclude"),
                problem=f"{', '.join(both)} is both included and excluded",
                hint="keep it in one list",
            )


def _check_type(doc: Document, here: tuple[Any, ...], spec: McpServerSpec) -> None:
    if spec.type is None:
        return
    wants_url = spec.type in ("http", "sse")
    if wants_url != (spec.url is not None):
        raise doc.error(
            (*here, "type"),
            problem=f"type: {spec.type} needs "
            + ("url:, not command:" if wants_url else "command: (and args:), not url:"),
            hint="leave type out to let url: or command: say it, or fix the transport",
        )


def _check_transport(doc: Document, here: tuple[Any, ...], spec: McpServerSpec) -> None:
    if spec.url is not None:
        # A URL that starts with ${VAR} (Claude Code's ${API_BASE_URL:-https://...}/mcp) is checked once expanded.
        if not spec.url.startswith("${") and not _HTTP_URL.match(spec.url):
            raise doc.error(
                (*here, "url"), expected='an http:// or https:// URL like "http://127.0.0.1:8000/mcp"'
            )
        for key, value in (("args", spec.args), ("env", spec.env), ("cwd", spec.cwd)):
            if value:
                raise doc.error(
                    (*here, key),
                    problem=f"{key} applies to a stdio server (command:), not to a url one",
                    hint="remove it, or use headers: for an HTTP server",
                )
    elif spec.headers:
        raise doc.error(
            (*here, "headers"),
            problem="headers apply to a url server, not to a stdio one",
            hint="pass values to a stdio server in env:",
        )


def _check_references(doc: Document, here: tuple[Any, ...], spec: McpServerSpec) -> None:
    texts: list[tuple[tuple[Any, ...], str]] = [
        ((*here, "url"), spec.url or ""),
        ((*here, "command"), spec.command or ""),
    ]
    texts += [((*here, "args", i), arg) for i, arg in enumerate(spec.args)]
    texts += [((*here, "env", k), v) for k, v in spec.env.items()]
    texts += [((*here, "headers", k), v) for k, v in spec.headers.items()]
    texts.append(((*here, "cwd"), spec.cwd or ""))
    for path, text in texts:
        if "${" in sub_references("", text):
            raise doc.error(
                path, problem="a malformed ${...} reference", expected="${NAME} or ${NAME:-default}"
            )
    for header, value in spec.headers.items():
        if header.lower() in SECRET_HEADERS and next(references(value), None) is None:
            raise doc.error(
                (*here, "headers", header),
                problem="credentials never go in the file (the value is not shown)",
                hint=f'write it as a reference, like {header}: "Bearer ${{{_token_name(here[-1])}}}", '
                "and put the token in that environment variable of the daemon",
            )


def _token_name(server: Any) -> str:
    return re.sub(r"[^A-Z0-9_]", "_", str(server).upper()) + "_TOKEN"


# -- which servers a turn uses -------------------------------------------------


class ServerEntry(msgspec.Struct, frozen=True):
    """One configured server: its spec and where it was configured."""

    name: str
    spec: McpServerSpec
    origin: str  # the file that configured it
    base_dir: Path  # where its relative paths start
    default_cwd: Path  # where a stdio server runs unless cwd: says otherwise
    # The agent's pass_env: variables of the daemon's environment a stdio server gets too.
    pass_env: tuple[str, ...] = ()


def servers_for(agent: Any, config: Any) -> list[ServerEntry]:
    """The servers of config.yaml's ``mcp:`` then the agent file's, in order.

    An agent file's server replaces the user's server of the same name whole,
    at the user's position (so ``enabled: false`` in an agent file turns a
    user's server off for that agent). Disabled servers are included. An
    entry read from a JSON file (``origin``, see mcp_json.py) keeps that file
    as its origin and runs in its ``run_dir``.
    """
    entries: dict[str, ServerEntry] = {}
    user_file = config.path or "config.yaml"
    home = paths.home()
    passed = tuple(getattr(agent, "pass_env", ()))
    for name, spec in getattr(config, "mcp", {}).items():
        entries[name] = _entry(name, spec, user_file, home, passed)
    for name, spec in getattr(agent, "mcp", {}).items():
        if agent.path or spec.origin:
            folder = Path(agent.path).parent if agent.path else home
            entries[name] = _entry(name, spec, agent.path or "", folder, passed)
    return list(entries.values())


def _entry(name: str, spec: McpServerSpec, file: str, run: Path, passed: tuple[str, ...]) -> ServerEntry:
    """A server entry: its origin is the JSON file it came from, else the file whose mcp: holds it."""
    origin = file
    if spec.origin:
        origin = spec.origin
        run = Path(spec.run_dir) if spec.run_dir else Path(origin).parent
    return ServerEntry(name, spec, origin, Path(origin).parent, run, passed)


class ExpansionError(Exception):
    """A ``${VAR}`` names a variable the daemon's environment does not have."""


class ResolvedServer(msgspec.Struct, frozen=True):
    """A server entry with its ``${VAR}`` references expanded: what a connection needs.

    ``key`` is a digest of everything that makes the connection (transport,
    URL and headers, or argv, environment and working directory), not of the
    tool filters: every session whose server has the same key shares one
    connection. Expanded values (tokens) are never shown; ``target`` is the
    configured text.
    """

    entry: ServerEntry
    transport: str  # "http", "sse" or "stdio"
    url: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    argv: list[str] = msgspec.field(default_factory=list)
    env: dict[str, str] = msgspec.field(default_factory=dict)
    cwd: Path | None = None
    key: str = ""

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def spec(self) -> McpServerSpec:
        return self.entry.spec

    @property
    def target(self) -> str:
        """What the server is, as configured (references unexpanded)."""
        spec = self.entry.spec
        if spec.url is not None:
            return spec.url
        return shlex.join([spec.command or "", *spec.args])


# Set by mm itself when the environment does not: ${MM_PYTHON} is the daemon's own
# interpreter, which has the official MCP SDK, so a Python server written with it
# starts wherever mm runs (contrib/eval/mcp.yaml).
BUILTIN_VARIABLES = {"MM_PYTHON": sys.executable}


def expand(text: str, where: str, environ: dict[str, str] | None = None) -> str:
    """*text* with each ``${VAR}`` replaced by the variable's value (or its ``:-default``).

    Errors: ExpansionError naming the variable and *where* it is used.
    """
    env = os.environ if environ is None else environ

    def value(m: re.Match[str]) -> str:
        name, default = m[1], m[2]
        if name in env:
            return env[name]
        if name in BUILTIN_VARIABLES:
            return BUILTIN_VARIABLES[name]
        if default is not None:
            return default
        raise ExpansionError(
            f"the environment variable {name} (in {where}) is not set in the daemon's environment; "
            "set it and restart the daemon (mm daemon stop), or give a default: ${" + name + ":-value}"
        )

    return sub_references(value, text)


def resolve(entry: ServerEntry, environ: dict[str, str] | None = None) -> ResolvedServer:
    """Expand *entry*'s references and compute its connection key.

    Errors: ExpansionError for a variable that is not set.
    """
    spec, name = entry.spec, entry.name

    def x(text: str, where: str) -> str:
        return expand(text, f"mcp.{name}.{where}", environ)

    if spec.url is not None:
        url = x(spec.url, "url")
        if not _HTTP_URL.match(url):
            raise ExpansionError(
                f"mcp.{name}.url expands to {url!r}, which is not an http:// or https:// URL"
            )
        headers = {k: x(v, f"headers.{k}") for k, v in spec.headers.items()}
        key = _digest({"url": url, "headers": headers, "transport": spec.transport})
        return ResolvedServer(entry, spec.transport, url=url, headers=headers, key=key)
    program = x(spec.command or "", "command")
    if "/" in program and not Path(program).is_absolute():
        program = str((entry.base_dir / program).resolve())
    argv = [program, *(x(a, f"args[{i}]") for i, a in enumerate(spec.args))]
    source = os.environ if environ is None else environ
    env = {k: source[k] for k in (*INHERITED_ENV, *entry.pass_env) if k in source}
    env.update({k: x(v, f"env.{k}") for k, v in spec.env.items()})
    cwd = entry.base_dir / Path(x(spec.cwd, "cwd")).expanduser() if spec.cwd else entry.default_cwd
    box = spec.sandbox
    sandbox = None if box.mode in (None, "off") else [box.mode, box.writable, box.network]
    key = _digest({"argv": argv, "env": env, "cwd": str(cwd), **({"sandbox": sandbox} if sandbox else {})})
    return ResolvedServer(entry, "stdio", argv=argv, env=env, cwd=cwd, key=key)


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:24]
