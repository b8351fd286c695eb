"""Claude Code's MCP configuration, SSE, and the server's whole schema checked before a call is sent.

A real mmd, the real ``mm`` CLI, a scripted model, and real MCP servers written with the official
SDK (tests/e2e/mcp_servers/): the seed server, and schema_server.py, whose tools declare raw JSON
Schemas (nested, draft-07, hostile). Both record every request they receive in $MM_MCP_LOG, so each
test judges from the server's side what reached it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import run_mm, trust_here
from .mcp_servers import HERE, SEED, calls, npm_server, records

SCHEMAS = HERE / "schema_server.py"


@pytest.fixture
def mcp_log(mm_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = mm_home / "mcp.jsonl"
    monkeypatch.setenv("MM_MCP_LOG", str(path))
    monkeypatch.setenv("MM_TEST_TOKEN", "s3cret")
    return path


@pytest.fixture
def sse_server(mcp_log: Path) -> Any:
    """schema_server.py over SSE, in its own process group, stopped and reaped at the end."""
    proc = subprocess.Popen(
        [sys.executable, str(SCHEMAS), "sse", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "MM_MCP_LOG": str(mcp_log)},
        start_new_session=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line.startswith("listening "), line
    yield line.split(" ", 1)[1]
    os.killpg(proc.pid, 9)
    proc.wait()
    proc.stdout.close()


def call(name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def prompt(work: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_mm("--yolo", "--output-format", "json", *extra, "-p", "go", cwd=work)


def tool_answers(server: Any) -> list[str]:
    """The last tool message of each request after the first: the answer to each step's call."""
    out = []
    for request in server.requests()[1:]:
        out.append([m["content"] for m in request["body"]["messages"] if m["role"] == "tool"][-1])
    return out


def tool_names(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request["body"].get("tools", [])]


def received(log: Path) -> list[tuple[str, Any]]:
    """The tools/call requests the schema server received: (tool, arguments)."""
    return [(r["name"], r["args"]) for r in records(log) if r.get("method") == "tools/call"]


def mcp_json(work: Path, servers: dict[str, Any]) -> None:
    (work / ".mcp.json").write_text(json.dumps({"mcpServers": servers}, indent=2))
    trust_here(work)  # as a person does once, having read it (docs/security.md#project-trust)


def seed_entry() -> dict[str, Any]:
    return {
        "type": "stdio",
        "command": sys.executable,
        "args": [str(SEED), "stdio"],
        "env": {"MM_MCP_LOG": "${MM_MCP_LOG}"},
    }


def listed(work: Path) -> list[dict[str, Any]]:
    result = run_mm("mcp", "list", "--json", cwd=work)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# --- .mcp.json ------------------------------------------------------------------------------------


def test_a_claude_mcp_json_works_with_no_other_config(mm_home, scripted, mcp_log):
    work = mm_home / "work"
    mcp_json(work, {"seed": seed_entry()})
    server = scripted([call("status", {"service": "billing"}), {"text": "billing is up"}])
    result = prompt(work)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["result"] == "billing is up"
    assert [(c["tool"], c["args"]) for c in calls(mcp_log)] == [("status", {"service": "billing"})]
    assert tool_answers(server) == ["billing: up since 09:00"]

    [row] = listed(work)
    assert (row["name"], row["transport"], row["state"]) == ("seed", "stdio", "ready")
    assert row["origin"] == str(work / ".mcp.json")
    text = run_mm("mcp", "list", cwd=work).stdout
    assert "(.mcp.json)" in text.splitlines()[0]


def test_a_malformed_mcp_json_is_an_error_naming_file_line_and_field(mm_home, scripted, mcp_log):
    work = mm_home / "work"
    (work / ".mcp.json").write_text('{\n  "mcpServers": {\n    "x": {"command": 3}\n  }\n}\n')
    scripted([{"text": "never"}])
    result = prompt(work)
    assert result.returncode == 1
    assert (
        f'{work / ".mcp.json"}:3: mcpServers.x.command: expected a program like "npx", found an integer (3)'
        in result.stderr
    )
    (work / ".mcp.json").write_text('{"mcpServers": {"x": {"command": "a",}}}')
    assert "not valid JSON" in run_mm("mcp", "list", cwd=work).stderr
    # The daemon survived both.
    assert run_mm("daemon", "status").returncode == 0


def test_mm_yaml_takes_claudes_type_and_hints_at_mcp_json_for_mcpservers(mm_home, scripted, mcp_log):
    work = mm_home / "work"
    entry = {"type": "stdio", "command": sys.executable, "args": [str(SEED), "stdio"]}
    (work / "mm.yaml").write_text(json.dumps({"mcpServers": {"seed": entry}}))
    result = run_mm("mcp", "list", cwd=work)
    assert result.returncode == 1
    assert "mm.yaml:1: mcpServers: unknown key" in result.stderr
    assert "Claude Code's .mcp.json" in result.stderr
    (work / "mm.yaml").write_text(json.dumps({"mcp": {"seed": entry}}))
    trust_here(work)
    [row] = listed(work)
    assert (row["name"], row["transport"], row["origin"]) == ("seed", "stdio", str(work / "mm.yaml"))


# --- mm mcp add / remove ------------------------------------------------------------------------


def test_mm_mcp_add_writes_each_scope_and_mm_mcp_list_shows_it(mm_home, scripted, mcp_log):
    work = mm_home / "work"
    add = run_mm(
        "mcp",
        "add",
        "seed",
        "-e",
        "MM_MCP_LOG=${MM_MCP_LOG}",
        "--",
        sys.executable,
        str(SEED),
        "stdio",
        cwd=work,
    )
    assert add.returncode == 0, add.stderr
    local = mm_home / "config" / "mm" / "mcp-local.json"
    assert "(local scope)" in add.stdout and str(local) in add.stdout
    written = json.loads(local.read_text())
    assert written["projects"][str(work)]["mcpServers"]["seed"] == {
        "type": "stdio",
        "command": sys.executable,
        "args": [str(SEED), "stdio"],
        "env": {"MM_MCP_LOG": "${MM_MCP_LOG}"},
    }
    assert oct(local.stat().st_mode & 0o777) == "0o600"

    web = [
        "--transport",
        "http",
        "web",
        "http://127.0.0.1:9/mcp",
        "-H",
        "Authorization: Bearer ${MM_TEST_TOKEN}",
    ]
    assert run_mm("mcp", "add", "-s", "project", *web, cwd=work).returncode == 0
    assert json.loads((work / ".mcp.json").read_text())["mcpServers"]["web"] == {
        "type": "http",
        "url": "http://127.0.0.1:9/mcp",
        "headers": {"Authorization": "Bearer ${MM_TEST_TOKEN}"},
    }
    rows = {r["name"]: r for r in listed(work)}
    assert {n: (r["transport"], Path(r["origin"]).name) for n, r in rows.items()} == {
        "web": ("http", ".mcp.json"),
        "seed": ("stdio", "mcp-local.json"),
    }
    text = run_mm("mcp", "list", cwd=work).stdout
    assert [line.split()[0] for line in text.splitlines()] == ["web", "seed"]

    # The server added works in a prompt.
    server = scripted([call("status", {"service": "db"}), {"text": "ok"}])
    mcp_json(work, {})  # the unreachable web server out of the way
    assert prompt(work).returncode == 0
    assert tool_answers(server) == ["db: up since 09:00"]

    # Not twice; a literal credential is refused and the file left as it was.
    again = run_mm("mcp", "add", "seed", "--", "true", cwd=work)
    assert again.returncode == 1 and "already exists" in again.stderr
    literal = run_mm(
        "mcp", "add", "-s", "user", "-t", "sse", "-H", "Authorization: Bearer abc", "api", "http://x/sse"
    )
    assert literal.returncode == 1
    assert "not added:" in literal.stderr and "credentials never go in the file" in literal.stderr
    assert not (mm_home / "config" / "mm" / "mcp.json").exists()
    user = run_mm("mcp", "add", "-s", "user", "-t", "sse", "api", "http://127.0.0.1:9/sse")
    assert user.returncode == 0, user.stderr
    assert "api" in {r["name"] for r in listed(work)}

    removed = run_mm("mcp", "remove", "seed", cwd=work)
    assert removed.returncode == 0, removed.stderr
    assert "seed" not in {r["name"] for r in listed(work)}
    assert json.loads(local.read_text()) == {"projects": {}}
    assert run_mm("mcp", "remove", "seed", cwd=work).returncode == 1


def test_mm_mcp_add_usage_errors(mm_home):
    work = mm_home / "work"
    both = run_mm("mcp", "add", "-t", "http", "web", "http://a/mcp", "http://b/mcp", cwd=work)
    assert both.returncode == 2 and "takes one URL" in both.stderr
    header = run_mm("mcp", "add", "-H", "X: y", "s", "--", "true", cwd=work)
    assert header.returncode == 2 and "--header applies to an http or sse server" in header.stderr


# --- SSE, and the whole schema checked locally ------------------------------------------------------------


def test_an_sse_server_and_nested_schema_violations_never_reach_it(mm_home, scripted, mcp_log, sse_server):
    work = mm_home / "work"
    mcp_json(work, {"schemas": {"type": "sse", "url": sse_server}})
    bad_edit = {"path": "notes.txt", "edits": [{"old": "a", "newText": "b"}]}
    good_edit = {"path": "notes.txt", "edits": [{"oldText": "a", "newText": "b"}]}
    bad_schedule = {"when": "tomorrow", "every": 0, "target": {"hostname": "web1"}}
    server = scripted(
        [
            call("edit", bad_edit),
            call("edit", {"path": "notes.txt", "edits": []}),
            call("schedule", bad_schedule),
            call("legacy", {"tags": ["a", "b", "c"]}),
            call("edit", good_edit),
            call("schedule", {"when": "2026-12-02", "every": "1.5", "target": {"group": "web"}}),
            {"text": "done"},
        ]
    )
    result = prompt(work)
    assert result.returncode == 0, result.stderr

    # What the server received: the two valid calls, as the contract always sends them ("1.5"
    # converted to a number, the default of dryRun filled in).
    assert received(mcp_log) == [
        ("edit", {**good_edit, "dryRun": False}),
        ("schedule", {"when": "2026-12-02", "every": 1.5, "target": {"group": "web"}}),
    ]
    answers = tool_answers(server)
    lines = answers[0].splitlines()
    assert lines[0] == (
        "edit was not run. edits[0].oldText is required but missing. "
        "edits[0].old is not a field here. Did you mean oldText?"
    )
    [sent] = [line for line in lines if line.startswith("You sent: edit(")]  # the call quoted back
    assert json.loads(sent.removeprefix("You sent: edit(")[:-1]) == bad_edit
    error = json.loads(lines[-1])["error"]
    assert (error["code"], error["field"], error["class"]) == (
        "missing_required",
        "edits[0].oldText",
        "fix_and_retry",
    )
    assert "edits must have at least 1 item; got 0 items." in answers[1]
    assert 'when "tomorrow" is not a valid date.' in answers[2]
    assert "every must be more than 0; got 0." in answers[2]
    assert "target" in answers[2] and "exactly one of the 2 shapes" in answers[2]
    assert "tags must have at most 2 items; got 3 items." in answers[3]  # draft-07, from its $schema
    assert (
        answers[4]
        == 'edit done: {"dryRun": false, "edits": [{"newText": "b", "oldText": "a"}], "path": "notes.txt"}'
    )

    [row] = listed(work)
    assert (row["transport"], row["state"]) == ("sse", "ready")


def test_hostile_schemas_neither_hang_the_daemon_nor_fetch_anything(mm_home, scripted, mcp_log):
    work = mm_home / "work"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    ref = f"http://127.0.0.1:{listener.getsockname()[1]}/schema.json"
    mcp_json(
        work,
        {
            "schemas": {
                "command": sys.executable,
                "args": [str(SCHEMAS), "stdio"],
                "env": {"MM_MCP_LOG": "${MM_MCP_LOG}", "MM_SCHEMA_REF_URL": ref},
            }
        },
    )
    server = scripted(
        [
            call("greedy", {"word": "a" * 20000 + "b"}),
            call("remote", {"spec": {"x": 1}}),
            call("bomb", {"value": 1}),
            {"text": "survived"},
        ]
    )
    try:
        result = prompt(work)
        assert result.returncode == 0, result.stderr
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody fetched the $ref
    finally:
        listener.close()
    assert "huge" not in tool_names(server.requests()[0])  # a 300 KB schema is left out
    answers = tool_answers(server)
    assert answers[0].startswith("greedy was not run. word ")
    assert "does not match the pattern ^(a+)+$" in answers[0]
    # A schema that cannot be checked in full (a remote $ref, a $ref bomb) leaves the call to the
    # server, which checks it itself; mm's own subset still ran.
    assert received(mcp_log) == [("remote", {"spec": {"x": 1}}), ("bomb", {"value": 1})]
    warnings = run_mm("tools", "list", "--json", cwd=work)
    assert warnings.returncode == 0, warnings.stderr
    assert run_mm("daemon", "status").returncode == 0


def test_the_filesystem_servers_edit_file_is_checked_before_it_is_sent(mm_home, scripted, mcp_log):
    """The report of issue #16: a nested edits[] the server's schema refuses came back as its -32602."""
    filesystem = npm_server("mcp-server-filesystem")
    if filesystem is None:
        pytest.skip("@modelcontextprotocol/server-filesystem is not installed (.ci/run installs it with npm)")
    work = mm_home / "work"
    (work / "notes.txt").write_text("ship it\n")
    mcp_json(work, {"fs": {"command": filesystem, "args": [str(work)]}})
    # Its edit_file clashes with mm's, and says it is destructive (which asks even under --yolo): mm.yaml
    # gives the same server a prefix and a tier (and wins over .mcp.json).
    fs = {"command": filesystem, "args": [str(work)], "prefix": True, "effects": {"edit_file": "write"}}
    (work / "mm.yaml").write_text(json.dumps({"mcp": {"fs": fs}}))
    trust_here(work)
    path = str(work / "notes.txt")
    server = scripted(
        [
            call("fs_edit_file", {"path": path, "edits": [{"old": "ship", "new": "hold"}]}),
            call("fs_edit_file", {"path": path, "edits": [{"oldText": "ship", "newText": "hold"}]}),
            {"text": "ok"},
        ]
    )
    assert prompt(work).returncode == 0
    answers = tool_answers(server)
    assert answers[0].startswith("fs_edit_file was not run. edits[0].oldText is required but missing.")
    assert "-32602" not in answers[0]  # answered by mm, not by the server
    assert (work / "notes.txt").read_text() == "hold it\n"  # the valid call, and only it, edited the file
