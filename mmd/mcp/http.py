"""The HTTP client of the MCP transports: no answer's body is read past a bound.

The SDK reads an answer that is one JSON document (streamable HTTP) or a POST's answer (the SSE
transport) whole into memory, and a server named by a cloned repository's agent file is not to be
trusted: a body without end would fill the daemon's memory. Each body passes through a counter that
stops it at MAX_ANSWER_BYTES, the bound of a stdio server's line (mmd/mcp/stdio.py): the read fails
with AnswerTooLarge, an ``httpx2.StreamError``, which the SDK answers to the request that waited for
the body as an error of its own (``Failed to parse JSON response: …``), the connection kept. An event
stream is left whole: the SDK bounds each of its events (``max_sse_event_size``, 1 MiB) and such a
stream may stay open for hours.

Both bounds count the bytes the SDK is given, so the client decodes nothing: httpx2 would ask for gzip,
deflate, br and zstd and decode them after the counter, and a few MB of gzip are gigabytes decoded (3 MB
on the wire held 3.3 GB). Every request asks for the body as it is (``Accept-Encoding: identity``, over
any header of the agent file's), and an answer that comes with another Content-Encoding, an event stream
too, is refused before a byte of its body is read or decoded: its read fails with AnswerRefused (an
``httpx2.StreamError`` as well, and an ``SSEError``), naming the encoding.

httpx2 is imported on first use, as the SDK is (mmd/mcp/pool.py: load_sdk): the daemon starts
without it. The body's wrapper must be an ``httpx2.AsyncByteStream``, so its class is made then.
"""

from __future__ import annotations

import functools
from typing import Any

import trio

# Bytes of one answer's body at most; an event stream's events are bounded by the SDK.
MAX_ANSWER_BYTES = 64 * 1024 * 1024
# The one content coding asked for and taken: none.
IDENTITY = "identity"


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

    limited, _, refused, _ = _classes()

    async def bound(response: httpx2.Response) -> None:
        # An event hook: the answer's head has come, its body not yet been read.
        if (coding := _encoding(response.headers)) is not None:
            response.stream = refused(response.stream, coding, str(response.url))
        elif not response.headers.get("content-type", "").lower().startswith("text/event-stream"):
            response.stream = limited(response.stream, most, str(response.url))

    sent = {k: v for k, v in (headers or {}).items() if k.lower() != "accept-encoding"}
    sent["accept-encoding"] = IDENTITY
    options: dict[str, Any] = {"event_hooks": {"response": [bound]}, "headers": sent}
    if timeout is not None:
        options["timeout"] = timeout
    if auth is not None:
        options["auth"] = auth
    return httpx2.AsyncClient(**options)


def answer_too_large() -> type[Exception]:
    """The error a body past its bound raises (an ``httpx2.StreamError``)."""
    return _classes()[1]


def answer_refused() -> type[Exception]:
    """The error an encoded body raises as it is read (an ``httpx2.StreamError`` and ``SSEError``)."""
    return _classes()[3]


def _encoding(headers: Any) -> str | None:
    """The answer's Content-Encoding if it is not identity (its body would be decoded), else None."""
    coding = headers.get("content-encoding")
    if coding and any(part.strip().lower() not in ("", IDENTITY) for part in coding.split(",")):
        return str(coding)
    return None


@functools.cache
def _classes() -> tuple[type[Any], type[Exception], type[Any], type[Exception]]:
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

    class AnswerRefused(httpx2.StreamError, httpx2.SSEError):
        """An answer came encoded and was not read. An SSEError too: the SDK quotes those of an event
        stream to the request that waited (``SSE stream failed: …``), and drops any other's message."""

    class Refused(httpx2.AsyncByteStream):
        """An encoded body: its read fails at once, before a byte of it is read (or decoded); the response's
        close drops the connection, its body unread."""

        def __init__(self, stream: httpx2.AsyncByteStream, coding: str, url: str) -> None:
            self._stream, self._coding, self._url = stream, coding, url

        async def __aiter__(self) -> Any:
            raise AnswerRefused(
                f"the MCP server at {self._url} answered with its body in Content-Encoding "
                f"{self._coding[:60]!r}, which mm does not decode (it asks for answers as they are: "
                f"Accept-Encoding: {IDENTITY}); it was refused unread (have the server, or the proxy in "
                "front of it, send answers uncompressed)"
            )
            yield b""  # an async generator, as the stream it replaces

        async def aclose(self) -> None:
            await self._stream.aclose()

    return Limited, AnswerTooLarge, Refused, AnswerRefused


async def _abandon(chunks: Any) -> None:
    # The body's iterators are nested async generators (httpx2's, httpcore2's): left suspended, each would
    # be collected unfinished (trio warns). Read on under a cancelled scope, the socket read at the bottom
    # raises Cancelled, which ends every level at once and drops the connection.
    with trio.CancelScope() as scope:
        scope.cancel()
        async for _ in chunks:
            pass
