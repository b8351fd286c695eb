"""The providers' table: every kind config.yaml accepts builds its provider."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mmd.config import load_user_config
from mmd.config.user import ProviderConfig
from mmd.models import PROVIDER_KINDS, PROVIDERS, factory, provider_class
from mmd.models.factory import ModelRef

# Another value of each field of a ModelRef. A field added to it must be added here: the test below then
# says whether build() reads it (and so it keys the daemon's providers) or it is one of NOT_BUILT.
OTHER: dict[str, Any] = {
    "label": "q/other",
    "kind": "anthropic",
    "model": "other",
    "base_url": "http://127.0.0.1:2/v1",
    "api_key_env": "MM_TEST_OTHER_KEY",
    "timeout": 5.0,
    "max_retries": 1,
    "max_tokens": 7,
    "headers": (("x-other", "1"),),
    "script": Path("/other.json"),
    "recover_tool_calls": True,
    "constrain_calls": True,
    "cache_prompt": True,
    "context_window": 999,
    "extra": {"other": True},
}


def test_config_accepts_exactly_the_kinds_of_the_table() -> None:
    kind = typing.get_type_hints(ProviderConfig)["kind"]
    assert typing.get_args(kind) == PROVIDER_KINDS == tuple(PROVIDERS) == ("openai", "anthropic")


def test_each_kind_builds_its_provider(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "providers:\n"
        + "".join(
            f"  {kind}: {{kind: {kind}, base_url: 'http://127.0.0.1:1/v1'}}\n" for kind in PROVIDER_KINDS
        )
    )
    config = load_user_config(path)
    for kind in PROVIDER_KINDS:
        provider = ModelRef.parse(config, f"{kind}/m", tmp_path).build()
        assert type(provider) is provider_class(kind)
        assert provider.name == f"{kind}/m"


def test_a_context_window_comes_from_the_alias_else_its_provider(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "providers:\n"
        "  big: {kind: openai, base_url: 'http://10.0.0.1/v1', context_window: 65536}\n"
        "  plain: {kind: anthropic, base_url: 'https://api.anthropic.com'}\n"
        "models:\n"
        "  small: {provider: big, model: m7, context_window: 8192}\n"
    )
    config = load_user_config(path)
    assert ModelRef.parse(config, "small", tmp_path).context_window == 8192
    assert ModelRef.parse(config, "big/m7", tmp_path).context_window == 65536
    assert ModelRef.parse(config, "plain/claude", tmp_path).context_window is None


def test_a_model_refs_key_is_all_that_its_provider_is_built_from(monkeypatch: pytest.MonkeyPatch) -> None:
    # max_tokens, constrain_calls, cache_prompt and the label were built from but not keyed on: a kept
    # provider went on with the values of a config.yaml edited since.
    assert set(OTHER) == set(ModelRef.__struct_fields__), "say in OTHER what a new field is to a provider"
    built: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(factory, "provider_class", lambda kind: lambda **args: built.append((kind, args)))
    monkeypatch.setenv("MM_TEST_OTHER_KEY", "k")
    base = ModelRef(label="p/m", kind="openai", model="m", base_url="http://127.0.0.1:1/v1")
    base.build()
    for name, value in OTHER.items():
        other = msgspec.structs.replace(base, **{name: value})
        other.build()
        assert (built[-1] != built[0]) == (other.key != base.key), name
        assert (other.key == base.key) == (name in factory.NOT_BUILT), name
