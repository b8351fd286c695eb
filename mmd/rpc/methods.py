"""Params of every RPC method and the event record, shared by daemon and clients.

Each Struct here is the single map argument of one method; docs/protocol.md
lists them with their results. Unknown fields are refused so that a typo in a
client is an error, not a silently ignored option.

What the decoder can check, it does, so a bad value is refused as ``invalid_params`` before a handler
runs: every integer is bounded (the store's integers are SQLite's, signed 64-bit: a larger one was an
OverflowError deep in a handler), and every field that names a file or folder holds no NUL byte (which no
path can hold, and which Python's file functions refuse with a ValueError).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import msgspec

# The largest integer the store can hold or compare: SQLite's INTEGER, msgpack's int64.
MAX_INT = 2**63 - 1
# A count, a sequence number, a version: from 0 ("none", "from the start").
Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_INT)]
# A number that counts from 1: a step, a rule's id.
Number = Annotated[int, msgspec.Meta(ge=1, le=MAX_INT)]


class _Params(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    pass


class _PathParams(_Params):
    """Params with fields that name a file or folder (``path_fields``), checked as they are decoded."""

    path_fields: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        # Raised here, msgspec answers it as a ValidationError: the request is refused as invalid_params.
        for name in self.path_fields:
            value = getattr(self, name)
            if value is not None and "\x00" in value:
                raise ValueError(
                    f"{name} holds a NUL byte (\\x00), which no file or folder name can hold: check how the "
                    f"path was built - at `$.{name}`"
                )


class Handshake(_Params):
    protocol: Count
    client: str = "unknown"
    version: str = ""


class Prompt(_PathParams):
    path_fields = ("cwd", "agent")

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
    step: Number | None = None  # one step; None: the whole session


class Undo(_Params):
    session_id: str
    to_step: Number | None = None  # restore the tree as it was before this step; None: the last step
    force: bool = False  # overwrite files something else changed since


class Subscribe(_Params):
    session_id: str
    after_seq: Count = 0
    interactive: bool = False  # this client answers consent asks


class ListSessions(_PathParams):
    path_fields = ("cwd",)

    limit: Count = 20
    cwd: str | None = None


class ShowSession(_Params):
    session_id: str
    events: bool = False
    after_seq: Count = 0  # with events: the page of events after this seq (the last of the page before)


class ConsentAnswer(_Params):
    session_id: str
    request_id: str
    decision: Literal["allow_once", "allow_always", "deny", "dry_run"]
    reason: str = ""
    # For bash: a command prefix the user allows ("git status"); None
    # allows the exact command that was asked about.
    rule: str | None = None
    scope: Literal["session", "project", "global"] = "project"


class ConsentList(_PathParams):
    path_fields = ("cwd",)

    cwd: str | None = None


class ConsentRevoke(_Params):
    id: Number


class Empty(_Params):
    pass


class TrustCheck(_PathParams):
    """The files a ``session.prompt`` of the same cwd, agent and session would go without."""

    path_fields = ("cwd", "agent")

    cwd: str
    agent: str | None = None  # named on the command line: trusted for the request, so not listed
    session_id: str | None = None  # the session the prompt continues: its folder and agent file
    continue_last: bool = False  # the newest session of cwd


# A file trust.add names: its absolute path and the SHA-256 (hex) of its text, as trust.check said them.
Digest = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
TrustPath = Annotated[str, msgspec.Meta(min_length=1, max_length=4096, pattern="^/[^\x00]*$")]


class TrustedFile(_Params):
    path: TrustPath
    digest: Digest


class TrustAdd(_Params):
    files: Annotated[list[TrustedFile], msgspec.Meta(max_length=64)]


class TrustForget(_Params):
    paths: Annotated[list[TrustPath], msgspec.Meta(max_length=4096)] | None = None  # None: every file


class ToolsList(_PathParams):
    path_fields = ("cwd", "agent")

    cwd: str
    agent: str | None = None  # agent file path, absolute


class SkillsList(_PathParams):
    path_fields = ("cwd", "agent")

    cwd: str
    agent: str | None = None  # agent file path, absolute


class ModelsList(_Params):
    pass


class ToolsCheck(_PathParams):
    path_fields = ("agent",)

    agent: str  # agent file path, absolute


class Stats(_Params):
    session_id: str | None = None  # None: every session


class McpList(_PathParams):
    path_fields = ("cwd", "agent")

    cwd: str
    agent: str | None = None


class McpTest(_PathParams):
    path_fields = ("cwd", "agent")

    name: str
    cwd: str
    agent: str | None = None


class EvalLoad(_PathParams):
    path_fields = ("path",)

    path: str  # absolute: a fixture folder holding eval.yaml, or the yaml file itself


class Event(msgspec.Struct, kw_only=True):
    """One step of a session, stored and streamed as the ``event`` notification."""

    session_id: str
    seq: int
    ts: float
    kind: str
    data: dict[str, Any] = {}
