"""Claude Code's headless output formats, ``json`` and ``stream-json``, made from mm's events.

The shapes follow Claude Code's documented SDK messages (docs/cli.md cites
them): a ``system``/``init`` record, ``assistant`` messages whose content is
``text`` and ``tool_use`` blocks (``input`` an object), ``user`` messages
carrying ``tool_result`` blocks, and a final ``result`` record with
``subtype``, ``is_error``, durations, ``num_turns``, ``usage`` and
``total_cost_usd``. ``json`` prints only that ``result``. :class:`Transcript`
does the translation and no I/O; :class:`ClaudeView` writes it.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, TextIO

from mmd import __version__

from . import terminal
from .render import View

# How mm's model steps end, as Anthropic's stop_reason says it (others pass through).
STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}
# Events that belong to a model step; any other event ends the wait for the model.
STEP_KINDS = frozenset({"text", "model_retry", "assistant"})
# Deepest tool input shown as an object: a model's arguments nested deeper are shown as their text
# (an agent file nests about six levels; json.dumps would fail near a thousand).
MAX_DEPTH = 64
# mm's turn statuses that have a result subtype of their own; every other failure is during execution.
SUBTYPES = {"ok": "success", "max_steps": "error_max_turns"}


def _usage() -> dict[str, int]:
    return {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def tool_input(arguments: Any) -> dict[str, Any]:
    """A call's arguments as a ``tool_use`` block's ``input`` object.

    The model sends a JSON text; what is not a JSON object (a model's broken
    output), or nests deeper than MAX_DEPTH, is kept whole under ``_raw``
    rather than dropped, so that no model output can stop the stream.
    """
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else arguments
    except (ValueError, RecursionError):
        value = None
    if isinstance(value, dict) and _depth(value) <= MAX_DEPTH:
        return value
    return {"_raw": arguments if isinstance(arguments, str) else json.dumps(arguments, default=str)}


def _depth(value: Any) -> int:
    """How deep lists and maps nest in *value*, counted without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            todo.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            todo.extend((v, depth + 1) for v in item)
    return deepest


class Transcript:
    """mm's events in, Claude Code's stream-json messages out, and the turn's ``result`` at the end."""

    def __init__(self, session_id: str | None = None) -> None:
        self.session_id = session_id
        self.model = ""
        self.steps = 0  # model steps: Claude's num_turns
        self.usage = _usage()
        self.api_seconds = 0.0
        self.stop_reason: str | None = None
        self.denials: list[dict[str, Any]] = []
        self.tool_calls: list[dict[str, Any]] = []  # mm's own result field: every call, in order
        self._calls: dict[str, dict[str, Any]] = {}  # tool_use id -> {name, input}
        self._waiting_since: float | None = None  # ts of the last event before the model's step
        self._pending: list[str] = []  # text of a step that had no `assistant` record yet, as it came
        self._answer = ""  # the last step's words

    def _base(self, kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, **fields, "uuid": str(uuid.uuid4()), "session_id": self.session_id}

    def feed(self, ev: dict[str, Any]) -> list[dict[str, Any]]:
        """The stream-json messages one mm event stands for (often none)."""
        self.session_id = ev.get("session_id") or self.session_id
        handler = getattr(self, "_on_" + ev["kind"], None)
        out = handler(ev["data"], ev.get("ts")) if handler else []
        if ev["kind"] not in STEP_KINDS and ev.get("ts") is not None:
            self._waiting_since = ev["ts"]
        return out

    def _on_turn_started(self, data: dict[str, Any], ts: float | None) -> list[dict[str, Any]]:
        self.model = data.get("model") or ""
        init = self._base(
            "system",
            subtype="init",
            cwd=data.get("cwd"),
            model=self.model,
            tools=list(data.get("tools") or []),
            mcp_servers=[{"name": n, "status": "connected"} for n in data.get("mcp_servers") or []],
            # yolo: write tools run unasked; destructive ones still ask (docs/cli.md).
            permissionMode="bypassPermissions" if data.get("yolo") else "default",
            apiKeySource="none",  # the daemon holds any key; a client never learns where from
            slash_commands=[],
            output_style="default",
            skills=list(data.get("skills") or []),
            plugins=[],
            mm_version=__version__,
        )
        return [init]

    def _on_text(self, data: dict[str, Any], ts: float | None) -> list[dict[str, Any]]:
        self._pending.append(data["text"])
        return []

    def _on_assistant(self, data: dict[str, Any], ts: float | None) -> list[dict[str, Any]]:
        self.steps += 1
        if ts is not None and self._waiting_since is not None:
            self.api_seconds += max(0.0, ts - self._waiting_since)
        self.stop_reason = STOP_REASONS.get(data.get("finish_reason") or "", data.get("finish_reason"))
        usage = self._step_usage(data)
        text = data.get("text") or ""
        self._pending = []
        self._answer = "" if data.get("tool_calls") else text
        blocks = [{"type": "text", "text": text}] if text or not data.get("tool_calls") else []
        for call in data.get("tool_calls") or []:
            blocks.append(self._tool_use(call["id"], call["name"], call["arguments"]))
        return [self._message(blocks, usage)]

    def _step_usage(self, data: dict[str, Any]) -> dict[str, int]:
        used, timings = data.get("usage") or {}, data.get("timings") or {}
        usage = {
            **_usage(),
            "input_tokens": int(used.get("input") or 0),
            "output_tokens": int(used.get("output") or 0),
            "cache_read_input_tokens": int(timings.get("cached_tokens") or 0),
        }
        for key, value in usage.items():
            self.usage[key] += value
        return usage

    def _tool_use(self, call_id: str, name: str, arguments: Any) -> dict[str, Any]:
        block = {"type": "tool_use", "id": call_id, "name": name, "input": tool_input(arguments)}
        self._calls[call_id] = block
        return block

    def _message(self, content: list[dict[str, Any]], usage: dict[str, int] | None = None) -> dict[str, Any]:
        message = {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": self.stop_reason,
            "stop_sequence": None,
            "usage": usage or _usage(),
        }
        return self._base("assistant", message=message, parent_tool_use_id=None)

    def _on_tool_call(self, data: dict[str, Any], ts: float | None) -> list[dict[str, Any]]:
        self.tool_calls.append({"name": data["name"], "arguments": tool_input(data["arguments"])})
        if data["call_id"] in self._calls:
            return []
        # A call the model wrote as text, or one mm makes itself (a verification): its own tool_use,
        # so that every tool_result answers one.
        return [self._message([self._tool_use(data["call_id"], data["name"], data["arguments"])])]

    def _on_tool_result(self, data: dict[str, Any], ts: float | None) -> list[dict[str, Any]]:
        block = {
            "type": "tool_result",
            "tool_use_id": data["call_id"],
            "content": data["content"],
            "is_error": not data["ok"],
        }
        user = self._base("user", message={"role": "user", "content": [block]}, parent_tool_use_id=None)
        if data.get("data") is not None:
            user["tool_use_result"] = data["data"]
        return [*self._denied(data), user]

    def _denied(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        """A call consent refused (a person, a ledger rule, or no one to ask): a permission denial."""
        details = data.get("data") or {}
        if not details.get("denied"):
            return []
        call = self._calls.get(data["call_id"], {})
        self.denials.append(
            {"tool_name": data["name"], "tool_use_id": data["call_id"], "tool_input": call.get("input", {})}
        )
        denied = self._base(
            "system",
            subtype="permission_denied",
            tool_name=data["name"],
            tool_use_id=data["call_id"],
            decision_reason=details.get("reason"),
            message=data["content"],
        )
        return [denied]

    def _on_context_compacted(self, data: dict[str, Any], ts: float | None) -> list[dict[str, Any]]:
        trigger = "auto" if data.get("by") == "auto" else "manual"
        metadata = {"trigger": trigger, "pre_tokens": data.get("before")}
        return [self._base("system", subtype="compact_boundary", compact_metadata=metadata)]

    def _informational(self, content: str, level: str) -> list[dict[str, Any]]:
        return [self._base("system", subtype="informational", content=content, level=level)]

    def _on_warning(self, data: dict[str, Any], ts: float | None) -> list[dict[str, Any]]:
        return self._informational(data["message"], "warning")

    def _on_loop_detected(self, data: dict[str, Any], ts: float | None) -> list[dict[str, Any]]:
        return self._informational(data.get("message") or f"loop: {data.get('kind')}", "warning")

    def _on_model_retry(self, data: dict[str, Any], ts: float | None) -> list[dict[str, Any]]:
        text = f"model: {data['reason']}; retrying in {data['wait']:.1f} s (attempt {data['attempt']})"
        return self._informational(text, "notice")

    def _on_turn_ended(self, data: dict[str, Any], ts: float | None) -> list[dict[str, Any]]:
        text, self._pending = "".join(self._pending), []
        if not text:
            return []
        # Words the model wrote with no step record (asked once more for an answer in words).
        self.steps += 1
        self._answer = text
        return [self._message([{"type": "text", "text": text}])]

    def result(self, ended: dict[str, Any], *, duration_ms: int) -> dict[str, Any]:
        """The ``result`` record of a turn that ended with *ended* (a ``turn_ended`` event's data)."""
        status = ended["status"]
        answer = (ended.get("text") or self._answer) if status == "ok" else (ended.get("text") or "")
        record = self._result(
            subtype=SUBTYPES.get(status, "error_during_execution"),
            duration_ms=duration_ms,
            result=answer,
            status=status,
            error=ended.get("error"),
        )
        if status != "ok":
            record["errors"] = [ended.get("error") or ended.get("text") or status]
        return record

    def failed(self, message: str, *, duration_ms: int) -> dict[str, Any]:
        """The ``result`` record of a turn that never started, or whose end was never seen."""
        record = self._result(
            subtype="error_during_execution",
            duration_ms=duration_ms,
            result="",
            status="error",
            error=message,
        )
        record["errors"] = [message]
        return record

    def _result(
        self, *, subtype: str, duration_ms: int, result: str, status: str, error: Any
    ) -> dict[str, Any]:
        model_usage = {
            self.model: {
                "inputTokens": self.usage["input_tokens"],
                "outputTokens": self.usage["output_tokens"],
                "cacheReadInputTokens": self.usage["cache_read_input_tokens"],
                "cacheCreationInputTokens": 0,
                "webSearchRequests": 0,
                "costUSD": 0.0,
            }
        }
        return self._base(
            "result",
            subtype=subtype,
            is_error=subtype != "success",
            duration_ms=duration_ms,
            duration_api_ms=round(self.api_seconds * 1000),
            num_turns=self.steps,
            result=result,
            stop_reason=self.stop_reason,
            total_cost_usd=0.0,  # mm knows no prices; a local model costs nothing per token
            usage=dict(self.usage),
            modelUsage=model_usage if self.model else {},
            permission_denials=self.denials,
            # mm's own, beside Claude's: the turn's status, its error, and every call made.
            status=status,
            error=error,
            tool_calls=self.tool_calls,
        )


class ClaudeView(View):
    """Writes a :class:`Transcript`: every message (``stream-json``) or the result alone (``json``).

    People still get warnings, retries and errors on stderr, as with ``text``.
    """

    def __init__(self, fmt: str, out: TextIO | None = None, err: TextIO | None = None) -> None:
        super().__init__(fmt, out, err)
        self.transcript = Transcript()
        self._started = time.monotonic()

    def _elapsed_ms(self) -> int:
        return round((time.monotonic() - self._started) * 1000)

    def _write(self, record: dict[str, Any], *, always: bool = False) -> None:
        if always or self.fmt == "stream-json":
            self.out.write(terminal.json_text(record, default=str) + "\n")
            self.out.flush()

    def event(self, ev: dict[str, Any]) -> None:
        super().event(ev)
        for record in self.transcript.feed(ev):
            self._write(record)

    def failed(self, message: str, session_id: str | None = None) -> None:
        """A turn that could not start (or whose end was lost): the error, and a result saying so."""
        self.error(message)
        self.transcript.session_id = session_id or self.transcript.session_id
        self._write(self.transcript.failed(message, duration_ms=self._elapsed_ms()), always=True)

    def lost(self, message: str) -> None:
        self.failed(message)

    def finish(self, session_id: str, ended: dict[str, Any]) -> int:
        self.transcript.session_id = session_id
        self._write(self.transcript.result(ended, duration_ms=self._elapsed_ms()), always=True)
        return super().finish(session_id, ended)


class InputError(ValueError):
    """A line of ``--input-format stream-json`` that is not a user message mm can take."""


# One line of --input-format stream-json, as Claude Code documents it.
INPUT_EXAMPLE = '{"type":"user","message":{"role":"user","content":"..."}}'


def user_message(line: str) -> str:
    """The prompt of one stdin line of ``--input-format stream-json``: a Claude Code user message.

    ``content`` is a string or a list of ``text`` blocks, joined by newlines.
    Errors: InputError, saying what the line holds and what is expected.
    """
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"not JSON ({exc}); expected one message per line, like {INPUT_EXAMPLE}") from None
    kind = msg.get("type") if isinstance(msg, dict) else type(msg).__name__
    if kind != "user":
        raise InputError(f"a message of type {kind!r}; mm takes user messages only, like {INPUT_EXAMPLE}")
    message = msg.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InputError(
            f"message.content is {type(content).__name__}; expected a string or a list of text blocks"
        )
    texts = []
    for block in content:
        if not (
            isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)
        ):
            what = block.get("type") if isinstance(block, dict) else type(block).__name__
            raise InputError(f"a content block of type {what!r}; mm takes text blocks only")
        texts.append(block["text"])
    return "\n".join(texts)
