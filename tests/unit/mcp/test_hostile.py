"""Servers that break the protocol on purpose, and how a connection (mmd/mcp/pool.py, stdio.py) ends them.

The stdio ones are real processes on real pipes, through the real SDK; the reconnect policy's are stand-in
clients on trio's autojump clock. The end-to-end calls through ``mm -p`` are in tests/e2e/test_mcp.py.
"""

from __future__ import annotations

import contextlib
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio

from mmd.config.mcp import McpServerSpec, ServerEntry, resolve
from mmd.mcp import pool as mcp_pool
from mmd.mcp import stdio
from mmd.mcp.errors import McpCallError

# A stdio server in plain JSON-RPC lines that answers the handshake and tools/list, then does HOSTILE.
SERVER = """
import json, os, sys, time

def send(message):
    sys.stdout.write(json.dumps(message) + "\\n")
    sys.stdout.flush()

for line in sys.stdin:
    message = json.loads(line)
    method, ident = message.get("method"), message.get("id")
    if method == "initialize":
        info = {{"name": "hostile", "version": "1"}}
        version = message["params"]["protocolVersion"]
        send({{"jsonrpc": "2.0", "id": ident,
              "result": {{"protocolVersion": version, "capabilities": {{"tools": {{}}}}, "serverInfo": info}}}})
    elif method == "tools/list":
        schema = {{"type": "object", "properties": {{}}}}
        send({{"jsonrpc": "2.0", "id": ident, "result": {{"tools": [{{"name": "go", "inputSchema": schema}}]}}}})
{hostile}
    elif method == "tools/call":
{on_call}
    elif ident is not None:  # server/discover among them: the handshake falls back to initialize at once
        send({{"jsonrpc": "2.0", "id": ident, "error": {{"code": -32601, "message": "no " + method}}}})
"""


@contextlib.asynccontextmanager
async def served(
    tmp_path: Path, hostile: str, on_call: str = "pass"
) -> AsyncIterator[mcp_pool.McpConnection]:
    """The connection of a daemon's pool (running) to the hostile server: *hostile* runs after its handshake,
    *on_call* answers each tools/call. The pool's task is cancelled at the block's end."""
    script = tmp_path / "server.py"
    code = {"hostile": hostile, "on_call": on_call}
    script.write_text(
        SERVER.format(**{k: textwrap.indent(textwrap.dedent(v), " " * 8) for k, v in code.items()})
    )
    spec = McpServerSpec(command=sys.executable, args=[str(script)], connect_timeout=20)
    entry = ServerEntry(name="hostile", spec=spec, origin="mm.yaml", base_dir=tmp_path, default_cwd=tmp_path)
    pool = mcp_pool.McpPool(log_dir=tmp_path, grace=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(pool.run)
        yield pool.connection(resolve(entry, environ={}))
        nursery.cancel_scope.cancel()


async def test_a_server_that_sends_requests_and_never_reads_its_answers_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK answers each request of the server's (here pings) in a task of its own, which waits until the
    server reads its stdin: one that sent pings and never read grew the daemon by 45 MB a second. Past
    MAX_UNREAD_ANSWERS answers waiting, mm stops reading it and drops the connection, saying why."""
    # 20,000 pings: the server can only finish writing them once mm read most (its stdout's pipe holds 64 KiB),
    # and mm's answers fill the server's stdin pipe after about 1,600: the rest wait in the daemon.
    hostile = """
        for n in range(20_000):
            sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": n, "method": "ping"}) + "\\n")
        sys.stdout.flush()
        sys.exit(7)
    """
    ends: list[str | None] = []  # why each session ended (it is reconnected after)
    ended = mcp_pool.McpConnection._ended
    monkeypatch.setattr(
        mcp_pool.McpConnection, "_ended", lambda conn, *a: (ended(conn, *a), ends.append(conn.error))
    )
    async with served(tmp_path, hostile) as conn:
        with trio.fail_after(30):  # a hang guard
            await conn.ready(20)
            while not ends:
                await conn._changed.wait()
        # Without the bound the server wrote its pings, mm read them all, and the server exited (exit code 7).
        assert ends[0] == stdio.UNREAD


# Each stayed 'ready' until a call found the connection closed, and the call was told the connection closed
# during call_tool. Stdout: mm read its end; stdin: mm's next write found the pipe closed and ended the read
# side alone. Now the connection drops as soon as mm sees it, and a call says why.
CLOSES_STDOUT = """
    os.close(1)
    time.sleep(60)
"""
CLOSES_STDIN = """
    sys.stdin.readline()  # the call, which is never answered
    os.close(0)
    send({"jsonrpc": "2.0", "id": "ping", "method": "ping"})  # mm's answer finds the pipe closed
    time.sleep(60)
"""


@pytest.mark.parametrize(
    ("hostile", "reason"),
    [(CLOSES_STDOUT, stdio.CLOSED), (CLOSES_STDIN, stdio.STDIN_CLOSED)],
    ids=["stdout", "stdin"],
)
async def test_a_server_that_closes_a_pipe_and_lives_on_is_dropped_with_that_reason(
    tmp_path: Path, hostile: str, reason: str
) -> None:
    async with served(tmp_path, hostile) as conn:
        with trio.fail_after(30):  # a hang guard
            await conn.ready(20)
            with pytest.raises(McpCallError) as raised:
                await conn.request("call_tool", "go", {}, timeout=20, connect_timeout=20)
        assert (raised.value.kind, raised.value.message) == ("lost", reason)


async def test_a_servers_errors_are_its_own_and_bounded_and_the_connection_stays(tmp_path: Path) -> None:
    """-32000, the SDK's code for a closed connection, is also the first code JSON-RPC leaves to servers: a
    server's "quota exceeded" with it was taken for a lost connection (the model told the call may have taken
    effect) and the server restarted. An error's message went whole to the model, twice; and an answer of
    2,000 bad content blocks was described by its 24,000 problems, 4.6 MB made on the event loop."""
    on_call = """
        name = message["params"]["name"]
        if name == "quota":
            error = {"code": -32000, "message": "quota exceeded"}
        elif name == "verbose":
            error = {"code": -32099, "message": "x" * 1_000_000}
        if name == "bad":
            send({"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text"}] * 2_000}})
        else:
            send({"jsonrpc": "2.0", "id": ident, "error": error})
    """
    async with served(tmp_path, "", on_call) as conn:
        raised = []
        with trio.fail_after(30):  # a hang guard
            await conn.ready(20)
            pid = conn.pid
            for name in ("quota", "verbose", "bad"):
                with pytest.raises(McpCallError) as error:
                    await conn.request("call_tool", name, {}, timeout=20, connect_timeout=20)
                raised.append(error.value)
        quota, verbose, bad = raised
        assert (quota.kind, quota.code, quota.message) == ("remote", -32000, "quota exceeded")
        assert (verbose.kind, verbose.code) == ("remote", -32099)
        assert verbose.message == "x" * 2000 + " [… 998,000 more characters cut]"
        assert (bad.kind, bad.message) == (
            "invalid",
            "the server's answer breaks the protocol: 24,000 validation errors for CallToolResult",
        )
        assert (conn.state, conn.pid, conn.attempts) == ("ready", pid, 1)  # never dropped


async def test_an_answer_listing_more_items_than_mm_reads_is_refused_before_the_sdk_checks_each(
    tmp_path: Path,
) -> None:
    """The SDK checks each content block against its types on the event loop: 300,000 bad ones (5 MB, within
    the bound of values) held every session of the daemon 3 s, and were then told as 1.2 M problems. A list
    at the top of a result longer than MAX_RESULT_ITEMS is refused in the transport, and the call answered."""
    on_call = """
        blocks = [{"type": "image"}] * 20_000
        send({"jsonrpc": "2.0", "id": ident, "result": {"content": blocks}})
    """
    async with served(tmp_path, "", on_call) as conn:
        with trio.fail_after(30):  # a hang guard
            with pytest.raises(McpCallError) as raised:
                await conn.request("call_tool", "go", {}, timeout=20, connect_timeout=20)
        assert (raised.value.kind, raised.value.data) == ("remote", {stdio.REFUSED: True})
        assert (
            raised.value.message
            == "mm refused its answer: its content lists 20,000 items; the limit is 10,000"
        )


class _Client:
    server_capabilities = server_info = None
    protocol_version = "2025-11-25"

    def __init__(self) -> None:
        self.listed = 0

    async def list_tools(self, cursor: Any = None) -> Any:
        self.listed += 1
        return SimpleNamespace(tools=[], next_cursor=None)


def stand_in(monkeypatch: pytest.MonkeyPatch, *, lives: float, times: int) -> mcp_pool.McpConnection:
    """A connection whose server exits *lives* seconds after its handshake, the first *times* times it starts,
    and exits when mm closes the session, as a stdio server does once its stdin is closed."""
    crashes = [lives] * times
    client = _Client()

    @contextlib.asynccontextmanager
    async def client_context(conn: mcp_pool.McpConnection) -> AsyncIterator[Any]:
        exited = False

        async def exit_later(seconds: float) -> None:
            nonlocal exited
            await trio.sleep(seconds)
            exited = True
            conn._exited(3)

        async with trio.open_nursery() as nursery:
            if crashes:
                nursery.start_soon(exit_later, crashes.pop())
            try:
                yield client
            finally:
                if not exited:
                    conn._exited(0)
                nursery.cancel_scope.cancel()

    async def loaded() -> None:
        return None

    monkeypatch.setattr(mcp_pool, "load_sdk", loaded)
    monkeypatch.setattr(mcp_pool.McpConnection, "_client_context", client_context)
    monkeypatch.setattr(mcp_pool.McpConnection, "_stderr_hint", lambda conn: "")
    server = SimpleNamespace(key="k", name="s", transport="stdio", spec=SimpleNamespace(connect_timeout=5))
    return mcp_pool.McpConnection(mcp_pool.McpPool(log_dir=Path("/nonexistent")), server)  # type: ignore[arg-type]


async def test_a_server_that_exits_right_after_its_handshake_is_restarted_with_backoff(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: Any
) -> None:
    """A connection that got ready reconnected at once whenever it dropped: a server that exited right after
    its handshake was started 30 times a second for as long as it was used. One that drops within STABLE_AFTER
    seconds of its start now counts as failing (0.5 s, doubling to 30 s); one that lived longer reconnects at
    once."""
    conn = stand_in(monkeypatch, lives=0.1, times=10_000)
    async with trio.open_nursery() as nursery:
        await nursery.start(conn.pool.run)
        await conn.ready(5)
        await trio.sleep(120)
        # Attempts at 0, 0.6, 1.7, 3.8, 7.9, 16, 32.1, 62.2 and 92.3 s: nine; at once each time, 1,200.
        assert conn.attempts == 9 and conn.error == "the server exited (exit code 3)"
        nursery.cancel_scope.cancel()


async def test_a_server_that_lived_long_reconnects_at_once_and_an_idle_close_is_no_drop(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: Any
) -> None:
    conn = stand_in(monkeypatch, lives=mcp_pool.STABLE_AFTER + 10, times=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(conn.pool.run)
        await conn.ready(5)
        await trio.sleep(mcp_pool.STABLE_AFTER + 10 + 1)
        assert (conn.attempts, conn.drops, conn.state) == (2, 1, "ready")  # reconnected at once
        # Unused, it is closed after IDLE_CLOSE; the server exits as its stdin closes: that is no drop.
        await trio.sleep(mcp_pool.IDLE_CLOSE + 10)
        assert (conn.attempts, conn.drops, conn.state) == (2, 1, "idle")
        nursery.cancel_scope.cancel()


async def test_a_server_that_keeps_saying_its_tools_changed_is_listed_at_most_every_relist_gap(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: Any
) -> None:
    """notifications/tools/list_changed made mm list the tools at once, each time: a server that sent it after
    each listing kept the daemon reading 8 MB listings four times a second, and a server that said it once a
    second was never closed for idleness. Now once in RELIST_GAP seconds, and notifications are no use."""
    conn = stand_in(monkeypatch, lives=0, times=0)
    changed = SimpleNamespace(method="notifications/tools/list_changed")
    async with trio.open_nursery() as nursery:
        await nursery.start(conn.pool.run)
        await conn.ready(5)
        client = conn._client
        for _ in range(60):
            await conn._on_message(changed)
            await trio.sleep(1)
        # The connect's listing, then one at once and one each 5 s, the 60th second's included: 14 (one at each
        # notification: 61).
        assert client.listed <= 2 + 60 / mcp_pool.RELIST_GAP
        for _ in range(int(mcp_pool.IDLE_CLOSE)):
            await conn._on_message(changed)
            await trio.sleep(1)
        assert conn.state == "idle"  # closed IDLE_CLOSE after its last use, the notifications notwithstanding
        nursery.cancel_scope.cancel()
