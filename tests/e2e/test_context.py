"""The context budget end to end: real daemons, the real `mm`, the scripted model server standing in for a
llama-server with a small window (it refuses a request over it, as llama-server does).

The budget's arithmetic is tests/unit/turn/test_budget.py, its work in one session
tests/unit/turn/test_context.py; the long session with the real 0.5B is in tests/e2e/test_local.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mm.connection import Client

from mmd.models.scripted import prompt_tokens
from mmd.turn.budget import NOTE_PREFIX

from .conftest import run_mm

WINDOW = 4096


def completions(server: Any) -> list[dict[str, Any]]:
    return [r["body"] for r in server.requests() if r["path"] == "/v1/chat/completions"]


def show(session_id: str, work: Path) -> dict[str, Any]:
    result = run_mm("sessions", "show", session_id, "--json", cwd=work)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def newest_session(work: Path) -> str:
    return json.loads(run_mm("sessions", "list", "--json", cwd=work).stdout)[0]["id"]


def test_a_huge_output_is_cut_to_the_window_and_the_next_turn_still_fits(
    mm_home: Path, scripted: Any
) -> None:
    """The issue's reproduction: `cat` of a 166 KB file, then `--continue`, with a small window."""
    work = mm_home / "work"
    (work / "big.txt").write_text(
        "".join(f"line {n:05}: some log text of the service\n" for n in range(4000))
    )
    server = scripted(
        [
            {"tool_calls": [{"name": "bash", "arguments": {"command": "cat big.txt"}}]},
            {"text": "It is a log of 4000 lines."},
            {"text": "Still here."},
        ],
        context_window=WINDOW,
    )
    first = run_mm("-p", "Run: cat big.txt", "--yolo", cwd=work)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "It is a log of 4000 lines."
    again = run_mm("--continue", "-p", "and now?", cwd=work)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "Still here."
    bodies = completions(server)
    assert len(bodies) == 3 and all(prompt_tokens(b) <= WINDOW for b in bodies)
    [tool] = [m for m in show(newest_session(work), work)["messages"] if m["role"] == "tool"]
    assert len(tool["content"]) <= WINDOW // 4 * 3 + 500  # its share, and the marker
    spill = tool["content"].split(" is in ", 1)[1].split(" — ", 1)[0]
    assert Path(spill).read_text() == (work / "big.txt").read_text()  # the whole, for read_file


def test_a_prompt_that_cannot_fit_is_never_sent_and_mm_says_what_to_do(mm_home: Path, scripted: Any) -> None:
    server = scripted([{"text": "never"}], context_window=WINDOW)
    result = run_mm("-p", "review this: " + "x" * 40_000, cwd=mm_home / "work")
    assert result.returncode == 1
    assert "context window of 4,096 tokens" in result.stderr
    assert "--model" in result.stderr and "new session" in result.stderr
    assert "exceeds the available context" not in result.stderr
    assert completions(server) == []


def test_session_compact_over_rpc_replaces_the_conversation_with_a_summary(
    mm_home: Path, scripted: Any
) -> None:
    work = mm_home / "work"
    server = scripted(
        [
            {"text": "Hello."},
            {"text": "Hello again."},
            {"text": "The user greeted twice and was greeted back."},
            {"text": "Third."},
        ],
        context_window=WINDOW,
    )
    assert run_mm("-p", "hello", cwd=work).returncode == 0
    assert run_mm("--continue", "-p", "hello again, " + "please " * 300, cwd=work).returncode == 0
    session_id = newest_session(work)
    client = Client.connect(autostart=False, client="context-e2e")
    try:
        done = client.call("session.compact", {"session_id": session_id[:6]})
    finally:
        client.close()
    assert done["session_id"] == session_id and done["summarised"] == 4 and done["summary"] == "model"
    assert done["window"] == WINDOW and done["after"] < done["before"]
    [note] = show(session_id, work)["messages"]
    assert note["role"] == "user" and note["content"].startswith(NOTE_PREFIX)
    assert "greeted twice" in note["content"]
    third = run_mm("--continue", "-p", "third", cwd=work)
    assert third.returncode == 0 and third.stdout.strip() == "Third."
    last = completions(server)[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user", "user"] and last[1]["content"] == note["content"]
    events = show_events(session_id, work)
    assert [e["data"]["by"] for e in events if e["kind"] == "context_compacted"] == ["user"]


def show_events(session_id: str, work: Path) -> list[dict[str, Any]]:
    client = Client.connect(autostart=False, client="context-e2e")
    try:
        return client.call("session.show", {"session_id": session_id, "events": True})["events"]
    finally:
        client.close()


def test_compact_in_mm_chat(mm_home: Path, scripted: Any) -> None:
    scripted([{"text": "Hi."}, {"text": "A greeting was exchanged."}], context_window=WINDOW)
    result = run_mm("chat", input="/compact\nhello\n/compact\n", cwd=mm_home / "work")
    assert result.returncode == 0, result.stderr
    assert "nothing to compact yet" in result.stderr
    assert (
        "compacted: 2 earlier messages summarised by the model to fit the 4,096-token window" in result.stderr
    )
