"""The ``mcp.*`` methods: the MCP servers an agent uses, their state, and a test of one."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from ..config import AgentFile, ConfigError, UserConfig, find_agent_file, load_agent_file, load_user_config
from ..config.loader import did_you_mean
from ..mcp.config import ExpansionError, ServerEntry, resolve, servers_for
from ..mcp.pool import McpCallError, McpUnavailable
from ..mcp.tool import admit, estimate_tokens, make_tools, taken_names
from ..rpc import RPCError
from ..tools.registry import Registry
from ..turn.plan import build_tools

if TYPE_CHECKING:
    from ..server.connection import Connection
    from ..server.daemon import Daemon


class McpList(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    cwd: str
    agent: str | None = None


class McpTest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    name: str
    cwd: str
    agent: str | None = None


def load(daemon: Daemon, cwd: Path, agent_path: str | None) -> tuple[AgentFile, UserConfig]:
    """The agent file for *cwd* and the user config, as a prompt there would read them.

    Blocking (it parses YAML): the methods call it in a worker thread.

    Errors: RPCError("config_error") naming the file, line and field.
    """
    try:
        found = find_agent_file(cwd, agent_path)
        agent = load_agent_file(found) if found else AgentFile()
        return agent, load_user_config(daemon.config_path)
    except ConfigError as exc:
        raise RPCError("config_error", str(exc)) from None


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


async def list_(daemon: Daemon, conn: Connection, p: McpList) -> dict[str, Any]:
    """The servers configured for *cwd* (config.yaml's, then the agent file's) and their connections.

    Lists only: it connects nothing.
    """
    agent, config = await trio.to_thread.run_sync(load, daemon, Path(p.cwd), p.agent)
    servers = []
    for entry in servers_for(agent, config):
        row = _describe(entry)
        try:
            found = daemon.mcp.connections.get(resolve(entry).key)
        except ExpansionError as exc:
            row.update(state="config_error", error=str(exc))
        else:
            row.update(found.status() if found is not None else {"state": "not connected", "error": None})
        servers.append(row)
    return {"agent": agent.path, "config": config.path, "servers": servers}


async def test(daemon: Daemon, conn: Connection, p: McpTest) -> dict[str, Any]:
    """Connect to one server and say exactly which tools its allowlist exposes, with their cost.

    Uses the daemon's shared connection (connecting now if it is down) and
    lists the tools afresh. ``ok`` is false when the server cannot be reached.
    Clashes are checked against this agent's built-in and declared tools.
    """
    cwd = Path(p.cwd)
    agent, config = await trio.to_thread.run_sync(load, daemon, cwd, p.agent)
    entries = {e.name: e for e in servers_for(agent, config)}
    entry = entries.get(p.name)
    if entry is None:
        hint = did_you_mean(p.name, entries)
        known = ", ".join(entries) or "none"
        raise RPCError(
            "no_server",
            f'no MCP server "{p.name}" here' + (f" — {hint}" if hint else "") + f" (configured: {known})",
        )
    out: dict[str, Any] = {**_describe(entry), "ok": False, "tools": [], "tokens": 0, "warnings": []}
    if not entry.spec.enabled:
        out["warnings"].append(
            f"MCP server {entry.name} is disabled (enabled: false): the model is not offered its tools"
        )
    try:
        server = resolve(entry)
        pooled = daemon.mcp.connection(server)
        reused = pooled.state == "ready"
        await pooled.refresh(entry.spec.connect_timeout)
    except (ExpansionError, McpUnavailable, McpCallError) as exc:
        out["error"] = str(exc)
        return out
    except Exception as exc:  # a listing the server broke; never an RPC crash
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    tools, warnings = make_tools(entry, pooled)
    base, _, _ = build_tools(agent, cwd)
    kept, clashes = admit(tools, taken_names(list(base.tools.values())))
    specs = Registry(kept, strict=agent.schema == "strict").specs()
    rows = []
    for tool, spec in zip(kept, specs, strict=True):
        rows.append(
            {
                "name": tool.name,
                "remote_name": tool.remote_name,
                "tier": tool.tier,
                "tokens": estimate_tokens(spec),
                "description": spec.description,
            }
        )
    info = pooled.server_info
    out.update(
        ok=True,
        error=None,
        reused=reused,
        connect_seconds=pooled.connect_seconds,
        connects=pooled.connects,
        pid=pooled.pid,
        protocol=pooled.protocol,
        server={"name": getattr(info, "name", None), "version": getattr(info, "version", None)},
        offered=len(pooled.tools),
        tools=rows,
        tokens=sum(r["tokens"] for r in rows),
        warnings=[*out["warnings"], *warnings, *clashes],
    )
    return out


METHODS = {
    "mcp.list": (McpList, list_),
    "mcp.test": (McpTest, test),
}
