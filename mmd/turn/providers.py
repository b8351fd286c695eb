"""The model connections of the daemon's turns: one provider per model, the 16 used last kept.

A provider is keyed by all that it is built from (ModelRef.key), so an edit of config.yaml gets a new one;
a local model's is keyed by its server's URL too (the server may come back on another port). One let go
closes its connections once no running turn holds it (``release``). A scripted model (tests, benchmarks)
replays its script from the start for each session, going on where the session's last turn left it; its
server lives as long as the turn.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from ..config import ConfigError
from ..local import catalog
from ..local.server import LocalServerError, LocalServers
from ..models import tokens
from ..models.base import Provider
from ..models.factory import ModelRef
from ..rpc import RPCError
from .budget import Budget, Window, window_tokens

if TYPE_CHECKING:  # imported by the first turn with a scripted model (tests, benchmarks): h11 and all
    from ..models import scripted

# Sessions whose scripted model position is remembered; the oldest is forgotten past this.
SCRIPT_POSITIONS = 10_000
# Seconds a server's answer about its window is kept. Asking costs every prompt a connection and a request
# before its first model request (0.8 of the ~7 ms of CPU a one-step prompt costs the daemon); a server
# restarted with another window is asked again within this.
WINDOW_TTL = 10.0
# Providers kept (each holds its connections), and llama-servers' token counters (each keeps up to
# tokens.CACHE_BYTES of counted text); the least recently used is let go past these. Every distinct
# `--model` a client named, and every port a local server came back on, kept one for the daemon's life.
PROVIDERS_KEPT = 16
COUNTERS_KEPT = 8


class _Scripted(msgspec.Struct, kw_only=True):
    """The scripted model of one running turn: its server, what stops it, the provider using it."""

    server: scripted.ScriptedServer
    scope: trio.CancelScope
    provider: Provider
    counter: tokens.Counter | None = None  # its /tokenize, when it serves one


class Providers:
    """Model connections, opened on first use; scripted servers are started in *nursery*."""

    def __init__(self, nursery: trio.Nursery, local: LocalServers) -> None:
        self.nursery = nursery
        self.local = local
        self.cache: OrderedDict[tuple[Any, ...], Provider] = OrderedDict()
        self._scripted: dict[str, _Scripted] = {}
        self._positions: dict[str, scripted.Position] = {}
        # Token counters of the llama-servers asked (by URL): each keeps the counts of its texts.
        self._counters: OrderedDict[tuple[str, str | None], tokens.Counter] = OrderedDict()
        self._estimate = tokens.Counter()
        # What each server root said of its window and model, and when (monotonic): kept WINDOW_TTL seconds.
        self._windows: dict[str, tuple[float, tokens.Props]] = {}
        # What each session's running turn was given (providers, counters, by id) until its release; and
        # what was let go from the caches while a turn held it, closed when none does.
        self._held: dict[str, dict[int, Any]] = {}
        self._retired: list[Any] = []

    async def get(self, model: ModelRef, session_id: str) -> Provider:
        """The provider for *model* in a turn of *session_id*.

        Errors: RPCError model_error (a local server that cannot start) or config_error.
        """
        if model.script is not None:
            return await self._start_scripted(model, session_id)
        url, api_key = await self._local_url(model) if "local" in model.extra else (None, None)
        key = (url, api_key, *model.key)  # a restarted server has a key of its own
        provider = self.cache.get(key)
        if provider is None:
            try:
                provider = model.build(base_url=url, api_key=api_key)
            except ConfigError as exc:  # e.g. the API key's variable is not set
                raise RPCError("config_error", str(exc)) from None
        await self._keep(self.cache, key, provider, PROVIDERS_KEPT)
        self._held.setdefault(session_id, {})[id(provider)] = provider
        return provider

    async def budget(self, model: ModelRef, session_id: str) -> Budget:
        """The window of *model* in a turn of *session_id* and how its tokens are counted.

        A llama-server on this machine (a local model's, a scripted one's, or the user's) tells its
        window and counts with its own tokenizer; config.yaml's ``context_window`` is the most a
        window may be; others are estimated (mmd/turn/budget.py's defaults).

        Errors: RPCError model_error (a local server that cannot start).
        """
        root, api_key = await self._root(model, session_id)
        asked = model.kind == "openai" and tokens.on_loopback(root)
        props = await self._props(root, api_key) if asked else tokens.Props(None, False)
        server = props.window
        local = catalog.context_size(model.extra["local"]) if "local" in model.extra else None
        size, source = window_tokens(model.kind, config=model.context_window, server=server, catalog=local)
        # A local model's server is llama-server even when /props did not answer: its /tokenize is
        # tried, and a text it does not count is counted as dense (mmd/models/tokens.py).
        counter = await self._counter(root, session_id, api_key) if server or local else self._estimate
        if props.model is not None:  # another model on the same port: the counts of the last one go
            counter.serving(props.model)
        self._held.setdefault(session_id, {})[id(counter)] = counter
        return Budget(window=Window.of(size, model.max_tokens), counter=counter, source=source)

    async def _props(self, root: str, api_key: str | None) -> tokens.Props:
        """What the server at *root* says of its window and model: asked at most once in WINDOW_TTL seconds
        while it answers (a server that does not answer is asked at every prompt: it may be up by the next)."""
        now = time.monotonic()
        kept = self._windows.get(root)
        if kept is not None and now - kept[0] < WINDOW_TTL:
            return kept[1]
        props = await tokens.server_props(root, api_key)
        # Expired answers go as another is kept: a scripted model's server has a root of its own per turn.
        self._windows = {r: k for r, k in self._windows.items() if now - k[0] < WINDOW_TTL}
        if props.answered:
            self._windows[root] = (time.monotonic(), props)
        return props

    async def _root(self, model: ModelRef, session_id: str) -> tuple[str, str | None]:
        """The root of *model*'s server, and the API key it asks (a local model's)."""
        if "local" in model.extra:
            url, api_key = await self._local_url(model)
            return tokens.server_root(url), api_key
        if model.script is not None and session_id in self._scripted:
            return self._scripted[session_id].server.url, None
        return tokens.server_root(model.base_url), None

    async def _counter(self, root: str, session_id: str, api_key: str | None) -> tokens.Counter:
        entry = self._scripted.get(session_id)
        if entry is not None and entry.server.url == root:  # lives as long as the turn's server
            entry.counter = entry.counter or tokens.LlamaCounter(root)
            return entry.counter
        key = (root, api_key)  # a restarted server has a key of its own
        counter = self._counters.get(key) or tokens.LlamaCounter(root, api_key)
        await self._keep(self._counters, key, counter, COUNTERS_KEPT)
        return counter

    async def _keep(self, kept: OrderedDict[Any, Any], key: Any, thing: Any, most: int) -> None:
        """*thing* kept in *kept* as the one used last; past *most*, the least recently used is let go:
        closed now, or when the last turn holding it is released (a closed client fails the requests
        a turn still makes with it)."""
        kept[key] = thing
        kept.move_to_end(key)
        while len(kept) > most:
            gone = kept.popitem(last=False)[1]
            if self._holds(gone):
                self._retired.append(gone)
            else:
                with trio.CancelScope(shield=True):
                    await gone.aclose()

    def _holds(self, thing: Any) -> bool:
        """Whether a running turn was given *thing*."""
        return any(id(thing) in held for held in self._held.values())

    async def _local_url(self, model: ModelRef) -> tuple[str, str]:
        try:
            return await self.local.url(model.extra["local"])
        except LocalServerError as exc:
            raise RPCError("model_error", str(exc)) from None

    async def _start_scripted(self, model: ModelRef, session_id: str) -> Provider:
        await self.release(session_id)  # never two servers for a session
        from ..models import scripted

        position = self._positions.get(session_id, scripted.START)
        try:
            # In a worker thread: the file is the agent file's to name, and a read is never the loop's.
            script = await trio.to_thread.run_sync(scripted.load_script, model.script)
        except (OSError, scripted.ScriptError) as exc:
            raise RPCError("config_error", f"scripted model: {exc}") from None
        server, scope = await self.nursery.start(_serve_scripted, script, position)
        provider = model.build(base_url=f"{server.url}/v1")
        self._scripted[session_id] = _Scripted(server=server, scope=scope, provider=provider)
        return provider

    async def release(self, session_id: str) -> None:
        """The session's turn ended: close what was let go while it held it, and stop its scripted server,
        remembering where its script stands."""
        self._held.pop(session_id, None)
        if self._retired:  # most often nothing was let go: no scope set up (twice a prompt, ~25 calls each)
            free = [thing for thing in self._retired if not self._holds(thing)]
            self._retired = [thing for thing in self._retired if self._holds(thing)]
            with trio.CancelScope(shield=True):
                for thing in free:
                    await thing.aclose()
        entry = self._scripted.pop(session_id, None)
        if entry is None:
            return
        self._positions.pop(session_id, None)  # re-inserted: the newest is forgotten last
        self._positions[session_id] = entry.server.position
        if len(self._positions) > SCRIPT_POSITIONS:
            del self._positions[next(iter(self._positions))]
        entry.scope.cancel()
        with trio.CancelScope(shield=True):
            await entry.provider.aclose()
            if entry.counter is not None:
                await entry.counter.aclose()

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            for thing in [*self.cache.values(), *self._counters.values(), *self._retired]:
                await thing.aclose()


async def _serve_scripted(
    script: scripted.Script,
    position: scripted.Position,
    *,
    task_status: trio.TaskStatus[tuple[scripted.ScriptedServer, trio.CancelScope]],
) -> None:
    # Under a scope of its own, so that the turn's end stops this server alone.
    with trio.CancelScope() as scope:
        started = _Started(task_status, scope)
        from ..models import scripted

        await scripted.serve(script, position=position, task_status=started)


class _Started:
    """Hands the caller of ``nursery.start`` the server and the scope that stops it."""

    def __init__(self, task_status: Any, scope: trio.CancelScope) -> None:
        self.task_status, self.scope = task_status, scope

    def started(self, server: scripted.ScriptedServer) -> None:
        self.task_status.started((server, self.scope))
