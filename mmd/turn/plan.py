"""Everything one turn needs, resolved in one place from the prompt, the agent file and the config.

:func:`load` finds and reads the agent file and config.yaml; :func:`resolve`
picks the model; :func:`build_tools` makes the tool set (built-ins, declared,
MCP) and the skills catalogue; :func:`assemble` puts a :class:`TurnSetup`
together. The daemon's prompts, ``tools.list``, ``mcp.*`` and ``eval.load`` all
use these, so what a turn offers and what the admin commands show agree.
Resolved afresh for every prompt, so an edited agent file or config.yaml
applies to the next turn without restarting the daemon.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

import msgspec

from .. import paths
from ..config import AgentFile, ConfigError, UserConfig, find_agent_file, load_agent_file, load_user_config
from ..config.agent import powers
from ..config.hooks import HooksSpec, claude_settings_files, claude_settings_hooks
from ..config.mcp_json import add_mcp_files
from ..config.sandbox import SandboxSpec
from ..config.secrets import credential_variables, secret_variables
from ..config.trust import Trust, Untrusted, warning
from ..config.turns import LoopLimits, PhaseSpec
from ..local import catalog as local_catalog
from ..mcp.tool import McpTool, admit, taken_names
from ..models.base import Message, Provider
from ..models.factory import ModelRef
from ..policy.hooks import Hooks, merged_hooks
from ..procs.environ import withhold
from ..rpc import RPCError
from ..sandbox import CONFINED_CLIENT_WARNING, DEFAULT_MODE, Sandbox, unavailable_reason
from ..tools.allowed import Limit
from ..tools.base import Limits
from ..tools.builtin import make_builtins
from ..tools.declared import declared_tools
from ..tools.registry import Registry
from ..tools.skillcmds import Commands
from ..tools.skilldirs import missing_configured, skill_dirs
from ..tools.skills import Catalogue, SkillDir, load_skills
from .budget import Budget

DEFAULT_SYSTEM = (
    "You are mm, an assistant that acts on the user's machine through tools. "
    "Use a tool when the request needs one; give each parameter as its own field. "
    "When you are done, answer briefly in plain text."
)


class TurnSetup(msgspec.Struct, kw_only=True):
    provider: Provider
    model_name: str
    system: str
    registry: Registry
    yolo: bool = False
    max_steps: int = 50
    temperature: float | None = None  # the agent file's; None: the server's default
    limits: Limits = msgspec.field(default_factory=Limits)
    skills: Catalogue | None = None
    warnings: list[str] = msgspec.field(default_factory=list)  # e.g. a skipped skill; sent as warning events
    # Loops, text-written calls and phases (docs/loops-and-recovery.md).
    recover_tool_calls: bool = False  # the model's; see mmd.models.recovery
    choose_skills: bool = False  # choose and read the turn's skill first (mmd/turn/skillpick.py)
    ground_values: bool = False  # a declared or MCP tool's names must come from the session (grounding.py)
    words_after_success: bool = False  # the step after calls that all succeeded starts with words (loop.py)
    act_first: bool = False  # the turn's first step is one call: a chosen skill says how (skillpick.py)
    loop: LoopLimits = msgspec.field(default_factory=LoopLimits)
    phases: list[PhaseSpec] = msgspec.field(default_factory=list)  # mmd.turn.phases narrows the registry
    hooks: Hooks | None = None  # the turn's hooks, by event (docs/hooks.md)
    # Secret-looking variables of the daemon's environment the agent hands on to its children.
    pass_env: tuple[str, ...] = ()
    # What the turn's processes may write and reach (mmd/sandbox); None in setups made by hand (tests).
    sandbox: Sandbox | None = None
    # Why this kernel cannot enforce ``sandbox``: write tools that run a process are then refused.
    sandbox_missing: str | None = None
    # The model's window and token counter (mmd/turn/context.py); None: no budget is kept.
    budget: Budget | None = None
    # Checkpoints of the working tree around write calls, for mm undo (mmd/undo): the most files a
    # snapshot may hold (daemon.snapshot_max_files); 0: none are taken.
    snapshot_max_files: int = 0
    snapshot_watch: bool = True  # daemon.snapshot_watch: a tree nothing changed in is snapshotted without git
    # The allowed-tools of the skill in use, and the registry before it narrowed it (mmd/turn/skilluse.py).
    skill_limit: Limit | None = None
    unlimited: Registry | None = None
    # The commands the skill in use names, which its bash calls are checked against (mmd/tools/skillcmds.py).
    skill_commands: Commands | None = None
    # Offer those commands as typed tools (the models mm constrains), and the names of the ones offered.
    skill_tools: bool = False
    skill_tool_names: tuple[str, ...] = ()
    # The system message of the last request: the same object while ``system`` is the same, so that
    # what providers keep of a request's messages by identity (its wire form) holds across steps.
    system_message: Message | None = None

    def request_messages(self, history: list[Message]) -> list[Message]:
        first = self.system_message
        if first is None or first.content != self.system:
            first = self.system_message = Message(role="system", content=self.system)
        return [first, *history]

    def skill_names(self) -> list[str]:
        """The skills the model can read now (none when read_skill is not offered)."""
        if self.skills is None or "read_skill" not in self.registry.names():
            return []
        return self.skills.names()

    def recoverable_names(self) -> list[str]:
        """Names a call written as text may carry: the tools, and the skills, which small models
        call as if they were tools; such a call is answered with how to read the skill."""
        return [*self.registry.names(), *self.skill_names()]


def system_prompt(base: str | None, cwd: Path, skills_text: str) -> str:
    parts = [base or DEFAULT_SYSTEM, f"Working directory: {cwd}"]
    if skills_text:
        parts.append(skills_text)
    return "\n\n".join(parts)


def skill_folders(agent: AgentFile, cwd: Path) -> list[SkillDir]:
    """Every folder searched for skills in *cwd* under *agent*, in priority order (tools/skilldirs.py): the
    turn's and ``mm skills list``'s. Errors: OSError where *cwd* cannot be read (see :func:`path_errors`)."""
    return skill_dirs(
        cwd,
        config_dir=paths.config_dir(),
        home=paths.home(),
        agent_skills=agent.skills,
        agent_file=agent.path,
    )


def build_tools(
    agent: AgentFile, cwd: Path, mcp_tools: list[McpTool] | None = None
) -> tuple[Registry, Catalogue, list[str]]:
    """The tools and skills an agent offers in *cwd*, and warnings about skipped skills.

    Built-ins first, then declared tools; the agent file's load-time checks
    already refused a declared tool that takes a built-in's name. Then the
    MCP tools the daemon's pool fetched (``McpPool.tools``): one whose name is
    taken by a built-in (even off) or a declared tool is skipped with a warning.

    Errors: RPCError bad_path when *cwd* cannot be read (:func:`path_errors`).
    """
    with path_errors():
        skills, warnings = load_skills(skill_folders(agent, cwd))
    warnings = [*missing_configured(agent.path, agent.skills, agent.skills_lines), *warnings]
    base_dir = agent.base_dir or cwd
    tools = [
        *make_builtins(agent.builtins, skills),
        *declared_tools(agent.tools, base_dir),
    ]
    kept, clashes = admit(mcp_tools or [], taken_names(tools))
    registry = Registry(
        [*tools, *kept], strict=agent.schema == "strict", placeholders=agent.tool_examples == "placeholders"
    )
    return registry, skills, [*warnings, *clashes]


class Plan(msgspec.Struct, kw_only=True):
    """What a prompt resolved to before anything starts: files read, model chosen."""

    cwd: Path
    config: UserConfig
    config_path: Path
    agent: AgentFile
    agent_path: str | None
    model: ModelRef
    yolo: bool = False
    sandbox: str | None = None  # --sandbox: the mode, over the agent file's
    # The client that sent the prompt runs with no_new_privs (a sandboxed command, most likely):
    # its turn is read-only with no network, whatever the agent file and --sandbox say.
    confined_client: bool = False
    # Claude Code's settings files' hooks (`import: claude`), each with its folder, and what was skipped.
    claude_hooks: list[tuple[HooksSpec, Path]] = msgspec.field(default_factory=list)
    hook_warnings: list[str] = msgspec.field(default_factory=list)
    # The project's files left out because they name commands and are not trusted (config/trust.py).
    untrusted: list[Untrusted] = msgspec.field(default_factory=list)


def load_agent(cwd: Path, agent_path: str | None, trust: Trust) -> tuple[AgentFile, Path | None]:
    """The agent file for *cwd* (or *agent_path*), and where it was found (None: no file, defaults). A
    file *trust* does not admit is read as none (config/trust.py) and left in ``trust.untrusted``.

    Blocking (it parses YAML): async callers run it in a worker thread.

    Errors: RPCError("config_error") naming the file, line and field; RPCError("bad_path") when *cwd* or
    *agent_path* cannot be read (:func:`path_errors`).
    """
    try:
        with path_errors():
            found = find_agent_file(cwd, agent_path)
            agent = load_agent_file(found) if found else AgentFile()
    except ConfigError as exc:
        raise RPCError("config_error", str(exc)) from None
    if found and not trust.admits(found, agent.digest, powers(agent), by_name=agent_path is not None):
        return AgentFile(), None
    return agent, found


# What to do about a path that cannot be read, by errno.
_PATH_HINTS = {
    errno.ENAMETOOLONG: "a name in a path is at most 255 bytes, and a whole path 4,095: check the path given",
    errno.ELOOP: "a symbolic link in it leads round in a loop (or through too many links): fix or remove the link",
    errno.EACCES: "you may not read it: check its permissions",
    errno.EPERM: "you may not read it: check its permissions",
}


@contextlib.contextmanager
def path_errors() -> Iterator[None]:
    """An OSError reading what a request names (its cwd, its agent file, the folders beneath) answered as
    ``bad_path``, naming the path and the reason: never a daemon error with a traceback. (A file that is
    not there is no error to the readers: no agent file means the defaults.)"""
    try:
        yield
    except OSError as exc:
        where = exc.filename if exc.filename is not None else "a path the request named"
        reason = exc.strerror or type(exc).__name__
        hint = _PATH_HINTS.get(exc.errno or 0, "check the path given")
        raise RPCError("bad_path", f"cannot read {where}: {reason} — {hint}") from None


def load(
    cwd: Path, agent_path: str | None, config_path: Path, trust: Trust
) -> tuple[AgentFile, UserConfig, Path | None]:
    """The agent file and the user config, as a prompt in *cwd* reads them (see :func:`load_agent`); the
    project's files *trust* does not admit are left out, and in ``trust.untrusted``."""
    try:
        config = load_user_config(config_path)
    except ConfigError as exc:
        raise RPCError("config_error", str(exc)) from None
    agent, found = load_agent(cwd, agent_path, trust)
    try:  # Claude Code's MCP files (.mcp.json, and mm mcp add's), beside the mcp: of both
        with path_errors():
            agent, config = add_mcp_files(agent, config, cwd, trust)
    except ConfigError as exc:
        raise RPCError("config_error", str(exc)) from None
    return agent, config, found


def resolve(
    cwd: Path,
    *,
    agent: str | None,
    model: str | None,
    yolo: bool,
    config_path: Path,
    trust: Trust,
    sandbox: str | None = None,
) -> Plan:
    """Read the files and choose the model of a prompt in *cwd*; the project's files *trust* does not
    admit are left out (:attr:`Plan.untrusted`).

    Blocking (YAML): run it in a worker thread. The secrets the config and the
    agent file name are withheld from every child from now on.

    Errors: RPCError config_error (bad file, unknown provider) or no_model.
    """
    agent_file, config, found = load(cwd, agent, config_path, trust)
    withhold(secret_variables(config) | credential_variables(agent_file.mcp))
    ref = model or agent_file.model or config.default_model or _local_default()
    if not ref:
        # An agent file left out untrusted may be the one that names the model: say that first.
        left_out = "".join(f"{warning(u, cwd)}; and " for u in trust.untrusted)
        raise RPCError(
            "no_model",
            f"{left_out}no model configured: pass --model PROVIDER/MODEL, set `model:` in the agent file, "
            f"or `default_model:` in {config_path} (the README's Models section shows how); "
            "or run `mm local setup` to install a local model, used when none is configured",
        )
    try:
        with path_errors():
            chosen = ModelRef.parse(config, ref, found.parent if found else cwd)
            claude_hooks, hook_warnings = _claude_hooks(cwd, agent_file, config, trust)
    except ConfigError as exc:
        raise RPCError("config_error", str(exc)) from None
    return Plan(
        claude_hooks=claude_hooks,
        hook_warnings=hook_warnings,
        cwd=cwd,
        config=config,
        config_path=config_path,
        agent=agent_file,
        agent_path=str(found) if found else None,
        model=chosen,
        yolo=yolo,
        sandbox=sandbox,
        untrusted=trust.untrusted,
    )


def _claude_hooks(
    cwd: Path, agent: AgentFile, config: UserConfig, trust: Trust
) -> tuple[list[tuple[HooksSpec, Path]], list[str]]:
    """The hooks of Claude Code's settings files when the agent file or config.yaml says `import: claude`.

    Errors: ConfigError for a malformed settings file, with its line.
    """
    if "claude" not in (agent.hooks.import_, config.hooks.import_):
        return [], []
    found, warnings = [], []
    user, *shipped = claude_settings_files(
        cwd
    )  # the user's, then the project's (not read through a link out)
    for path in (user, *shipped):
        spec, skipped = claude_settings_hooks(path, project=cwd if path in shipped else None, trust=trust)
        warnings += skipped
        if spec is not None:
            found.append((spec, path.parent.parent))  # the project root, or the home folder
    return found, warnings


def untrusted_files(cwd: Path, agent_path: str | None, config_path: Path, trust: Trust) -> list[Untrusted]:
    """The project files a request in *cwd* would go without (``trust.check``), read as a prompt reads
    them. Blocking: run it in a worker thread.

    Errors: as :func:`resolve`'s (config_error, bad_path).
    """
    agent, config, _ = load(cwd, agent_path, config_path, trust)
    try:
        with path_errors():
            _claude_hooks(cwd, agent, config, trust)
    except ConfigError as exc:
        raise RPCError("config_error", str(exc)) from None
    return trust.untrusted


def trust_warnings(untrusted: list[Untrusted], cwd: Path) -> list[str]:
    """A warning for each file a request in *cwd* went without (config/trust.py)."""
    return [warning(u, cwd) for u in untrusted]


def turn_sandbox(
    agent: AgentFile,
    cwd: Path,
    override: str | None = None,
    user: SandboxSpec | None = None,
    config_file: str | None = None,
) -> Sandbox:
    """The sandbox of a turn's processes in *cwd*: *override* (``--sandbox``), else the agent file's mode,
    else config.yaml's (*user*), else workspace.

    ``workspace`` may write beneath the session's directory and the ``sandbox.writable:`` folders of the
    agent file and of config.yaml; ``read-only`` beneath none of them (both: and the temp dir). The network
    is off where either file turns it off: an agent file (a cloned repository's) cannot turn on what the
    person turned off for every agent. *config_file*: the config.yaml *user* came from, named where a
    refusal says how to allow a folder.
    """
    spec, user = agent.sandbox, user or SandboxSpec()
    mode = override or spec.mode or user.mode or DEFAULT_MODE
    roots = (cwd, *spec.writable, *user.writable) if mode == "workspace" else ()
    return Sandbox(
        mode=mode,  # type: ignore[arg-type]  # checked by the agent file's type and by the RPC params
        roots=tuple(dict.fromkeys(os.path.realpath(root) for root in roots)),
        network=spec.network and user.network,
        source=agent.path or "",
        config=config_file or "",
    )


def _local_default() -> str | None:
    """The installed local model, used when nothing names one."""
    if local_catalog.server_ready() and local_catalog.model_ready(local_catalog.DEFAULT_MODEL):
        return f"local/{local_catalog.DEFAULT_MODEL}"
    return None


def assemble(
    plan: Plan,
    provider: Provider,
    mcp_tools: list[McpTool],
    mcp_warnings: list[str],
    budget: Budget | None = None,
) -> TurnSetup:
    """The :class:`TurnSetup` of a resolved plan, given its model connection, MCP tools and budget."""
    agent, cwd, d = plan.agent, plan.cwd, plan.config.daemon
    # A tool's output is cut to its share of the model's window where that is less than the config's.
    max_bytes = budget.window.output_bytes(d.output_max_bytes) if budget else d.output_max_bytes
    registry, skills, warnings = build_tools(agent, cwd, mcp_tools)
    pass_env = tuple(agent.pass_env)
    box = turn_sandbox(agent, cwd, plan.sandbox, plan.config.sandbox, plan.config.path)
    if plan.confined_client:
        box = Sandbox(mode="read-only", network=False, source=box.source, config=box.config)
        warnings.append(CONFINED_CLIENT_WARNING)
    return TurnSetup(
        sandbox=box,
        sandbox_missing=unavailable_reason(box),
        warnings=[
            *trust_warnings(plan.untrusted, plan.cwd),
            *mcp_warnings,
            *warnings,
            *plan.hook_warnings,
        ],  # emitted by the turn: among its events
        hooks=merged_hooks(
            plan.config.hooks,
            plan.config_path.parent,
            agent.hooks,
            agent.base_dir or cwd,
            pass_env=pass_env,
            imported=plan.claude_hooks,
        ),
        pass_env=pass_env,
        provider=provider,
        model_name=provider.name,
        system=system_prompt(agent.system, cwd, skills.render()),
        registry=registry,
        yolo=plan.yolo or agent.yolo,
        max_steps=agent.max_steps or d.max_steps,
        temperature=agent.temperature,
        limits=Limits(
            timeout=d.tool_timeout, grace=d.grace, max_bytes=max_bytes, max_lines=d.output_max_lines
        ),
        budget=budget,
        snapshot_max_files=d.snapshot_max_files,
        snapshot_watch=d.snapshot_watch,
        skills=skills,
        recover_tool_calls=plan.model.recover_tool_calls,
        choose_skills=plan.model.constrain_calls,  # a server that takes a grammar can make the choice
        ground_values=plan.model.constrain_calls,  # the small models mm serves itself
        words_after_success=plan.model.constrain_calls,
        # The skill in use's commands as typed tools (mmd/tools/skillcmds.py); MM_SKILL_TOOLS=0 measures without.
        skill_tools=plan.model.constrain_calls and os.environ.get("MM_SKILL_TOOLS", "1") != "0",
        loop=agent.loop,
        phases=agent.phases,
    )
