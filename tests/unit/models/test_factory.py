"""The providers' table: every kind config.yaml accepts builds its provider."""

from __future__ import annotations

import typing
from pathlib import Path

from mmd.config import load_user_config
from mmd.config.user import ProviderConfig
from mmd.models import PROVIDER_KINDS, PROVIDERS, provider_class
from mmd.models.factory import ModelRef


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
