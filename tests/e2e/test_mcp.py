"""MCP servers end to end: a real mmd, the real ``mm`` CLI, a scripted model, real MCP servers.

The servers are written with the official SDK's server side (tests/e2e/mcp_servers/seed_server.py),
one run over stdio by the daemon's supervisor and one over streamable HTTP by the test; they
expose the seed's three tools and record, in $MM_MCP_LOG, every request they receive and every
tool call with its arguments. Each test judges from that record what really reached the server:
which arguments, how many handshakes (``initialize`` or ``server/discover``), how many starts.
A third-party server from npm (installed by .ci/run) shows interop; its test is skipped when npm
could not install it.

The daemon gets $MM_MCP_LOG (and the test's tokens) from the client that starts it, so each test
sets them before its first ``mm`` command.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from mmd.mcp import pool as mcp_pool
from mmd.mcp.tool import exposed_name
from mmd.turn.calls import idempotency_key

from .conftest import run_mm, spawn_mm, write_config
from .mcp_servers import (
    BIG,
    SEED,
    HttpServer,
    calls,
    handshakes,
    npm_server,
    records,
    starts,
    wait_for_record,
)

SEED_TOOLS = ["release", "pkgtest", "status"]
RELEASE = {"version": "1.4.2", "channel": "beta"}
PACKED = '{"version": "1.4.2 1.4.2, channel beta"}'
BUILTINS = ["bash", "read_file", "write_file", "edit_file", "list_files", "grep"]
LONG = "report_the_status_of_every_service_of_the_company_including_those_nobody_uses_anymore"


# --- helpers ------------------------------------------------------------------------------------


@pytest.fixture
def mcp_log(mm_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$MM_MCP_LOG for the servers, and the variables the configs reference; set before the daemon starts."""
    path = mm_home / "mcp.jsonl"
    monkeypatch.setenv("MM_MCP_LOG", str(path))
    monkeypatch.setenv("MM_TEST_TOKEN", "s3cret")
    monkeypatch.setenv("MM_TEST_DAEMON_SECRET", "never-for-servers")
    return path


@pytest.fixture
def http_seed(mcp_log: Path) -> Any:
    servers: list[HttpServer] = []

    def start(port: int = 0) -> HttpServer:
        server = HttpServer(mcp_log, port).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def stdio_seed(**over: Any) -> dict[str, Any]:
    return {
        "command": sys.executable,
        "args": [str(SEED), "stdio"],
        "env": {"MM_MCP_LOG": "${MM_MCP_LOG}"},
        **over,
    }


def http_entry(url: str, **over: Any) -> dict[str, Any]:
    return {"url": url, "headers": {"Authorization": "Bearer ${MM_TEST_TOKEN}"}, **over}


def agent_file(work: Path, servers: dict[str, Any], **extra: Any) -> Path:
    path = work / "agent.yaml"
    path.write_text(yaml.safe_dump({"mcp": servers, **extra}, sort_keys=False))
    return path


def call(name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def prompt(work: Path, text: str = "go", *extra: str) -> subprocess.CompletedProcess[str]:
    return run_mm("--yolo", "--agent", "agent.yaml", "--output-format", "json", *extra, "-p", text, cwd=work)


def tool_names(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request["body"].get("tools", [])]


def tool_spec(request: dict[str, Any], name: str) -> dict[str, Any]:
    [spec] = [t["function"] for t in request["body"]["tools"] if t["function"]["name"] == name]
    return spec


def tool_messages(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["body"]["messages"] if m["role"] == "tool"]


def events(work: Path) -> tuple[str, list[dict[str, Any]]]:
    rows = json.loads(run_mm("sessions", "list", "--json", cwd=work).stdout)
    shown = run_mm("sessions", "show", "--json", rows[0]["id"], cwd=work)
    assert shown.returncode == 0, shown.stderr
    return rows[0]["id"], json.loads(shown.stdout)["events"]


def of(evs: list[dict[str, Any]], kind: str, **match: Any) -> list[dict[str, Any]]:
    return [
        e["data"] for e in evs if e["kind"] == kind and all(e["data"].get(k) == v for k, v in match.items())
    ]


# --- the seed flow, over both transports ------------------------------------------------------------


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_seed_tools_are_validated_locally_then_called_with_exactly_the_typed_arguments(
    mm_home, scripted, mcp_log, http_seed, transport
):
    work = mm_home / "work"
    include = {"tools": {"include": SEED_TOOLS}}
    entry = stdio_seed(**include) if transport == "stdio" else http_entry(http_seed().url, **include)
    agent_file(work, {"seed": entry})
    server = scripted(
        [
            call("release", PACKED),
            call("release", RELEASE),
            call("pkgtest", {"package": "greet"}),
            call("status", {"service": "billing"}),
            {"text": "Released, tested, billing is up."},
        ]
    )
    result = prompt(work, "Release 1.4.2 to beta, test greet, and tell me how billing is")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["result"] == "Released, tested, billing is up."

    # What reached the server: exactly the typed calls, never the packed one.
    assert [(c["tool"], c["args"]) for c in calls(mcp_log)] == [
        ("release", RELEASE),
        ("pkgtest", {"package": "greet"}),
        ("status", {"service": "billing"}),
    ]
    assert [r["name"] for r in records(mcp_log) if r.get("method") == "tools/call"] == SEED_TOOLS

    requests = server.requests()
    # The model read the seed's contract: required and enum in words, the closing line.
    release = tool_spec(requests[0], "release")
    assert release["description"] == (
        "Publish a release of the product to one channel. Changes files or state. "
        "Give each parameter as its own field."
    )
    assert release["parameters"]["properties"]["channel"]["description"] == "Required. One of: stable, beta."
    assert "Pattern: ^\\d+\\.\\d+\\.\\d+$" in release["parameters"]["properties"]["version"]["description"]
    assert "required" not in release["parameters"] and "title" not in release["parameters"]
    status = tool_spec(requests[0], "status")
    assert status["description"].endswith("Give each parameter as its own field.")
    assert "Changes" not in status["description"]  # readOnlyHint: a read tool

    # The packed call was answered locally, quoting it, with the machine-readable class.
    [answer] = tool_messages(requests[1])
    assert answer.startswith("release was not run.")
    assert f"You sent: release({PACKED})" in answer.splitlines()
    assert "It seems to hold other parameters too (channel)." in answer
    assert "channel is required but missing." in answer
    error = json.loads(answer.splitlines()[-1])["error"]
    assert (error["code"], error["class"]) == ("pattern_mismatch", "fix_and_retry")
    assert tool_messages(requests[2])[-1] == "Released 1.4.2 to the beta channel."

    # The write carried the harness-minted idempotency key in _meta; reads carry none.
    session_id, evs = events(work)
    keys = {r["name"]: r["idempotency_key"] for r in records(mcp_log) if r.get("method") == "tools/call"}
    assert keys == {
        "release": idempotency_key(session_id, "release", RELEASE),
        "pkgtest": None,
        "status": None,
    }
    assert [(r["name"], r["ok"]) for r in of(evs, "tool_result")] == [
        ("release", False),
        ("release", True),
        ("pkgtest", True),
        ("status", True),
    ]
    assert [c["echo"] for c in of(evs, "tool_call")][
        1
    ] == 'seed: release {"version": "1.4.2", "channel": "beta"}'
    if transport == "http":  # the token came from the daemon's environment, never from the file
        assert {r.get("authorization") for r in records(mcp_log) if "method" in r} == {"Bearer s3cret"}
    else:  # the stdio server did not get the daemon's environment
        assert [s["leaked"] for s in starts(mcp_log)] == [False]


# --- the allowlist, clashes, tiers ------------------------------------------------------------------


def test_the_allowlist_is_honoured_exactly_in_the_request_and_by_mm_mcp_test(mm_home, scripted, mcp_log):
    work = mm_home / "work"
    agent_file(work, {"seed": stdio_seed(tools={"include": SEED_TOOLS})}, builtins=[])
    server = scripted([{"text": "ok"}])
    assert prompt(work).returncode == 0
    assert tool_names(server.requests()[0]) == SEED_TOOLS

    tested = run_mm("mcp", "test", "seed", "--agent", "agent.yaml", cwd=work)
    assert tested.returncode == 0, tested.stderr
    listed = [line.split()[0] for line in tested.stdout.splitlines() if line.startswith("  ")]
    assert listed == SEED_TOOLS
    assert "3 of 10 tools exposed:" in tested.stdout
    assert "reused the daemon's open connection" in tested.stdout  # the prompt's connection
    assert tested.stderr == ""
    as_json = json.loads(run_mm("mcp", "test", "seed", "--agent", "agent.yaml", "--json", cwd=work).stdout)
    assert [t["name"] for t in as_json["tools"]] == SEED_TOOLS
    assert all(t["tokens"] > 0 for t in as_json["tools"])
    assert as_json["tokens"] == sum(t["tokens"] for t in as_json["tools"])

    # exclude: everything the server offers but these.
    agent_file(
        work,
        {
            "seed": stdio_seed(
                tools={"exclude": ["hang", "flood", "picture", "deploy", "wipe", "read_file", LONG]}
            )
        },
        builtins=[],
    )
    server = scripted([{"text": "ok"}])
    assert prompt(work).returncode == 0
    assert tool_names(server.requests()[0]) == SEED_TOOLS


def test_a_clash_with_a_builtin_is_a_warning_and_the_prefix_offers_the_tool(mm_home, scripted, mcp_log):
    work = mm_home / "work"
    agent_file(work, {"seed": stdio_seed(tools={"include": ["release", "read_file", "missing_tool"]})})
    server = scripted([{"text": "ok"}])
    result = prompt(work)
    assert result.returncode == 0, result.stderr
    names = tool_names(server.requests()[0])
    assert names == [*BUILTINS, "release"]
    assert tool_spec(server.requests()[0], "read_file")["description"].startswith(
        "Read a text file"
    )  # mm's own
    _, evs = events(work)
    warnings = [w["message"] for w in of(evs, "warning")]
    assert (
        "MCP server seed: tool read_file is skipped: its name read_file is taken by the built-in tool read_file "
        "(set prefix: true on the server to offer it as seed_read_file, or leave it out with tools.exclude)"
    ) in warnings
    assert "MCP server seed: tools.include names missing_tool, which the server does not offer" in warnings
    tested = run_mm("mcp", "test", "seed", "--agent", "agent.yaml", cwd=work)
    assert tested.returncode == 0
    assert "tool read_file is skipped" in tested.stderr

    # With a prefix, both are offered under the server's name.
    agent_file(work, {"seed": stdio_seed(tools={"include": ["release", "read_file"]}, prefix=True)})
    server = scripted([call("seed_read_file", {"path": "/etc/motd"}), {"text": "ok"}])
    assert prompt(work).returncode == 0
    assert tool_names(server.requests()[0]) == [*BUILTINS, "seed_release", "seed_read_file"]
    assert calls(mcp_log, "read_file")[-1]["args"] == {"path": "/etc/motd"}  # the server's own name was sent


def test_tiers_come_from_annotations_and_the_agent_file_overrides_them(mm_home, mcp_log):
    work = mm_home / "work"
    agent_file(
        work,
        {"seed": stdio_seed(tools={"include": [*SEED_TOOLS, "wipe"]}, effects={"pkgtest": "write"})},
        builtins=[],
    )
    listed = run_mm("tools", "list", "--agent", "agent.yaml", "--json", cwd=work)
    assert listed.returncode == 0, listed.stderr
    tiers = {t["name"]: (t["tier"], t["source"]) for t in json.loads(listed.stdout)}
    assert tiers == {
        "release": ("write", "mcp:seed"),  # no annotation
        "pkgtest": ("write", "mcp:seed"),  # readOnlyHint, overridden by effects:
        "status": ("read", "mcp:seed"),  # readOnlyHint
        "wipe": ("destructive", "mcp:seed"),  # destructiveHint
    }


def test_a_destructive_mcp_tool_asks_even_under_yolo(mm_home, scripted, mcp_log):
    work = mm_home / "work"
    agent_file(work, {"seed": stdio_seed(tools={"include": ["wipe"]})})
    scripted([call("wipe", {"service": "web"}), {"text": "never"}])
    result = prompt(work, "wipe web")
    assert result.returncode == 3, result.stderr  # nobody to ask: denied, never a silent yes
    assert calls(mcp_log, "wipe") == []


# --- connections: warm, dropped, restarted ----------------------------------------------------------


def test_a_second_prompt_reuses_the_warm_connections(mm_home, scripted, mcp_log, http_seed):
    work = mm_home / "work"
    web = http_seed()
    agent_file(
        work,
        {
            "local": stdio_seed(tools={"include": ["status"]}),
            "remote": http_entry(web.url, tools={"include": ["pkgtest"]}),
        },
    )
    for n in range(2):
        scripted(
            [call("status", {"service": f"s{n}"}), call("pkgtest", {"package": f"p{n}"}), {"text": "ok"}]
        )
        assert prompt(work).returncode == 0
    # Two prompts, four calls; each server saw one connection: one start, one handshake.
    assert [c["tool"] for c in calls(mcp_log)] == ["status", "pkgtest", "status", "pkgtest"]
    local = [s for s in starts(mcp_log) if s["transport"] == "stdio"]
    assert len(local) == 1
    by_pid: dict[int, int] = {}
    for h in handshakes(mcp_log):
        by_pid[h["pid"]] = by_pid.get(h["pid"], 0) + 1
    assert by_pid == {local[0]["pid"]: 1, web.proc.pid: 1}
    listed = json.loads(run_mm("mcp", "list", "--agent", "agent.yaml", "--json", cwd=work).stdout)
    assert [(s["name"], s["state"], s["connects"], s["calls"]) for s in listed] == [
        ("local", "ready", 1, 2),
        ("remote", "ready", 1, 2),
    ]
    assert listed[0]["pid"] == local[0]["pid"]


def test_a_stdio_server_killed_mid_call_is_answered_retry_after_and_restarted(mm_home, scripted, mcp_log):
    work = mm_home / "work"
    agent_file(work, {"seed": stdio_seed(tools={"include": ["hang", "status"]})})
    scripted([call("hang", {"label": "x"}), call("status", {"service": "billing"}), {"text": "done"}])
    mm = spawn_mm("--yolo", "--agent", "agent.yaml", "--output-format", "json", "-p", "go", cwd=work)
    hang = wait_for_record(mcp_log, {"tool": "hang"})
    psutil.Process(hang["pid"]).kill()
    out, err = mm.communicate(timeout=120)
    assert mm.returncode == 0, err
    assert json.loads(out)["result"] == "done"

    _, evs = events(work)
    [lost] = of(evs, "tool_result", name="hang")
    assert lost["ok"] is False
    assert (lost["data"]["error"]["code"], lost["data"]["error"]["class"]) == (
        "connection_lost",
        "retry_after",
    )
    assert "The same call may work later." in lost["content"]
    [status] = of(evs, "tool_result", name="status")
    assert status["ok"] and status["content"] == "billing: up since 09:00"
    # The server was started again, and the next call reached the new one.
    first, second = starts(mcp_log)
    assert first["pid"] == hang["pid"] and second["pid"] != hang["pid"]
    assert [r["pid"] for r in records(mcp_log) if r.get("name") == "status"] == [second["pid"]]
    listed = json.loads(run_mm("mcp", "list", "--agent", "agent.yaml", "--json", cwd=work).stdout)
    assert (listed[0]["state"], listed[0]["connects"], listed[0]["drops"]) == ("ready", 2, 1)


def test_an_http_server_killed_mid_call_is_answered_retry_after_and_reconnected_on_the_next_call(
    mm_home, scripted, mcp_log, http_seed
):
    work = mm_home / "work"
    web = http_seed()
    agent_file(work, {"remote": http_entry(web.url, tools={"include": ["hang", "status"]})})
    scripted([call("hang", {"label": "x"}), {"text": "it dropped"}])
    mm = spawn_mm("--yolo", "--agent", "agent.yaml", "--output-format", "json", "-p", "go", cwd=work)
    wait_for_record(mcp_log, {"tool": "hang"})
    web.kill()
    _out, err = mm.communicate(timeout=120)
    assert mm.returncode == 0, err
    _, evs = events(work)
    [lost] = of(evs, "tool_result", name="hang")
    assert (lost["data"]["error"]["code"], lost["data"]["error"]["class"]) == (
        "connection_lost",
        "retry_after",
    )

    # The server comes back on the same port; the next call reconnects and runs.
    again = http_seed(web.port)
    scripted([call("status", {"service": "billing"}), {"text": "billing is up"}])
    result = prompt(work, "and billing?", "--continue")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["result"] == "billing is up"
    assert [r["pid"] for r in records(mcp_log) if r.get("name") == "status"] == [again.proc.pid]
    assert [h["pid"] for h in handshakes(mcp_log)] == [web.proc.pid, again.proc.pid]


def test_a_call_past_its_timeout_is_answered_retry_after(mm_home, scripted, mcp_log):
    work = mm_home / "work"
    agent_file(work, {"seed": stdio_seed(tools={"include": ["hang", "status"]}, timeout=1)})
    scripted([call("hang", {"label": "slow"}), call("status", {"service": "web"}), {"text": "ok"}])
    assert prompt(work).returncode == 0
    _, evs = events(work)
    [slow] = of(evs, "tool_result", name="hang")
    assert (slow["data"]["error"]["code"], slow["data"]["error"]["class"]) == ("timeout", "retry_after")
    assert of(evs, "tool_result", name="status")[0]["ok"]  # the connection is still good
    assert len(starts(mcp_log)) == 1


# --- results and errors ----------------------------------------------------------------------------


def test_results_are_truncated_and_spilled_like_bash_and_blobs_summarised(mm_home, scripted, mcp_log):
    work = mm_home / "work"
    agent_file(work, {"seed": stdio_seed(tools={"include": ["flood", "picture", "deploy"]})})
    server = scripted(
        [
            call("flood", {"lines": 5000}),
            call("picture", {"caption": "the logo"}),
            call("deploy", {"service": "web"}),
            {"text": "ok"},
        ]
    )
    config = yaml.safe_load((mm_home / "config" / "mm" / "config.yaml").read_text())
    write_config(mm_home, {**config, "daemon": {"output_max_lines": 40}})
    assert prompt(work).returncode == 0
    requests = server.requests()
    flood = tool_messages(requests[1])[-1]
    lines = flood.splitlines()
    assert lines[:20] == [f"line {i}" for i in range(1, 21)]
    assert lines[-1] == "line 5000"
    [marker] = [line for line in lines if line.startswith("[... ")]
    spill = marker.split(" is in ")[1].split(" — ")[0]
    assert Path(spill).read_text() == "".join(f"line {i}\n" for i in range(1, 5001))
    assert tool_messages(requests[2])[-1] == (
        "the logo\n[image: image/png, 70 bytes; not shown]\n[resource memo://caption (text/plain)]\ncaption: the logo"
    )
    failed = tool_messages(requests[3])[-1]
    assert failed.startswith("deploy failed. Error executing tool deploy: the deploy system refused web")
    error = json.loads(failed.splitlines()[-1])["error"]
    assert (error["code"], error["class"]) == ("tool_error", "fix_and_retry")
    _, evs = events(work)
    assert of(evs, "tool_result", name="flood")[0]["data"]["output_file"] == spill


def test_unreachable_servers_and_unset_variables_are_warnings_and_the_turn_goes_on(
    mm_home, scripted, mcp_log
):
    work = mm_home / "work"
    agent_file(
        work,
        {
            "gone": {"command": str(work / "no-such-server")},
            "nokey": http_entry(
                "http://127.0.0.1:9/mcp", headers={"Authorization": "Bearer ${MM_UNSET_TOKEN}"}
            ),
            "seed": stdio_seed(tools={"include": ["status"]}),
        },
    )
    server = scripted([{"text": "still here"}])
    result = prompt(work)
    assert result.returncode == 0, result.stderr
    assert tool_names(server.requests()[0]) == [*BUILTINS, "status"]
    _, evs = events(work)
    warnings = [w["message"] for w in of(evs, "warning")]
    assert (
        f"MCP server gone is not available: command not found: {work / 'no-such-server'}; its tools are left out"
        in warnings
    )
    [nokey] = [w for w in warnings if w.startswith("MCP server nokey")]
    assert "the environment variable MM_UNSET_TOKEN (in mcp.nokey.headers.Authorization) is not set" in nokey

    tested = run_mm("mcp", "test", "gone", "--agent", "agent.yaml", cwd=work)
    assert tested.returncode == 1
    assert "failed: command not found" in tested.stderr
    listed = json.loads(run_mm("mcp", "list", "--agent", "agent.yaml", "--json", cwd=work).stdout)
    assert [(s["name"], s["state"]) for s in listed] == [
        ("gone", "failed"),
        ("nokey", "config_error"),
        ("seed", "ready"),
    ]


def test_user_config_servers_apply_and_an_agent_file_can_turn_one_off(mm_home, scripted, mcp_log):
    work = mm_home / "work"
    server = scripted([{"text": "ok"}])
    config = yaml.safe_load((mm_home / "config" / "mm" / "config.yaml").read_text())
    write_config(mm_home, {**config, "mcp": {"seed": stdio_seed(tools={"include": ["status"]})}})
    (work / "agent.yaml").write_text("builtins: []\n")
    assert prompt(work).returncode == 0
    assert tool_names(server.requests()[0]) == ["status"]
    agent_file(work, {"seed": {**stdio_seed(), "enabled": False}}, builtins=[])
    server = scripted([{"text": "ok"}])
    assert prompt(work).returncode == 0
    assert tool_names(server.requests()[0]) == []


def test_stopping_the_daemon_stops_its_stdio_servers(mm_home, scripted, mcp_log):
    work = mm_home / "work"
    agent_file(work, {"seed": stdio_seed(tools={"include": ["status"]})})
    scripted([call("status", {"service": "x"}), {"text": "ok"}])
    assert prompt(work).returncode == 0
    [start] = starts(mcp_log)
    server = psutil.Process(start["pid"])
    assert run_mm("daemon", "stop").returncode == 0
    _, alive = psutil.wait_procs([server], timeout=30)
    assert alive == []


# --- a third-party server ----------------------------------------------------------------------------


def test_a_third_party_server_from_npm(mm_home, scripted, mcp_log):
    everything = npm_server("mcp-server-everything")
    if everything is None:
        pytest.skip("@modelcontextprotocol/server-everything is not installed (.ci/run installs it with npm)")
    work = mm_home / "work"
    agent_file(work, {"everything": {"command": everything, "tools": {"include": ["echo", "get-sum"]}}})
    tested = run_mm("mcp", "test", "everything", "--agent", "agent.yaml", cwd=work)
    assert tested.returncode == 0, tested.stderr
    assert [line.split()[0] for line in tested.stdout.splitlines() if line.startswith("  ")] == [
        "echo",
        "get-sum",
    ]
    server = scripted(
        [
            call("get-sum", {"a": "2", "b": 3}),
            call("echo", {"message": "hi"}),
            call("echo", {"text": "hi"}),
            {"text": "ok"},
        ]
    )
    assert prompt(work).returncode == 0
    messages = [tool_messages(r)[-1] for r in server.requests()[1:]]
    assert "5" in messages[0]  # "2" was converted to the number the schema asks for
    assert messages[1] == "Echo: hi"
    assert messages[2].startswith("echo was not run. text is not a parameter.")  # refused locally


def test_a_third_party_filesystem_server_clashes_until_given_a_prefix(mm_home, scripted, mcp_log):
    filesystem = npm_server("mcp-server-filesystem")
    if filesystem is None:
        pytest.skip("@modelcontextprotocol/server-filesystem is not installed (.ci/run installs it with npm)")
    work = mm_home / "work"
    (work / "notes.txt").write_text("ship it\n")
    agent_file(work, {"fs": {"command": filesystem, "args": [str(work)]}})
    tested = run_mm("mcp", "test", "fs", "--agent", "agent.yaml", cwd=work)
    assert tested.returncode == 0, tested.stderr
    skipped = sorted(
        line.split(" tool ")[1].split()[0] for line in tested.stderr.splitlines() if "is skipped" in line
    )
    assert skipped == ["edit_file", "read_file", "write_file"]

    agent_file(work, {"fs": {"command": filesystem, "args": [str(work)], "prefix": True}})
    server = scripted([call("fs_read_text_file", {"path": str(work / "notes.txt")}), {"text": "ok"}])
    assert prompt(work).returncode == 0
    names = tool_names(server.requests()[0])
    assert {"fs_read_file", "fs_write_file", "fs_read_text_file", "fs_list_directory"} <= set(names)
    assert tool_messages(server.requests()[1])[-1] == "ship it\n"


def test_resources_and_prompts_are_offered_only_when_asked_for(mm_home, scripted, mcp_log):
    work = mm_home / "work"
    agent_file(
        work,
        {"seed": stdio_seed(tools={"include": ["status"], "resources": True, "prompts": True})},
        builtins=[],
    )
    server = scripted(
        [
            call("seed_list_resources", {}),
            call("seed_read_resource", {"uri": "memo://release-notes"}),
            call("seed_list_prompts", {}),
            call("seed_get_prompt", {"name": "checklist", "arguments": {"version": "1.4.2"}}),
            {"text": "ok"},
        ]
    )
    assert prompt(work).returncode == 0
    requests = server.requests()
    assert tool_names(requests[0]) == [
        "status",
        "seed_list_resources",
        "seed_read_resource",
        "seed_list_prompts",
        "seed_get_prompt",
    ]
    answers = [tool_messages(r)[-1] for r in requests[1:]]
    assert (
        answers[0] == "memo://release-notes — release_notes (text/markdown): The notes of the next release."
    )
    assert answers[1] == "[resource memo://release-notes (text/markdown)]\n# 1.4.2\n- faster greet\n"
    assert answers[2] == "checklist(version): Ask for a release checklist."
    assert answers[3] == "Ask for a release checklist.\nuser: Write the release checklist for 1.4.2."
    listed = json.loads(run_mm("tools", "list", "--agent", "agent.yaml", "--json", cwd=work).stdout)
    assert {t["name"]: t["tier"] for t in listed}["seed_read_resource"] == "read"


def test_a_name_past_64_characters_is_shortened_and_the_original_is_called(mm_home, scripted, mcp_log):
    work = mm_home / "work"
    agent_file(work, {"seed": stdio_seed(tools={"include": [LONG]})}, builtins=[])
    short = exposed_name("seed", LONG, False)
    assert len(LONG) > 64 and len(short) == 64
    server = scripted([call(short, {"region": "eu"}), {"text": "ok"}])
    assert prompt(work).returncode == 0
    assert tool_names(server.requests()[0]) == [short]
    assert tool_messages(server.requests()[1])[-1] == "eu: all up"
    assert [r["name"] for r in records(mcp_log) if r.get("method") == "tools/call"] == [LONG]
    _, evs = events(work)
    assert f"MCP server seed: tool {LONG} is offered as {short} (names are limited to 64 characters)" in [
        w["message"] for w in of(evs, "warning")
    ]


@pytest.mark.parametrize("guardian", ["lives", "killed too"])
def test_a_helper_of_a_stdio_server_left_by_a_killed_daemon_is_stopped(mm_home, scripted, mcp_log, guardian):
    # The server exits when its stdin closes (the daemon died); a helper process it started does not. The
    # daemon's guardian (mmd/procs/guardian.py) stops it as the daemon dies; where the guardian was killed
    # too (a SIGKILL of the whole service), the next daemon does, as it starts.
    work = mm_home / "work"
    helper_pid = work / "helper.pid"
    script = f"sleep 3600 & echo $! > {helper_pid}; exec {sys.executable} {SEED} stdio"
    agent_file(
        work,
        {
            "seed": {
                "command": "bash",
                "args": ["-c", script],
                "env": {"MM_MCP_LOG": "${MM_MCP_LOG}"},
                "tools": {"include": ["status"]},
            }
        },
    )
    scripted([{"text": "ok"}])
    assert prompt(work).returncode == 0
    helper = psutil.Process(int(helper_pid.read_text()))
    daemon = psutil.Process(json.loads(run_mm("daemon", "status", "--json").stdout)["pid"])
    [guard] = [c for c in daemon.children() if "mmd-guardian" in c.cmdline()]
    if guardian == "killed too":
        guard.kill()
        psutil.wait_procs([guard], timeout=30)
    daemon.kill()
    psutil.wait_procs([daemon], timeout=30)
    if guardian == "killed too":
        assert helper.is_running()  # orphaned: nobody stops it but the next daemon
        assert run_mm("daemon", "start").returncode == 0
    _, alive = psutil.wait_procs([helper], timeout=30)
    assert alive == []


def test_a_server_that_lists_without_end_is_read_within_the_bounds(mm_home, scripted, mcp_log):
    # 20,000 tools of 20 KB each held 1.4 GB of the daemon; 100 pages of that would have ended it. The listing
    # is read up to MAX_TOOLS tools or MAX_LISTING_CHARS characters, each description cut at 4,096 characters,
    # and no page past that is asked for.
    work = mm_home / "work"
    asked = mm_home / "pages.log"
    entry = {"command": sys.executable, "args": [str(BIG), "300", "10000", "50", str(asked)]}
    agent_file(work, {"big": entry})
    tested = run_mm("mcp", "test", "big", "--agent", "agent.yaml", "--json", cwd=work)
    assert tested.returncode == 0, tested.stderr
    result = json.loads(tested.stdout)
    assert 0 < result["offered"] <= mcp_pool.MAX_TOOLS
    cut = "d" * mcp_pool.MAX_DESCRIPTION_CHARS + " [cut]"
    assert all(cut in t["description"] and "d" * 4097 not in t["description"] for t in result["tools"])
    assert any("it lists more than 500 tools" in w for w in result["warnings"])
    # The 500th tool came in the second page: no third was asked for (at connect, nor at the test's relisting).
    assert set(asked.read_text().split()) == {"0", "1"}
    scripted([{"text": "ok"}])
    answered = prompt(work)
    assert "it lists more than 500 tools" in answered.stderr


def test_a_server_that_dies_at_start_is_quoted_from_its_stderr(mm_home, mcp_log):
    # Its stderr is a pipe the daemon drains into the log: the last lines must be there before they are quoted.
    work = mm_home / "work"
    dying = work / "dying.py"
    dying.write_text(
        "import sys\nsys.stderr.write('x\\n' * 5000 + 'fatal: missing config FOO\\n')\nsys.exit(3)\n"
    )
    agent_file(work, {"dying": {"command": sys.executable, "args": [str(dying)]}})
    for _ in range(3):
        tested = run_mm("mcp", "test", "dying", "--agent", "agent.yaml", cwd=work)
        assert tested.returncode == 1
        assert "the server exited (exit code 3) before it answered" in tested.stderr
        assert "its stderr ends with:" in tested.stderr and "fatal: missing config FOO" in tested.stderr
