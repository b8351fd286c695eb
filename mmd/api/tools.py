"""The ``tools.*``, ``skills.*`` and ``stats.*`` methods: what the model would see, agent-file checks, telemetry."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import trio

from ..config.trust import everything
from ..models.tokens import estimate
from ..rpc.methods import SkillsList, Stats, ToolsCheck, ToolsList
from ..rpc.results import SkillInfo, SkillsListed, ToolInfo, ToolsChecked, ToolsListed, ToolStat, ToolStats
from ..tools.skills import Catalogue
from ..turn import plan

if TYPE_CHECKING:
    from ..server.connection import Connection
    from ..server.daemon import Daemon


async def list_(daemon: Daemon, conn: Connection, p: ToolsList) -> ToolsListed:
    """Every tool the model would be offered in *cwd*, with its tier, source and exact schema."""
    cwd = Path(p.cwd)
    confined = conn.confined  # starts no MCP server (sandbox.CONFINED_CLIENT_MCP)
    trust = daemon.project_trust(conn, cwd, p.agent)
    # In a worker thread: parsing a big or hostile agent file must not stall other clients.
    agent, config, _ = await trio.to_thread.run_sync(plan.load, cwd, p.agent, daemon.config_path, trust)
    mcp_tools, mcp_warnings = await daemon.mcp.tools(agent, config, confined_client=confined)
    registry, skills, warnings = await trio.to_thread.run_sync(plan.build_tools, agent, cwd, mcp_tools)
    warnings = [*plan.trust_warnings(trust.untrusted, cwd), *mcp_warnings, *warnings]
    specs = {spec.name: spec for spec in registry.specs()}
    box = plan.turn_sandbox(agent, cwd, user=config.sandbox, config_file=config.path)
    tools = [
        ToolInfo(
            name=tool.name,
            tier=tool.tier,
            source=tool.source,
            description=specs[tool.name].description,
            parameters=specs[tool.name].parameters,
            sandbox=tool.sandbox_label(box),
        )
        for tool in registry.tools.values()
    ]
    return ToolsListed(agent=agent.path, tools=tools, skills=skills.names(), warnings=warnings)


async def skills_list(daemon: Daemon, conn: Connection, p: SkillsList) -> SkillsListed:
    """Every skill a prompt in *cwd* would be offered, in priority order, with where it is from and its cost."""
    cwd = Path(p.cwd)
    trust = daemon.project_trust(conn, cwd, p.agent)
    agent, _ = await trio.to_thread.run_sync(plan.load_agent, cwd, p.agent, trust)
    # The same build as a turn's, so the list and the turn agree (in a worker thread: it reads files).
    _, skills, warnings = await trio.to_thread.run_sync(plan.build_tools, agent, cwd, [])
    warnings = [*plan.trust_warnings(trust.untrusted, cwd), *warnings]
    with plan.path_errors():
        dirs = plan.skill_folders(agent, cwd)
    return SkillsListed(
        agent=agent.path, skills=_skill_infos(skills), folders=[str(d.path) for d in dirs], warnings=warnings
    )


def _skill_infos(skills: Catalogue) -> list[SkillInfo]:
    return [
        SkillInfo(
            name=s.name,
            description=s.description,
            source=s.source,
            folder=str(s.folder),
            tokens=estimate(skills.line(s)),  # its line in the system prompt, as the model reads it
            body_tokens=estimate(s.body),
            allowed_tools=list(s.allowed_tools) if s.allowed_tools is not None else None,
        )
        for s in skills.skills.values()
    ]


async def check(daemon: Daemon, conn: Connection, p: ToolsCheck) -> ToolsChecked:
    # The file named is only read, its tools named: nothing of it runs, so it needs no trust.
    agent, _ = await trio.to_thread.run_sync(plan.load_agent, Path(p.agent).parent, p.agent, everything())
    return ToolsChecked(agent=agent.path, tools=[t.name for t in agent.tools])


async def stats(daemon: Daemon, conn: Connection, p: Stats) -> ToolStats:
    session_id = daemon.find_session(p.session_id)[0].id if p.session_id else None
    return ToolStats(tools=[ToolStat(**row) for row in daemon.store.tool_stats(session_id)])


METHODS = {
    "tools.list": (ToolsList, list_),
    "tools.check": (ToolsCheck, check),
    "skills.list": (SkillsList, skills_list),
    "stats.tools": (Stats, stats),
}
