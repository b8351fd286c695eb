"""The MCP stdio transport over mm's supervisor.

The SDK's ``stdio_client`` starts the server itself; mm's servers run under
:func:`mmd.procs.supervised_process` instead, like every child of the daemon:
their own session and process group, descendants recorded, the whole tree
stopped (SIGTERM, grace, SIGKILL, reaped) when the connection ends, and found
by their tag after a daemon was killed. This module bridges the child's pipes
to the SDK's message streams: one JSON-RPC message per line each way.

Shutdown follows the MCP lifecycle: close the server's stdin, give it a moment
to exit by itself, then the supervisor stops the group.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import trio

from ..procs import supervised_process
from ..procs.logfile import Drains
from ..sandbox import Sandbox
from ..untrusted import MAX_DOCUMENT_DEPTH, OFF_LOOP_BYTES, TooDeep, TooMany, check_json

log = logging.getLogger(__name__)

# Seconds a server gets to exit by itself once its stdin is closed, before SIGTERM.
STDIN_CLOSE_WAIT = 0.5
# Longest line read from a server; a longer one is dropped (and logged), not buffered forever.
MAX_LINE = 64 * 1024 * 1024
# Bytes read at once from the server's stdout.
READ_SIZE = 65536
# Answers to the server's own requests (ping, sampling, roots…) that may wait for its stdin at once: the SDK
# answers each in a task of its own, which waits until the server reads. A server that sent requests and never
# read its stdin grew the daemon by 45 MB a second; past this many waiting, its connection is dropped.
MAX_UNREAD_ANSWERS = 256
# Items of a list at the top of a result (content blocks, tools, resources…) read at most. The SDK checks each
# against its types on the event loop: 300,000 bad content blocks (5 MB, within MAX_VALUES) held every session
# of the daemon 3 s; real answers list tens, a page of tools hundreds. Past it the answer is refused.
MAX_RESULT_ITEMS = 10_000
# JSON-RPC's code for an error inside the server (here: an answer mm cannot read).
_INTERNAL_ERROR = -32603
# The key in an error's data that says mm refused the server's answer (mmd/mcp/tool.py reads it).
REFUSED = "mm_refused"
# A JSON string, or a bracket: the tokens that matter to nesting.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*+"?|[\[\]{}]', re.DOTALL)
# Tokens read for the id at most: servers write it first or second; a line of 20 M values (refused as too
# many) is not walked token by token in Python.
_ID_TOKENS = 100_000
# The key "id" and its value (a number or a string), at a token's start.
_ID = re.compile(rb'"id"\s*:\s*(-?[0-9]+|"(?:[^"\\]|\\.)*")')


@contextlib.asynccontextmanager
async def stdio_transport(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    stderr: Callable[[bytes], None],
    grace: float,
    on_start: Callable[[int], None],
    on_exit: Callable[[int | None], None],
    on_eof: Callable[[str], None],
    sandbox: Sandbox | None = None,
) -> AsyncIterator[tuple[Any, Any]]:
    """Run the server ``argv`` and yield ``(read_stream, write_stream)`` for an MCP ``Client``.

    The server's environment is ``env`` alone (see config.INHERITED_ENV);
    its stderr is read by the daemon and handed to ``stderr`` chunk by chunk (the pool's bounded log: a server
    given the file itself could fill the disk, its sandbox notwithstanding). ``on_start(pid)`` is
    called once it runs; ``on_exit(returncode)`` as soon as it exits, whoever
    asked (the server crashed, was killed, or the block ended); ``on_eof(reason)`` when mm stops reading a
    server that runs on (it closed its stdout or stdin, or left MAX_UNREAD_ANSWERS answers unread). A ``sandbox``
    confines the server and all it starts (mmd/procs/supervisor.py).

    Errors: OSError or ValueError if the server cannot start.
    Cancellation: the process tree is stopped in a shielded scope, then
    Cancelled goes on.
    """
    # The SDK's stream library: imported when a stdio server first starts, as the SDK is
    # (mmd/mcp/pool.py): a daemon without MCP servers never loads either.
    import anyio

    async with supervised_process(
        argv,
        cwd=cwd,
        env=env,
        inherit_env=False,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        grace=grace,
        sandbox=sandbox,
    ) as proc:
        on_start(proc.pid)
        read_send, read_recv = anyio.create_memory_object_stream[Any](0)
        write_send, write_recv = anyio.create_memory_object_stream[Any](0)

        async def watcher() -> None:
            on_exit(await proc.wait())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(_read, proc, read_send, write_send, argv[0], on_eof)
            drains = Drains(nursery, stderr, proc.stderr)
            nursery.start_soon(_write, proc, write_recv, read_send, on_eof)
            nursery.start_soon(watcher)
            try:
                yield read_recv, write_send
            finally:
                await _close_stdin(proc, grace, drains)
                nursery.cancel_scope.cancel()
                for stream in (read_send, read_recv, write_send, write_recv):
                    stream.close()


async def _read(
    proc: Any, read_send: Any, write_send: Any, program: str, on_eof: Callable[[str], None]
) -> None:
    """The server's stdout onto the SDK's read stream: one JSON-RPC message a line; ``on_eof(reason)`` when it
    ends, or when the server sends a request while MAX_UNREAD_ANSWERS answers wait for it to read its stdin."""
    # The SDK and its stream library, lazily as in stdio_transport.
    import anyio
    import mcp_types
    from mcp.shared.message import SessionMessage

    lines = _Lines()
    try:
        async with read_send:
            while chunk := await proc.stdout.receive_some(READ_SIZE):
                for line in lines.feed(chunk):
                    if len(line) > OFF_LOOP_BYTES:  # checked and decoded in a thread: seconds for 64 MiB
                        message = await trio.to_thread.run_sync(_parse, line, mcp_types, SessionMessage)
                    else:
                        message = _parse(line, mcp_types, SessionMessage)
                    if message is None:
                        continue
                    if _unread(message, write_send, mcp_types):
                        log.warning("%s: %s; dropping the connection", program, UNREAD)
                        on_eof(UNREAD)
                        return
                    await read_send.send(message)
                if lines.partial > MAX_LINE:
                    log.warning("%s: dropped a line longer than %d bytes", program, MAX_LINE)
                    lines.drop()
            await _gone(proc, on_eof, CLOSED)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass  # the session is gone, or the pipe: either way the stream is closed


# Why mm stopped reading a server that is still running (on_eof's reasons).
UNREAD = f"the server sent requests without reading mm's answers ({MAX_UNREAD_ANSWERS:,} waited)"
CLOSED = "the server closed its stdout and went on running"
STDIN_CLOSED = "the server closed its stdin and went on running"


def _unread(message: Any, write_send: Any, mcp_types: Any) -> bool:
    """Whether *message* is a request of the server's while MAX_UNREAD_ANSWERS messages wait for its stdin
    (counted where they wait: each of the SDK's tasks blocked handing one to ``_write``)."""
    return (
        isinstance(message.message, mcp_types.JSONRPCRequest)
        and write_send.statistics().tasks_waiting_send >= MAX_UNREAD_ANSWERS
    )


class _Lines:
    """The complete, non-blank lines of the bytes fed; a partial last line is kept for the next feed, and
    only its new bytes are searched for its end (a line of MAX_LINE bytes read whole from its start at
    every read would cost the event loop a search of gigabytes)."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._searched = 0  # the bytes before this offset of the buffer hold no line end

    @property
    def partial(self) -> int:
        """Bytes of the line under way."""
        return len(self._buf)

    def feed(self, chunk: bytes) -> list[bytes]:
        buf = self._buf
        buf += chunk
        lines, start, at = [], 0, self._searched
        while (end := buf.find(b"\n", at)) >= 0:
            line = bytes(buf[start:end])
            if line.strip():
                lines.append(line)
            start = at = end + 1
        del buf[:start]
        self._searched = len(buf)
        return lines

    def drop(self) -> None:
        """Forget the line under way."""
        self._buf.clear()
        self._searched = 0


async def _write(proc: Any, write_recv: Any, read_send: Any, on_eof: Callable[[str], None]) -> None:
    """The SDK's write stream to the server's stdin, one message a line; ``on_eof(reason)`` when the server
    closed its stdin and runs on."""
    import anyio  # lazily, as in stdio_transport

    try:
        async with write_recv:
            async for message in write_recv:
                text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await proc.stdin.send_all(text.encode() + b"\n")
    except (trio.BrokenResourceError, trio.ClosedResourceError, anyio.ClosedResourceError, OSError) as exc:
        try:
            if isinstance(exc, trio.BrokenResourceError):  # the server's end, not mm's, was closed
                await _gone(proc, on_eof, STDIN_CLOSED)  # first: a waiting request is told why
        finally:
            # The server is gone: end the read side too, so a waiting request is answered.
            await read_send.aclose()


async def _gone(proc: Any, on_eof: Callable[[str], None], reason: str) -> None:
    """``on_eof(reason)`` unless the server exits within a moment. Most often it is exiting, which the
    watcher reports; one that closed a pipe and lived on was 'ready' until a call found it silent (and was
    told it may have taken effect)."""
    with trio.move_on_after(STDIN_CLOSE_WAIT):
        await proc.wait()
    if proc.returncode is None:
        on_eof(reason)


async def _close_stdin(proc: Any, grace: float, drains: Drains) -> None:
    """The MCP shutdown: close the server's stdin and give it a moment to exit by itself; once it exited, its
    last stderr lines reach the log before the drain is cancelled (they are quoted when it failed)."""
    with trio.CancelScope(shield=True):
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await proc.stdin.aclose()
        with trio.move_on_after(min(grace, STDIN_CLOSE_WAIT)):
            await proc.wait()
        if proc.returncode is not None:
            await drains.wait(STDIN_CLOSE_WAIT)


def _parse(line: bytes, mcp_types: Any, session_message: Any) -> Any:
    """The SDK's message of one line, or an error answering its request if mm refuses it, or None.

    Before the SDK's parser recurses into the line, or builds every value of it (the SDK's types keep
    fields they do not know: 20 M ``{}`` in a 64 MiB line were 7 GB kept), its nesting and its count of
    values are checked: a text of at most MAX_VALUES characters costs two ``count``s of the event loop.
    Before the SDK checks a result's lists item by item, their length is (MAX_RESULT_ITEMS).
    """
    try:
        check_json(line, what="it is", max_depth=MAX_DOCUMENT_DEPTH)
    except (TooDeep, TooMany) as exc:
        return _refused(_top_level_id(line), str(exc), mcp_types, session_message)
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError:
        # A server that logs to stdout breaks the protocol; skip the line rather than the connection.
        log.warning("an MCP server wrote a line that is not JSON-RPC: %.200r", line)
        return None
    result = getattr(message, "result", None)
    for key, value in result.items() if isinstance(result, dict) else ():
        if isinstance(value, list) and len(value) > MAX_RESULT_ITEMS:
            too_long = f"its {key} lists {len(value):,} items; the limit is {MAX_RESULT_ITEMS:,}"
            return _refused(message.id, too_long, mcp_types, session_message)
    return session_message(message)


def _refused(msgid: Any, why: str, mcp_types: Any, session_message: Any) -> Any:
    """An error answering request *msgid* now (rather than after its timeout) saying mm refused its answer;
    None without an id."""
    log.warning("an MCP server wrote a line that mm refused: %s", why)
    if msgid is None:
        return None
    error = mcp_types.ErrorData(
        code=_INTERNAL_ERROR, message=f"mm refused its answer: {why}", data={REFUSED: True}
    )
    return session_message(mcp_types.JSONRPCError(jsonrpc="2.0", id=msgid, error=error))


def _top_level_id(line: bytes) -> int | str | None:
    """The ``id`` of a JSON-RPC message too deep to decode, if it comes before the deep part."""
    depth = 0
    for tokens, match in enumerate(_TOKEN.finditer(line)):
        if tokens > _ID_TOKENS:
            return None
        char = line[match.start()]
        if char in b"[{":
            depth += 1
            if depth > MAX_DOCUMENT_DEPTH:
                return None
        elif char in b"]}":
            depth -= 1
        elif depth == 1 and (key := _ID.match(line, match.start())) is not None:
            value = json.loads(key[1])
            return value if isinstance(value, int | str) else None
    return None
