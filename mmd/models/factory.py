"""From a model reference ("provider/model", an alias, or "scripted:PATH") to a Provider.

API keys are read from the daemon's environment when a provider is built,
never from files, and never stored or logged.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from ..config import ConfigError, resolve_model
from ..config.agent import SCRIPTED
from ..local import catalog
from . import provider_class
from .base import Provider
from .recovery import default_enabled

# Prefix of a model served by a llama-server the daemon runs itself (mmd.local), unless the user
# config defines a provider of that name.
LOCAL = "local/"
# A small model can fall into repeating itself until its context is full; a local step stops
# here (about 4 KB of text: a tool call, an answer, a file of a few hundred lines).
LOCAL_MAX_TOKENS = 1024
# The fields of a ModelRef that build() does not read: they shape the turn (recovery, the window) or
# choose where the provider's server is (a script, a local model). Every other field keys the daemon's
# providers (ModelRef.key), so a field added later parts them until it is named here (a kept provider
# built from an older config.yaml was used with the old max_tokens and constrain_calls).
NOT_BUILT = frozenset({"recover_tool_calls", "context_window", "script", "extra"})


class ModelRef(msgspec.Struct, frozen=True, kw_only=True):
    label: str  # shown to the user: "provider/model"
    kind: str  # a key of PROVIDERS (mmd/models/__init__.py)
    model: str
    base_url: str = ""
    api_key_env: str | None = None
    timeout: float = 300.0
    max_retries: int = 4
    max_tokens: int | None = None  # per model step; see ProviderConfig.max_tokens
    headers: tuple[tuple[str, str], ...] = ()
    script: Path | None = None
    # Turn tool calls written as text into calls (mmd.models.recovery).
    recover_tool_calls: bool = False
    # A llama-server mm may constrain: its template and mm's grammar (mmd.models.llama, mmd.models.grammar).
    constrain_calls: bool = False
    # Ask llama-server to reuse the prompt prefix it processed last time (its `cache_prompt`).
    cache_prompt: bool = False
    # The context window config.yaml gives (tokens); None: the server's, else a default by kind.
    context_window: int | None = None
    extra: dict[str, Any] = msgspec.field(default_factory=dict)

    @property
    def key(self) -> tuple[Any, ...]:
        """What the provider :meth:`build` makes depends on: every field but those of NOT_BUILT, so that an
        edit of config.yaml that changes any other (``max_tokens``, ``constrain_calls``…) gets a new one."""
        return tuple(getattr(self, name) for name in self.__struct_fields__ if name not in NOT_BUILT)

    @classmethod
    def parse(cls, config: Any, ref: str, base_dir: Path) -> ModelRef:
        """Resolve *ref* against the user config.

        Errors:
            ConfigError: unknown provider or alias, or a missing script file.
        """
        if ref.startswith(SCRIPTED):
            return cls._scripted(ref, base_dir)
        if ref.startswith(LOCAL) and LOCAL.rstrip("/") not in config.providers:
            return cls._local(ref)
        prov, prov_name, model_id = resolve_model(config, ref)
        recover = prov.recover_tool_calls
        return cls(
            label=f"{prov_name}/{model_id}",
            kind=prov.kind,
            model=model_id,
            base_url=prov.base_url,
            api_key_env=prov.api_key_env,
            timeout=prov.timeout,
            max_retries=prov.max_retries,
            max_tokens=prov.max_tokens,
            headers=tuple(sorted(prov.headers.items())),
            # A constrained call comes back as text: recovery reads it, wherever the server is.
            recover_tool_calls=(default_enabled(prov.kind, prov.base_url) or prov.constrain_calls)
            if recover is None
            else recover,
            constrain_calls=prov.constrain_calls,
            context_window=_context_window(config, ref, prov),
        )

    @classmethod
    def _scripted(cls, ref: str, base_dir: Path) -> ModelRef:
        script = (base_dir / ref[len(SCRIPTED) :]).resolve()
        if not script.is_file():
            raise ConfigError(
                file=str(script),
                line=None,
                field="model",
                found=ref,
                expected="a scripted model naming an existing script file",
                hint="the path is relative to the agent file's folder",
            )
        return cls(
            label=f"scripted/{script.name}",
            kind="openai",
            model="scripted",
            script=script,
            recover_tool_calls=True,  # served on 127.0.0.1, like a local llama-server
        )

    @classmethod
    def _local(cls, ref: str) -> ModelRef:
        name = ref[len(LOCAL) :]
        if not catalog.known(name):
            names = [*catalog.MODELS, *catalog.added_models()]
            raise ConfigError(
                file="model reference",
                line=None,
                field="model",
                found=ref,
                expected="one of " + ", ".join(f"local/{m}" for m in names),
                hint="`mm local add PATH --name NAME` registers a GGUF file; `mm local status` lists them",
            )
        return cls(
            label=ref,
            kind="openai",
            model=name,
            recover_tool_calls=True,
            constrain_calls=catalog.constrain_calls(),
            cache_prompt=True,
            max_tokens=LOCAL_MAX_TOKENS,
            extra={"local": name},
        )

    def api_key(self) -> str | None:
        if not self.api_key_env:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ConfigError(
                file="environment",
                line=None,
                field=self.api_key_env,
                found="not set",
                expected=f"the API key of {self.label} in ${self.api_key_env}",
                hint="the daemon reads it from its own environment: set it, then `mm daemon stop` so the next mm "
                "starts a daemon that has it",
            )
        return key

    def build(self, *, base_url: str | None = None, api_key: str | None = None) -> Provider:
        """The provider of this kind (mmd/models/__init__.py's table), not yet connected; *base_url* and
        *api_key* are a local model's server's (mmd/local/server.py), else the config's.

        Errors: ConfigError when the API key's variable is not set.
        """
        args: dict[str, Any] = {
            "name": self.label,
            "base_url": base_url or self.base_url,
            "model": self.model,
            "api_key": api_key or self.api_key(),
            "timeout": self.timeout,
            "max_retries": self.max_retries,
            "headers": dict(self.headers),
        }
        if self.max_tokens is not None:  # else the provider's default (anthropic's API requires one)
            args["max_tokens"] = self.max_tokens
        if self.constrain_calls:  # only providers that can take a grammar are given one
            args["constrain_calls"] = True
        if self.cache_prompt:  # a llama-server field: only for the servers mm runs itself
            args["cache_prompt"] = True
        return provider_class(self.kind)(**args)


def _context_window(config: Any, ref: str, provider: Any) -> int | None:
    """config.yaml's context window of *ref*: its alias's, else its provider's, else None."""
    alias = config.models.get(ref)
    if alias is not None and alias.context_window is not None:
        return alias.context_window
    return provider.context_window
