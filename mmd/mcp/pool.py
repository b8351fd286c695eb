"""The daemon's MCP connections, shared by every session that uses the same server.

One :class:`McpConnection` per server configuration (its ``ResolvedServer.key``:
URL and headers, or argv, environment and working directory; not the tool
filters), so two agents that allow different tools of one server share one
connection, and a second ``mm -p`` finds it warm: no new process, no new
handshake. Each connection is one task in the pool's nursery, which the
daemon opens in its root nursery; when the daemon stops, the nursery is
cancelled and every stdio server's process group is stopped.

A connection's task connects on first use, lists the tools, and then waits.
When the connection drops (a stdio server exits, an HTTP request finds the
server gone) it reconnects at once, then with backoff (0.5 s doubling up to
30 s) while it keeps failing; a dead stdio server is so restarted. A call in
flight when the connection dropped gets :class:`McpCallError` ``lost``, which
the tool answers with class ``retry_after``. A call or a turn that finds the
connection down asks for an attempt now rather than waiting out the backoff,
and waits for it up to the server's ``connect_timeout``. A connection unused
for ``IDLE_CLOSE`` seconds is closed (its server stopped) and reopened on the
next use.

The MCP SDK is imported on first use, in a worker thread (it takes a second
or two): a daemon without MCP servers never loads it.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import math
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import trio

from .. import __version__, paths
from ..config.mcp import ExpansionError, ResolvedServer, resolve, servers_for
from ..procs import spawn_error_message
from ..procs.logfile import BoundedLog
from ..sandbox import CONFINED_CLIENT_MCP, Sandbox
from ..untrusted import MAX_DEPTH, value_depth
from .errors import McpCallError, McpUnavailable, cut
from .http import bounded_client
from .stdio import stdio_transport
from .tool import McpTool, make_tools

log = logging.getLogger(__name__)

# Seconds a connection may go unused before it is closed (its stdio server stopped).
IDLE_CLOSE = 1800.0
# Connections kept, by configuration key: past it, those closed for being idle are forgotten with their tool
# listings (up to MAX_LISTING_CHARS each). Every configuration met made one for the daemon's life (a server's
# env: naming a token that rotates made a new key at each rotation).
CONNECTIONS_KEPT = 64
# Backoff between reconnect attempts that keep failing: first, then doubling up to the last.
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0
# A connection that drops sooner than this after it was made counts as failing: the next attempt backs off. (A
# server that exited right after its handshake was restarted at once, 30 times a second, as long as it was used.)
STABLE_AFTER = 30.0
# Seconds between two listings of a server's tools on its notifications/tools/list_changed: one that sent it
# after each listing made the daemon read 8 MB listings four times a second, and was never closed for idleness.
RELIST_GAP = 5.0
# Pages of tools/list read at most (a server whose cursor never ends cannot hang a turn).
MAX_PAGES = 100
# Tools kept of one server's listing, and the characters of their descriptions and schemas together: the rest
# is not read (one warning says so). The largest servers list about a hundred tools in well under 1 MiB; a
# server that listed 20,000 tools of 20 KB each held 1.4 GB of the daemon, and 100 pages of that would end it.
MAX_TOOLS = 500
MAX_LISTING_CHARS = 8 * 1024 * 1024
# A tool's description longer than this is cut (it goes to the model with every request).
MAX_DESCRIPTION_CHARS = 4096
# Bytes of a stdio server's stderr quoted in an error.
STDERR_TAIL = 600


_JSON = msgspec.json.Encoder()
_sdk_loaded: trio.Event | None = None


async def load_sdk() -> None:
    """Import the MCP SDK once, in a worker thread, so the daemon keeps answering meanwhile."""
    global _sdk_loaded
    if _sdk_loaded is None:
        _sdk_loaded = trio.Event()
        try:
            await trio.to_thread.run_sync(importlib.import_module, "mcp.client.client")
        finally:
            _sdk_loaded.set()
    await _sdk_loaded.wait()


class McpConnection:
    """One server's connection: state, the cached tool list, and the task that keeps it."""

    def __init__(self, pool: McpPool, server: ResolvedServer) -> None:
        self.pool = pool
        self.server = server
        self.key = server.key
        self.state = "new"  # new | connecting | ready | dropped | failed | idle | closed
        self.error: str | None = None  # why the last attempt failed, or the connection dropped
        self.tools: list[Any] = []  # the SDK's Tool objects, as the server listed them (within the bounds)
        self.listing_cut: str | None = None  # what of the last listing was left unread, and why
        self.capabilities: Any = None
        self.server_info: Any = None
        self.protocol: str | None = None
        self.pid: int | None = None
        self.attempts = 0  # connection attempts
        self.connects = 0  # handshakes that succeeded
        self.failures = 0  # attempts that never reached ready
        self.drops = 0  # connections that dropped once ready
        self.calls = 0
        self.in_flight = 0
        self.connect_seconds: float | None = None  # of the last successful connect
        self.connected_at: float | None = None  # wall clock
        self.last_used = trio.current_time()
        self.log_path = pool.log_dir / f"{server.name}-{server.key[:8]}.log"
        self._log: BoundedLog | None = None  # a stdio server's stderr, while it runs
        self._client: Any = None
        self._changed = trio.Event()
        self._wake = trio.Event()
        self._poke = trio.Event()
        self._broken = False
        self._closing = False  # mm is closing the session: the server's exit is no drop
        self._stopped_reading = False  # mm dropped the server (stdio's on_eof): its exit is not the reason
        self._relist = False
        self._exit_code: int | None = None
        self._running = False
        self._forgotten = False  # let go by the pool (McpPool.connection): its task ends

    # -- what callers use --------------------------------------------------

    async def ready(self, timeout: float) -> Any:
        """The live MCP client, connecting now if the connection is down.

        Errors: McpUnavailable when the attempt fails or ``timeout`` passes.
        """
        self.last_used = trio.current_time()
        if self._live():
            return self._client
        if self._forgotten:  # a turn still holds a tool of it: the pool's connection for its key answers
            return await self.pool.adopt(self).ready(timeout)
        self.pool._start(self)
        seen = self.failures
        if self.state != "connecting":
            self._wake.set()
        with trio.move_on_after(timeout):
            while True:
                if self._live():
                    return self._client
                if self.failures > seen:
                    raise McpUnavailable(self.error or "the connection failed")
                await self._changed.wait()
        last = f"; last error: {self.error}" if self.error else ""
        raise McpUnavailable(f"no connection within {timeout:g} s{last}")

    def _live(self) -> bool:
        return self.state == "ready" and self._client is not None and not self._broken

    async def request(
        self, method: str, *args: Any, timeout: float, connect_timeout: float, **kw: Any
    ) -> Any:
        """``client.<method>(*args, **kw)`` on the live connection, within ``timeout`` seconds.

        Errors: McpUnavailable (no connection), McpCallError (see its kinds).
        Cancellation: the request is abandoned (the SDK tells the server).
        """
        client = await self.ready(connect_timeout)
        # The SDK, lazily: loaded by load_sdk in a worker thread, never in a daemon without MCP servers.
        from mcp.shared.exceptions import MCPError
        from pydantic import ValidationError

        self.in_flight += 1
        self.calls += 1
        try:
            with trio.fail_after(timeout):
                return await getattr(client, method)(*args, **kw)
        except trio.TooSlowError:
            raise McpCallError("timeout", f"no answer within {timeout:g} s") from None
        except MCPError as exc:
            if self._lost(exc):
                self._break(f"the connection closed during {method}")
                raise McpCallError("lost", self._lost_reason()) from None
            # mm gives the SDK no timeout: a REQUEST_TIMEOUT is the server's own error, answered as one.
            raise McpCallError("remote", exc.message, code=exc.code, data=exc.data) from None
        except ValidationError as exc:
            raise McpCallError(
                "invalid", f"the server's answer breaks the protocol: {_invalid(exc)}"
            ) from None
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._break(str(exc))
            raise McpCallError("lost", self._lost_reason()) from None
        except Exception as exc:
            if _is_transport_error(exc):
                self._break(describe(exc))
                raise McpCallError("lost", self._lost_reason()) from None
            raise
        finally:
            self.in_flight -= 1
            self.last_used = trio.current_time()

    def _lost(self, exc: Any) -> bool:
        """Whether the SDK's MCPError says the connection is gone, not that the server answered an error.

        -32000 is the SDK's CONNECTION_CLOSED and the first code JSON-RPC leaves to servers, which use it for
        their own errors: a stdio server's "quota exceeded" was taken for a lost connection, the model told
        the call may have taken effect, and the server restarted. Over stdio the SDK's is its "Connection
        closed"; over HTTP it makes -32000 errors of its own for a stream that ended, and a server's cannot
        be told from them.
        """
        from mcp_types import CONNECTION_CLOSED, INVALID_REQUEST  # the SDK, lazily (see load_sdk)

        if exc.code == INVALID_REQUEST:
            return exc.message == "Session terminated" and self.server.transport != "stdio"
        if exc.code != CONNECTION_CLOSED:
            return False
        return self.server.transport != "stdio" or (exc.message == "Connection closed" and exc.data is None)

    async def refresh(self, timeout: float) -> None:
        """List the tools again (``mm mcp test``), connecting if needed."""
        client = await self.ready(timeout)
        with trio.fail_after(timeout):
            self.tools, self.listing_cut = await _list_tools(client)

    def status(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "error": self.error,
            "pid": self.pid,
            "connects": self.connects,
            "drops": self.drops,
            "calls": self.calls,
            "in_flight": self.in_flight,
            "tools_offered": len(self.tools) if self.connects else None,
            "connect_seconds": None if self.connect_seconds is None else round(self.connect_seconds, 3),
            "connected_at": self.connected_at,
            "protocol": self.protocol,
            "log": str(self.log_path) if self.server.transport == "stdio" else None,
        }

    # -- the connection's task ---------------------------------------------

    async def run(self) -> None:
        delay = 0.0
        while True:
            if delay and self.connects:
                with trio.move_on_after(delay):
                    await self._wake.wait()
            elif delay:  # it never connected: try again when a turn or a call asks, not on a timer
                await self._wake.wait()
            if not self._wanted():
                self._set("idle")
                await self._wake.wait()
            if self._forgotten:
                self._running = False
                return
            self._wake = trio.Event()
            started = trio.current_time()
            reached = await self._session()
            stable = reached and trio.current_time() - started >= STABLE_AFTER
            delay = 0.0 if stable else min(max(delay * 2, BACKOFF_FIRST), BACKOFF_MAX)

    def _wanted(self) -> bool:
        return self.in_flight > 0 or trio.current_time() - self.last_used < IDLE_CLOSE

    async def _session(self) -> bool:
        """One connection, from connecting until it drops or idles out; whether it got ready."""
        self._begin_attempt()
        started = trio.current_time()
        reached, error = False, None
        timeout = self.server.spec.connect_timeout
        try:
            # Within the guard: out of descriptors or threads, the SDK's import fails as a connect would.
            await load_sdk()
            with trio.CancelScope(deadline=started + timeout) as scope:
                async with self._client_context() as client:
                    tools, self.listing_cut = await _list_tools(client)
                    scope.deadline = math.inf
                    reached = True
                    self._connected(client, tools, started)
                    await self._serve(client)
                    self._closing = True
            if scope.cancelled_caught and not reached:
                error = f"no answer within {timeout:g} s" + self._stderr_hint()
        except Exception as exc:
            error = self._explain(exc)
        finally:
            self._client = None
        self._ended(reached, error)
        return reached

    def _begin_attempt(self) -> None:
        self.attempts += 1
        self._broken, self._closing, self._relist, self._exit_code, self.pid = False, False, False, None, None
        self._stopped_reading = False
        self._poke = trio.Event()
        self._set("connecting")

    def _connected(self, client: Any, tools: list[Any], started: float) -> None:
        self._client, self.tools = client, tools
        self.capabilities = client.server_capabilities
        self.server_info, self.protocol = client.server_info, client.protocol_version
        self.connects += 1
        self.connect_seconds = trio.current_time() - started
        self.connected_at = time.time()
        self.error = None
        self._set("ready")
        log.info(
            "MCP server %s connected in %.3f s (%s, %d tools)",
            self.server.name,
            self.connect_seconds,
            self.protocol,
            len(tools),
        )

    def _ended(self, reached: bool, error: str | None) -> None:
        """Record how a session ended: dropped, failed, or (no error) closed for being idle."""
        if self._broken and error is None:
            signalled = self._exit_code is not None and self._exit_code < 0
            error = self._lost_reason() + ("" if signalled else self._stderr_hint())
        if error is None:
            return  # closed for being idle
        self.error = error
        if reached:
            self.drops += 1
            log.warning("MCP server %s dropped: %s; reconnecting", self.server.name, error)
        else:
            self.failures += 1
            log.warning("MCP server %s: %s", self.server.name, error)
        self._set("failed")

    async def _serve(self, client: Any) -> None:
        """Serve until the connection breaks or is unused for IDLE_CLOSE; list the tools again when the server
        says they changed, at most once in RELIST_GAP seconds."""
        relist_at = -math.inf
        while not self._broken:
            wake = self.last_used + IDLE_CLOSE
            with trio.move_on_at(min(wake, relist_at) if self._relist else wake):
                await self._poke.wait()
            self._poke = trio.Event()
            if self._broken:
                return
            if not self._wanted():  # a server's notifications are no use of it
                log.info("MCP server %s closed after %g s unused", self.server.name, IDLE_CLOSE)
                return
            if self._relist and trio.current_time() >= relist_at:
                self._relist = False
                with trio.fail_after(self.server.spec.connect_timeout):
                    self.tools, self.listing_cut = await _list_tools(client)
                relist_at = trio.current_time() + RELIST_GAP
                self._set("ready")

    @contextlib.asynccontextmanager
    async def _client_context(self) -> AsyncIterator[Any]:
        # The SDK, lazily (see load_sdk).
        from mcp.client.client import Client
        from mcp_types import Implementation

        client = Client(
            self._transport(),
            mode="auto",
            client_info=Implementation(name="mm", version=__version__),
            message_handler=self._on_message,
            cache=None,
        )
        async with client:
            yield client

    def _transport(self) -> Any:
        server = self.server
        if server.transport == "http":
            return _http_transport(server.url or "", server.headers, server.spec.connect_timeout)
        if server.transport == "sse":
            return _sse_transport(server.url or "", server.headers, server.spec.connect_timeout)
        return self._stdio()

    @contextlib.asynccontextmanager
    async def _stdio(self) -> AsyncIterator[Any]:
        server = self.server
        self.log_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with BoundedLog(self.log_path, f"--- mm: starting {server.target} at {time.ctime()}\n") as stderr:
            self._log = stderr
            async with stdio_transport(
                server.argv,
                cwd=server.cwd or paths.home(),
                env=server.env,
                stderr=stderr.write,
                grace=self.pool.grace,
                on_start=self._started,
                on_exit=self._exited,
                on_eof=self._eof,
                sandbox=server_sandbox(server),
            ) as streams:
                yield streams

    def _started(self, pid: int) -> None:
        self.pid = pid

    def _exited(self, code: int | None) -> None:
        self._exit_code = code
        self._break("")
        if not self._stopped_reading:
            self._break_reason = f"the server exited ({_exit_text(code)})"

    def _eof(self, reason: str) -> None:
        """mm stopped reading a server that still runs (stdio's on_eof): the reason, whatever its exit says."""
        if not self._broken and not self._closing:
            self._stopped_reading = True
            self._break(reason)

    async def _on_message(self, message: Any) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            self._relist = True
            self._poke.set()

    def _break(self, reason: str) -> None:
        if not self._broken and not self._closing:
            self._broken = True
            self._break_reason = reason
            self._poke.set()
            if self.state == "ready":
                self._set("dropped")

    def _lost_reason(self) -> str:
        return getattr(self, "_break_reason", None) or "the connection dropped"

    def _explain(self, exc: BaseException) -> str:
        leaf = _leaf(exc)
        if isinstance(leaf, OSError | ValueError) and self.server.transport == "stdio" and self.pid is None:
            return spawn_error_message(leaf, self.server.argv, self.server.cwd or paths.home())
        if self._stopped_reading:
            return self._lost_reason() + self._stderr_hint()
        if self._exit_code is not None:
            return (
                f"the server exited ({_exit_text(self._exit_code)}) before it answered{self._stderr_hint()}"
            )
        return describe(leaf) + self._stderr_hint()

    def _stderr_hint(self) -> str:
        if self.server.transport != "stdio":
            return ""
        started = self._log.started if self._log is not None else 0  # this run's bytes only
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(started, os.path.getsize(self.log_path) - STDERR_TAIL))
                tail = f.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""
        if not tail:
            return ""
        lines = tail.splitlines()[-4:]
        return f"; its stderr ends with: {' | '.join(line.strip() for line in lines)}"

    def _set(self, state: str) -> None:
        self.state = state
        self._changed.set()
        self._changed = trio.Event()


class McpPool:
    """Every MCP connection of the daemon, by configuration key."""

    def __init__(self, *, log_dir: Path, grace: float = 3.0) -> None:
        self.log_dir = log_dir
        self.grace = grace
        self.connections: dict[str, McpConnection] = {}
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the connection tasks until cancelled; then every server is stopped."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            for conn in self.connections.values():
                conn._running = False
                conn.state = "closed"

    def connection(self, server: ResolvedServer) -> McpConnection:
        conn = self.connections.get(server.key)
        if conn is None:
            self._forget_idle()
            conn = self.connections[server.key] = McpConnection(self, server)
        else:
            conn.server = server  # the same connection, perhaps under another name
        return conn

    def adopt(self, conn: McpConnection) -> McpConnection:
        """The connection for forgotten *conn*'s key: *conn* itself again when none was made since."""
        live = self.connections.get(conn.key)
        if live is None:
            conn._forgotten = False
            live = self.connections[conn.key] = conn
        return live

    def _forget_idle(self) -> None:
        """Past CONNECTIONS_KEPT, forget the connections closed for being idle (least recently used first):
        their tasks end, and their listings go. Those in use or wanted are kept, whatever their number."""
        if len(self.connections) < CONNECTIONS_KEPT:
            return
        idle = sorted(
            (
                c
                for c in self.connections.values()
                if c.state in ("new", "idle", "failed") and not c._wanted()
            ),
            key=lambda c: c.last_used,
        )
        for conn in idle[: len(self.connections) - CONNECTIONS_KEPT + 1]:
            del self.connections[conn.key]
            conn._forgotten, conn.tools = True, []
            conn._wake.set()  # a task parked on it ends

    def _start(self, conn: McpConnection) -> None:
        if conn._running:
            return
        if self._nursery is None:
            raise McpUnavailable("the daemon is stopping")
        conn._running = True
        self._nursery.start_soon(conn.run, name=f"mcp:{conn.server.name}")

    async def tools(
        self, agent: Any, config: Any, *, confined_client: bool = False
    ) -> tuple[list[McpTool], list[str]]:
        """The MCP tools of every enabled server of *agent* and *config*, and warnings. None, and a warning
        why, for a *confined_client* (a process with no_new_privs: sandbox.CONFINED_CLIENT_MCP).

        Servers are connected concurrently, each within its ``connect_timeout``.
        A server that cannot be reached, or whose ``${VAR}`` is not set, is a
        warning and its tools are left out of the turn. Clashes with built-in
        and declared tools are not decided here (see ``tool.admit``).
        """
        entries = [e for e in servers_for(agent, config) if e.spec.enabled]
        if not entries:
            return [], []
        if confined_client:
            return [], [CONFINED_CLIENT_MCP]
        results: list[tuple[list[McpTool], list[str]]] = [([], [])] * len(entries)

        async def one(i: int) -> None:
            entry = entries[i]
            try:
                conn = self.connection(resolve(entry))
                await conn.ready(entry.spec.connect_timeout)
            except (ExpansionError, McpUnavailable) as exc:
                results[i] = (
                    [],
                    [f"MCP server {entry.name} is not available: {exc}; its tools are left out"],
                )
                return
            try:
                results[i] = make_tools(entry, conn)
            except Exception as exc:  # a listing mm cannot read must not fail the turn
                log.exception("MCP server %s: its tools could not be read", entry.name)
                results[i] = (
                    [],
                    [f"MCP server {entry.name}: its tools could not be read ({exc}); they are left out"],
                )

        async with trio.open_nursery() as nursery:
            for i in range(len(entries)):
                nursery.start_soon(one, i)
        tools = [t for found, _ in results for t in found]
        return tools, [w for _, warned in results for w in warned]


@contextlib.asynccontextmanager
async def _http_transport(url: str, headers: dict[str, str], connect_timeout: float) -> AsyncIterator[Any]:
    # The SDK and its HTTP client, lazily (see load_sdk).
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    # No read timeout here: each request has its own (the call's timeout). No body read past its bound.
    timeout = httpx2.Timeout(connect_timeout, read=None)
    async with (
        bounded_client(headers, timeout) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


@contextlib.asynccontextmanager
async def _sse_transport(url: str, headers: dict[str, str], connect_timeout: float) -> AsyncIterator[Any]:
    """The SDK's SSE transport (the MCP protocol of 2024-11-05, which Claude Code calls ``sse``)."""
    from mcp.client.sse import sse_client  # lazily (see load_sdk)

    # The event stream of an idle connection may stay silent as long as the connection is kept:
    # a shorter read timeout would drop it (and reconnect) for nothing.
    async with sse_client(
        url,
        headers=headers,
        timeout=connect_timeout,
        sse_read_timeout=IDLE_CLOSE * 2,
        httpx_client_factory=bounded_client,  # no POST's answer read past its bound
    ) as streams:
        yield streams


async def _list_tools(client: Any) -> tuple[list[Any], str | None]:
    """The server's tools, page after page, within MAX_TOOLS and MAX_LISTING_CHARS (descriptions cut at
    MAX_DESCRIPTION_CHARS); and what was left unread, or None."""
    tools: list[Any] = []
    cursor, chars, cut = None, 0, None
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        for remote in page.tools:
            chars += _listing_chars(remote)
            if len(tools) == MAX_TOOLS or chars > MAX_LISTING_CHARS:
                cut = (
                    f"it lists more than {MAX_TOOLS} tools, or more than {MAX_LISTING_CHARS:,} characters of "
                    f"descriptions and schemas: the {len(tools)} tools before are kept, the rest left out "
                    "(name the ones you want with tools.include)"
                )
                return tools, cut
            if remote.description and len(remote.description) > MAX_DESCRIPTION_CHARS:
                remote.description = remote.description[:MAX_DESCRIPTION_CHARS] + " [cut]"
            tools.append(remote)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools, cut


def _listing_chars(remote: Any) -> int:
    """The characters a listed tool holds: its description and its schema (as compact JSON; a schema nested
    past MAX_DEPTH counts nothing here: make_tools leaves it out)."""
    schema = remote.input_schema
    if value_depth(schema, stop_past=MAX_DEPTH) > MAX_DEPTH:
        size = 0
    else:
        try:
            size = len(_JSON.encode(schema))
        except (TypeError, ValueError, OverflowError):
            size = 0  # not JSON: make_tools says so
    return len(remote.description or "") + len(remote.name or "") + size


def _leaf(exc: BaseException) -> BaseException:
    """The first exception inside nested groups that is not a cancellation."""
    if isinstance(exc, BaseExceptionGroup):
        inner = [_leaf(e) for e in exc.exceptions]
        real = [e for e in inner if not isinstance(e, trio.Cancelled)]
        return (real or inner)[0]
    return exc


def _is_transport_error(exc: BaseException) -> bool:
    leaf = _leaf(exc)
    return type(leaf).__module__.startswith(("httpx2", "httpcore2", "anyio")) or isinstance(
        leaf, ConnectionError
    )


def _invalid(exc: Any) -> str:
    """What a pydantic ValidationError says, made cheaply: its text lists every problem, and an answer of
    100,000 bad content blocks had 1.2 M of them, a text of 232 MB that took the event loop seconds to make."""
    count = exc.error_count()
    return str(exc) if count <= 10 else f"{count:,} validation errors for {exc.title}"


def describe(exc: BaseException) -> str:
    """One line saying what went wrong, for a person and the model (cut at MAX_MESSAGE_CHARS)."""
    return cut(_describe(exc))


def _describe(exc: BaseException) -> str:
    leaf = _leaf(exc)
    if callable(getattr(leaf, "error_count", None)):  # pydantic's ValidationError: an answer mm cannot read
        return f"the server's answer breaks the protocol: {_invalid(leaf)}"
    code = getattr(leaf, "code", None)
    if type(leaf).__name__ == "MCPError":
        return f"{leaf} (MCP error {code})"
    module = type(leaf).__module__
    if module.startswith(("httpx2", "httpcore2")):
        name = type(leaf).__name__
        if name == "ConnectError":
            return f"cannot connect: {leaf or 'connection refused'}"
        return f"{name}: {leaf}" if str(leaf) else name
    text = str(leaf)
    return f"{type(leaf).__name__}: {text}" if text else type(leaf).__name__


def _exit_text(code: int | None) -> str:
    if code is None:
        return "status unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def server_sandbox(server: ResolvedServer) -> Sandbox | None:
    """The sandbox a stdio server runs in: its entry's ``sandbox:``, off unless it says otherwise.

    In ``workspace`` mode the server may write beneath its working directory
    and its ``writable:`` folders (and the temp dir).
    """
    spec = server.spec.sandbox
    if spec.mode in (None, "off"):
        return None
    roots = (server.cwd or paths.home(), *spec.writable) if spec.mode == "workspace" else ()
    return Sandbox(
        mode=spec.mode,
        roots=tuple(os.path.realpath(root) for root in roots),
        network=spec.network,
        source=server.entry.origin,
    )
