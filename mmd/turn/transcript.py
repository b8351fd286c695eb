"""A session's transcript: its conversation as JSON lines, the file a hook's ``transcript_path`` names.

Claude Code hands every hook the path of the session's transcript (a JSONL
file); mm writes one per session at
``$XDG_STATE_HOME/mm/transcripts/<session id>.jsonl``, in the daemon's private
state folder. Each message added to the conversation is appended as it is
added, so a hook reads everything up to the moment it runs: one object per
line, ``{"type": role, "session_id", "timestamp", "message": {role, content,
tool_calls?, tool_call_id?, name?}}``. A compaction rewrites the stored
conversation, not this file: the transcript only grows.

While a turn runs the file is held open (:func:`open_for_turn`, closed as the turn ends): opening and
closing it for each message cost two system calls and a path lookup each, twice a tool call. A message
added outside a turn opens it for itself.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import msgspec

from ..models.base import Message
from ..rpc.messages import packed

log = logging.getLogger(__name__)
# One JSON line per message, by msgspec (json.dumps cost more than the rest of adding a message).
_JSON = msgspec.json.Encoder()


def path_for(state_dir: Path, session_id: str) -> Path:
    """Where the transcript of *session_id* is written."""
    return state_dir / "transcripts" / f"{session_id}.jsonl"


def open_for_turn(path: Path) -> int | None:
    """Create the transcript if it is not there (a hook that runs before the first message can open it) and
    hold it open for the turn: the descriptor for :func:`append`, which :func:`close` closes; None (logged)
    when it cannot be opened, and each message then tries on its own."""
    try:
        return _open(path)
    except OSError as exc:
        log.warning("transcript %s: cannot write it: %s", path, exc)
        return None


def close(fd: int | None) -> None:
    """Close what :func:`open_for_turn` opened."""
    if fd is not None:
        os.close(fd)


def append(path: Path, session_id: str, msg: Message, fd: int | None = None) -> None:
    """Append *msg* (through *fd* when the turn holds the file open); a failed write is logged, never raised
    (the store keeps the conversation)."""
    record = {
        "type": msg.role,
        "session_id": session_id,
        "timestamp": timestamp(time.time_ns()),
        "message": msg,
    }
    data = packed(record, _JSON.encode) + b"\n"
    try:
        if fd is not None:
            os.write(fd, data)
            return
        fd = _open(path)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    except OSError as exc:
        log.warning("transcript %s: cannot write it: %s", path, exc)


# The text of the last second a timestamp was made in: (second, "YYYY-MM-DDTHH:MM:SS"). One entry, keyed by
# the whole second it names.
_second: tuple[int, str] = (-1, "")


def timestamp(ns: int) -> str:
    """*ns* (nanoseconds since the epoch) as ``datetime.now(UTC).isoformat(timespec="milliseconds")`` writes
    it: ``2026-12-05T17:57:24.123+00:00``. datetime's cost ~13,000 instructions a line (its formatting goes
    through PyUnicode_FromFormat, the offset's through a timedelta): 1.3 % of a tool call's, two lines a
    call; the date and time of day are made once a second here."""
    global _second
    second, rest = divmod(ns, 1_000_000_000)
    if _second[0] != second:
        _second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{_second[1]}.{rest // 1_000_000:03d}+00:00"


def _open(path: Path) -> int:
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
    try:
        return os.open(path, flags, 0o600)
    except FileNotFoundError:  # the first write of all: the folder is made once
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        return os.open(path, flags, 0o600)
