"""A blocking msgpack-RPC client over the daemon's real socket, for cases the `mm` CLI cannot write.

It speaks the wire format directly (no handshake unless asked), so a case can pipeline frames, hang up
at any byte, or answer consent asks itself.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

from mmd.rpc import PROTOCOL_VERSION, Splitter, decode_message, decode_notification_arg, request
from mmd.rpc.messages import Notification, Response

from ..conftest import socket_of

# Seconds any one read waits before a case fails instead of hanging.
READ_TIMEOUT = 60.0


class Raw:
    """One connection: ``call`` for a request and its answer, ``events_until`` for a turn's events."""

    def __init__(self, home: Path, *, handshake: bool = True) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(READ_TIMEOUT)
        try:
            self.sock.connect(str(socket_of(home)))
        except OSError:  # no daemon there (a case may wait for one): nothing left open
            self.sock.close()
            raise
        self.splitter = Splitter()
        self.pending: list[Any] = []
        self.msgid = 0
        if handshake:
            self.call("handshake", {"protocol": PROTOCOL_VERSION, "client": "adversarial"})

    def __enter__(self) -> Raw:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def frame(self, method: str, params: Any = None) -> bytes:
        """The bytes of the next request (its msgid is ``self.msgid`` after this)."""
        self.msgid += 1
        return request(self.msgid, method, params)

    def next(self) -> Any:
        """The next message, or None when the daemon closed the connection."""
        while not self.pending:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.pending += [decode_message(f) for f in self.splitter.feed(data)]
        return self.pending.pop(0)

    def response(self, msgid: int) -> Response:
        """Read until the response to ``msgid``; notifications read meanwhile are kept."""
        kept = []
        try:
            while True:
                msg = self.next()
                assert msg is not None, f"the daemon closed the connection before answering {msgid}"
                if isinstance(msg, Response) and msg.msgid == msgid:
                    return msg
                kept.append(msg)
        finally:
            self.pending[:0] = kept

    def call(self, method: str, params: Any = None) -> Any:
        """Send a request and return its result; AssertionError with the message on an error."""
        self.sock.sendall(self.frame(method, params))
        resp = self.response(self.msgid)
        assert resp.error is None, f"{method}: {resp.error}"
        return resp.result

    def events_until(self, kind: str) -> list[dict[str, Any]]:
        """The session events received until (and with) the first of ``kind``."""
        events = []
        while True:
            msg = self.next()
            assert msg is not None, f"the daemon closed the connection before a {kind} event"
            if isinstance(msg, Notification) and msg.method == "event":
                event = decode_notification_arg(msg.params)
                events.append(event)
                if event["kind"] == kind:
                    return events


def scripted_agent(folder: Path, steps: list[dict[str, Any]]) -> Path:
    """An agent file in ``folder`` whose model is ``scripted:`` (served inside the daemon) with ``steps``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "script.json").write_text(json.dumps({"responses": steps}))
    agent = folder / "agent.yaml"
    agent.write_text("model: scripted:script.json\n")
    return agent


def wait_until(check: Any, what: str, timeout: float = 60.0) -> Any:
    """Poll ``check()`` until it returns a true value (returned); fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.05)
