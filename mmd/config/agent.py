"""The agent file: which model, what it is told, which tools and skills it gets.

Found in the project (``./mm.yaml`` or ``./.mm/agent.yaml``) or named with
``--agent``; without one, every key takes its default. Relative paths in the
file are relative to the file's own directory, so an agent folder can be
moved or shared as a whole.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, ClassVar, Literal

import msgspec

from .. import paths
from ..tools.builtin import BUILTIN_TOOLS
from . import loader
from .declared import DeclaredToolSpec
from .declared_check import check_tool_count, check_tools
from .hooks import HooksSpec, check_hooks, hook_commands
from .loader import ConfigError, Document
from .mcp import KEY_HINTS, McpServerSpec, check_servers, server_commands
from .sandbox import SandboxSpec, absolute, normalise
from .trust import command_text, listing, settings_text
from .turns import LoopLimits, PhaseSpec, check_phases

# A name of the built-in tools' table (mmd/tools/builtin/__init__.py), checked when the file is read.
BuiltinName = Literal[BUILTIN_TOOLS]  # type: ignore[valid-type]
# Where the agent file is looked for in the working directory, first found wins.
_DISCOVERED = ("mm.yaml", ".mm/agent.yaml")
# Most entries under skills:. Each is a folder of any number of skills, so an agent names a few. skills: is
# no power (nothing runs), so a cloned repository's file is read without trust, and every prompt looks at
# each folder and warns about each missing one: 20,000 entries were ~300 MiB of the daemon's cache.
MAX_SKILL_FOLDERS = 64
# Prefix of a model reference that replays a script (mmd.models.factory): the script, not the person's
# model, then answers, and what it answers mm does. Named by a project's file, it is a power (powers()).
SCRIPTED = "scripted:"


class AgentFile(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    model: Annotated[str | None, msgspec.Meta(description='a string like "provider/model"')] = None
    system: Annotated[str | None, msgspec.Meta(description="a string: what the model is told first")] = None
    yolo: bool = False  # run write tools without asking (destructive ones still ask)
    # None: every built-in. A list: only these (may be empty).
    builtins: Annotated[
        list[BuiltinName] | None,
        msgspec.Meta(description="a list of built-in tool names, like [bash, read_file]"),
    ] = None
    # Skill folders; absolute after loading.
    skills: list[Annotated[str, msgspec.Meta(description="a path to a skills folder")]] = []
    max_steps: Annotated[int, msgspec.Meta(ge=1)] | None = None  # model steps per turn; None: the daemon's
    # Sampling temperature sent with every model step (0: greedy, repeatable); None: the server's default.
    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] | None = None
    # Declared tools: one argv command each, typed (docs/declared-tools.md).
    tools: list[DeclaredToolSpec] = []
    # "strict" keeps required/enum keywords in the schemas, for providers that enforce them.
    schema: Literal["loose", "strict"] = "loose"
    # How a tool's example is shown in its description: its real values, or a placeholder per parameter
    # ("<one of: stable, beta>") that a small model cannot copy as a call (docs/loops-and-recovery.md).
    tool_examples: Literal["values", "placeholders"] = "placeholders"
    # MCP servers by name (docs/mcp.md); they add to, and by name replace, config.yaml's.
    mcp: dict[str, McpServerSpec] = {}
    # The loop detector's thresholds (docs/loops-and-recovery.md).
    loop: LoopLimits = msgspec.field(default_factory=LoopLimits)
    # Phases: only the current phase's tools are offered; next_phase moves on (docs/loops-and-recovery.md).
    phases: list[PhaseSpec] = []
    # Hooks by event, mm's shape or Claude Code's (docs/hooks.md); they run after config.yaml's.
    hooks: HooksSpec = msgspec.field(default_factory=HooksSpec)
    # Variables of the daemon's environment handed on to tools, hooks and MCP stdio servers
    # although they hold secrets (else withheld: mmd/procs/environ.py).
    pass_env: list[
        Annotated[
            str,
            msgspec.Meta(
                pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                description="the name of an environment variable, like GITHUB_TOKEN",
            ),
        ]
    ] = []
    # What the processes of a turn may write and reach (docs/security.md#sandbox); --sandbox overrides the mode.
    sandbox: SandboxSpec = msgspec.field(default_factory=SandboxSpec)
    # The file this was loaded from, absolute; None for the defaults. Not a key of the file.
    path: str | None = None
    # The line of each skills: entry, for the warning about a folder that does not exist. Not a key.
    skills_lines: list[int | None] = []
    # The SHA-256 of the text read (config/trust.py: what `mm trust` records). Not a key.
    digest: str = ""

    set_by_loader: ClassVar[frozenset[str]] = frozenset({"path", "skills_lines", "digest"})
    key_hints: ClassVar[dict[str, str]] = KEY_HINTS  # mcpServers: Claude Code's .mcp.json shape

    @property
    def base_dir(self) -> Path | None:
        """The directory relative paths in the file start from; None for the defaults."""
        return Path(self.path).parent if self.path else None


def powers(agent: AgentFile) -> list[str]:
    """What *agent* would make mm run, or let through its guards, that no one is asked about — each
    command whole, as it would run (trust.shown bounds what is shown): empty for a file of words, choices
    and limits (config/trust.py). A ``scripted:`` model is one: the file's script would answer in place of the
    person's model, and its tool calls are the calls of the turn (under ``--yolo``, run unasked)."""
    found = [_tool_line(tool) for tool in agent.tools]
    found += hook_commands(agent.hooks)
    found += server_commands(agent.mcp)
    if agent.model is not None and agent.model.startswith(SCRIPTED):
        found.append(f"model {agent.model}: the file's own script answers in place of your model")
    if agent.yolo:
        found.append("yolo: write tools run without asking")
    if agent.pass_env:
        found.append(f"pass_env: {listing(agent.pass_env)} handed to commands")
    if agent.sandbox.mode == "off":
        found.append("sandbox: off")
    if agent.sandbox.writable:
        found.append(f"sandbox.writable: {listing(agent.sandbox.writable)}")
    found += [
        f"skills: {folder}, outside the project: its skills go to your model and the file tools read it unasked"
        for folder in outside_skills(agent.path, agent.skills, paths.config_dir())
    ]
    return found


def agent_project(agent_file: str | None, config_dir: Path) -> Path | None:
    """The project an agent file's ``skills:`` belong to (the repository holding the file: its folder up
    to ``.git``, else its folder), None when the file is the user's: none, or in the user's config folder.

    A cloned repository's ``mm.yaml`` needs no trust to name skills, and a skill's text goes to the model
    and its folder is one the file tools read without asking: ``skills: [~/work/other/.claude/skills]``
    read another project's files unasked, ``skills: [./s]`` with ``s/x`` linked out the same."""
    if agent_file is None:
        return None
    if Path(os.path.realpath(agent_file)).is_relative_to(os.path.realpath(config_dir)):
        return None
    return paths.project_root(Path(agent_file).parent)


def outside_skills(agent_file: str | None, skills: Sequence[str], config_dir: Path) -> list[str]:
    """The ``skills:`` folders of a project's agent file that lead out of its project (symbolic links
    resolved), as they resolve: each is a power of the file, asked about before the file is used."""
    root = agent_project(agent_file, config_dir)
    if root is None:
        return []
    return [os.path.realpath(p) for p in skills if skills_confine(p, root) is None]


def skills_confine(path: str, root: Path | None) -> Path | None:
    """What an agent file's skills folder at *path* is confined to: *root* when it is inside (a link in it
    that leads out is then no skill, as in the project's own folders); None when the file is the user's,
    or the folder leads out (the file was trusted with it as a power: :func:`outside_skills`)."""
    if root is None:
        return None
    real, top = os.path.realpath(path), os.path.realpath(root)
    return root if os.path.commonpath([real, top]) == top else None


def _tool_line(tool: DeclaredToolSpec) -> str:
    """A declared tool as a power: its command, where and with what it runs, and its dry run's command."""
    line = f"declared tool {tool.name}: runs {command_text(tool.command)}" + settings_text(tool.cwd, tool.env)
    if tool.dry_run:
        line += f"; its dry run runs {command_text(tool.dry_run)}"
    return line


def find_agent_file(cwd: Path, explicit: str | None) -> Path | None:
    """The agent file for a prompt run in ``cwd``, or None to use the defaults.

    ``explicit`` (``--agent``; relative to ``cwd``, ``~`` allowed) wins and must
    exist; else ``cwd/mm.yaml``, else ``cwd/.mm/agent.yaml``.

    Errors: ConfigError if ``explicit`` names no file.
    """
    if explicit:
        path = cwd / Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(
                file=path,
                line=None,
                field="",
                problem="agent file not found",
                hint="check the path (a relative one starts at the working directory), "
                "or leave out --agent to use ./mm.yaml or ./.mm/agent.yaml",
            )
        return path
    return next((cwd / name for name in _DISCOVERED if (cwd / name).is_file()), None)


def check_link(path: Path) -> None:
    """Refuse an agent file reached through a symbolic link out of its project and the user's config folder
    (loader.check_link); any other file is named as itself (``--agent``), never through a link the project
    ships.

    Errors: ConfigError naming the link and where it leads, and quoting nothing of the target.
    """
    loader.check_link(path, what="an agent file", hint="name the file itself with --agent, or copy it here")


def load_agent_file(path: Path) -> AgentFile:
    """Read the agent file at ``path``; skill paths come back absolute.

    Errors: ConfigError naming the file, line and key of the first problem:
    a symbolic link out of the project (:func:`check_link`), unreadable file, bad YAML, a file past a size, nesting or value limit
    (config.loader, mmd.untrusted), more than MAX_TOOLS declared tools or MAX_SKILL_FOLDERS skills folders,
    unknown key, wrong type, unknown built-in, or a declared tool that fails
    its load-time checks (see config.declared_check).
    """
    path = Path(path).absolute()
    check_link(path)
    return loader.remembered(path, _load)


def _load(path: Path, doc: Document) -> AgentFile:
    check_tool_count(doc)
    check_skill_count(doc)
    normalise_sandboxes(doc)
    agent = doc.convert(AgentFile)
    check_tools(doc, agent.tools, BUILTIN_TOOLS)
    check_servers(doc, agent.mcp)
    check_phases(doc, agent.phases)
    check_hooks(doc, agent.hooks)
    skills = [os.path.normpath(path.parent / Path(skill).expanduser()) for skill in agent.skills]
    lines = [doc.line(("skills", i)) for i in range(len(skills))]
    return msgspec.structs.replace(
        agent,
        skills=skills,
        skills_lines=lines,
        path=str(path),
        digest=doc.digest,
        sandbox=absolute(agent.sandbox, path.parent),
        mcp={
            name: msgspec.structs.replace(s, sandbox=absolute(s.sandbox, path.parent))
            for name, s in agent.mcp.items()
        },
    )


def check_skill_count(doc: Document) -> None:
    """Refuse more than MAX_SKILL_FOLDERS entries under ``skills:``, before they are checked one by one.

    Errors: ConfigError at the line of the first folder past the limit.
    """
    hint = (
        "a folder holds any number of skills (a subfolder each): gather them in fewer folders, "
        "or list the others in another agent file (--agent FILE)"
    )
    doc.refuse_past("skills", MAX_SKILL_FOLDERS, "skills folders listed", hint)


def normalise_sandboxes(doc: Document) -> None:
    """The short ``sandbox: MODE`` of the file and of its MCP servers as maps (config/sandbox.py)."""
    normalise(doc, ("sandbox",))
    servers = doc.data.get("mcp") if isinstance(doc.data, dict) else None
    if isinstance(servers, dict):
        for name in servers:
            normalise(doc, ("mcp", name, "sandbox"))
