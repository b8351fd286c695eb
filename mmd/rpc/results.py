"""Results of every RPC method, as msgspec Structs shared by daemon and clients.

Each handler in mmd/api returns one of these; msgpack encodes a Struct as the
map docs/protocol.md describes. A field whose default is ``UNSET`` is left out
of that map until it is given: the wire tells "absent" from "null" exactly as
the method documents it (``events`` of ``session.show``, the connection facts
of an ``mcp.list`` row). Unknown fields are accepted when a client decodes a
result, so a newer daemon may add one.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from .methods import Event


class _Result(msgspec.Struct, kw_only=True):
    pass


class Done(_Result):
    """``{}``: the method did what was asked and has nothing to say."""


# -- handshake and daemon.* -------------------------------------------------------------------


class HandshakeResult(_Result):
    protocol: int
    daemon_version: str
    pid: int
    capabilities: list[str]


class DaemonStatus(_Result):
    pid: int
    version: str
    protocol: int
    socket: str
    store: str
    log: str
    uptime: float  # seconds
    clients: int
    sessions_loaded: int
    turns_running: int
    sandbox: str = ""  # what this kernel can enforce: "Landlock ABI 7 (...)" or "unavailable: why"


class Stopping(_Result):
    stopping: bool
    pid: int


# -- session.* --------------------------------------------------------------------------------


class Prompted(_Result):
    session_id: str
    after_seq: int  # this turn's events are those with seq > after_seq


class Cancelled(_Result):
    cancelled: bool  # false when no turn ran


class Subscribed(_Result):
    session_id: str
    events: list[Event]  # stored events after after_seq (the replay)
    running: bool
    pending_consent: list[dict[str, Any]]  # data of the consent_needed events still waiting


class SessionInfo(_Result):
    """One row of ``session.list``, and the ``session`` of ``session.show``."""

    id: str
    created: float
    updated: float
    cwd: str
    agent: str | None
    model: str
    title: str
    turns: int
    running: bool
    last_status: str | None  # status of the newest turn_ended; None before any ended


class SessionList(_Result):
    sessions: list[SessionInfo]


class TurnEnding(_Result):
    status: str | None
    error: str | None


class ChatToolCall(_Result):
    id: str
    name: str
    arguments: str  # JSON text exactly as the model sent it


class ChatMessage(_Result, omit_defaults=True):
    """One message of the model's context, as stored (mmd.models.base.Message)."""

    role: str  # system | user | assistant | tool
    content: str = ""
    tool_calls: list[ChatToolCall] = []
    tool_call_id: str | None = None
    name: str | None = None
    said: str | None = None  # assistant: the text its calls were read from, as the model wrote it


class SessionShow(_Result):
    session: SessionInfo
    messages: list[ChatMessage]
    turns: list[TurnEnding]  # of each turn that ended, oldest first
    events: list[Event] | UnsetType = UNSET  # only when asked for: a page of them (store.EVENTS_PAGE_BYTES)
    more: bool | UnsetType = UNSET  # with events: whether events after this page remain (ask after_seq)


class Compacted(_Result):
    """What ``session.compact`` did: the data of its ``context_compacted`` event."""

    session_id: str
    before: int  # estimated tokens of a request with the conversation before
    after: int  # and after
    summarised: int  # messages replaced by the summary note (0: there was nothing)
    summary: str  # who wrote it: "model", "mm" (the model gave none), or "none"
    window: int  # the model's context window in tokens


class Checkpoint(_Result):
    """One step of ``session.diff``: a call that may have written, or an undo."""

    step: int
    call_id: str | None  # None for an undo
    tool: str  # the tool's name, or "undo"
    echo: str
    ts: float
    files: list[dict[str, str]]  # [{path, change}]: added, modified, deleted or type


class SessionDiff(_Result):
    session_id: str
    step: int | None  # the step shown; None: the whole session
    steps: list[Checkpoint]  # every step of the session, oldest first
    files: list[dict[str, str]]  # [{path, change}] the diff covers
    diff: str  # unified diff (git's, binary files as git binary patches)
    truncated: bool  # the diff was cut at 4 MiB


class Undone(_Result):
    session_id: str
    step: int | None  # the undo's own step (undo it to put the files back); None: nothing changed
    undone: int  # the files are as they were before this step
    files: list[dict[str, str]]  # [{path, change}] the undo changed


# -- consent.* --------------------------------------------------------------------------------


class ConsentRule(_Result):
    id: int
    tool: str
    kind: str  # tool | exact | prefix | path
    rule: str | None
    scope: str  # session | project | global
    scope_key: str
    decision: str
    created: float
    origin: str


class ConsentRules(_Result):
    rules: list[ConsentRule]


class Revoked(_Result):
    revoked: int


# -- trust.* ----------------------------------------------------------------------------------


class UntrustedFile(_Result):
    path: str  # absolute, as mm found it (links not followed)
    digest: str  # SHA-256 of its text: what trust.add takes back
    powers: list[str]  # what it would make mm run or let through, one phrase each, each whole
    changed: bool  # an older text of it was trusted
    # What it would make mm do is too long to show whole: powers holds the lines that fit and one saying how
    # many more; a client does not offer to trust it (the person reads the file: `mm trust --yes`).
    too_long: bool = False


class TrustChecked(_Result):
    files: list[UntrustedFile]  # the project files a request there would go without


class TrustEntry(_Result):
    path: str
    digest: str
    trusted: float  # when, seconds since the epoch
    state: str  # "as trusted", "changed" (its text is another now), "gone" (no file there)


class TrustListed(_Result):
    files: list[TrustEntry]


class Forgotten(_Result):
    forgotten: int


# -- tools.* and stats.* ----------------------------------------------------------------------


class ToolInfo(_Result):
    name: str
    tier: str
    source: str
    description: str  # exactly as sent to the model
    parameters: dict[str, Any]  # JSON Schema, exactly as sent to the model
    sandbox: str | None = None  # the sandbox its processes run under; None: it runs inside mm


class ToolsListed(_Result):
    agent: str | None
    tools: list[ToolInfo]
    skills: list[str]
    warnings: list[str]


class SkillInfo(_Result):
    name: str
    description: str
    source: str  # "agent file", "user" or "project"
    folder: str  # absolute
    tokens: int  # estimated tokens of its line in the system prompt, in every request
    body_tokens: int  # estimated tokens of its body, when read
    allowed_tools: list[str] | None  # as written in SKILL.md; None: the key is absent


class SkillsListed(_Result):
    agent: str | None
    skills: list[SkillInfo]  # in priority order
    folders: list[str]  # every folder searched, in priority order
    warnings: list[str]


class ModelInfo(_Result):
    name: str  # what session.prompt's model takes: an alias of config.yaml, or local/NAME
    provider: str
    model: str  # the model id the provider knows


class ModelsListed(_Result):
    models: list[ModelInfo]
    default_model: str | None


class ToolsChecked(_Result):
    agent: str | None
    tools: list[str]  # the declared tool names


class ToolStat(_Result):
    tool: str
    calls: int
    first_attempts: int
    first_valid: int
    first_invalid: int
    recoveries: int
    top_error: str | None


class ToolStats(_Result):
    tools: list[ToolStat]


# -- mcp.* ------------------------------------------------------------------------------------


class _McpServer(_Result):
    """What configures one MCP server, common to ``mcp.list`` and ``mcp.test``."""

    name: str
    origin: str  # the file that configured it
    enabled: bool
    transport: str  # http | stdio
    target: str  # the URL, or the command line
    include: list[str] | None
    exclude: list[str]


class McpServerState(_McpServer):
    """A row of ``mcp.list``: the fields after ``error`` come only with a connection."""

    state: str
    error: str | None
    pid: int | UnsetType | None = UNSET
    connects: int | UnsetType = UNSET
    drops: int | UnsetType = UNSET
    calls: int | UnsetType = UNSET
    in_flight: int | UnsetType = UNSET
    tools_offered: int | UnsetType | None = UNSET
    connect_seconds: float | UnsetType | None = UNSET
    connected_at: float | UnsetType | None = UNSET
    protocol: str | UnsetType | None = UNSET
    log: str | UnsetType | None = UNSET


class McpServers(_Result):
    agent: str | None
    config: str | None
    servers: list[McpServerState]
    # The project's files left out as untrusted (mmd/config/trust.py), one sentence each.
    warnings: list[str] = []


class McpToolInfo(_Result):
    name: str
    remote_name: str
    tier: str
    tokens: int  # estimated cost in every request
    description: str


class McpServerInfo(_Result):
    name: str | None
    version: str | None


class McpTested(_McpServer):
    """``mcp.test``: the fields after ``error`` come only when the server was reached."""

    ok: bool
    tools: list[McpToolInfo]
    tokens: int
    warnings: list[str]
    error: str | None = None
    reused: bool | UnsetType = UNSET
    connect_seconds: float | UnsetType | None = UNSET
    connects: int | UnsetType = UNSET
    pid: int | UnsetType | None = UNSET
    protocol: str | UnsetType | None = UNSET
    server: McpServerInfo | UnsetType = UNSET
    offered: int | UnsetType = UNSET


# -- eval.* -----------------------------------------------------------------------------------


class EvalCase(_Result):
    name: str
    expect: list[str]  # the argv the action must receive, program name first
    prompts: dict[str, str]  # language -> prompt


class EvalFixture(_Result):
    """An ``mm eval`` fixture, checked: its folder, its file and what it asks for."""

    root: str  # the folder holding the file; mode agent files are relative to it
    file: str
    runs: int
    modes: dict[str, str]  # mode -> agent file
    cases: list[EvalCase]
    log: str  # the file the actions append their argv to, in the working directory
    timeout: float  # seconds per run
