"""What the HTTP providers share: one streamed POST, retries, error wording.

A provider builds its request body and a parser for its dialect (a subclass
of ``Accumulator``); ``HttpModel.post`` sends it, reads Server-Sent Events
into the parser and retries what another attempt may fix. Nothing here knows
a provider's JSON shapes.
"""

from __future__ import annotations

import email.utils
import math
import random
import reprlib
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import msgspec
import trio

from mmd.models import transport
from mmd.models.base import Completion, ModelError, OnRetry, OnText, Timings, ToolCall, Usage
from mmd.rpc.messages import packed
from mmd.untrusted import MAX_DOCUMENT_DEPTH, OFF_LOOP_BYTES, check_json

T = TypeVar("T")
_JSON = msgspec.json.Encoder()

# Longest wait honoured from a Retry-After header or reached by backoff.
MAX_WAIT = 60.0
# How many characters of a bad body an error message quotes.
EXCERPT_CHARS = 80
# Bytes read for one answer, streamed or not. A step of 128k tokens, the most any model
# writes, streams as about 32 MB of events; the cap keeps a broken or hostile server
# from filling the daemon's memory.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
# Characters of text and tool-call arguments in one answer: 128k tokens are about
# 512k characters. Kept under a quarter of the RPC frame limit (16 MiB), so the events
# that carry an answer (even in 4-byte UTF-8) always reach the clients.
MAX_ANSWER_CHARS = 2 * 1024 * 1024
# What each tool call of an answer counts toward MAX_ANSWER_CHARS besides its arguments, its name and its id:
# a call with empty arguments counted nothing, so one step could carry millions of them (each then checked,
# stored and answered). At most about 100,000 calls a step.
CALL_CHARS = 16
# Bytes of one Server-Sent Event's data, each data line counted with LINE_COST more (what it costs as a Python
# string): a server that never ended an event made the daemon keep every `data:xy` line of a 60 MB answer as a
# string of 51 bytes (576 MB). The largest real event holds a whole answer (2 Mi characters, escaped).
MAX_EVENT_BYTES = 16 * 1024 * 1024
LINE_COST = 64
# The largest token count kept from an answer's usage or timings: no model's window comes near 4 billion
# tokens (the largest are a few million). A count past it, negative or not a whole number is no count: it is
# dropped (the step's count stays what the server said before, 0 if nothing), never clamped to an invented
# number, and never stored (10**40 was an OverflowError where the step's event is encoded).
MAX_TOKENS = 2**32 - 1
# Statuses another attempt may fix besides 5xx: request timeout, rate limit.
RETRY_STATUSES = frozenset({408, 429})
# What to do about a request the server refused, by status.
HINTS = {
    400: "Check the model name and options in config.yaml; if the conversation is too long, start a new one.",
    401: "Check the API key for this provider (config.yaml or its environment variable).",
    403: "Check that the API key may use this model.",
    404: "Check base_url and the model name in config.yaml.",
    413: "The conversation is too large for this endpoint; start a new one.",
    422: "Check the model name and options in config.yaml.",
}
# The hint for a refusal with a status not in HINTS.
DEFAULT_HINT = "Check the provider settings in config.yaml."


class Retry(Exception):
    """One attempt failed in a way a later attempt may fix."""

    def __init__(self, reason: str, *, hint: str, status: int | None = None, wait: float | None = None):
        super().__init__(reason)
        self.reason = reason
        self.hint = hint
        self.status = status
        self.wait = wait


def excerpt(text: str | bytes) -> str:
    """Quote the start of a body for an error message."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    text = text.strip()
    return repr(text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "…")


# A decoded value quoted in an error: a few items of each container, a few levels, cut strings. reprlib's
# work is bounded by these, whatever the value holds (str() of a 60 MB answer took seconds and gigabytes).
_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxdict, _SHORT.maxlist, _SHORT.maxstring, _SHORT.maxother = (
    4,
    6,
    6,
    EXCERPT_CHARS,
    60,
)


def short(value: Any) -> str:
    """A decoded value quoted for an error message, in bounded time and memory however big it is."""
    return _SHORT.repr(value)


def check_depth(data: str | bytes, label: str) -> None:
    """Refuse a JSON document from the provider nested deeper than MAX_DOCUMENT_DEPTH, or that decodes into
    more than MAX_VALUES values, before any decoder recurses into it or builds them.

    Errors: ModelError saying so, with an excerpt.
    """
    try:
        check_json(data, what="the provider's answer is", max_depth=MAX_DOCUMENT_DEPTH)
    except ValueError as exc:  # TooDeep, TooMany
        raise ModelError(
            f"{label}: {exc} ({excerpt(data)}); no model answers like this. "
            "Try again; if it happens again, check that base_url in config.yaml points at a server you trust."
        ) from None


def decode_json(data: str | bytes, label: str) -> Any:
    """Parse a JSON document from the provider, refusing one nested deeper than MAX_DOCUMENT_DEPTH.

    Errors: ModelError saying the provider returned invalid or too deeply nested
    JSON, with an excerpt.
    """
    check_depth(data, label)
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError:
        raise ModelError(
            f"{label}: the provider returned invalid JSON: {excerpt(data)}. "
            "Check that base_url in config.yaml points at the right kind of API."
        ) from None


def new_call_id() -> str:
    """An id for a tool call the provider sent without one."""
    return "call_" + secrets.token_hex(8)


def retry_after_seconds(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """The wait a response asks for, from retry-after-ms or Retry-After.

    Retry-After may be seconds or an HTTP date. The result is capped at
    MAX_WAIT; an unreadable header counts as absent.
    """
    wait = _float(headers.get("retry-after-ms"), scale=0.001)
    if wait is None and (value := headers.get("retry-after")):
        wait = _float(value)
        if wait is None:
            wait = _http_date_wait(value, now)
    if wait is None or math.isnan(wait):
        return None
    return min(max(wait, 0.0), MAX_WAIT)


def _float(text: str | None, scale: float = 1.0) -> float | None:
    try:
        return float(text) * scale if text else None
    except ValueError:
        return None


def _http_date_wait(value: str, now: float | None) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return when.timestamp() - (time.time() if now is None else now)


def backoff_delay(attempt: int, base: float) -> float:
    """Seconds before retry number ``attempt``: doubling, with jitter.

    Jitter keeps many clients that failed together from retrying together.
    """
    ceiling = min(base * 2 ** (attempt - 1), MAX_WAIT)
    return ceiling / 2 + random.uniform(0, ceiling / 2)


def server_message(body: str) -> str:
    """The error message inside a provider's error body, or an excerpt."""
    try:
        check_json(body, max_depth=MAX_DOCUMENT_DEPTH)
        obj = msgspec.json.decode(body)
    except ValueError:  # not JSON, or nested too deep to decode safely
        return excerpt(body) if body.strip() else "(empty body)"
    return error_message(obj) or excerpt(body)


def error_message(obj: Any) -> str | None:
    """The message of a decoded error document, in any common shape."""
    error = obj.get("error", obj) if isinstance(obj, dict) else None
    if isinstance(error, str):
        return error
    if isinstance(error, dict):
        for key in ("message", "detail"):
            if isinstance(error.get(key), str):
                return error[key]
    return None


def status_failure(status: int, body: str, headers: Mapping[str, str], label: str) -> Exception:
    """The exception for a non-2xx answer: Retry if worth another try."""
    message = server_message(body)
    if status in RETRY_STATUSES or status >= 500:
        hint = "The provider is rate-limiting; wait a while or lower concurrency."
        if status != 429:
            hint = "The provider is failing; try again later."
        return Retry(f"HTTP {status}: {message}", hint=hint, status=status, wait=retry_after_seconds(headers))
    return ModelError(f"{label}: HTTP {status}: {message}. {HINTS.get(status, DEFAULT_HINT)}", status=status)


def token_count(value: Any) -> int | None:
    """*value* as a token count the provider reported, or None when it is none (see MAX_TOKENS)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKENS:
        return value
    return None


def _call_key(key: Any) -> int:
    # A call's place in the answer, which orders the calls: another type beside an int made sorting them
    # a TypeError after the answer was read.
    if not isinstance(key, int) or isinstance(key, bool):
        raise TypeError("a tool call's index is not an integer")  # reported as an unexpected shape
    return key


def _text_or_none(value: Any, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{what} is not a string")  # reported as an unexpected shape
    return value


class _PartialCall(msgspec.Struct):
    id: str | None = None
    name: str | None = None
    parts: list[str] = msgspec.field(default_factory=list)
    # The arguments if no fragment arrives (Anthropic's start block input).
    fallback: str = ""


class Accumulator:
    """Collects one streamed answer: text (handed on event by event) and tool calls.

    Subclasses parse their provider's events and call ``add_text``,
    ``start_call``, ``add_arguments``, ``finish`` and ``usage``. These take what the provider sent and
    check its type: the boundary where an answer becomes typed values. A value of the wrong type where
    the answer depends on it (text, a call's index, id, name or arguments, the finish reason) is a
    TypeError, which ``HttpModel`` answers as the provider's answer of an unexpected shape; a token count
    that is none (only informational) is dropped.
    """

    def __init__(self, on_text: OnText | None, label: str) -> None:
        self.label = label
        self.finish_reason = ""
        self.input_tokens = 0
        self.output_tokens = 0
        self.timings: Timings | None = None  # llama-server's, from its last event
        self._on_text = on_text
        self._text: list[str] = []
        self._unsent: list[str] = []
        self._chars = 0
        self._calls: dict[int, _PartialCall] = {}  # by stream index
        # The parser ended the answer before the server did (llama.py: the model began repeating its
        # instructions); the rest is not read, and closing the connection stops the generation.
        self.cut = False

    def feed(self, event: str, data: str) -> bool:
        """Take one Server-Sent Event; True once the answer is complete.

        Errors: ModelError for an event that is not valid JSON or reports an error.
        """
        raise NotImplementedError

    def feed_body(self, obj: Any) -> None:
        """Take a whole answer that arrived as one JSON document.

        Errors: ModelError for a body that is not an answer.
        """
        raise NotImplementedError

    def checked(self, obj: Any) -> dict[str, Any]:
        """*obj* as one event or body of an answer: an object, not an error report.

        Errors: ModelError for anything else, quoting it, or the error the server reported.
        """
        if not isinstance(obj, dict):
            raise ModelError(
                f"{self.label}: the provider sent something other than a completion: {short(obj)}"
            )
        if obj.get("error") is not None:
            message = error_message(obj) or short(obj["error"])
            raise ModelError(f"{self.label}: the provider reported an error: {message}")
        return obj

    def ended(self) -> bool:
        """Whether a stream that stops here is a complete answer."""
        return bool(self.finish_reason)

    @property
    def started(self) -> bool:
        """Whether any part of the answer was handed on or seen."""
        return bool(self._text or self._calls)

    @property
    def chars(self) -> int:
        """Characters received so far: text plus tool-call arguments."""
        return self._chars

    def add_text(self, delta: str) -> None:
        if not isinstance(delta, str):
            raise TypeError("a text delta is not a string")  # reported as an unexpected shape
        if not delta:
            return
        self._count(len(delta))
        self._text.append(delta)
        self._unsent.append(delta)

    def flush(self) -> None:
        """Hand the text deltas parsed since the last flush to on_text."""
        if not self._unsent:  # most events of a tool call carry no text
            return
        unsent, self._unsent = self._unsent, []
        if self._on_text is not None:
            for delta in unsent:
                self._on_text(delta)

    def start_call(self, key: int, call_id: str | None, name: str | None, fallback: str = "") -> None:
        key = _call_key(key)
        call_id = _text_or_none(call_id, "a tool call's id")
        name = _text_or_none(name, "a tool call's name")
        if not isinstance(fallback, str):
            raise TypeError("a tool call's input is not a string")  # reported as an unexpected shape
        if (call := self._calls.get(key)) is None:
            self._count(len(fallback) + CALL_CHARS)
            call = self._calls[key] = _PartialCall(fallback=fallback)
        # Some servers repeat id and name on every fragment: the first wins.
        if not call.id and call_id:
            self._count(len(call_id))
            call.id = call_id
        if not call.name and name:
            self._count(len(name))
            call.name = name

    def add_arguments(self, key: int, fragment: str) -> None:
        if not isinstance(fragment, str):
            raise TypeError("an arguments fragment is not a string")  # reported as an unexpected shape
        key = _call_key(key)
        if (call := self._calls.get(key)) is None:
            self._count(CALL_CHARS)
            call = self._calls[key] = _PartialCall()
        self._count(len(fragment))
        call.parts.append(fragment)

    def typed_part(self, key: int, call_id: str | None, name: str | None, fragment: str | None) -> None:
        """:meth:`start_call` then :meth:`add_arguments`, for values a typed decoder checked already (the
        msgspec Structs of openai.py): one call for each fragment of a call, as a local model streams one
        a token, and no type checked again. The same counts toward the answer's size."""
        call = self._calls.get(key)
        chars = 0
        if call is None:
            chars = CALL_CHARS
            call = self._calls[key] = _PartialCall()
        if call_id and not call.id:  # some servers repeat id and name on every fragment: the first wins
            chars += len(call_id)
            call.id = call_id
        if name and not call.name:
            chars += len(name)
            call.name = name
        if fragment:
            chars += len(fragment)
            call.parts.append(fragment)
        self._count(chars)

    def finish(self, reason: Any) -> None:
        """The answer's finish reason, when the provider sent one (None, "" or another empty value: not yet)."""
        if not reason:
            return
        if not isinstance(reason, str):
            raise TypeError("the finish reason is not a string")  # reported as an unexpected shape
        self.finish_reason = reason

    def usage(self, input_tokens: Any, output_tokens: Any) -> None:
        """The token counts the provider reported; one that is no count (MAX_TOKENS), or 0, keeps the last."""
        self.input_tokens = token_count(input_tokens) or self.input_tokens
        self.output_tokens = token_count(output_tokens) or self.output_tokens

    def _count(self, chars: int) -> None:
        self._chars += chars
        if self._chars > MAX_ANSWER_CHARS:
            raise ModelError(
                f"{self.label}: the answer passed {MAX_ANSWER_CHARS:,} characters of text and tool-call "
                "arguments, the limit of one model step (no model writes that much in one step); "
                "it was refused. Run the prompt again, or set max_tokens for this provider in config.yaml."
            )

    def completion(self) -> Completion:
        """The answer collected so far."""
        calls = [
            ToolCall(id=c.id or new_call_id(), name=c.name or "", arguments="".join(c.parts) or c.fallback)
            for c in (self._calls[key] for key in sorted(self._calls))
        ]
        usage = Usage(input_tokens=self.input_tokens, output_tokens=self.output_tokens)
        return Completion(
            text="".join(self._text),
            tool_calls=calls,
            finish_reason=self.finish_reason,
            usage=usage,
            timings=self.timings,
        )


class _Document(Accumulator):
    """An answer that is one JSON document, kept whole (``HttpModel.post_json``)."""

    def __init__(self, label: str) -> None:
        super().__init__(None, label)
        self.document: Any = None

    def feed(self, event: str, data: str) -> bool:
        self.feed_body(decode_json(data, self.label))
        return True

    def feed_body(self, obj: Any) -> None:
        self.document = obj
        self.finish_reason = "stop"


class SSEDecoder:
    """Splits a Server-Sent Events byte stream into (event name, data) pairs.

    Lines are split on LF only: str.splitlines would also split inside JSON
    text on characters such as U+2028. No I/O: bytes in, events out.

    Each byte is searched for line ends about once, however the stream is cut: a line under way stays
    in a buffer that only its new bytes are searched in (a server that never ends a line, or ends them
    with CR alone, once cost a search of the whole line per read: 72 s of the event loop before the
    answer's 64 MB bound). ``searched`` counts the bytes searched, for the tests.
    """

    def __init__(self, label: str) -> None:
        self._label = label
        self._event = ""
        self._data: list[str] = []
        self._data_cost = 0  # of the event under way: its data lines' bytes, LINE_COST more each
        self._partial = bytearray()  # the bytes after the last line end: a line under way
        self._held = b""  # a whole data line whose blank line may come next (see _lines)
        self.searched = 0

    def feed(self, chunk: bytes) -> list[tuple[str, str]]:
        """The events completed by ``chunk``.

        Errors: ModelError for a line that is not an SSE field.
        """
        partial = self._partial
        if not partial and chunk.endswith(b"\n"):  # whole lines, as a local model's events come
            return self._lines(chunk)
        start = len(partial)
        partial += chunk
        self.searched += len(chunk)
        end = partial.rfind(b"\n", start)  # the bytes before start hold no line end
        if end < 0:
            return []
        whole = bytes(partial[: end + 1])
        del partial[: end + 1]  # what is left came in this chunk
        return self._lines(whole)

    def _lines(self, whole: bytes) -> list[tuple[str, str]]:
        """The events of *whole*, whole lines (it ends with LF).

        A model's stream is events of one data line each, a blank line after each: they are split whole
        from the bytes (each event a slice and a decode; line by line, each cost a dozen calls more, once
        a token for a local model). Any other event, an event under way, and lines with CR go line by line.
        A data line last, its blank line not come, is held to be split with it.
        """
        if self._held:
            whole, self._held = self._held + whole, b""
        self.searched += len(whole)
        # find, not `in`: a bytes `in` bytes first tries the needle as an int and raises (and clears) a
        # formatted TypeError, ~2,000 instructions a test here, twice an event (callgrind: _Py_bytes_contains).
        if self._data or self._event or whole.find(b"\r") >= 0:
            return self._by_lines(whole)
        *blocks, tail = whole.split(b"\n\n")
        events = []
        for block in blocks:
            if block.startswith(b"data:") and block.find(b"\n") < 0:
                value = block[6:] if block[5:6] == b" " else block[5:]
                events.append(("message", value.decode("utf-8", errors="replace")))
            else:
                events += self._by_lines(block + b"\n\n")
        if tail.startswith(b"data:") and tail.find(b"\n") == len(tail) - 1:  # held once, then read on
            self._held = tail
        elif tail:
            events += self._by_lines(tail)
        return events

    def _by_lines(self, whole: bytes) -> list[tuple[str, str]]:
        lines = whole.split(b"\n")
        del lines[-1]  # empty: *whole* ends with a line end
        events = []
        for raw in lines:
            line = raw.removesuffix(b"\r").decode("utf-8", errors="replace")
            # A data line and the blank line after it are all a model's stream holds: they are read here,
            # without a call of _line each (two a token, for a local model).
            if line.startswith("data:"):
                self._add_data(line[6:] if line.startswith("data: ") else line[5:])
            elif not line:
                if self._data:
                    events.append((self._event or "message", "\n".join(self._data)))
                self._event, self._data, self._data_cost = "", [], 0
            elif event := self._line(line):
                events.append(event)
        return events

    def close(self) -> list[tuple[str, str]]:
        """The last event, for servers that end without the final blank line.

        Errors: ModelError for a line that is not an SSE field.
        """
        rest = self._held + bytes(self._partial)
        self._held = b""
        self._partial.clear()
        events = self._by_lines(rest + b"\n") if rest.strip() else []
        last = self._line("")
        return [*events, last] if last else events

    def _add_data(self, value: str) -> None:
        self._data_cost += len(value) + LINE_COST
        if self._data_cost > MAX_EVENT_BYTES:
            raise ModelError(
                f"{self._label}: the provider sent an event of more than {MAX_EVENT_BYTES:,} bytes of data "
                f"({len(self._data) + 1:,} lines, each counted with {LINE_COST} bytes more); it was refused. "
                "Check that base_url in config.yaml points at a server you trust."
            )
        self._data.append(value)

    def _line(self, line: str) -> tuple[str, str] | None:
        if not line:
            event, data = self._event or "message", self._data
            self._event, self._data, self._data_cost = "", [], 0
            return (event, "\n".join(data)) if data else None
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            self._add_data(value)
        elif field == "event":
            self._event = value
        elif field not in ("id", "retry"):
            raise ModelError(
                f"{self._label}: the provider returned a stream that is not Server-Sent Events: {excerpt(line)}"
            )
        return None


async def _abandon(chunks: AsyncIterator[bytes]) -> None:
    # The byte iterators (httpx's, transport.py's) are nested async generators. Leaving them
    # suspended makes trio warn when they are collected; reading on under a
    # cancelled scope ends every level at once, because the socket read at
    # the bottom raises Cancelled (and closes the connection). A generator already at its end (read
    # to the end, drained) has nothing to close: no scope to set up, once a step.
    if getattr(chunks, "ag_frame", True) is None:
        return
    with trio.CancelScope() as scope:
        scope.cancel()
        async for _ in chunks:
            pass


async def with_retries(
    attempt: Callable[[], Awaitable[T]],
    *,
    label: str,
    max_retries: int,
    base_delay: float,
    on_retry: OnRetry | None,
) -> T:
    """Run ``attempt`` until it succeeds, retrying on Retry up to max_retries times.

    Errors: ModelError (retryable=True) once the retries are spent.
    Cancellation: a cancelled wait or attempt stops at once.
    """
    n = 0
    while True:
        n += 1
        try:
            return await attempt()
        except Retry as exc:
            if n > max_retries:
                raise ModelError(
                    f"{label}: {exc.reason}; gave up after {n} attempts. {exc.hint}",
                    status=exc.status,
                    retryable=True,
                ) from None
            wait = exc.wait if exc.wait is not None else backoff_delay(n, base_delay)
            if on_retry is not None:
                on_retry(n, wait, exc.reason)
            await trio.sleep(wait)


class HttpModel:
    """One HTTP endpoint that answers a POST with a stream of events.

    The API key lives only in ``headers``; error messages are scrubbed of it
    in case a server echoes it back.
    """

    def __init__(
        self,
        *,
        label: str,
        url: str,
        headers: dict[str, str],
        secret: str | None,
        timeout: float,
        max_retries: int,
        retry_base_delay: float,
        client: transport.Client | None,
    ) -> None:
        self.label = label
        self.url = url
        self._headers = headers
        # The body is encoded by msgspec (a tenth of the time of json.dumps, which httpx's json= used:
        # the whole history goes out with every step), so its type is set here.
        self._json_headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
        self._json_headers["content-type"] = "application/json"
        self._secret = secret
        self._timeout = timeout
        self._max_retries = max_retries
        self._base_delay = retry_base_delay
        self._owns_client = client is None
        self._client = client if client is not None else transport.client_for(url, timeout)

    async def post(
        self,
        body: dict[str, Any],
        parser: Callable[[], Accumulator],
        on_retry: OnRetry | None,
        *,
        url: str | None = None,
    ) -> Completion:
        """Send ``body`` (to *url*, or the endpoint's URL), parse the answer with a fresh ``parser()`` per attempt.

        Errors: ModelError when retries are spent or the answer cannot succeed.
        Cancellation: closes the HTTP stream at once.
        """

        def report(attempt: int, wait: float, reason: str) -> None:
            if on_retry is not None:
                on_retry(attempt, wait, self._scrub(reason))

        try:
            return await with_retries(
                lambda: self._attempt(body, parser(), url or self.url),
                label=self.label,
                max_retries=self._max_retries,
                base_delay=self._base_delay,
                on_retry=report,
            )
        except ModelError as exc:
            if self._secret and self._secret in str(exc):
                raise ModelError(self._scrub(str(exc)), status=exc.status, retryable=exc.retryable) from None
            raise

    async def aclose(self) -> None:
        """Close the HTTP client if this object created it."""
        if self._owns_client:
            await self._client.aclose()

    def _scrub(self, text: str) -> str:
        return text.replace(self._secret, "<redacted>") if self._secret else text

    async def post_json(self, url: str, body: dict[str, Any], on_retry: OnRetry | None) -> Any:
        """POST *body* to *url* and return its JSON answer (not streamed), with the same retries and errors."""
        holder = _Document(self.label)
        await self.post(body, lambda: holder, on_retry, url=url)
        return holder.document

    async def _attempt(self, body: dict[str, Any], parser: Accumulator, url: str) -> Completion:
        try:
            async with self._client.stream(
                "POST", url, content=packed(body, _JSON.encode), headers=self._json_headers
            ) as response:
                return await self._read(response, parser)
        except transport.TransportError as exc:
            if exc.kind == "url":
                raise ModelError(
                    f"{self.label}: cannot send a request to {url} ({exc}). Check base_url in config.yaml."
                ) from None
            if exc.kind == "encoding":  # another attempt is answered the same way
                raise ModelError(
                    f"{self.label}: {exc}; the answer was refused unread. Have the server (or the proxy in "
                    "front of it) send answers uncompressed, or check that base_url in config.yaml is the "
                    "server you meant."
                ) from None
            if exc.kind == "timeout":
                reason = f"no answer within {self._timeout:g} s ({exc})"
                raise self._broken(
                    parser, reason, "Raise timeout in config.yaml if the model is slow."
                ) from None
            reason = f"connection failed ({exc})"
            raise self._broken(parser, reason, f"Is the server at {url} running?") from None

    async def _read(self, response: transport.Response, parser: Accumulator) -> Completion:
        if not 200 <= response.status_code < 300:
            text = (await self._body(response)).decode("utf-8", errors="replace")
            raise status_failure(response.status_code, text, response.headers, self.label)
        if "text/event-stream" not in response.headers.get("content-type", ""):
            # A server that ignores stream=true answers with one JSON document.
            data = await self._body(response)
            if len(data) > OFF_LOOP_BYTES:  # checked and decoded in a thread: seconds for 60 MB
                obj = await trio.to_thread.run_sync(decode_json, data, self.label)
            else:
                obj = decode_json(data, self.label)
            self._parse(parser, data, parser.feed_body, obj)
            return parser.completion()
        if await self._read_events(response, parser) or parser.ended():
            return parser.completion()
        raise self._broken(parser, "the stream ended before the answer was complete", "Try again later.")

    async def _read_events(self, response: transport.Response, parser: Accumulator) -> bool:
        decoder = SSEDecoder(self.label)
        chunks = response.aiter_bytes()
        received = 0
        # Since when the chunks read made no event (None: the last one made one). A read waits `timeout` at
        # most, but a server that trickles a byte a second never lets it: the answer must go on by events.
        idle: float | None = None
        try:
            async for chunk in chunks:
                received += len(chunk)
                self._check_size(received)
                made = False
                for event, data in decoder.feed(chunk):
                    made = True
                    if len(data) > OFF_LOOP_BYTES:
                        ended = await self._parse_off_loop(parser, data, event)
                    else:
                        ended = self._parse(parser, data, parser.feed, event, data)
                    if ended:
                        if not parser.cut:  # a cut answer's connection is closed: the server stops writing
                            await response.end(chunks)
                        return True
                if made:
                    idle = None
                elif idle is None:
                    idle = trio.current_time()
                elif trio.current_time() - idle > self._timeout:
                    raise transport.TransportError(
                        "timeout", f"bytes came, but no whole event of the stream for {self._timeout:g} s"
                    )
            for event, data in decoder.close():
                if await self._parse_off_loop(parser, data, event):
                    return True
            return False
        finally:
            await _abandon(chunks)

    async def _body(self, response: transport.Response) -> bytes:
        data = bytearray()
        async for chunk in response.aiter_bytes():
            data += chunk
            self._check_size(len(data))
        return bytes(data)

    def _check_size(self, received: int) -> None:
        if received > MAX_RESPONSE_BYTES:
            raise ModelError(
                f"{self.label}: the answer passed {MAX_RESPONSE_BYTES:,} bytes, the limit of one model step "
                "(a step of 128k tokens streams about 32 MB); it was refused. "
                f"Check that {self.url} is the model server you meant."
            )

    async def _parse_off_loop(self, parser: Accumulator, data: str, event: str) -> bool:
        """:meth:`_parse` of one event, in a worker thread when it is longer than OFF_LOOP_BYTES (its checks
        and its decode take seconds for 60 MB); the text it parsed is handed on here, on the loop."""
        if len(data) <= OFF_LOOP_BYTES:
            return self._parse(parser, data, parser.feed, event, data)
        # Its nesting and its count of values are checked first, for every provider (an event of at most
        # OFF_LOOP_BYTES, more than MAX_VALUES, holds no more values than their limit). The parser only
        # collects text there; on_text (the daemon's) is called here, on the loop.
        ended = await trio.to_thread.run_sync(self._checked_feed, parser, data, event)
        if parser._unsent:
            parser.flush()
        return ended

    def _parse(self, parser: Accumulator, data: str | bytes, feed: Callable[..., T], *args: Any) -> T:
        # Parsers index into the provider's JSON freely; a document of the wrong shape surfaces here as one
        # clear error (as in _guarded: inline here, a call less for each event of a local model).
        try:
            result = feed(*args)
        except (AttributeError, KeyError, IndexError, TypeError):
            raise ModelError(
                f"{self.label}: the provider sent an answer of an unexpected shape: {excerpt(data)}"
            ) from None
        # on_text runs outside the guard so its own errors propagate unchanged. Most events of a tool call
        # carry no text: no call to flush for them (one an event, a token of a local model's stream).
        if parser._unsent:
            parser.flush()
        return result

    def _checked_feed(self, parser: Accumulator, data: str, event: str) -> bool:
        check_depth(data, self.label)
        return self._guarded(parser, data, parser.feed, event, data)

    def _guarded(self, parser: Accumulator, data: str | bytes, feed: Callable[..., T], *args: Any) -> T:
        # Parsers index into the provider's JSON freely; a document of the
        # wrong shape surfaces here as one clear error.
        try:
            return feed(*args)
        except (AttributeError, KeyError, IndexError, TypeError):
            raise ModelError(
                f"{self.label}: the provider sent an answer of an unexpected shape: {excerpt(data)}"
            ) from None

    def _broken(self, parser: Accumulator, reason: str, hint: str) -> Exception:
        # Deltas already handed on cannot be taken back, so only a stream that
        # delivered nothing may be tried again.
        if not parser.started:
            return Retry(reason, hint=hint)
        return ModelError(
            f"{self.label}: {reason}: the stream broke off after {parser.chars} characters; "
            "run the prompt again with --continue"
        )
