"""Params of every RPC method and the event record, shared by daemon and clients.

Each Struct here is the single map argument of one method; docs/protocol.md
lists them with their results. Unknown fields are refused so that a typo in a
client is an error, not a silently ignored option.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec


class _Params(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    pass


class Handshake(_Params):
    protocol: int
    client: str = "unknown"
    version: str = ""


class Prompt(_Params):
    prompt: str
    cwd: str
    session_id: str | None = None  # resume this session
    continue_last: bool = False  # resume the newest session of cwd
    agent: str | None = None  # agent file path, absolute
    model: str | None = None
    yolo: bool = False
    # --sandbox: the mode of the turn's processes, over the agent file's (docs/security.md#sandbox).
    sandbox: Literal["workspace", "read-only", "off"] | None = None
    # The caller can answer consent asks (a TTY or an editor). When no
    # attached client can, a call that needs consent is denied.
    interactive: bool = False


class SessionRef(_Params):
    session_id: str


class Compact(_Params):
    session_id: str
    model: str | None = None  # the model that summarises; default: the one a prompt would use


class Diff(_Params):
    session_id: str
    step: int | None = None  # one step; None: the whole session


class Undo(_Params):
    session_id: str
    to_step: int | None = None  # restore the tree as it was before this step; None: the last step
    force: bool = False  # overwrite files something else changed since


class Subscribe(_Params):
    session_id: str
    after_seq: int = 0
    interactive: bool = False  # this client answers consent asks


class ListSessions(_Params):
    limit: int = 20
    cwd: str | None = None


class ShowSession(_Params):
    session_id: str
    events: bool = False


class ConsentAnswer(_Params):
    session_id: str
    request_id: str
    decision: Literal["allow_once", "allow_always", "deny", "dry_run"]
    reason: str = ""
    # For bash: a command prefix the user allows ("git status"); None
    # allows the exact command that was asked about.
    rule: str | None = None
    scope: Literal["session", "project", "global"] = "project"


class ConsentList(_Params):
    cwd: str | None = None


class ConsentRevoke(_Params):
    id: int


class Empty(_Params):
    pass


class ToolsList(_Params):
    cwd: str
    agent: str | None = None  # agent file path, absolute


class SkillsList(_Params):
    cwd: str
    agent: str | None = None  # agent file path, absolute


class ModelsList(_Params):
    pass


class ToolsCheck(_Params):
    agent: str  # agent file path, absolute


class Stats(_Params):
    session_id: str | None = None  # None: every session


class McpList(_Params):
    cwd: str
    agent: str | None = None


class McpTest(_Params):
    name: str
    cwd: str
    agent: str | None = None


class EvalLoad(_Params):
    path: str  # absolute: a fixture folder holding eval.yaml, or the yaml file itself


class Event(msgspec.Struct, kw_only=True):
    """One step of a session, stored and streamed as the ``event`` notification."""

    session_id: str
    seq: int
    ts: float
    kind: str
    data: dict[str, Any] = {}
