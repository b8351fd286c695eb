"""Input small on the wire that decodes into huge Python objects: a ``{}`` is 2 bytes of JSON (1 of msgpack)
and a 64-byte dict, so a 64 MiB MCP line was 7 GB, a 60 MB model answer 4.6 GB, a 16 MiB RPC frame 1.2 GB,
each decoded on the event loop while every other client waited.

The count of values is now bounded before anything is built (mmd/untrusted.py ``check_json``,
mmd/rpc/framing.py), fields mm does not read are skipped unread, input over a megabyte is decoded in a worker
thread, and the unfinished frames all clients hold are bounded together (tests/unit/server/test_connection.py).
Each case is a few megabytes past a bound of a million values (100,000 for a client's frame), against a real
daemon, a real model server and a real MCP server process, and ends with ``assert_daemon_serves``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from mmd.rpc import MAX_REQUEST_VALUES
from mmd.untrusted import MAX_VALUES

from ..conftest import socket_of
from .serves import assert_daemon_serves
from .test_nesting import DEEP_SERVER, call, exchange, prompt, tool_messages, use_model

# Past MAX_VALUES by a tenth: 3.3 MB of `{},`.
WIDE = MAX_VALUES + MAX_VALUES // 10
REFUSED = f"too big once decoded: more than {MAX_VALUES:,} values, the limit"


def empties(n: int) -> str:
    return "[" + "{}," * (n - 1) + "{}]"


def sse(*events: str) -> dict[str, str]:
    return {"raw": "".join(f"data: {e}\n\n" for e in events), "content_type": "text/event-stream"}


def test_a_provider_body_of_a_million_empty_objects_is_refused_unbuilt(mm_home: Path, scripted) -> None:
    # A body that is not a completion was quoted whole in the error: str() of 20 M dicts, 24 s of the loop.
    work = mm_home / "work"
    use_model(mm_home, work, scripted, [{"raw": empties(WIDE)}], "openai")
    result = prompt(work)
    assert result.returncode == 1
    assert f"the provider's answer is {REFUSED}" in result.stderr
    assert len(result.stderr) < 1000  # the excerpt is a slice of the bytes
    assert_daemon_serves(mm_home)


def test_a_stream_event_whose_usage_is_a_million_values_is_refused(mm_home: Path, scripted) -> None:
    # `usage` was typed Any in the event's Struct: a list of 20 M {} was built whole, then passed over.
    work = mm_home / "work"
    text = '{"choices": [{"index": 0, "delta": {"content": "hi"}}], "usage": ' + empties(WIDE) + "}"
    stop = '{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}'
    use_model(mm_home, work, scripted, [sse(text, stop, "[DONE]")], "openai")
    result = prompt(work)
    assert result.returncode == 1
    assert f"the provider's answer is {REFUSED}" in result.stderr
    assert_daemon_serves(mm_home)


def test_an_event_that_never_ends_is_refused_at_its_bound(mm_home: Path, scripted) -> None:
    # Every `data:` line of an event was kept as a Python string until its blank line: 9 bytes on the wire,
    # ~60 in the daemon. 300,000 lines (2.4 MB) cost past 16 MiB so counted.
    work = mm_home / "work"
    lines = "data:xy\n" * 300_000
    use_model(mm_home, work, scripted, [{"raw": lines, "content_type": "text/event-stream"}], "openai")
    result = prompt(work)
    assert result.returncode == 1
    assert "the provider sent an event of more than 16,777,216 bytes of data" in result.stderr
    assert_daemon_serves(mm_home)


def test_an_mcp_answer_of_a_million_values_is_answered_at_once(mm_home: Path, scripted) -> None:
    # The SDK keeps fields it does not know: 20 M {} in one 64 MiB line were 7 GB held, 34 s of the loop.
    work = mm_home / "work"
    server = use_model(
        mm_home,
        work,
        scripted,
        [call("echo", {"text": "hi"}), {"text": "the server answered badly"}],
        "openai",
    )
    entry = {"command": sys.executable, "args": [str(DEEP_SERVER), str(WIDE), "wide"], "timeout": 600}
    (work / "agent.yaml").write_text(yaml.safe_dump({"mcp": {"deep": entry}}))
    result = prompt(work)
    assert result.returncode == 0, result.stderr
    [answer] = tool_messages(server, "openai")
    assert answer.startswith(
        f"echo failed. The MCP server deep answered badly: mm refused its answer: it is {REFUSED}."
    )
    assert_daemon_serves(mm_home)


def test_a_frame_of_too_many_values_is_refused_at_its_header(mm_home: Path, daemon) -> None:
    # [1, 0, nil, [{} × 150,000]]: 150 KB, no handshake; its first 64 bytes are enough. A response was decoded untyped (1.2 GB for 16 MiB)
    # before it was ignored; now the header's count is past what any request holds.
    n = MAX_REQUEST_VALUES + MAX_REQUEST_VALUES // 2
    frame = b"\x94\x01\x00\xc0\xdd" + n.to_bytes(4, "big") + b"\x80" * n
    messages = exchange(socket_of(mm_home), frame[:64])  # refused at its header: the rest is never read
    [error] = [m for m in messages if m[:2] == [2, "error"]]
    assert error[2][0]["code"] == "protocol_error"
    assert f"frame of more than {MAX_REQUEST_VALUES:,} values" in error[2][0]["message"]
    assert daemon.poll() is None
    assert_daemon_serves(mm_home)
