"""Declared tools end to end: a real mmd, the real ``mm`` CLI, a scripted model server, real scripts.

Every run is judged from what the scripts really received: each appends its
argv (and MM_IDEMPOTENCY_KEY) as a JSON line to $MM_ARGV_LOG. The daemon gets
that variable from the client that starts it, so each test sets it before its
first ``mm`` command and lets the CLI start the daemon.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from mm.connection import Client

from mmd.rpc import RPCError
from mmd.turn.calls import idempotency_key

from ..paths import ROOT
from .conftest import run_mm

RELEASE_TEAM = ROOT / "contrib" / "release-team"
# Seconds a client waits for one message from the daemon before the test fails (a hang, not a timing).
READ_TIMEOUT = 60.0

PACKED = '{"version": "1.4.2 1.4.2, channel beta"}'
RELEASE = {"version": "1.4.2", "channel": "beta"}


# --- helpers ---------------------------------------------------------------------------


@pytest.fixture
def argv_log(mm_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$MM_ARGV_LOG for the scripts; set before any ``mm`` command starts the daemon."""
    path = mm_home / "argv.jsonl"
    monkeypatch.setenv("MM_ARGV_LOG", str(path))
    return path


def ran(log: Path, tool: str | None = None) -> list[dict[str, Any]]:
    """The argv records of the scripts that ran, in order; only *tool*'s when given."""
    if not log.exists():
        return []
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    return [r for r in rows if tool is None or r["tool"] == tool]


def release_team(work: Path) -> Path:
    """contrib/release-team copied into *work*; returns its agent file."""
    shutil.copytree(RELEASE_TEAM, work, dirs_exist_ok=True)
    return work / "agent.yaml"


def call(name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    """A script step that makes one tool call."""
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def write_script(path: Path, name: str, body: str = "") -> Path:
    """An executable Python script that records its argv under *name*, then runs *body*."""
    path.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "args = sys.argv[1:]\n"
        'with open(os.environ["MM_ARGV_LOG"], "a") as log:\n'
        f'    log.write(json.dumps({{"tool": {name!r}, "argv": args,'
        ' "idempotency_key": os.environ.get("MM_IDEMPOTENCY_KEY")}) + "\\n")\n' + body
    )
    path.chmod(0o755)
    return path


def tool_messages(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["body"]["messages"] if m["role"] == "tool"]


def session_events(work: Path) -> tuple[str, list[dict[str, Any]]]:
    """The id and stored events of the newest session of *work*."""
    rows = json.loads(run_mm("sessions", "list", "--json", cwd=work).stdout)
    session_id = rows[0]["id"]
    shown = run_mm("sessions", "show", "--json", session_id, cwd=work)
    assert shown.returncode == 0, shown.stderr
    return session_id, json.loads(shown.stdout)["events"]


def of(events: list[dict[str, Any]], kind: str, **match: Any) -> list[dict[str, Any]]:
    return [
        e["data"]
        for e in events
        if e["kind"] == kind and all(e["data"].get(k) == v for k, v in match.items())
    ]


def connect() -> Client:
    """An interactive client of the running daemon; never starts one."""
    client = Client.connect(autostart=False, client="declared-test")
    client.sock.settimeout(READ_TIMEOUT)
    return client


def interactive_turn(
    client: Client, work: Path, agent: Path | None, answer: Any, text: str = "go", yolo: bool = True
) -> list[dict[str, Any]]:
    """One turn as an interactive client (under yolo unless told otherwise); its events.

    ``answer(ask, session_id)`` gives the fields of the consent.answer sent for each ask.
    """
    params = {"prompt": text, "cwd": str(work), "interactive": True, "yolo": yolo}
    if agent is not None:
        params["agent"] = str(agent)
    started = client.call("session.prompt", params)
    session_id = started["session_id"]
    events = []
    while True:
        method, ev = client.next_notification()
        if method != "event" or ev["session_id"] != session_id or ev["seq"] <= started["after_seq"]:
            continue
        events.append(ev)
        if ev["kind"] == "consent_needed":
            fields = answer(ev["data"], session_id)
            reply = {"session_id": session_id, "request_id": ev["data"]["request_id"], **fields}
            client.call("consent.answer", reply)
        elif ev["kind"] == "turn_ended":
            return events


# --- the seed flow ------------------------------------------------------------------------


def test_packed_call_is_answered_then_the_corrected_call_runs_once_and_is_verified(
    mm_home, scripted, argv_log
):
    work = mm_home / "work"
    release_team(work)
    server = scripted(
        [call("release", PACKED), call("release", RELEASE), {"text": "Released 1.4.2 to beta, verified."}]
    )
    result = run_mm("--yolo", "--agent", "agent.yaml", "-p", "Release 1.4.2 to beta", cwd=work)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Released 1.4.2 to beta, verified.\n"

    requests = server.requests()
    assert len(requests) == 3
    # The model read the invalid call back, what was wrong, and the machine-readable error.
    [answer] = tool_messages(requests[1])
    lines = answer.splitlines()
    assert lines[0].startswith("release was not run.")
    assert f"You sent: release({PACKED})" in lines
    assert 'version "1.4.2 1.4.2, channel beta" does not match the pattern ^\\d+\\.\\d+\\.\\d+$.' in answer
    assert "It seems to hold other parameters too (channel)." in answer
    assert "channel is required but missing." in answer
    assert "Give each parameter as its own field." in answer
    # A write tool's answer shows the call's shape, never values that would act if copied.
    [example_line] = [line for line in lines if line.startswith("Example: release(")]
    assert "1.4.2" not in example_line and json.dumps(RELEASE) not in answer
    assert '"version": "<version matching ^\\\\d+\\\\.\\\\d+\\\\.\\\\d+$>"' in example_line
    machine = json.loads(lines[-1])
    assert machine["ok"] is False
    error = machine["error"]
    assert set(error) == {"code", "field", "reason", "class", "fix", "example"}
    assert (error["code"], error["field"], error["class"]) == ("pattern_mismatch", "version", "fix_and_retry")
    assert "channel is required but missing" in error["reason"] and error["fix"]
    assert set(error["example"]) == set(RELEASE)
    assert all(str(v).startswith("<") for v in error["example"].values())

    # The release ran once, with exactly the typed arguments, then its verification read.
    assert [(r["tool"], r["argv"]) for r in ran(argv_log)] == [
        ("release", ["1.4.2", "beta"]),
        ("status", ["release"]),
    ]
    [verified] = tool_messages(requests[2])[1:]
    assert verified.startswith("Released 1.4.2 to the beta channel.\n[exit code 0]")
    assert "Verification with status: passed." in verified
    assert "release: last published 1.4.2 beta" in verified
    _, events = session_events(work)
    results = of(events, "tool_result", name="release")
    assert [r["ok"] for r in results] == [False, True]
    assert [p["code"] for p in results[0]["data"]["error"]["problems"]] == [
        "pattern_mismatch",
        "missing_required",
    ]
    assert results[1]["data"]["verified"] is True
    # The verification was shown to the user as a call of its own.
    assert [c["name"] for c in of(events, "tool_call")] == ["release", "release", "status"]

    stats = run_mm("stats", "--json", cwd=work)
    assert stats.returncode == 0, stats.stderr
    [row] = [r for r in json.loads(stats.stdout) if r["tool"] == "release"]
    assert (row["calls"], row["first_attempts"], row["first_valid"]) == (2, 1, 0)
    assert (row["first_invalid"], row["recoveries"], row["top_error"]) == (1, 1, "pattern_mismatch")


# --- idempotency ----------------------------------------------------------------------------


def test_repeated_write_is_replayed_across_a_daemon_restart(mm_home, scripted, argv_log):
    work = mm_home / "work"
    release_team(work)
    server = scripted([call("release", RELEASE), {"text": "one"}, call("release", RELEASE), {"text": "two"}])
    first = run_mm("--yolo", "--agent", "agent.yaml", "-p", "Release 1.4.2 to beta", cwd=work)
    assert first.returncode == 0 and first.stdout == "one\n", first.stderr
    before = json.loads(run_mm("daemon", "status", "--json").stdout)["pid"]
    assert run_mm("daemon", "stop").returncode == 0
    second = run_mm("--yolo", "--agent", "agent.yaml", "--continue", "-p", "Release it again", cwd=work)
    assert second.returncode == 0 and second.stdout == "two\n", second.stderr
    after = json.loads(run_mm("daemon", "status", "--json").stdout)["pid"]
    assert after != before  # a new daemon answered the second turn

    # The script ran once (and its verification once); the second call was replayed.
    [release] = ran(argv_log, "release")
    assert release["argv"] == ["1.4.2", "beta"]
    assert len(ran(argv_log, "status")) == 1
    session_id, events = session_events(work)
    assert release["idempotency_key"] == idempotency_key(session_id, "release", RELEASE)
    first_result, replayed = of(events, "tool_result", name="release")
    assert first_result["ok"] and "replayed" not in first_result["data"]
    assert replayed["ok"] and replayed["data"]["replayed"] is True and replayed["data"]["verified"] is True
    requests = server.requests()
    assert len(requests) == 4
    told = tool_messages(requests[3])[-1]
    assert told.startswith(
        "This exact call already ran in this session; its first result is replayed, nothing ran again.\n"
    )
    assert "Released 1.4.2 to the beta channel." in told


def test_failed_verification_is_never_success_and_the_retry_reuses_the_key(mm_home, scripted, argv_log):
    work = mm_home / "work"
    write_script(work / "deploy", "deploy", 'print(f"deployed {args[0]}")\n')
    write_script(work / "health", "health", 'print(f"{args[0]}: down")\nsys.exit(1)\n')
    (work / "agent.yaml").write_text(
        """
tools:
  - name: deploy
    description: Deploy one service.
    command: ["./deploy", "{{service}}"]
    parameters:
      service: {type: string, required: true}
    effects: write
    verify: {tool: health, args: {service: "{{service}}"}}
  - name: health
    description: Check one service.
    command: ["./health", "{{service}}"]
    parameters:
      service: {type: string, required: true}
    effects: read
"""
    )
    server = scripted(
        [call("deploy", {"service": "web"}), call("deploy", {"service": "web"}), {"text": "Not confirmed."}]
    )
    result = run_mm(
        "--yolo", "--output-format", "json", "--agent", "agent.yaml", "-p", "deploy web", cwd=work
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["status"] == "ok"
    assert [c["name"] for c in out["tool_calls"]] == ["deploy", "health", "deploy", "health"]

    told = tool_messages(server.requests()[1])[-1]
    assert told.startswith("deployed web\n[exit code 0]")
    assert "Verification with health: FAILED: the change is not confirmed." in told
    assert "web: down" in told
    assert "passed" not in told and "success" not in told.lower()
    _, events = session_events(work)
    results = of(events, "tool_result", name="deploy")
    assert [r["ok"] for r in results] == [False, False]
    assert all(r["data"]["verified"] is False for r in results)
    # A write whose verification failed is not kept for replay: the retry ran again,
    # with the same harness-minted key (bound to the step, not the attempt).
    deploys = ran(argv_log, "deploy")
    assert [d["argv"] for d in deploys] == [["web"], ["web"]]
    keys = {d["idempotency_key"] for d in deploys}
    assert len(keys) == 1 and next(iter(keys)).startswith("mm-")
    assert [h["idempotency_key"] for h in ran(argv_log, "health")] == [None, None]  # reads get no key


# --- consent for destructive tools ----------------------------------------------------------

WIPE_AGENT = """
tools:
  - name: wipe_cache
    description: Delete the build cache of one project.
    command: ["./wipe", "{{project}}"]
    parameters:
      project: {type: string, required: true}
    effects: destructive
"""


def test_destructive_tool_asks_under_yolo_then_the_ledger_lets_it_run(mm_home, scripted, argv_log):
    work = mm_home / "work"
    write_script(work / "wipe", "wipe", 'print(f"wiped {args[0]}")\n')
    agent = work / "agent.yaml"
    agent.write_text(WIPE_AGENT)
    wipe = call("wipe_cache", {"project": "web"})
    server = scripted([wipe, wipe, {"text": "wiped"}, wipe, {"text": "wiped again"}])

    headless = run_mm("--yolo", "--agent", "agent.yaml", "-p", "wipe the web cache", cwd=work)
    assert headless.returncode == 3, headless.stderr
    assert "no one to ask" in headless.stderr
    assert ran(argv_log) == []
    assert len(server.requests()) == 1

    asks = []

    def allow_always(ask: dict[str, Any], session_id: str) -> dict[str, Any]:
        asks.append(ask)
        return {"decision": "allow_always"}

    client = connect()
    try:
        events = interactive_turn(client, work, agent, allow_always)
    finally:
        client.close()
    [ask] = asks
    assert (ask["tool"], ask["tier"]) == ("wipe_cache", "destructive")
    assert ask["options"] == ["allow_once", "allow_always", "deny"]
    assert ask["echo"] == "./wipe web"
    assert of(events, "turn_ended")[-1]["status"] == "ok"
    assert [r["argv"] for r in ran(argv_log)] == [["web"]]
    rules = json.loads(run_mm("consent", "list", "--json", cwd=work).stdout)
    assert [(r["tool"], r["kind"]) for r in rules] == [("wipe_cache", "tool")]

    again = run_mm("--yolo", "--agent", "agent.yaml", "-p", "wipe it again", cwd=work)
    assert again.returncode == 0, again.stderr
    assert again.stdout == "wiped again\n"
    assert [r["argv"] for r in ran(argv_log)] == [["web"], ["web"]]
    _, events = session_events(work)
    assert of(events, "consent_needed") == []
    [answered] = of(events, "consent_answered")
    assert answered["decision"] == "allow" and answered["by"] == f"ledger rule {rules[0]['id']}"


def test_dry_run_is_offered_shown_then_asked_again(mm_home, scripted, argv_log):
    work = mm_home / "work"
    write_script(
        work / "purge",
        "purge",
        'if args[0] == "--dry-run":\n    print(f"would delete 3 releases of {args[1]}")\n'
        'else:\n    print(f"deleted 3 releases of {args[0]}")\n',
    )
    agent = work / "agent.yaml"
    agent.write_text(
        """
tools:
  - name: purge
    description: Purge old releases of one channel.
    command: ["./purge", "{{channel}}"]
    dry_run: ["./purge", "--dry-run", "{{channel}}"]
    parameters:
      channel: {type: string, required: true, enum: [stable, beta]}
    effects: destructive
"""
    )
    server = scripted([call("purge", {"channel": "beta"}), {"text": "purged"}])
    assert run_mm("daemon", "start").returncode == 0  # started by the CLI: it has MM_ARGV_LOG
    asks = []
    seen_at_ask: list[list[list[str]]] = []

    def dry_run_first(ask: dict[str, Any], session_id: str) -> dict[str, Any]:
        asks.append(ask)
        seen_at_ask.append([r["argv"] for r in ran(argv_log)])
        return {"decision": "dry_run" if len(asks) == 1 else "allow_once"}

    client = connect()
    try:
        events = interactive_turn(client, work, agent, dry_run_first)
    finally:
        client.close()
    assert asks[0]["options"] == ["allow_once", "allow_always", "dry_run", "deny"]
    assert len(asks) == 2
    # Nothing had run at the first ask; only the dry run had at the second.
    assert seen_at_ask == [[], [["--dry-run", "beta"]]]
    kinds = [e["kind"] for e in events]
    first, second = (i for i, k in enumerate(kinds) if k == "consent_needed")
    assert first < kinds.index("dry_run") < second < kinds.index("tool_result")
    [dry] = of(events, "dry_run")
    assert dry["ok"] and "would delete 3 releases of beta" in dry["content"]
    purges = ran(argv_log)
    assert [r["argv"] for r in purges] == [["--dry-run", "beta"], ["beta"]]
    assert purges[0]["idempotency_key"] is None and purges[1]["idempotency_key"].startswith("mm-")
    # The model reads the real result only.
    told = tool_messages(server.requests()[1])[-1]
    assert told.startswith("deleted 3 releases of beta") and "would delete" not in told
    assert of(events, "turn_ended")[-1]["status"] == "ok"


def test_dry_run_answer_for_a_tool_without_one_is_refused(mm_home, scripted, argv_log):
    work = mm_home / "work"
    write_script(work / "wipe", "wipe", 'print(f"wiped {args[0]}")\n')
    agent = work / "agent.yaml"
    agent.write_text(WIPE_AGENT)
    scripted([call("wipe_cache", {"project": "web"}), {"text": "wiped"}])
    assert run_mm("daemon", "start").returncode == 0
    refused = []
    client = connect()

    def dry_run_then_allow(ask: dict[str, Any], session_id: str) -> dict[str, Any]:
        assert "dry_run" not in ask["options"]
        try:
            client.call(
                "consent.answer",
                {"session_id": session_id, "request_id": ask["request_id"], "decision": "dry_run"},
            )
        except RPCError as exc:
            refused.append(exc)
        return {"decision": "allow_once"}

    try:
        events = interactive_turn(client, work, agent, dry_run_then_allow)
    finally:
        client.close()
    [exc] = refused
    assert "dry_run" in exc.message
    ended = of(events, "turn_ended")[-1]
    assert ended["status"] == "ok" and ended["error"] is None
    assert [r["argv"] for r in ran(argv_log)] == [["web"]]


# --- what the model sees, checks, paths, partial success ---------------------------------------


def test_tools_list_shows_the_exact_schemas_the_model_reads(mm_home, scripted, argv_log):
    work = mm_home / "work"
    release_team(work)
    server = scripted([{"text": "hello"}])
    assert run_mm("--agent", "agent.yaml", "-p", "hi", cwd=work).returncode == 0
    listed = run_mm("tools", "list", "--json", "--agent", "agent.yaml", cwd=work)
    assert listed.returncode == 0, listed.stderr
    tools = json.loads(listed.stdout)
    assert [(t["name"], t["tier"], t["source"]) for t in tools] == [
        ("read_file", "read", "builtin"),
        ("release", "write", "declared"),
        ("pkgtest", "read", "declared"),
        ("status", "read", "declared"),
    ]
    sent = {t["function"]["name"]: t["function"] for t in server.requests()[0]["body"]["tools"]}
    for tool in tools:
        assert sent[tool["name"]]["description"] == tool["description"]
        assert sent[tool["name"]]["parameters"] == tool["parameters"]
    release = next(t for t in tools if t["name"] == "release")
    assert release["parameters"] == {
        "type": "object",
        "properties": {
            "version": {
                "type": "string",
                "description": "Version like 1.4.2. Required. Pattern: ^\\d+\\.\\d+\\.\\d+$",
            },
            "channel": {"type": "string", "description": "Required. One of: stable, beta."},
        },
    }
    text = run_mm("tools", "list", "--agent", "agent.yaml", cwd=work)
    assert "declared:" in text.stdout and "release" in text.stdout


def test_tools_check_names_file_and_line(mm_home, argv_log):
    work = mm_home / "work"
    agent = release_team(work)
    good = run_mm("tools", "check", "agent.yaml", cwd=work)
    assert good.returncode == 0, good.stderr
    assert good.stdout == "agent.yaml: ok (declared tools: release, pkgtest, status)\n"
    text = agent.read_text()
    bad = work / "bad.yaml"
    bad.write_text(text.replace('"{{channel}}"]', '"{{chanel}}"]'))
    line = next(n for n, row in enumerate(bad.read_text().splitlines(), 1) if "{{chanel}}" in row)
    checked = run_mm("tools", "check", "bad.yaml", cwd=work)
    assert checked.returncode == 1
    assert f"{bad}:{line}: tools[0].command[2]: placeholder {{{{chanel}}}} is not a declared parameter" in (
        checked.stderr
    )
    assert 'did you mean "channel"?' in checked.stderr


def test_relative_program_is_found_from_the_agent_folder_when_mm_runs_elsewhere(mm_home, scripted, argv_log):
    team = mm_home / "work" / "team"
    release_team(team)
    elsewhere = mm_home / "work" / "elsewhere"
    # A decoy at the same relative path under the working directory must not be what runs.
    (elsewhere / "scripts").mkdir(parents=True)
    write_script(elsewhere / "scripts" / "status", "decoy")
    server = scripted([call("status", {"service": "billing"}), {"text": "billing is healthy"}])
    result = run_mm("--agent", "../team/agent.yaml", "-p", "What is the status of billing?", cwd=elsewhere)
    assert result.returncode == 0, result.stderr
    assert [(r["tool"], r["argv"]) for r in ran(argv_log)] == [("status", ["billing"])]
    told = tool_messages(server.requests()[1])[-1]
    assert told == "billing: running, healthy, up 3 days\n[exit code 0]"
    [announced] = of(session_events(elsewhere)[1], "tool_call")
    assert announced["echo"] == "./scripts/status billing"


def test_partial_success_line_reaches_the_model_intact(mm_home, scripted, argv_log):
    work = mm_home / "work"
    partial = '{"done": [1, 2], "failed": [3], "resume": "x"}'
    write_script(
        work / "sync",
        "sync",
        # stdout only: lines on stderr may arrive before or after it (two pipes).
        f'print("synced 1")\nprint("synced 2")\nprint({partial!r})\nsys.exit(1)\n',
    )
    (work / "agent.yaml").write_text(
        """
tools:
  - name: sync_records
    description: Sync the records of one batch.
    command: ["./sync", "{{batch}}"]
    parameters:
      batch: {type: string, required: true}
    effects: write
"""
    )
    server = scripted([call("sync_records", {"batch": "b1"}), {"text": "2 of 3 synced"}])
    result = run_mm("--yolo", "--agent", "agent.yaml", "-p", "sync batch b1", cwd=work)
    assert result.returncode == 0, result.stderr
    told = tool_messages(server.requests()[1])[-1]
    assert partial in told.splitlines()
    assert told.endswith(f"{partial}\n[exit code 1]")
    [res] = of(session_events(work)[1], "tool_result", name="sync_records")
    assert res["ok"] is False
    assert res["data"]["partial"] == {"done": [1, 2], "failed": [3], "resume": "x"}
    assert [r["argv"] for r in ran(argv_log)] == [["b1"]]


def test_lone_surrogate_in_the_arguments_is_answered_not_an_internal_error(mm_home, scripted, argv_log):
    work = mm_home / "work"
    release_team(work)
    raw = '{"service": "bill\\udd00ing"}'  # valid JSON syntax; decodes to no text
    server = scripted([call("status", raw), call("status", {"service": "billing"}), {"text": "healthy"}])
    result = run_mm("--agent", "agent.yaml", "-p", "status of billing", cwd=work)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "healthy\n"
    told = tool_messages(server.requests()[1])[-1]
    assert told.startswith("status was not run. The arguments hold \\udd00, a lone surrogate escape")
    assert f"You sent: status({raw})" in told
    assert json.loads(told.splitlines()[-1])["error"]["code"] == "malformed_json"
    assert [r["argv"] for r in ran(argv_log)] == [["billing"]]
