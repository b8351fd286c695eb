"""The window and token counter of a turn's model (mmd/turn/providers.py's ``Providers.budget``).

A scripted model server in process stands in for llama-server when its script has a context_window;
a local model's real server is asked the same in tests/e2e/test_local.py's long session.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from mmd.config import load_user_config
from mmd.local.server import LocalServers
from mmd.models import tokens
from mmd.models.factory import ModelRef
from mmd.turn import providers as providers_module
from mmd.turn.providers import Providers


def _script(tmp_path: Path, window: int | None) -> Path:
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"responses": [], **({"context_window": window} if window else {})}))
    return path


async def test_a_server_that_tells_its_window_sets_it_and_counts_the_tokens(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    providers = Providers(nursery, LocalServers(nursery, tmp_path))
    model = ModelRef.parse(
        load_user_config(tmp_path / "none.yaml"), f"scripted:{_script(tmp_path, 3000)}", tmp_path
    )
    await providers.get(model, "s1")
    budget = await providers.budget(model, "s1")
    assert (budget.window.tokens, budget.source) == (3000, "server")
    assert isinstance(budget.counter, tokens.LlamaCounter) and await budget.counter.count("x" * 8) == 2
    await providers.release("s1")  # closes the turn's counter with its server
    await providers.aclose()


async def test_a_server_that_does_not_gets_the_default_of_its_kind_and_the_estimate(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    providers = Providers(nursery, LocalServers(nursery, tmp_path))
    model = ModelRef.parse(
        load_user_config(tmp_path / "none.yaml"), f"scripted:{_script(tmp_path, None)}", tmp_path
    )
    await providers.get(model, "s1")
    budget = await providers.budget(model, "s1")
    assert (budget.window.tokens, budget.source) == (32_768, "default")
    assert not budget.counter.exact
    await providers.release("s1")
    await providers.aclose()


async def test_a_remote_provider_is_never_asked_and_takes_its_configured_window(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "providers:\n  far: {kind: openai, base_url: 'https://models.example/v1', context_window: 16384}\n"
    )
    providers = Providers(nursery, LocalServers(nursery, tmp_path))
    model = ModelRef.parse(load_user_config(config), "far/m", tmp_path)
    budget = await providers.budget(model, "s1")  # nothing listens there: a request would fail
    assert (budget.window.tokens, budget.source) == (16_384, "config")
    assert (budget.window.answer, budget.window.output_bytes(30_000)) == (2048, 12_288)
    await providers.aclose()


async def test_a_servers_window_is_asked_once_in_a_while_and_a_silent_server_at_every_prompt(
    tmp_path: Path, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Asking cost every prompt a connection and a request before its first model request.
    asked: list[str] = []
    ask = tokens.server_window

    async def counted(root: str) -> tuple[int | None, bool]:
        asked.append(root)
        return await ask(root)

    monkeypatch.setattr(tokens, "server_window", counted)
    providers = Providers(nursery, LocalServers(nursery, tmp_path))
    model = ModelRef.parse(
        load_user_config(tmp_path / "none.yaml"), f"scripted:{_script(tmp_path, 3000)}", tmp_path
    )
    await providers.get(model, "s1")
    for _ in range(3):
        assert (await providers.budget(model, "s1")).window.tokens == 3000
    assert len(asked) == 1
    monkeypatch.setattr(providers_module, "WINDOW_TTL", 0.0)  # kept no longer: asked again
    assert (await providers.budget(model, "s1")).window.tokens == 3000
    assert len(asked) == 2
    await providers.release("s1")

    config = tmp_path / "config.yaml"
    config.write_text("providers:\n  near: {kind: openai, base_url: 'http://127.0.0.1:9/v1'}\n")
    monkeypatch.setattr(providers_module, "WINDOW_TTL", 60.0)
    silent = ModelRef.parse(load_user_config(config), "near/m", tmp_path)
    for _ in range(2):  # nothing listens: asked again next time, when it may be up
        assert (await providers.budget(silent, "s2")).source == "default"
    assert asked[2:] == ["http://127.0.0.1:9", "http://127.0.0.1:9"]
    await providers.aclose()
