"""MCP tools as mm tools: names, schemas, tiers, calls and what the model reads.

An :class:`McpTool` is a :class:`~mmd.tools.base.Tool`, so
it goes through the registry, the contract (local validation against the
server's inputSchema before anything is sent), consent, hooks and telemetry
like every tool (mmd/turn/calls.py). Its ``run`` sends the validated
arguments to the shared connection and turns the answer into a
:class:`ToolResult` (text passed on, images and other blobs summarised,
truncated and spilled exactly as ``bash`` output is) or a :class:`ToolError`
with the class the seeds ask for.

This module does not import the MCP SDK: it reads the SDK's objects by
attribute, and the pool translates the SDK's exceptions.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import copy
import hashlib
import json
import re
from typing import Any, Protocol

from ..config.mcp import McpServerSpec, ServerEntry
from ..contract import closest
from ..sandbox import Sandbox
from ..tools.base import ErrorClass, Tier, Tool, ToolContext, ToolError, ToolResult
from ..tools.builtin import BUILTIN_TOOLS
from ..tools.process import capped_text
from ..untrusted import (
    MAX_ARGUMENTS_BYTES,
    MAX_DEPTH,
    MAX_DOCUMENT_DEPTH,
    TooDeep,
    check_json,
    check_value,
    value_depth,
)
from .errors import McpCallError, McpUnavailable
from .schema import Patterns, Unusable, check_for
from .stdio import REFUSED


class Server(Protocol):
    """What the tools need of a server's connection (mmd.mcp.pool.McpConnection): its listing, and calls."""

    tools: list[Any]  # the SDK's Tool objects, as the server listed them
    capabilities: Any
    listing_cut: str | None  # what of the listing was left unread (pool.MAX_TOOLS), or None

    async def request(
        self, method: str, *args: Any, timeout: float, connect_timeout: float, **kw: Any
    ) -> Any:
        """``client.<method>(*args, **kw)``; McpUnavailable or McpCallError when no answer comes."""
        ...


# Tool names providers accept: letters, digits, _ and -, at most 64.
MAX_NAME = 64
_NOT_NAME = re.compile(r"[^A-Za-z0-9_-]")
# Keys of a property schema whose value is a schema (walked by normalize_schema).
_SUBSCHEMAS = ("items", "additionalProperties")
# JSON-RPC error codes and what the model should do about them.
_INVALID_PARAMS, _METHOD_NOT_FOUND, _INVALID_REQUEST, _PARSE_ERROR = -32602, -32601, -32600, -32700
_RESOURCE_NOT_FOUND = -32002
_ERROR_CLASSES = ("fix_and_retry", "retry_after", "terminal")


def exposed_name(server: str, remote: str, prefix: bool | str) -> str:
    """The name the model calls for the server's tool *remote*.

    No prefix by default; ``prefix: true`` gives ``<server>_<tool>``, a string
    that string then the tool. Characters providers refuse become ``_``. A
    name longer than 64 characters keeps its first 55 and ends with ``_`` and
    8 hex digits of the SHA-256 of the full name: deterministic, and distinct
    for names that share their first 55 characters.
    """
    full = _prefixed(server, remote, prefix)
    name = _NOT_NAME.sub("_", full) or "_"
    if len(name) > MAX_NAME:
        name = f"{name[: MAX_NAME - 9]}_{hashlib.sha256(full.encode()).hexdigest()[:8]}"
    return name


def _prefixed(server: str, remote: str, prefix: bool | str) -> str:
    return ("" if prefix is False else (f"{server}_" if prefix is True else str(prefix))) + remote


def tier_of(annotations: Any, override: str | None) -> Tier:
    """``read`` if readOnlyHint, ``destructive`` if destructiveHint, else ``write``; the agent file wins.

    The MCP spec's default for a missing destructiveHint (true) is not applied:
    a tool says it is destructive, or it is a write.
    """
    if override is not None:
        return override  # type: ignore[return-value]
    if annotations is not None and getattr(annotations, "read_only_hint", None) is True:
        return "read"
    if annotations is not None and getattr(annotations, "destructive_hint", None) is True:
        return "destructive"
    return "write"


def normalize_schema(schema: Any) -> dict[str, Any]:
    """The server's inputSchema in the subset the contract validates and renders.

    ``$ref`` to ``$defs`` is inlined (recursive ones become plain objects);
    ``anyOf``/``oneOf`` of one type and ``null`` (an optional value), and a
    type list with ``null``, become that type; ``const`` becomes a one-value
    enum; ``null`` is dropped from enums and ``default: null`` from defaults;
    ``title`` and ``$schema`` (tokens the model need not read) are dropped.
    A union of several real types keeps no ``type``, so its values pass
    unconverted. An ``additionalProperties`` left out stays out: the contract
    then refuses unknown fields, with a did-you-mean.
    """
    if not isinstance(schema, dict):
        return {"type": "object", "properties": {}}
    defs = {**schema.get("definitions", {}), **schema.get("$defs", {})}
    top = _walk(schema, defs, 0)
    out: dict[str, Any] = {"type": "object", "properties": top.get("properties", {})}
    if isinstance(top.get("required"), list):
        out["required"] = [r for r in top["required"] if isinstance(r, str)]
    if "additionalProperties" in top:
        out["additionalProperties"] = top["additionalProperties"]
    return out


def _walk(schema: Any, defs: dict[str, Any], depth: int) -> dict[str, Any]:
    if not isinstance(schema, dict):
        return {}
    node = copy.deepcopy(schema)
    ref = node.pop("$ref", None)
    if isinstance(ref, str):
        target = defs.get(ref.rsplit("/", 1)[-1])
        if depth > 8 or not isinstance(target, dict):
            return {
                "type": "object",
                **({"description": node["description"]} if "description" in node else {}),
            }
        node = {**_walk(target, defs, depth + 1), **node}
    for key in ("title", "$schema", "$defs", "definitions", "$id"):
        node.pop(key, None)
    node = _optional_unions(node, defs, depth)
    _simplify_values(node)
    if isinstance(node.get("properties"), dict):
        node["properties"] = {k: _walk(v, defs, depth + 1) for k, v in node["properties"].items()}
    for key in _SUBSCHEMAS:
        if isinstance(node.get(key), dict):
            node[key] = _walk(node[key], defs, depth + 1)
    return node


def _optional_unions(node: dict[str, Any], defs: dict[str, Any], depth: int) -> dict[str, Any]:
    """``anyOf``/``oneOf`` of one type and ``null`` become that type; a type list loses ``null``."""
    for union in ("anyOf", "oneOf"):
        members = node.get(union)
        if isinstance(members, list):
            real = [m for m in members if not (isinstance(m, dict) and m.get("type") == "null")]
            if len(real) == 1:
                del node[union]
                node = {**_walk(real[0], defs, depth + 1), **node}
    kind = node.get("type")
    if isinstance(kind, list):
        real_types = [t for t in kind if t != "null"]
        if len(real_types) == 1:
            node["type"] = real_types[0]
        else:
            node.pop("type")
    return node


def _simplify_values(node: dict[str, Any]) -> None:
    """``const`` becomes a one-value enum; ``null`` leaves enums, and ``default: null`` goes."""
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if isinstance(node.get("enum"), list):
        node["enum"] = [v for v in node["enum"] if v is not None]
    if "default" in node and node["default"] is None:
        del node["default"]


class McpTool(Tool):
    """One tool of an MCP server (or a resources/prompts helper), as the model sees and calls it."""

    idempotent = False  # never replayed by mm: the server owns its idempotency
    # The sandbox its stdio server runs in ("off" by default); None for an HTTP server (not mm's process).
    server_sandbox: str | None = None

    def __init__(
        self,
        *,
        name: str,
        remote_name: str,
        server: str,
        description: str,
        parameters: dict[str, Any],
        tier: Tier,
        conn: Server,
        timeout: float | None,
        connect_timeout: float,
        method: str = "call_tool",
        full_check: Patterns | None = None,
    ) -> None:
        self.name = name
        self.remote_name = remote_name  # the server's name, sent in the call
        self.server = server
        self.description = description
        self.parameters = parameters
        self.tier = tier
        self.source = f"mcp:{server}"
        self.conn = conn
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.method = method
        # The server's whole inputSchema, checked after the contract's subset (mmd/mcp/schema.py).
        self.full_check = full_check

    def echo(self, args: dict[str, Any]) -> str:
        return f"{self.server}: {self.remote_name} {json.dumps(args, ensure_ascii=False)}"

    def sandbox_label(self, turn: Sandbox | None) -> str | None:
        return self.server_sandbox

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        timeout = self.timeout or ctx.limits.timeout
        try:
            answer = await self._send(args, ctx, timeout)
        except McpUnavailable as exc:
            raise ToolError(
                "server_unavailable",
                f"The MCP server {self.server} is not reachable: {exc}.",
                cls="retry_after",
                fix="Try again later, or do without this tool.",
            ) from None
        except McpCallError as exc:
            raise self._call_error(exc, timeout) from None
        text, is_error, structured = self._render(answer)
        try:
            # The SDK decodes up to ~200 levels; what mm renders stays within its own limit.
            check_value(structured, what="its structured content is", max_depth=MAX_DOCUMENT_DEPTH)
        except TooDeep as exc:
            raise ToolError(
                "bad_answer", f"The MCP server {self.server} answered badly: {exc}.", cls="terminal"
            ) from None
        content, data = capped_text(text, ctx)
        data.update({"server": self.server, "tool": self.remote_name})
        if is_error:
            cls = _declared_class(structured, text) or "fix_and_retry"
            raise ToolError(
                "tool_error",
                content.strip() or "the server reported an error and said nothing more.",
                cls=cls,
                fix="Change the arguments or the approach, following the server's message."
                if cls == "fix_and_retry"
                else None,
            )
        return ToolResult(ok=True, content=content, data=data)

    async def _send(self, args: dict[str, Any], ctx: ToolContext, timeout: float) -> Any:
        request = self.conn.request
        if self.method == "call_tool":
            meta = {"mm/idempotency-key": ctx.idempotency_key} if ctx.idempotency_key else None
            return await request(
                "call_tool",
                self.remote_name,
                args,
                meta=meta,
                timeout=timeout,
                connect_timeout=self.connect_timeout,
            )
        if self.method == "read_resource":
            return await request(
                "read_resource", args["uri"], timeout=timeout, connect_timeout=self.connect_timeout
            )
        if self.method == "get_prompt":
            arguments = {k: str(v) for k, v in (args.get("arguments") or {}).items()}
            return await request(
                "get_prompt", args["name"], arguments, timeout=timeout, connect_timeout=self.connect_timeout
            )
        return await request(self.method, timeout=timeout, connect_timeout=self.connect_timeout)

    def _render(self, answer: Any) -> tuple[str, bool, Any]:
        """(text, is_error, structured content) of an answer."""
        if self.method == "call_tool":
            blocks = getattr(answer, "content", None) or []
            structured = getattr(answer, "structured_content", None)
            text = render_blocks(blocks)
            if not blocks and structured is not None:
                text = json.dumps(structured, ensure_ascii=False, indent=1)
            return text, bool(getattr(answer, "is_error", False)), structured
        if self.method == "list_resources":
            rows = [
                f"{r.uri} — {r.name}"
                + (f" ({r.mime_type})" if r.mime_type else "")
                + (f": {r.description}" if r.description else "")
                for r in answer.resources
            ]
            return "\n".join(rows) or "The server lists no resources.", False, None
        if self.method == "read_resource":
            return "\n".join(_render_contents(c) for c in answer.contents), False, None
        if self.method == "list_prompts":
            rows = []
            for p in answer.prompts:
                params = ", ".join(
                    a.name + ("" if a.required else "?") for a in (getattr(p, "arguments", None) or [])
                )
                rows.append(f"{p.name}({params})" + (f": {p.description}" if p.description else ""))
            return "\n".join(rows) or "The server lists no prompts.", False, None
        # get_prompt
        lines = [answer.description] if getattr(answer, "description", None) else []
        lines += [f"{m.role}: {render_blocks([m.content])}" for m in answer.messages]
        return "\n".join(lines), False, None

    def _call_error(self, exc: McpCallError, timeout: float) -> ToolError:
        if exc.kind == "lost":
            return ToolError(
                "connection_lost",
                f"The MCP server {self.server} stopped answering while the call was running ({exc.message}); "
                "mm is reconnecting. Whether the call took effect is not known.",
                cls="retry_after",
                fix="Call it again"
                + (
                    ""
                    if self.tier == "read"
                    else "; if it changes something, first check whether it already did"
                )
                + ".",
            )
        if exc.kind == "timeout":
            return ToolError(
                "timeout",
                f"The MCP server {self.server} did not answer within {timeout:g} s; the call was abandoned.",
                cls="retry_after",
                fix="Try again later, or with a smaller request.",
            )
        if exc.kind == "invalid":
            return ToolError(
                "bad_answer", f"The MCP server {self.server} answered badly: {exc.message}.", cls="terminal"
            )
        if isinstance(exc.data, dict) and exc.data.get(REFUSED):  # an answer past mm's limits
            return ToolError(
                "bad_answer", f"The MCP server {self.server} answered badly: {exc.message}.", cls="terminal"
            )
        code = exc.code
        reason = f"The MCP server {self.server} refused the call: {exc.message} (JSON-RPC error {code})."
        if code == _INVALID_PARAMS:
            return ToolError(
                "invalid_params", reason, cls="fix_and_retry", fix="Change the arguments as the server says."
            )
        if code in (_METHOD_NOT_FOUND, _INVALID_REQUEST, _PARSE_ERROR, _RESOURCE_NOT_FOUND):
            return ToolError("server_refused", reason, cls="terminal")
        return ToolError("server_error", reason, cls="retry_after", fix="Try again later.")


def render_blocks(blocks: list[Any]) -> str:
    """Content blocks as text: text whole; images, audio and blobs as one summary line each."""
    parts = []
    for block in blocks:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            size = _b64_size(getattr(block, "data", ""))
            parts.append(f"[{kind}: {block.mime_type}, {size:,} bytes; not shown]")
        elif kind == "resource":
            parts.append(_render_contents(block.resource))
        elif kind == "resource_link":
            mime = f", {block.mime_type}" if getattr(block, "mime_type", None) else ""
            about = f": {block.description}" if getattr(block, "description", None) else ""
            parts.append(f"[resource link: {block.name} at {block.uri}{mime}{about}]")
        else:
            parts.append(f"[{kind} content; not shown]")
    return "\n".join(parts)


def _render_contents(contents: Any) -> str:
    mime = getattr(contents, "mime_type", None) or "unknown type"
    text = getattr(contents, "text", None)
    if text is not None:
        return f"[resource {contents.uri} ({mime})]\n{text}"
    size = _b64_size(getattr(contents, "blob", ""))
    return f"[resource {contents.uri}: {mime}, {size:,} bytes; not shown]"


def _b64_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data) * 3 // 4


def _declared_class(structured: Any, text: str) -> ErrorClass | None:
    """The error class a server gave in the seeds' shape (``{"error": {"class": ...}}``), if any."""
    candidates = [structured]
    lines = text.strip().splitlines()
    if lines:
        # ValueError: not JSON, or too deep or big to be this line (TooDeep, TooLarge).
        with contextlib.suppress(ValueError):
            check_json(lines[-1], max_depth=MAX_DEPTH, max_bytes=MAX_ARGUMENTS_BYTES)
            candidates.append(json.loads(lines[-1]))
    for value in candidates:
        if isinstance(value, dict):
            error = value.get("error") if isinstance(value.get("error"), dict) else value
            cls = error.get("class")
            if cls in _ERROR_CLASSES:
                return cls
    return None


# -- from a server's listing to the tools of a turn ------------------------------------------


def make_tools(entry: ServerEntry, conn: Server) -> tuple[list[McpTool], list[str]]:
    """The tools *entry*'s allowlist exposes of what *conn*'s server offers, and warnings.

    Order: the server's. ``tools.include`` (when given) and ``tools.exclude``
    name the server's tool names; a name the server does not offer is a
    warning with a did-you-mean. A tool whose inputSchema nests deeper than
    MAX_DEPTH is left out with a warning. ``resources``/``prompts`` add two
    helper tools each when the server has the capability.
    """
    spec, name = entry.spec, entry.name
    warnings = _unoffered(name, spec, list(dict.fromkeys(t.name for t in conn.tools)))
    if conn.listing_cut:
        warnings.insert(0, f"MCP server {name}: {conn.listing_cut}")
    include, exclude = spec.tools.include, set(spec.tools.exclude)
    chosen = [t for t in conn.tools if (include is None or t.name in include) and t.name not in exclude]
    tools = []
    for remote in chosen:
        if value_depth(remote.input_schema, stop_past=MAX_DEPTH) > MAX_DEPTH:
            # It would go to the model, the clients and deepcopy, one recursion a level.
            warnings.append(
                f"MCP server {name}: tool {remote.name} is left out: its inputSchema is nested more than "
                f"{MAX_DEPTH} levels deep, the limit (real schemas nest a few levels)"
            )
            continue
        try:
            check: Patterns = check_for(remote.input_schema)
        except Unusable as exc:
            if exc.too_large:
                warnings.append(f"MCP server {name}: tool {remote.name} is left out: {exc}")
                continue
            warnings.append(
                f"MCP server {name}: tool {remote.name}: {exc}; its calls are checked by mm's subset only"
            )
            check = Patterns()
        tools.append(_remote_tool(entry, conn, remote, check))
    for tool in tools:
        if len(_prefixed(name, tool.remote_name, spec.prefix)) > MAX_NAME:
            warnings.append(
                f"MCP server {name}: tool {tool.remote_name} is offered as {tool.name} (names are limited to 64 characters)"
            )
    helpers, missing = _helper_tools(entry, conn)
    label = server_sandbox_label(spec)
    for tool in (*tools, *helpers):
        tool.server_sandbox = label
    return [*tools, *helpers], [*warnings, *missing]


def server_sandbox_label(spec: McpServerSpec) -> str | None:
    """How a server's ``sandbox:`` reads in the ask and ``mm tools list``; None for a URL server."""
    if spec.transport != "stdio":
        return None
    mode = spec.sandbox.mode or "off"
    return mode if mode == "off" or spec.sandbox.network else f"{mode}, network off"


def _unoffered(name: str, spec: McpServerSpec, offered: list[str]) -> list[str]:
    """A warning for each tool name the agent file gives that the server does not offer."""
    warnings = []
    include, exclude = spec.tools.include, sorted(set(spec.tools.exclude))
    for listed, key in ((include or [], "include"), (exclude, "exclude")):
        for wanted in listed:
            if wanted not in offered:
                maybe = closest(wanted, offered)
                hint = f"; did you mean {maybe[0]}?" if maybe else ""
                warnings.append(
                    f"MCP server {name}: tools.{key} names {wanted}, which the server does not offer{hint}"
                )
    for tool_name in spec.effects:
        if tool_name not in offered:
            warnings.append(f"MCP server {name}: effects names {tool_name}, which the server does not offer")
    return warnings


def _remote_tool(entry: ServerEntry, conn: Server, remote: Any, check: Patterns) -> McpTool:
    spec = entry.spec
    return McpTool(
        name=exposed_name(entry.name, remote.name, spec.prefix),
        remote_name=remote.name,
        server=entry.name,
        description=(remote.description or remote.name).strip(),
        parameters=normalize_schema(remote.input_schema),
        tier=tier_of(remote.annotations, spec.effects.get(remote.name)),
        conn=conn,
        timeout=spec.timeout,
        connect_timeout=spec.connect_timeout,
        full_check=check,
    )


def _helper_tools(entry: ServerEntry, conn: Server) -> tuple[list[McpTool], list[str]]:
    """The resources/prompts helper tools the agent file turns on, and a warning for each the server lacks."""
    spec, name = entry.spec, entry.name
    tools, warnings = [], []
    caps = conn.capabilities
    for flag, helpers in (("resources", _RESOURCE_HELPERS), ("prompts", _PROMPT_HELPERS)):
        if not getattr(spec.tools, flag):
            continue
        if caps is None or getattr(caps, flag, None) is None:
            warnings.append(f"MCP server {name}: tools.{flag} is on, but the server offers no {flag}")
            continue
        for method, description, parameters in helpers:
            tools.append(
                McpTool(
                    name=exposed_name(name, method, True),
                    remote_name=method,
                    server=name,
                    description=description,
                    parameters=parameters,
                    tier="read",
                    conn=conn,
                    timeout=spec.timeout,
                    connect_timeout=spec.connect_timeout,
                    method=method,
                )
            )
    return tools, warnings


_RESOURCE_HELPERS = [
    (
        "list_resources",
        "List the resources this server offers: URI, name, type.",
        {"type": "object", "properties": {}},
    ),
    (
        "read_resource",
        "Read one resource of this server by its URI (from list_resources).",
        {
            "type": "object",
            "properties": {"uri": {"type": "string", "description": "The resource's URI"}},
            "required": ["uri"],
        },
    ),
]
_PROMPT_HELPERS = [
    (
        "list_prompts",
        "List the prompt templates this server offers, with their arguments.",
        {"type": "object", "properties": {}},
    ),
    (
        "get_prompt",
        "Get one prompt template of this server, filled with its arguments.",
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The prompt's name (from list_prompts)"},
                "arguments": {"type": "object", "description": "The prompt's arguments by name"},
            },
            "required": ["name"],
        },
    ),
]


def admit(tools: list[McpTool], taken: dict[str, str]) -> tuple[list[McpTool], list[str]]:
    """The MCP tools whose names are free, and a warning for each one skipped.

    *taken* maps the names already used to what uses them ("the built-in
    tool", "the declared tool"); built-in names are taken even when that
    built-in is off, so turning it on later never changes which tool the
    model gets. Between two MCP servers, the first one configured keeps the name.
    """
    taken = dict(taken)
    kept, warnings = [], []
    mine: dict[str, McpTool] = {}  # the MCP tools kept, by name
    for tool in tools:
        owner = taken.get(tool.name)
        if owner is None:
            taken[tool.name] = f"the tool of MCP server {tool.server}"
            mine[tool.name] = tool
            kept.append(tool)
            continue
        first = mine.get(tool.name)
        if first is not None and first.server == tool.server:  # a prefix would not part them
            warnings.append(_same_server_clash(first, tool))
            continue
        fix = (
            f"set prefix: true on the server to offer it as {exposed_name(tool.server, tool.remote_name, True)}, "
            f"or leave it out with tools.exclude"
        )
        warnings.append(
            f"MCP server {tool.server}: tool {tool.remote_name} is skipped: its name {tool.name} is taken by {owner} ({fix})"
        )
    return kept, warnings


def _same_server_clash(first: McpTool, tool: McpTool) -> str:
    """The warning for a server's tool whose name its own earlier tool has (a prefix gives both the same)."""
    if first.remote_name == tool.remote_name:
        return f"MCP server {tool.server} lists tool {tool.remote_name} twice: the first is kept"
    return (
        f"MCP server {tool.server}: tool {tool.remote_name} is skipped: it is offered as {tool.name}, as is its "
        f"tool {first.remote_name} (a name keeps letters, digits, _ and -); name the one you want in tools.include, "
        "or leave the other out with tools.exclude"
    )


def taken_names(tools: list[Any]) -> dict[str, str]:
    """The names MCP tools may not take: every built-in's (even off) and the turn's other tools'."""
    taken = {name: f"the built-in tool {name} (reserved even when it is off)" for name in BUILTIN_TOOLS}
    taken.update({t.name: f"the {t.source} tool {t.name}" for t in tools if t.name not in taken})
    for name in BUILTIN_TOOLS:
        if any(t.name == name for t in tools):
            taken[name] = f"the built-in tool {name}"
    return taken


def estimate_tokens(spec: Any) -> int:
    """Tokens a tool costs in every request, estimated as characters / 4, rounded up.

    The characters are those of the tool's entry in an OpenAI-shaped request
    body, compact JSON: ``{"type": "function", "function": {name, description,
    parameters}}``. Four characters a token is the usual rule of thumb for
    English and JSON under BPE tokenizers; a real count varies by model.
    """
    entry = {
        "type": "function",
        "function": {"name": spec.name, "description": spec.description, "parameters": spec.parameters},
    }
    text = json.dumps(entry, ensure_ascii=False, separators=(",", ":"))
    return -(-len(text) // 4)
