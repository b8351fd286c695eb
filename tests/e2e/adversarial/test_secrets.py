"""Secrets stay in the daemon: no child it starts inherits a key, unless the agent file passes it on.

A real mmd is started with four variables in its environment: the provider's key under a name
that looks like nothing (known only because config.yaml's ``api_key_env`` names it), a key
under a well-known name (``OPENAI_API_KEY``), an MCP server's token (named only by a header of
config.yaml) and a plain variable. One turn of the scripted model runs ``env`` four ways: the
``bash`` tool, a declared tool, an MCP stdio server's tool (tests/e2e/mcp_servers/env_server.py,
which also dumps the environment it started with) and a preToolCall hook around each call.
The keys must appear in none of them, nor in what the model was sent next, nor in the store;
with ``pass_env`` the named ones appear everywhere, the others still nowhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..conftest import run_mm, start_mmd, stop_daemon, write_config
from ..mcp_servers import HERE as MCP_SERVERS
from .serves import assert_daemon_serves

ENV_SERVER = MCP_SERVERS / "env_server.py"
# Name → value of the daemon's secrets; the values are what must never leak.
SECRETS = {
    "MMTEST_LLM_ACCESS": "sk-provider-0f1e2d3c",  # a secret only because api_key_env names it
    "OPENAI_API_KEY": "sk-openai-9a8b7c6d",  # a secret by its name
    "MMTEST_RELEASE_AUTH": "tok-release-5e4f3a2b",  # a secret because an MCP header refers to it
}
PLAIN = ("MMTEST_PLAIN", "plain-value-1234")


@pytest.fixture
def secret_daemon(mm_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[subprocess.Popen[bytes]]:
    """A daemon started with the secrets (and one plain variable) in its environment."""
    for name, value in [*SECRETS.items(), PLAIN]:
        monkeypatch.setenv(name, value)
    proc = start_mmd(mm_home)
    yield proc
    stop_daemon(proc)


def configure(home: Path, url: str) -> None:
    write_config(
        home,
        {
            "providers": {
                "script": {
                    "kind": "openai",
                    "base_url": f"{url}/v1",
                    "max_retries": 3,
                    "api_key_env": "MMTEST_LLM_ACCESS",
                }
            },
            "default_model": "script/scripted",
            "mcp": {
                "release": {
                    "url": "http://127.0.0.1:9/mcp",
                    "headers": {"Authorization": "Bearer ${MMTEST_RELEASE_AUTH}"},
                    "enabled": False,  # never connected: it only names the token
                }
            },
        },
    )


def agent(work: Path, dump: Path, pass_env: list[str] | None = None) -> Path:
    spec: dict[str, Any] = {
        "tools": [
            {
                "name": "declared_env",
                "description": "Print the environment.",
                "command": ["env"],
                "effects": "read",
            }
        ],
        "hooks": {"preToolCall": [{"matcher": "*", "command": "env > hook-env-$MM_TOOL_NAME.txt"}]},
        "mcp": {
            "envdump": {
                "command": sys.executable,
                "args": [str(ENV_SERVER)],
                "env": {"MM_ENV_DUMP": str(dump)},
                "prefix": True,
            }
        },
    }
    if pass_env is not None:
        spec["pass_env"] = pass_env
    path = work / "agent.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


ENV_CALLS = [
    call("bash", {"command": "env"}),
    call("declared_env", {}),
    call("envdump_show_env", {}),
    {"text": "done"},
]
TOOLS = ("bash", "declared_env", "envdump_show_env")


def run_env_turn(home: Path, scripted: Any, pass_env: list[str] | None) -> tuple[str, dict[str, str], str]:
    """One turn running env four ways; (what the model was sent, the MCP server's env, hook outputs)."""
    work = home / "work"
    server = scripted(ENV_CALLS)
    configure(home, server.url)
    dump = home / f"env-dump-{len(pass_env or [])}.json"
    agent(work, dump, pass_env)
    result = run_mm("--yolo", "--agent", "agent.yaml", "--output-format", "json", "-p", "env", cwd=work)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["result"] == "done", out
    assert [c["name"] for c in out["tool_calls"]] == list(TOOLS), out
    sent = json.dumps(server.requests())
    hooks = "\n".join((work / f"hook-env-{tool}.txt").read_text() for tool in TOOLS)
    return sent, json.loads(dump.read_text()), hooks


def stored(home: Path) -> bytes:
    """Every byte of the store (the main file and its write-ahead log)."""
    state = home / "state" / "mm"
    return b"".join(p.read_bytes() for p in sorted(state.glob("mm.db*")) if p.is_file())


def test_no_child_inherits_a_secret_of_the_daemon(mm_home: Path, scripted: Any, secret_daemon: Any) -> None:
    sent, mcp_env, hooks = run_env_turn(mm_home, scripted, pass_env=None)
    for name, value in SECRETS.items():
        assert value not in sent, f"{name} reached the model"
        assert name not in mcp_env, f"{name} reached the MCP stdio server"
        assert value not in hooks, f"{name} reached a hook"
        assert value.encode() not in stored(mm_home), f"{name} reached the store"
    # The tools did run env, and saw the daemon's other variables.
    assert sent.count(f"{PLAIN[0]}={PLAIN[1]}") >= 2  # bash and the declared tool
    assert hooks.count(f"{PLAIN[0]}={PLAIN[1]}") == len(TOOLS)
    assert "MM_ENV_DUMP" in mcp_env and "PATH" in mcp_env
    assert_daemon_serves(mm_home)


def test_pass_env_hands_on_exactly_the_named_variables(
    mm_home: Path, scripted: Any, secret_daemon: Any
) -> None:
    passed = ["MMTEST_LLM_ACCESS", "OPENAI_API_KEY"]
    sent, mcp_env, hooks = run_env_turn(mm_home, scripted, pass_env=passed)
    for name in passed:
        line = f"{name}={SECRETS[name]}"
        assert sent.count(line) >= 3, f"{name} did not reach bash, the declared tool and the MCP tool"
        assert hooks.count(line) == len(TOOLS), f"{name} did not reach every hook"
        assert mcp_env.get(name) == SECRETS[name]
    held = SECRETS["MMTEST_RELEASE_AUTH"]
    assert held not in sent and held not in hooks and "MMTEST_RELEASE_AUTH" not in mcp_env
    assert_daemon_serves(mm_home)


def test_pass_env_must_name_variables(mm_home: Path, secret_daemon: Any) -> None:
    work = mm_home / "work"
    (work / "bad.yaml").write_text("model: x/y\npass_env:\n  - OPENAI_API_KEY\n  - $HOME\n")
    checked = run_mm("tools", "check", "bad.yaml", cwd=work)
    assert checked.returncode == 1
    assert (
        f"{work / 'bad.yaml'}:4: pass_env[1]: expected the name of an environment variable" in checked.stderr
    )
    assert_daemon_serves(mm_home)


def test_a_relative_path_entry_finds_no_program_of_the_project(
    mm_home: Path, scripted: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # mm starts its children in the project: with "." or an empty entry in the daemon's PATH, the bash of a
    # bash call (and an undo snapshot's git) was the cloned repository's own.
    work = mm_home / "work"
    marker = mm_home / "ran-the-projects-program"
    for name in ("bash", "git"):
        fake = work / name
        fake.write_text(f"#!/bin/sh\necho {name} >> {marker}\necho fake\n")
        fake.chmod(0o755)
    monkeypatch.setenv("PATH", f".{os.pathsep}{os.environ['PATH']}{os.pathsep}")
    proc = start_mmd(mm_home)
    try:
        server = scripted([call("bash", {"command": "echo real-$((6 * 7))"}), {"text": "done"}])
        result = run_mm("--yolo", "--output-format", "json", "-p", "go", cwd=work)
        assert result.returncode == 0, result.stderr
        assert not marker.exists(), marker.read_text()
        assert "real-42" in json.dumps(server.requests()[-1]["body"]["messages"])
        log = (mm_home / "state" / "mm" / "mmd.log").read_text()
        assert "PATH entries left out" in log and "'.', ''" in log
        assert_daemon_serves(mm_home)
    finally:
        stop_daemon(proc)
