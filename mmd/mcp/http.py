"""The HTTP client of the MCP transports: no answer's body is read past a bound.

The SDK reads an answer that is one JSON document (streamable HTTP) or a POST's answer (the SSE
transport) whole into memory, and a server named by a cloned repository's agent file is not to be
trusted: a body without end would fill the daemon's memory. Each body passes through a counter that
stops it at MAX_ANSWER_BYTES, the bound of a stdio server's line (mmd/mcp/stdio.py): the read fails
with AnswerTooLarge, an ``httpx2.StreamError``, which the SDK answers to the request that waited for
the body as an error of its own (``Failed to parse JSON response: …``), the connection kept. An event
stream is left whole: the SDK bounds each of its events (``max_sse_event_size``, 1 MiB) and such a
stream may stay open for hours.

httpx2 is imported on first use, as the SDK is (mmd/mcp/pool.py: load_sdk): the daemon starts
without it. The body's wrapper must be an ``httpx2.AsyncByteStream``, so its class is made then.
"""

from __future__ import annotations

import functools
from typing import Any

import trio

# Bytes of one answer's body at most; an event stream's events are bounded by the SDK.
MAX_ANSWER_BYTES = 64 * 1024 * 1024


def bounded_client(
    headers: dict[str, str] | None = None,
    timeout: Any = None,
    auth: Any = None,
    *,
    most: int = MAX_ANSWER_BYTES,
) -> Any:
    """An ``httpx2.AsyncClient`` whose answers' bodies stop at *most* bytes (the SDK's client factory's
    signature: ``sse_client(httpx_client_factory=…)`` takes it as it is)."""
    import httpx2

    limited, _ = _classes()

    async def bound(response: httpx2.Response) -> None:
        # An event hook: the answer's head has come, its body not yet been read.
        if not response.headers.get("content-type", "").lower().startswith("text/event-stream"):
            response.stream = limited(response.stream, most, str(response.url))

    options: dict[str, Any] = {"event_hooks": {"response": [bound]}}
    if headers is not None:
        options["headers"] = headers
    if timeout is not None:
        options["timeout"] = timeout
    if auth is not None:
        options["auth"] = auth
    return httpx2.AsyncClient(**options)


def answer_too_large() -> type[Exception]:
    """The error a body past its bound raises (an ``httpx2.StreamError``)."""
    return _classes()[1]


@functools.cache
def _classes() -> tuple[type[Any], type[Exception]]:
    import httpx2

    class AnswerTooLarge(httpx2.StreamError):
        """An answer's body passed its bound and was not read on."""

    class Limited(httpx2.AsyncByteStream):
        """A body read through a counter."""

        def __init__(self, stream: httpx2.AsyncByteStream, most: int, url: str) -> None:
            self._stream, self._most, self._url = stream, most, url

        async def __aiter__(self) -> Any:
            read = 0
            chunks = self._stream.__aiter__()
            async for chunk in chunks:
                read += len(chunk)
                if read > self._most:
                    await _abandon(chunks)
                    raise AnswerTooLarge(
                        f"the answer of the MCP server at {self._url} passed {self._most:,} bytes, "
                        "the limit of one answer; it was refused (check that the url in the agent file "
                        "is the server you meant)"
                    )
                yield chunk

        async def aclose(self) -> None:
            await self._stream.aclose()

    return Limited, AnswerTooLarge


async def _abandon(chunks: Any) -> None:
    # The body's iterators are nested async generators (httpx2's, httpcore2's): left suspended, each would
    # be collected unfinished (trio warns). Read on under a cancelled scope, the socket read at the bottom
    # raises Cancelled, which ends every level at once and drops the connection.
    with trio.CancelScope() as scope:
        scope.cancel()
        async for _ in chunks:
            pass
