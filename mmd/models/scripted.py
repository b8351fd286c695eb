"""The scripted model server: real HTTP answers replayed from a script.

The only stand-in for a model mm allows. Tests, demos and benchmarks point
the real providers at it over a real socket, so streaming, retries and
cancellation run end to end. It serves the OpenAI-compatible
``POST /v1/chat/completions``, Anthropic's ``POST /v1/messages`` and llama-server's
own ``POST /completion`` (what mm sends a llama-server it constrains: a rendered
prompt and a grammar; a step's calls come back as ``<tool_call>`` text, and its
``probabilities`` as the first token's top probabilities), streamed or not; each
such POST consumes the next step of the script. ``POST /apply-template`` renders
the messages and tools into one prompt text, as llama-server does with a chat
template (not recorded, no step used). ``GET
/_mm/requests`` lists every request received (secret header values shown as
``<redacted>``), ``GET /v1/models`` one model, ``GET /health`` ``ok``.

A script is ``{responses: [step, ...]}`` (or the bare list); a step has any of
``text``, ``tool_calls``, ``delay``, ``chunk_delay``, ``status``,
``retry_after``, ``body``, ``break_after``, ``raw``, ``content_type``,
``usage``, ``timings`` (see ``Step``). A script with ``context_window: N`` also answers as
llama-server does about its window: ``GET /props`` (``n_ctx``), ``POST /tokenize`` (UTF-8
bytes / 4 tokens a text), and a completion whose messages and tools come to more than N such
tokens is refused with llama-server's HTTP 400 "exceeds the available context size" (no step is
used); these two paths are not recorded.

Run alone: ``python -m mmd.models.scripted SCRIPT [--host H] [--port N]``;
the first stdout line is ``listening http://127.0.0.1:PORT``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import ipaddress
import itertools
import logging
import math
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from typing import Annotated, Any, NamedTuple

import h11
import msgspec
import trio
import yaml

from mmd.untrusted import (
    MAX_DOCUMENT_DEPTH,
    YamlLimitError,
    check_json,
    open_regular,
    read_at_most,
    safe_load,
)

log = logging.getLogger("mmd.scripted")

# The completion endpoints; each POST to one consumes a script step.
OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"
LLAMA_PATH = "/completion"
# llama-server's chat template endpoint; it uses no step and is not recorded.
TEMPLATE_PATH = "/apply-template"
# The introspection endpoint; it is not itself recorded.
REQUESTS_PATH = "/_mm/requests"
# llama-server's window and tokenizer, served when the script has a context_window; not recorded.
PROPS_PATH = "/props"
TOKENIZE_PATH = "/tokenize"
# The one model the server lists.
MODEL_NAME = "scripted"
# Headers whose values are never stored, only their presence.
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key"})
# Bytes read from a socket at once.
RECEIVE_SIZE = 65536
# Largest request accepted; a long conversation fits with room to spare.
MAX_REQUEST = 64 * 1024 * 1024
# Pieces a tool call's arguments are streamed in, so clients must concatenate.
ARGUMENT_PIECES = 3
# Error "type" names by status, as both APIs spell them.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    529: "overloaded_error",
}

# Seconds to wait: never negative.
NonNegative = Annotated[float, msgspec.Meta(ge=0)]


class ScriptError(ValueError):
    """A script that cannot be replayed; the message says where and why."""


# The largest script file read: a scripted turn of a thousand tool calls is about 100 KB.
MAX_SCRIPT_BYTES = 16 * 1024 * 1024


class Position(NamedTuple):
    """Where a server is in its script, so that a new server can go on from there."""

    step: int = 0  # index of the next step to answer
    call: int = 1  # number of the next generated call id (call_<n>)


# The position of a new script: its first step, call_1 next.
START = Position()


class ScriptedCall(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One tool call of a step."""

    name: str
    # A map is sent JSON-encoded; a string is sent verbatim, which is how a
    # script sends malformed arguments.
    arguments: dict[str, Any] | str = {}
    id: str | None = None  # else call_<n>, counting over the server's life


class ScriptedUsage(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Token counts to report; missing ones are estimated from lengths."""

    input_tokens: int | None = None
    output_tokens: int | None = None


class ScriptedTimings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """llama-server's ``timings`` of a step, sent as it sends them (OpenAI and llama dialects)."""

    cache_n: Annotated[int, msgspec.Meta(ge=0)] = 0  # prompt tokens reused from the prompt cache
    prompt_n: Annotated[int, msgspec.Meta(ge=0)] = 0  # prompt tokens processed
    prompt_ms: NonNegative = 0.0
    predicted_n: Annotated[int, msgspec.Meta(ge=0)] = 0
    predicted_ms: NonNegative = 0.0


class Step(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One answer of the script.

    The server waits ``delay`` seconds, then sends an error if ``status`` is
    not 200, else ``raw`` verbatim if given, else an answer with ``text``
    (streamed word by word) and ``tool_calls``. ``break_after`` closes the
    connection after that many stream events (right after the headers when
    not streaming).
    """

    text: str = ""
    tool_calls: list[ScriptedCall] = []
    delay: NonNegative = 0.0
    chunk_delay: NonNegative = 0.0  # between stream events
    status: Annotated[int, msgspec.Meta(ge=200, le=599)] = 200
    retry_after: float | str | None = None  # Retry-After header: seconds or HTTP date
    body: Any = None  # error body: a map is JSON-encoded, a string sent verbatim
    break_after: Annotated[int, msgspec.Meta(ge=0)] | None = None
    raw: str | None = None  # sent as the whole 200 body
    content_type: str | None = None  # for raw; default application/json
    usage: ScriptedUsage | None = None
    timings: ScriptedTimings | None = None  # sent with the last event, as llama-server does
    # /completion only: the first token's top probabilities (token: probability), as llama-server reports
    # them when asked for n_probs.
    probabilities: dict[str, Annotated[float, msgspec.Meta(gt=0, le=1)]] | None = None


class Script(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The steps a server replays, in order."""

    responses: list[Step] = []
    # Tokens of llama-server's window to stand in for (/props, /tokenize, refusals); None: none.
    context_window: Annotated[int, msgspec.Meta(ge=1)] | None = None

    @classmethod
    def from_obj(cls, obj: Any) -> Script:
        """Build a script from decoded YAML/JSON: a map with ``responses`` or a bare list.

        Errors: ScriptError naming the offending step and key.
        """
        if isinstance(obj, list):
            obj = {"responses": obj}
        try:
            return msgspec.convert(obj, cls)
        except msgspec.ValidationError as exc:
            raise ScriptError(f"invalid script: {exc}") from None


def load_script(path: str | os.PathLike[str]) -> Script:
    """Read a script from a YAML or JSON (``.json``) file.

    A script can come from a cloned repository's agent file: it is read only if it is a regular file
    (a FIFO put there would hang the read, a link to /dev/zero would never end) and only up to
    MAX_SCRIPT_BYTES.

    Errors: OSError if the file cannot be read or is not a regular file; ScriptError if it is too
    large, not UTF-8, does not parse or is not a valid script.
    """
    with open_regular(path) as f:
        raw = read_at_most(f, MAX_SCRIPT_BYTES)
    if len(raw) > MAX_SCRIPT_BYTES:
        raise ScriptError(f"{path}: over {MAX_SCRIPT_BYTES:,} bytes, the most a script may hold")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScriptError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    is_json = str(path).endswith(".json")
    try:
        if is_json:
            check_json(text, what="the script is", max_depth=MAX_DOCUMENT_DEPTH)  # before decoding recurses
        # A script can come from a cloned repository's agent file: within the YAML limits too.
        obj = msgspec.json.decode(text) if is_json else safe_load(text)
    except YamlLimitError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else "?"
        raise ScriptError(f"{path}:{line}: {exc.problem} — {exc.hint}") from None
    except (ValueError, yaml.YAMLError) as exc:  # msgspec.DecodeError and TooDeep are ValueErrors
        raise ScriptError(f"{path}: not valid {'JSON' if is_json else 'YAML'}: {exc}") from None
    try:
        return Script.from_obj(obj)
    except ScriptError as exc:
        raise ScriptError(f"{path}: {exc}") from None


# ---------------------------------------------------------------- answers
# Pure functions: a step plus the request → the JSON documents or SSE frames.


class _Call(NamedTuple):
    id: str
    name: str
    text: str  # the arguments as sent in streams and OpenAI bodies
    value: Any  # the arguments as an Anthropic non-streamed input


class _Reply(NamedTuple):
    id: str
    model: str
    text: str
    calls: list[_Call]
    input_tokens: int
    output_tokens: int
    include_usage: bool  # OpenAI: the client asked for a usage chunk
    timings: dict[str, Any] | None  # llama-server's timings, in the last chunk or the body
    probabilities: dict[str, float] | None  # llama: the first token's top probabilities


def _words(text: str) -> list[str]:
    # Split after whitespace so the pieces join back to the exact text.
    return [piece for piece in re.split(r"(?<=\s)(?=\S)", text) if piece]


def _pieces(text: str) -> list[str]:
    size = max(1, -(-len(text) // ARGUMENT_PIECES))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _json(obj: Any) -> str:
    return msgspec.json.encode(obj).decode()


def _openai_error(message: str, status: int) -> dict[str, Any]:
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _openai_usage(reply: _Reply) -> dict[str, int]:
    total = reply.input_tokens + reply.output_tokens
    return {
        "prompt_tokens": reply.input_tokens,
        "completion_tokens": reply.output_tokens,
        "total_tokens": total,
    }


def _openai_chunks(reply: _Reply) -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {
            "id": reply.id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": reply.model,
            "choices": [choice],
        }

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": word}) for word in _words(reply.text)]
    for index, call in enumerate(reply.calls):
        function = {"name": call.name, "arguments": ""}
        chunks.append(
            chunk({"tool_calls": [{"index": index, "id": call.id, "type": "function", "function": function}]})
        )
        chunks += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]})
            for p in _pieces(call.text)
        ]
    chunks.append(chunk({}, "tool_calls" if reply.calls else "stop"))
    if reply.include_usage:
        chunks.append({**chunk({}), "choices": [], "usage": _openai_usage(reply)})
    if reply.timings is not None:
        chunks[-1]["timings"] = reply.timings
    return [b"data: " + msgspec.json.encode(c) + b"\n\n" for c in chunks] + [b"data: [DONE]\n\n"]


def _openai_message(reply: _Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.text}}
            for c in reply.calls
        ]
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": "tool_calls" if reply.calls else "stop",
    }
    return {
        "id": reply.id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": reply.model,
        "choices": [choice],
        "usage": _openai_usage(reply),
        **({"timings": reply.timings} if reply.timings is not None else {}),
    }


def _anthropic_error(message: str, status: int) -> dict[str, Any]:
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _anthropic_events(reply: _Reply) -> list[bytes]:
    stop = "tool_use" if reply.calls else "end_turn"
    start = {
        "id": reply.id,
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": reply.input_tokens, "output_tokens": 1},
    }
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}, {"type": "ping"}]
    blocks = [({"type": "text", "text": ""}, [{"type": "text_delta", "text": w} for w in _words(reply.text)])]
    blocks = blocks if reply.text else []
    for c in reply.calls:
        block = {"type": "tool_use", "id": c.id, "name": c.name, "input": {}}
        blocks.append((block, [{"type": "input_json_delta", "partial_json": p} for p in _pieces(c.text)]))
    for index, (block, deltas) in enumerate(blocks):
        events.append({"type": "content_block_start", "index": index, "content_block": block})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": reply.output_tokens},
        }
    )
    events.append({"type": "message_stop"})
    return [f"event: {e['type']}\ndata: {_json(e)}\n\n".encode() for e in events]


def _anthropic_message(reply: _Reply) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.value} for c in reply.calls]
    return {
        "id": reply.id,
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": content,
        "stop_reason": "tool_use" if reply.calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens},
    }


def _llama_error(message: str, status: int) -> dict[str, Any]:
    kind = ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"code": status, "message": message, "type": kind}}


def _llama_text(reply: _Reply) -> str:
    """What a model writes under mm's grammar: its words, then each call in a ``<tool_call>`` tag."""
    calls = [
        f'<tool_call>\n{{"name": {_json(c.name)}, "arguments": {c.text}}}\n</tool_call>' for c in reply.calls
    ]
    return "\n".join([reply.text, *calls] if reply.text else calls)


def _llama_end(reply: _Reply) -> dict[str, Any]:
    end: dict[str, Any] = {
        "stop": True,
        "stop_type": "eos",
        "tokens_evaluated": reply.input_tokens,
        "tokens_predicted": reply.output_tokens,
    }
    if reply.timings is not None:
        end["timings"] = reply.timings
    return end


def _llama_events(reply: _Reply) -> list[bytes]:
    events = [{"content": word, "stop": False} for word in _words(_llama_text(reply))]
    events.append({"content": "", **_llama_end(reply)})
    return [b"data: " + msgspec.json.encode(e) + b"\n\n" for e in events]


def _llama_message(reply: _Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"content": _llama_text(reply), **_llama_end(reply)}
    if reply.probabilities:
        top = [{"token": t, "logprob": math.log(p)} for t, p in reply.probabilities.items()]
        first = max(top, key=lambda entry: entry["logprob"])
        message["completion_probabilities"] = [{**first, "top_logprobs": top}]
    return message


def render_template(body: Any) -> str:
    """The scripted chat template: the tools, then each message under its role, then the assistant's turn."""
    if not isinstance(body, dict):
        return ""
    parts = [f"<tools>\n{_json(body['tools'])}\n</tools>"] if body.get("tools") else []
    for message in body.get("messages") or []:
        if isinstance(message, dict):
            calls = "".join(
                f"\n<tool_call>{_call_text(c)}</tool_call>" for c in message.get("tool_calls") or []
            )
            parts.append(f"<|{message.get('role')}|>\n{message.get('content') or ''}{calls}")
    return "\n".join([*parts, "<|assistant|>\n"])


class _Dialect(NamedTuple):
    error: Callable[[str, int], dict[str, Any]]
    stream: Callable[[_Reply], list[bytes]]
    message: Callable[[_Reply], dict[str, Any]]


# Each completion endpoint and how it speaks.
DIALECTS = {
    OPENAI_PATH: _Dialect(_openai_error, _openai_chunks, _openai_message),
    ANTHROPIC_PATH: _Dialect(_anthropic_error, _anthropic_events, _anthropic_message),
    LLAMA_PATH: _Dialect(_llama_error, _llama_events, _llama_message),
}


# ---------------------------------------------------------------- HTTP/1.1


class _Connection:
    """One client connection: h11 state plus its socket stream."""

    def __init__(self, stream: trio.abc.Stream, number: int) -> None:
        self.stream = stream
        self.number = number
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST)
        self.peer_closed = False
        self.record: dict[str, Any] | None = None  # of the request being answered
        self.last_read = 0.0  # time.time() when bytes last came from the socket

    def hung_up(self) -> None:
        self.peer_closed = True
        if self.record is not None and self.record["t_responded"] is None:
            self.record["client_closed"] = True

    async def receive(self) -> None:
        data = await self.stream.receive_some(RECEIVE_SIZE)
        self.last_read = time.time()
        if not data:
            self.hung_up()
        self.h11.receive_data(data)

    async def next_event(self) -> Any:
        while (event := self.h11.next_event()) is h11.NEED_DATA:
            await self.receive()
        return event

    async def read_request(self) -> tuple[h11.Request, bytes] | None:
        request = await self.next_event()
        if isinstance(request, h11.ConnectionClosed):
            return None
        body = bytearray()
        while isinstance(event := await self.next_event(), h11.Data):
            body += event.data
            if len(body) > MAX_REQUEST:
                raise h11.RemoteProtocolError("request body too large", error_status_hint=413)
        return request, bytes(body)

    async def watch_for_hangup(self, scope: trio.CancelScope) -> None:
        # Runs while a response is produced: a client that goes away cancels
        # the response at once instead of at the next write.
        try:
            while not self.peer_closed:
                await self.receive()
        except trio.BrokenResourceError:
            self.hung_up()
        scope.cancel()

    def reusable(self) -> bool:
        return not self.peer_closed and self.h11.states == {h11.CLIENT: h11.DONE, h11.SERVER: h11.DONE}

    async def send(self, *events: Any) -> None:
        data = b"".join(self.h11.send(event) or b"" for event in events)
        last = self.record is not None and isinstance(events[-1], h11.EndOfMessage)
        if last:
            # Stamped before the write: once the bytes are out the client may
            # look at the record before this task runs again.
            self.record["t_responded"] = time.time()
        try:
            await self.stream.send_all(data)
        except BaseException:
            if last:
                self.record["t_responded"] = None
            raise

    async def send_body(
        self, status: int, body: bytes, content_type: str, extra: list[tuple[str, str]]
    ) -> None:
        headers = [("content-type", content_type), ("content-length", str(len(body))), *extra]
        await self.send(
            h11.Response(status_code=status, headers=headers), h11.Data(data=body), h11.EndOfMessage()
        )

    async def send_json(self, status: int, obj: Any, extra: list[tuple[str, str]] | None = None) -> None:
        await self.send_body(status, msgspec.json.encode(obj), "application/json", extra or [])


def _redacted_headers(request: h11.Request) -> dict[str, str]:
    headers: dict[str, str] = {}
    for raw_name, raw_value in request.headers:
        name, value = raw_name.decode("latin-1"), raw_value.decode("latin-1")
        value = "<redacted>" if name in SECRET_HEADERS else value
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


def _parse_body(body: bytes) -> Any:
    if not body:
        return None
    try:
        check_json(body, max_depth=MAX_DOCUMENT_DEPTH)
        return msgspec.json.decode(body)
    except ValueError:  # not JSON, or too deep to decode safely (msgspec.DecodeError, TooDeep)
        return body.decode("utf-8", errors="replace")


class ScriptedServer:
    """A running scripted server: where it listens and what it was asked.

    ``requests`` holds one record per request received (except
    ``/_mm/requests`` itself): ``path``, ``method``, ``headers`` (secret
    values redacted), ``body`` (parsed JSON, else text), ``t_received`` (time its last bytes were
    read from the socket), ``t_responded`` (time the last byte was sent, None until then or if the
    response never finished), ``client_closed`` (the client hung up before
    the response finished) and ``connection`` (a number per connection).
    """

    def __init__(self, script: Script, host: str, port: int, position: Position = START) -> None:
        self.script = script
        self.host = host
        self.port = port
        self.url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
        self.requests: list[dict[str, Any]] = []
        self._next_step = position.step
        self._next_call = position.call
        self._connection_numbers = itertools.count(1)

    @property
    def steps_used(self) -> int:
        """How many script steps were consumed so far."""
        return self._next_step

    @property
    def position(self) -> Position:
        """Where this server is in its script: pass it to :func:`serve` to go on from there."""
        return Position(self._next_step, self._next_call)

    async def handle_connection(self, stream: trio.abc.Stream) -> None:
        """Serve one client connection until it closes; keep-alive aware.

        Errors: none escape; a broken or misbehaving client only ends its connection.
        """
        conn = _Connection(stream, next(self._connection_numbers))
        try:
            while await self._serve_next(conn):
                conn.h11.start_next_cycle()
        except h11.RemoteProtocolError as exc:
            await self._reject(conn, exc)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client went away mid-response
        except Exception:
            # Served inside mmd for `scripted:` models: a bug here ends this connection (the model
            # call fails and is retried or reported), never the daemon with every running turn.
            log.exception("scripted model server: connection %d failed", conn.number)
        finally:
            await stream.aclose()

    async def _reject(self, conn: _Connection, exc: h11.RemoteProtocolError) -> None:
        if conn.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            gone = (trio.BrokenResourceError, trio.ClosedResourceError, h11.LocalProtocolError)
            with trio.move_on_after(1), contextlib.suppress(*gone):
                await conn.send_json(exc.error_status_hint, {"error": {"message": str(exc)}})

    async def _serve_next(self, conn: _Connection) -> bool:
        received = await conn.read_request()
        if received is None:
            return False
        request, body = received
        method, path = request.method.decode(), request.target.decode("latin-1").split("?")[0]
        conn.record = None
        if path == REQUESTS_PATH:
            await conn.send_json(200, self.requests)
            return conn.reusable()
        if path in (PROPS_PATH, TOKENIZE_PATH):
            await self._llama(conn, path, _parse_body(body))
            return conn.reusable()
        if path == TEMPLATE_PATH:
            await conn.send_json(200, {"prompt": render_template(_parse_body(body))})
            return conn.reusable()
        record = {
            "path": path,
            "method": method,
            "headers": _redacted_headers(request),
            "body": _parse_body(body),
            # When the request's last bytes came in: this server's own parsing (h11, the JSON body) is no
            # part of the client's time to send it.
            "t_received": conn.last_read,
            "t_responded": None,
            "client_closed": False,
            "connection": conn.number,
        }
        self.requests.append(record)
        conn.record = record
        finished = False
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.watch_for_hangup, nursery.cancel_scope)
            try:
                finished = await self._route(conn, method, path, record)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                conn.hung_up()
            nursery.cancel_scope.cancel()
        return finished and conn.reusable()

    async def _route(self, conn: _Connection, method: str, path: str, record: dict[str, Any]) -> bool:
        known = {
            "/health": "GET",
            "/v1/models": "GET",
            OPENAI_PATH: "POST",
            ANTHROPIC_PATH: "POST",
            LLAMA_PATH: "POST",
        }
        if path not in known:
            await conn.send_json(404, {"error": {"message": f"scripted server: no such path {path}"}})
        elif method != known[path]:
            await conn.send_json(405, {"error": {"message": f"scripted server: {path} takes {known[path]}"}})
        elif path == "/health":
            await conn.send_json(200, {"status": "ok"})
        elif path == "/v1/models":
            model = {"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "mm"}
            await conn.send_json(200, {"object": "list", "data": [model]})
        else:
            return await self._complete(conn, DIALECTS[path], record["body"])
        return True

    async def _complete(self, conn: _Connection, dialect: _Dialect, body: Any) -> bool:
        if not isinstance(body, dict):
            await conn.send_json(
                400, dialect.error("scripted server: the request body is not a JSON object", 400)
            )
            return True
        window = self.script.context_window
        if (
            window is not None
            and dialect is not DIALECTS[ANTHROPIC_PATH]
            and (n := prompt_tokens(body)) > window
        ):
            await conn.send_json(400, _too_long(n, window))  # as llama-server: no step is used
            return True
        if self._next_step >= len(self.script.responses):
            message = f"scripted server: script exhausted after {len(self.script.responses)} responses"
            await conn.send_json(400, dialect.error(message, 400))
            return True
        step = self.script.responses[self._next_step]
        self._next_step += 1
        await trio.sleep(step.delay)
        if step.status != 200:
            await self._send_status(conn, dialect, step)
            return True
        if step.raw is not None:
            await conn.send_body(200, step.raw.encode(), step.content_type or "application/json", [])
            return True
        reply = self._reply(step, body)
        if body.get("stream"):
            return await self._stream(conn, step, dialect.stream(reply))
        if step.break_after is not None:
            await conn.send(h11.Response(status_code=200, headers=[("content-type", "application/json")]))
            return False
        await conn.send_json(200, dialect.message(reply))
        return True

    async def _send_status(self, conn: _Connection, dialect: _Dialect, step: Step) -> None:
        extra = []
        if step.retry_after is not None:
            value = step.retry_after
            extra.append(("retry-after", f"{value:g}" if isinstance(value, float) else value))
        if isinstance(step.body, str):
            await conn.send_body(step.status, step.body.encode(), "application/json", extra)
            return
        body = step.body
        if body is None:
            body = dialect.error(f"scripted error {step.status}", step.status)
        await conn.send_json(step.status, body, extra)

    async def _stream(self, conn: _Connection, step: Step, frames: list[bytes]) -> bool:
        headers = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]
        await conn.send(h11.Response(status_code=200, headers=headers))
        for number, frame in enumerate(frames):
            if step.break_after is not None and number >= step.break_after:
                return False  # the caller closes the socket with the body unfinished
            if number and step.chunk_delay:
                await trio.sleep(step.chunk_delay)
            await conn.send(h11.Data(data=frame))
        await conn.send(h11.EndOfMessage())
        return True

    def _reply(self, step: Step, body: dict[str, Any]) -> _Reply:
        calls = [self._call(c) for c in step.tool_calls]
        usage = step.usage or ScriptedUsage()
        # About four characters per token, as a stand-in when the script gives no counts.
        estimate_in = max(1, len(_json(body)) // 4)
        estimate_out = max(1, (len(step.text) + sum(len(c.text) for c in calls)) // 4)
        options = body.get("stream_options")
        return _Reply(
            id=f"scripted-{self._next_step}",
            model=str(body.get("model") or MODEL_NAME),
            text=step.text,
            calls=calls,
            input_tokens=usage.input_tokens if usage.input_tokens is not None else estimate_in,
            output_tokens=usage.output_tokens if usage.output_tokens is not None else estimate_out,
            include_usage=isinstance(options, dict) and bool(options.get("include_usage")),
            timings=msgspec.to_builtins(step.timings) if step.timings is not None else None,
            probabilities=step.probabilities,
        )

    async def _llama(self, conn: _Connection, path: str, body: Any) -> None:
        window = self.script.context_window
        if window is None:
            await conn.send_json(404, {"error": {"message": f"scripted server: no such path {path}"}})
        elif path == PROPS_PATH:
            await conn.send_json(200, {"default_generation_settings": {"n_ctx": window}, "total_slots": 1})
        else:
            text = body.get("content") if isinstance(body, dict) else None
            await conn.send_json(200, {"tokens": [0] * _tokens(text if isinstance(text, str) else "")})

    def _call(self, call: ScriptedCall) -> _Call:
        call_id = call.id
        if not call_id:
            call_id = f"call_{self._next_call}"
            self._next_call += 1
        if isinstance(call.arguments, dict):
            return _Call(call_id, call.name, _json(call.arguments), call.arguments)
        try:
            check_json(call.arguments, max_depth=MAX_DOCUMENT_DEPTH)
            value = msgspec.json.decode(call.arguments)
        except ValueError:  # malformed (or nested too deep) on purpose: sent as it is
            value = call.arguments
        return _Call(call_id, call.name, call.arguments, value)


def _tokens(text: str) -> int:
    """The scripted tokenizer: UTF-8 bytes / 4, rounded up."""
    return -(-len(text.encode()) // 4)


def prompt_tokens(body: dict[str, Any]) -> int:
    """The tokens of an OpenAI-dialect request as the scripted tokenizer counts them: each message's
    content and calls, and the tools (no template around them); of a /completion request, its prompt."""
    if isinstance(body.get("prompt"), str):
        return _tokens(body["prompt"])
    texts = [msgspec.json.encode(body["tools"]).decode()] if body.get("tools") else []
    for message in body.get("messages") or []:
        if isinstance(message, dict):
            texts.append(str(message.get("content") or ""))
            texts += [_call_text(call) for call in message.get("tool_calls") or []]
    return sum(_tokens(t) for t in texts)


def _call_text(call: Any) -> str:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        return ""
    return f"{function.get('name', '')} {function.get('arguments', '')}"


def _too_long(n: int, window: int) -> dict[str, Any]:
    message = f"request ({n} tokens) exceeds the available context size ({window} tokens), try increasing it"
    return {"error": {"code": 400, "message": message, "type": "exceed_context_size_error"}}


def _loopback(host: str) -> str:
    if host == "localhost":
        return "127.0.0.1"
    try:
        if ipaddress.ip_address(host).is_loopback:
            return host
    except ValueError:
        pass
    raise ValueError(f"scripted server: refusing to listen on {host!r}; it serves loopback addresses only")


def _as_script(script: Script | str | os.PathLike[str] | list[Any] | dict[str, Any]) -> Script:
    if isinstance(script, Script):
        return script
    if isinstance(script, str | os.PathLike):
        return load_script(script)
    return Script.from_obj(script)


async def serve(
    script: Script | str | os.PathLike[str] | list[Any] | dict[str, Any],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    position: Position = START,
    task_status: trio.TaskStatus[ScriptedServer] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``script`` on host:port (0 = any free port) until cancelled.

    ``script`` is a Script, a path to a script file, or decoded YAML/JSON.
    Use ``server = await nursery.start(serve, script)``; ``server`` is the
    ScriptedServer with ``url``, ``port`` and ``requests``. ``position``
    (another server's ``position``) starts there instead of at the first step.

    Errors: ValueError for a host that is not a loopback address, ScriptError
    for a bad script, OSError if the port cannot be bound.
    Cancellation: closes the listener and every open connection.
    """
    script = _as_script(script)
    listeners = await trio.open_tcp_listeners(port, host=_loopback(host))
    bound_host, bound_port = listeners[0].socket.getsockname()[:2]
    server = ScriptedServer(script, bound_host, bound_port, position)
    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, server.handle_connection, listeners)
        task_status.started(server)


async def _run(script: Script, host: str, port: int) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            server = await nursery.start(functools.partial(serve, script, host=host, port=port))
            print(f"listening {server.url}", flush=True)
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m mmd.models.scripted", description="Replay a model script over HTTP."
    )
    parser.add_argument("script", help="YAML or JSON script file")
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to listen on")
    parser.add_argument("--port", type=int, default=0, help="port (0 = any free port)")
    args = parser.parse_args(argv)
    try:
        _loopback(args.host)
        script = load_script(args.script)
    except (OSError, ValueError) as exc:  # ScriptError is a ValueError
        print(f"scripted server: {exc}", file=sys.stderr)
        return 2
    status = 0
    try:
        trio.run(_run, script, args.host, args.port)
    except* OSError as group:  # the port is taken, or similar
        print(f"scripted server: {group.exceptions[0]}", file=sys.stderr)
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
