"""A session's transcript: its conversation as JSON lines, the file a hook's ``transcript_path`` names.

Claude Code hands every hook the path of the session's transcript (a JSONL
file); mm writes one per session at
``$XDG_STATE_HOME/mm/transcripts/<session id>.jsonl``, in the daemon's private
state folder. Each message added to the conversation is appended as it is
added, so a hook reads everything up to the moment it runs: one object per
line, ``{"type": role, "session_id", "timestamp", "message": {role, content,
tool_calls?, tool_call_id?, name?}}``. A compaction rewrites the stored
conversation, not this file: the transcript only grows.
"""

from __future__ import annotations

import datetime
import logging
import os
from pathlib import Path

import msgspec

from ..models.base import Message

log = logging.getLogger(__name__)
# One JSON line per message, by msgspec (json.dumps cost more than the rest of adding a message).
_JSON = msgspec.json.Encoder()


def path_for(state_dir: Path, session_id: str) -> Path:
    """Where the transcript of *session_id* is written."""
    return state_dir / "transcripts" / f"{session_id}.jsonl"


def touch(path: Path) -> None:
    """Create the transcript (empty) so a hook that runs before the first message can open it."""
    _append(path, b"")


def append(path: Path, session_id: str, msg: Message) -> None:
    """Append *msg*; a failed write is logged, never raised (the store keeps the conversation)."""
    record = {
        "type": msg.role,
        "session_id": session_id,
        "timestamp": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"),
        "message": msg,
    }
    _append(path, _JSON.encode(record) + b"\n")


def _append(path: Path, data: bytes) -> None:
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
    try:
        try:
            fd = os.open(path, flags, 0o600)
        except FileNotFoundError:  # the first write of all: the folder is made once
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, flags, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    except OSError as exc:
        log.warning("transcript %s: cannot write it: %s", path, exc)
