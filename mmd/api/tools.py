"""The ``tools.*`` and ``stats.*`` methods: what the model would see, agent-file checks, telemetry."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from ..config import AgentFile, ConfigError, find_agent_file, load_agent_file
from ..rpc import RPCError
from ..turn.plan import build_tools

if TYPE_CHECKING:
    from ..server.connection import Connection
    from ..server.daemon import Daemon


class ToolsList(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    cwd: str
    agent: str | None = None


class ToolsCheck(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    agent: str


class Stats(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    session_id: str | None = None


def _agent(cwd: Path, path: str | None) -> AgentFile:
    try:
        found = find_agent_file(cwd, path)
        return load_agent_file(found) if found else AgentFile()
    except ConfigError as exc:
        raise RPCError("config_error", str(exc)) from None


async def list_(daemon: Daemon, conn: Connection, p: ToolsList) -> dict[str, Any]:
    """Every tool the model would be offered in *cwd*, with its tier, source and exact schema."""
    cwd = Path(p.cwd)
    from .mcp import load

    # In a worker thread: parsing a big or hostile agent file must not stall other clients.
    agent, config = await trio.to_thread.run_sync(load, daemon, cwd, p.agent)
    mcp_tools, mcp_warnings = await daemon.mcp.tools(agent, config)
    registry, skills, warnings = build_tools(agent, cwd, mcp_tools)
    warnings = [*mcp_warnings, *warnings]
    specs = {spec.name: spec for spec in registry.specs()}
    tools = [
        {
            "name": tool.name,
            "tier": tool.tier,
            "source": tool.source,
            "description": specs[tool.name].description,
            "parameters": specs[tool.name].parameters,
        }
        for tool in registry.tools.values()
    ]
    return {"agent": agent.path, "tools": tools, "skills": skills.names(), "warnings": warnings}


async def check(daemon: Daemon, conn: Connection, p: ToolsCheck) -> dict[str, Any]:
    agent = await trio.to_thread.run_sync(_agent, Path(p.agent).parent, p.agent)
    return {"agent": agent.path, "tools": [t.name for t in agent.tools]}


async def stats(daemon: Daemon, conn: Connection, p: Stats) -> dict[str, Any]:
    session_id = daemon.session(p.session_id).id if p.session_id else None
    return {"tools": daemon.store.tool_stats(session_id)}


METHODS = {
    "tools.list": (ToolsList, list_),
    "tools.check": (ToolsCheck, check),
    "stats.tools": (Stats, stats),
}
