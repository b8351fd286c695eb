"""The user's config.yaml: model providers, model aliases and the daemon's limits.

API keys never go in the file: a provider names the environment variable that
holds its key (``api_key_env``), and the daemon reads it when it builds the
provider. A key-looking literal is refused with a message that says so.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import msgspec

from mmd import paths

from ..models import PROVIDER_KINDS
from .hooks import HooksSpec, check_hooks
from .loader import ConfigError, Document, did_you_mean, one_of, remembered
from .mcp import KEY_HINTS, McpServerSpec, check_servers
from .sandbox import SandboxSpec, absolute, normalise

# A kind of the providers' table (mmd/models/__init__.py): the API a provider speaks.
ProviderKind = Literal[PROVIDER_KINDS]  # type: ignore[valid-type]
# What an environment variable's name looks like; a key does not.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Headers that carry credentials; their values come from api_key_env instead.
_SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key"})


class ProviderConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    kind: ProviderKind  # the API it speaks
    base_url: Annotated[str, msgspec.Meta(description='a URL like "http://127.0.0.1:8080/v1"')]
    api_key_env: Annotated[
        str | None, msgspec.Meta(description="the name of an environment variable, like OPENAI_API_KEY")
    ] = None
    # Seconds without a byte before giving up (to a server on this machine: that long at least, 1.5x at most).
    timeout: Annotated[float, msgspec.Meta(gt=0)] = 300.0
    max_retries: Annotated[int, msgspec.Meta(ge=0)] = 4
    headers: dict[str, str] = {}  # extra HTTP headers, never credentials
    # The most tokens one model step may write. None: 4096 for kind anthropic (its API
    # requires a value); for kind openai nothing is sent, so the server's own limit applies.
    max_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    # Turn tool calls the model wrote as text into calls (docs/loops-and-recovery.md).
    # None: on for kind openai on localhost/127.0.0.1/::1, off otherwise.
    recover_tool_calls: bool | None = None
    # A llama-server: steps rendered by its /apply-template and generated under mm's grammar (a call is
    # valid by construction; mmd/models/llama.py), skills chosen, values grounded. Off unless set; on for local/.
    constrain_calls: bool = False
    # The models' context window in tokens (docs/local.md#context-budget). None: what a llama-server
    # on this machine reports, else 32768 for kind openai, 200000 for kind anthropic.
    context_window: Annotated[int, msgspec.Meta(ge=256)] | None = None


class ModelAlias(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    provider: str  # a key of providers:
    model: str  # the model id that provider knows
    # This model's context window in tokens, over its provider's context_window.
    context_window: Annotated[int, msgspec.Meta(ge=256)] | None = None


class DaemonConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    max_steps: Annotated[int, msgspec.Meta(ge=1)] = 50  # model steps per turn
    tool_timeout: Annotated[float, msgspec.Meta(gt=0)] = 120.0  # seconds per tool call
    grace: Annotated[float, msgspec.Meta(ge=0)] = 3.0  # seconds between SIGTERM and SIGKILL
    output_max_bytes: Annotated[int, msgspec.Meta(ge=1)] = 30_000  # of tool output the model reads
    output_max_lines: Annotated[int, msgspec.Meta(ge=1)] = 400
    # Seconds a session with no turn and no client stays in memory; it is loaded again on demand.
    session_idle: Annotated[float, msgspec.Meta(ge=0)] = 60.0
    # Days a session may go unused before it is deleted with its events, spill files and transcript
    # (mmd/server/retention.py); 0 keeps every session.
    session_days: Annotated[float, msgspec.Meta(ge=0)] = 30.0
    # Checkpoints for mm undo (docs/undo.md): no snapshot in a turn whose working tree holds more
    # files than this (ignored files not counted); 0 turns them off.
    snapshot_max_files: Annotated[int, msgspec.Meta(ge=0)] = 100_000
    # Watch the project with inotify, so that a snapshot of a tree nothing changed in runs no git
    # (mmd/undo/watch.py); false: every snapshot runs git.
    snapshot_watch: bool = True


class UserConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    providers: dict[str, ProviderConfig] = {}
    models: dict[str, ModelAlias] = {}  # alias -> provider and model id
    default_model: Annotated[str | None, msgspec.Meta(description='a model alias or "provider/model"')] = None
    daemon: DaemonConfig = msgspec.field(default_factory=DaemonConfig)
    # MCP servers by name, for every agent (docs/mcp.md).
    mcp: dict[str, McpServerSpec] = {}
    # Hooks for every agent, mm's shape or Claude Code's (docs/hooks.md); they run before the agent file's.
    hooks: HooksSpec = msgspec.field(default_factory=HooksSpec)
    # The sandbox of every agent's processes (docs/security.md): mode, the default where neither --sandbox nor
    # the agent file names one; writable, folders beside the agent file's (a tool's cache: ~/.cache/uv);
    # network: off turns it off whatever the agent file says.
    sandbox: SandboxSpec = msgspec.field(default_factory=SandboxSpec)
    # The file this was loaded from (it may not exist). Not a key of the file.
    path: str | None = None

    set_by_loader: ClassVar[frozenset[str]] = frozenset({"path"})
    key_hints: ClassVar[dict[str, str]] = KEY_HINTS  # mcpServers: Claude Code's .mcp.json shape


def load_user_config(path: Path | None = None) -> UserConfig:
    """Read config.yaml (default ``config_dir()/config.yaml``); a missing file gives the defaults.

    Errors: ConfigError naming the file, line and key of the first problem:
    bad YAML, unknown key, wrong type, a literal API key or credential header,
    a model alias or default_model naming an unknown provider.
    """
    path = path if path is not None else paths.config_dir() / "config.yaml"
    if not path.exists():
        return UserConfig(path=str(path))
    return remembered(path, _load)


def _load(path: Path, doc: Document) -> UserConfig:
    _refuse_secrets(doc)
    servers = doc.data.get("mcp") if isinstance(doc.data, dict) else None
    for name in servers if isinstance(servers, dict) else ():
        normalise(doc, ("mcp", name, "sandbox"))
    normalise(doc, ("sandbox",))
    config = doc.convert(UserConfig)
    servers = {
        name: msgspec.structs.replace(s, sandbox=absolute(s.sandbox, path.parent))
        for name, s in config.mcp.items()
    }
    config = msgspec.structs.replace(
        config, path=str(path), mcp=servers, sandbox=absolute(config.sandbox, path.parent)
    )
    _check_references(doc, config)
    check_servers(doc, config.mcp)
    check_hooks(doc, config.hooks)
    return config


def resolve_model(config: UserConfig, ref: str) -> tuple[ProviderConfig, str, str]:
    """``(provider config, provider name, model id)`` for an alias of ``models:`` or ``provider/model``.

    Errors: ConfigError naming the aliases and providers that exist, and
    where to add one.
    """
    alias = config.models.get(ref)
    if alias is not None and alias.provider in config.providers:
        return config.providers[alias.provider], alias.provider, alias.model
    provider, slash, model = ref.partition("/")
    if slash and model and provider in config.providers:
        return config.providers[provider], provider, model
    raise _unknown_model(config, ref, provider if slash else None)


def _unknown_model(config: UserConfig, ref: str, provider: str | None) -> ConfigError:
    file = config.path or "config.yaml"
    if provider is None:
        return ConfigError(
            file=file,
            line=None,
            field="model",
            problem=f'unknown model alias "{ref}"',
            expected=f'an alias ({one_of(config.models)}) or "provider/model"'
            if config.models
            else '"provider/model"',
            hint=did_you_mean(ref, config.models) or f"add the alias under models: in {file}",
        )
    return ConfigError(
        file=file,
        line=None,
        field="model",
        problem=f'unknown provider "{provider}" in "{ref}"',
        expected=f"a provider ({one_of(config.providers)})" if config.providers else None,
        hint=did_you_mean(provider, config.providers) or f"add it under providers: in {file}",
    )


def _refuse_secrets(doc: Document) -> None:
    # Before the type check: an `api_key:` must say "use api_key_env", not
    # "unknown key", and no message may quote the secret back.
    providers = doc.data.get("providers") if isinstance(doc.data, dict) else None
    if not isinstance(providers, dict):
        return  # the type check reports it
    for name, provider in providers.items():
        if isinstance(provider, dict):
            _refuse_provider_secrets(doc, ("providers", name), provider)


def _refuse_provider_secrets(doc: Document, path: tuple[Any, ...], provider: dict[Any, Any]) -> None:
    env_hint = f"set api_key_env: {_env_name(path[-1])} and put the key in that environment variable"
    if "api_key" in provider:
        raise doc.error((*path, "api_key"), problem="API keys never go in config.yaml", hint=env_hint)
    env = provider.get("api_key_env")
    if isinstance(env, str) and not _ENV_NAME.fullmatch(env):
        raise doc.error(
            (*path, "api_key_env"),
            problem="not the name of an environment variable (the value is not shown: it may be a key)",
            expected=f"a name like {_env_name(path[-1])}",
            hint="put the key itself in that variable",
        )
    headers = provider.get("headers")
    for header in headers if isinstance(headers, dict) else ():
        if str(header).lower() in _SECRET_HEADERS:
            raise doc.error(
                (*path, "headers", header), problem="credentials never go in config.yaml", hint=env_hint
            )


def _env_name(provider: Any) -> str:
    return re.sub(r"[^A-Z0-9_]", "_", str(provider).upper()) + "_API_KEY"


def _check_references(doc: Document, config: UserConfig) -> None:
    for alias, target in config.models.items():
        if target.provider not in config.providers:
            raise doc.error(
                ("models", alias, "provider"),
                problem=f'unknown provider "{target.provider}"',
                expected=f"a provider ({one_of(config.providers)})" if config.providers else None,
                hint=did_you_mean(target.provider, config.providers) or "add it under providers:",
            )
    if config.default_model is not None:
        try:
            resolve_model(config, config.default_model)
        except ConfigError as e:
            raise doc.error(("default_model",), problem=e.problem, expected=e.expected, hint=e.hint) from None
