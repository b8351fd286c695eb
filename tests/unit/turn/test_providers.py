"""The window and token counter of a turn's model (mmd/turn/providers.py's ``Providers.budget``).

A scripted model server in process stands in for llama-server when its script has a context_window;
a local model's real server is asked the same in tests/e2e/test_local.py's long session.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from mmd.config import load_user_config
from mmd.local.server import LocalServers
from mmd.models import factory, tokens
from mmd.models.factory import ModelRef
from mmd.turn import providers as providers_module
from mmd.turn.providers import Providers

from ..models.test_transport import Server, sized


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
    ask = tokens.server_props

    async def counted(root: str, key: str | None = None) -> tokens.Props:
        asked.append(root)
        return await ask(root)

    monkeypatch.setattr(tokens, "server_props", counted)
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


async def test_an_edit_of_config_yaml_gets_a_provider_built_from_it(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    # The provider kept was keyed by part of what it is built from: the edit was read, the old one used.
    config = tmp_path / "config.yaml"
    providers = Providers(nursery, LocalServers(nursery, tmp_path))
    used = []
    for max_tokens, constrain in ((100, "false"), (2000, "true")):
        config.write_text(
            "providers:\n  p: {kind: openai, base_url: 'http://127.0.0.1:9/v1', "
            f"max_tokens: {max_tokens}, constrain_calls: {constrain}}}\n"
        )
        provider: Any = await providers.get(ModelRef.parse(load_user_config(config), "p/m", tmp_path), "s1")
        await providers.release("s1")
        used.append((provider.max_tokens, provider.constrain_calls))
    assert used == [(100, False), (2000, True)]
    await providers.aclose()


class _Provider:
    """Stands in for a provider class: built with the factory's arguments, tells whether it was closed."""

    def __init__(self, **args: Any) -> None:
        self.args, self.closed = args, False

    async def aclose(self) -> None:
        self.closed = True


async def test_the_providers_used_last_are_kept_and_one_a_turn_holds_is_closed_once_it_ends(
    tmp_path: Path, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every --model a client named kept a provider, and its connections, for the daemon's life.
    monkeypatch.setattr(factory, "provider_class", lambda kind: _Provider)
    providers = Providers(nursery, LocalServers(nursery, tmp_path))
    refs = [ModelRef(label=f"p/m{i}", kind="openai", model=f"m{i}") for i in range(40)]
    running: Any = await providers.get(refs[0], "running")  # its turn goes on while the others come and go
    made: list[Any] = []
    for i, ref in enumerate(refs[1:]):
        made.append(await providers.get(ref, f"s{i}"))
        await providers.release(f"s{i}")
    assert len(providers.cache) == providers_module.PROVIDERS_KEPT
    assert list(providers.cache.values()) == made[-providers_module.PROVIDERS_KEPT :]
    assert all(p.closed for p in made[: -providers_module.PROVIDERS_KEPT])
    assert not running.closed  # let go, but not closed under its turn
    assert await providers.get(refs[-1], "again") is made[-1]  # one kept is the same provider
    await providers.release("running")
    assert running.closed
    await providers.aclose()
    assert all(p.closed for p in made)


async def test_the_token_counters_of_the_servers_used_last_are_kept(
    tmp_path: Path, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A local server restarted on a new port each time added a counter, with its counts, for good.
    async def props(root: str, key: str | None = None) -> tokens.Props:
        return tokens.Props(4096, True, ("/models/a.gguf", 4096))

    monkeypatch.setattr(tokens, "server_props", props)
    providers = Providers(nursery, LocalServers(nursery, tmp_path))
    counters = []
    for port in range(1, 21):
        model = ModelRef(label="p/m", kind="openai", model="m", base_url=f"http://127.0.0.1:{port}/v1")
        counters.append((await providers.budget(model, "s1")).counter)
        await providers.release("s1")
    assert list(providers._counters.values()) == counters[-providers_module.COUNTERS_KEPT :]
    await providers.aclose()


async def test_a_llama_server_restarted_with_another_model_gets_its_texts_counted_again(
    tmp_path: Path, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The window was asked again, but the counts of the old model's tokenizer were kept for the daemon's life.
    serving = {"model_path": "/models/a.gguf", "n_ctx": 8192, "bytes_per_token": 4}

    async def llama(stream: trio.SocketStream, request: bytes) -> bool:
        head, _, body = request.partition(b"\r\n\r\n")
        if head.startswith(b"GET /props"):
            settings = {"n_ctx": serving["n_ctx"]}
            answer: Any = {"model_path": serving["model_path"], "default_generation_settings": settings}
        else:
            content = json.loads(body)["content"]
            answer = {"tokens": list(range(-(-len(content) // serving["bytes_per_token"])))}
        await stream.send_all(sized(json.dumps(answer).encode()))
        return True

    root = await Server(llama).serve(nursery)
    config = tmp_path / "config.yaml"
    config.write_text(f"providers:\n  mine: {{kind: openai, base_url: '{root}/v1'}}\n")
    model = ModelRef.parse(load_user_config(config), "mine/m", tmp_path)
    providers = Providers(nursery, LocalServers(nursery, tmp_path))
    text = "some tool output " * 100  # 1,700 characters
    budget = await providers.budget(model, "s1")
    assert (budget.window.tokens, await budget.counter.count(text)) == (8192, 425)
    await providers.release("s1")

    serving.update(model_path="/models/b.gguf", bytes_per_token=1)  # restarted with another model
    monkeypatch.setattr(providers_module, "WINDOW_TTL", 0.0)  # as WINDOW_TTL seconds later
    budget = await providers.budget(model, "s2")
    assert (budget.window.tokens, await budget.counter.count(text)) == (8192, 1700)
    await providers.release("s2")
    serving.update(n_ctx=4096, bytes_per_token=2)  # and again with the same file, another window
    budget = await providers.budget(model, "s3")
    assert (budget.window.tokens, await budget.counter.count(text)) == (4096, 850)
    await providers.release("s3")
    await providers.aclose()
