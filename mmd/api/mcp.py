"""The ``mcp.*`` methods: the MCP servers an agent uses, their state, and a test of one."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from .. import sandbox
from ..config.loader import did_you_mean
from ..config.mcp import ExpansionError, ServerEntry, resolve, servers_for
from ..mcp.errors import McpCallError, McpUnavailable
from ..mcp.pool import McpConnection
from ..mcp.tool import McpTool, admit, estimate_tokens, make_tools, taken_names
from ..models.base import ToolSpec
from ..rpc import RPCError
from ..rpc.methods import McpList, McpTest
from ..rpc.results import McpServerInfo, McpServers, McpServerState, McpTested, McpToolInfo
from ..tools.registry import Registry
from ..turn import plan

if TYPE_CHECKING:
    from ..server.connection import Connection
    from ..server.daemon import Daemon


def _describe(entry: ServerEntry) -> dict[str, Any]:
    spec = entry.spec
    return {
        "name": entry.name,
        "origin": entry.origin,
        "enabled": spec.enabled,
        "transport": spec.transport,
        "target": spec.url if spec.url is not None else " ".join([spec.command or "", *spec.args]),
        "include": spec.tools.include,
        "exclude": spec.tools.exclude,
    }


async def list_(daemon: Daemon, conn: Connection, p: McpList) -> McpServers:
    """The servers configured for *cwd* (config.yaml's, then the agent file's) and their connections.

    Lists only: it connects nothing.
    """
    cwd = Path(p.cwd)
    trust = daemon.project_trust(conn, cwd, p.agent)
    agent, config, _ = await trio.to_thread.run_sync(plan.load, cwd, p.agent, daemon.config_path, trust)
    servers = [_state(daemon, entry) for entry in servers_for(agent, config)]
    warnings = plan.trust_warnings(trust.untrusted, cwd)
    return McpServers(agent=agent.path, config=config.path, servers=servers, warnings=warnings)


def _state(daemon: Daemon, entry: ServerEntry) -> McpServerState:
    """A row of mcp.list: the connection's facts only when the daemon has one."""
    try:
        found = daemon.mcp.connections.get(resolve(entry).key)
    except ExpansionError as exc:
        return McpServerState(**_describe(entry), state="config_error", error=str(exc))
    if found is None:
        return McpServerState(**_describe(entry), state="not connected", error=None)
    return McpServerState(**_describe(entry), **found.status())


async def test(daemon: Daemon, conn: Connection, p: McpTest) -> McpTested:
    """Connect to one server and say exactly which tools its allowlist exposes, with their cost.

    Uses the daemon's shared connection (connecting now if it is down) and
    lists the tools afresh. ``ok`` is false when the server cannot be reached.
    Clashes are checked against this agent's built-in and declared tools.
    """
    if conn.confined:
        raise RPCError("confined_client", sandbox.CONFINED_CLIENT_MCP)
    cwd = Path(p.cwd)
    trust = daemon.project_trust(conn, cwd, p.agent)
    agent, config, _ = await trio.to_thread.run_sync(plan.load, cwd, p.agent, daemon.config_path, trust)
    entries = {e.name: e for e in servers_for(agent, config)}
    entry = entries.get(p.name)
    if entry is None:
        hint = did_you_mean(p.name, entries)
        known = ", ".join(entries) or "none"
        left_out = "".join(f"; {w}" for w in plan.trust_warnings(trust.untrusted, cwd))
        raise RPCError(
            "no_server",
            f'no MCP server "{p.name}" here'
            + (f" — {hint}" if hint else "")
            + f" (configured: {known}){left_out}",
        )
    out = McpTested(**_describe(entry), ok=False, tools=[], tokens=0, warnings=[])
    if not entry.spec.enabled:
        out.warnings.append(
            f"MCP server {entry.name} is disabled (enabled: false): the model is not offered its tools"
        )
    try:
        server = resolve(entry)
        pooled = daemon.mcp.connection(server)
        reused = pooled.state == "ready"
        await pooled.refresh(entry.spec.connect_timeout)
    except (ExpansionError, McpUnavailable, McpCallError) as exc:
        out.error = str(exc)
        return out
    except Exception as exc:  # a listing the server broke; never an RPC crash
        out.error = f"{type(exc).__name__}: {exc}"
        return out
    tools, warnings = make_tools(entry, pooled)
    base, _, _ = await trio.to_thread.run_sync(plan.build_tools, agent, cwd)  # it reads the skills
    kept, clashes = admit(tools, taken_names(list(base.tools.values())))
    specs = Registry(kept, strict=agent.schema == "strict").specs()
    _reached(out, pooled, reused, [_tool_row(tool, spec) for tool, spec in zip(kept, specs, strict=True)])
    out.warnings = [*out.warnings, *warnings, *clashes]
    return out


def _tool_row(tool: McpTool, spec: ToolSpec) -> McpToolInfo:
    """One tool a test exposes (an McpTool and its ToolSpec), with its estimated cost."""
    return McpToolInfo(
        name=tool.name,
        remote_name=tool.remote_name,
        tier=tool.tier,
        tokens=estimate_tokens(spec),
        description=spec.description,
    )


def _reached(out: McpTested, pooled: McpConnection, reused: bool, rows: list[McpToolInfo]) -> None:
    """Fill in what only a server that answered tells: its connection, its identity, the tools kept."""
    info = pooled.server_info
    out.ok, out.error, out.reused = True, None, reused
    out.connect_seconds, out.connects, out.pid = pooled.connect_seconds, pooled.connects, pooled.pid
    out.protocol = pooled.protocol
    out.server = McpServerInfo(name=getattr(info, "name", None), version=getattr(info, "version", None))
    out.offered = len(pooled.tools)
    out.tools, out.tokens = rows, sum(r.tokens for r in rows)


METHODS = {
    "mcp.list": (McpList, list_),
    "mcp.test": (McpTest, test),
}
