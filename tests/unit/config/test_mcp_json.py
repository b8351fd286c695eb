"""Claude Code's MCP files (mmd/config/mcp_json.py) and Claude's keys in mm's own mcp:."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from mmd.config import AgentFile, ConfigError, UserConfig, load_agent_file, load_user_config
from mmd.config.mcp import ExpansionError, resolve, servers_for
from mmd.config.mcp_json import add_mcp_files, read_servers, scope_file
from mmd.config.trust import Trust, everything

STDIO = {"type": "stdio", "command": "npx", "args": ["-y", "server"], "env": {"TOKEN": "${GH_TOKEN}"}}


def write(path: Path, value: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value if isinstance(value, str) else json.dumps(value, indent=2))
    return path


def error(path: Path, text: str) -> str:
    write(path, text)
    with pytest.raises(ConfigError) as info:
        read_servers(path, run_dir=path.parent)
    return str(info.value)


def test_claudes_shape_becomes_mm_specs_with_their_origin(tmp_path):
    path = write(
        tmp_path / ".mcp.json",
        {
            "mcpServers": {
                "files": STDIO,
                "api": {
                    "type": "sse",
                    "url": "${API_BASE_URL:-https://api.example.com}/sse",
                    "headers": {"Authorization": "Bearer ${API_KEY}"},
                },
                "web": {"type": "http", "url": "https://mcp.example.com/mcp"},
                "bare": {"command": "./server.py"},  # no type: stdio, as in Claude Code
            }
        },
    )
    specs = read_servers(path, run_dir=tmp_path)
    assert {n: s.transport for n, s in specs.items()} == {
        "files": "stdio",
        "api": "sse",
        "web": "http",
        "bare": "stdio",
    }
    assert specs["files"].origin == str(path) and specs["files"].run_dir == str(tmp_path)
    agent = AgentFile(mcp=specs)
    entries = {e.name: e for e in servers_for(agent, UserConfig(path=str(tmp_path / "config.yaml")))}
    assert entries["bare"].origin == str(path) and entries["bare"].default_cwd == tmp_path
    env = {"API_KEY": "k", "GH_TOKEN": "t", "PATH": "/bin"}
    api = resolve(entries["api"], env)
    assert (api.transport, api.url, api.headers) == (
        "sse",
        "https://api.example.com/sse",
        {"Authorization": "Bearer k"},
    )
    assert resolve(entries["bare"], env).argv == [str(tmp_path / "server.py")]
    assert resolve(entries["files"], env).env["TOKEN"] == "t"
    with pytest.raises(ExpansionError, match="not an http:// or https:// URL"):
        resolve(entries["api"], {**env, "API_BASE_URL": "file:///etc"})


def test_an_absent_file_has_no_servers(tmp_path):
    assert read_servers(tmp_path / ".mcp.json", run_dir=tmp_path) == {}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # json's own words follow (3.13 names a trailing comma: "Illegal trailing comma before end of object").
        ('{"mcpServers": {"x": {"command": "a",}}}', ".mcp.json:1: not valid JSON: "),
        ("[1, 2]", ".mcp.json:1: expected a JSON object"),
        ('{"servers": {}}', ".mcp.json:1: servers: unknown key; expected one of mcpServers"),
        (
            '{\n "mcpServers": {\n  "x": {\n   "comand": "a"\n  }\n }\n}',
            ".mcp.json:4: mcpServers.x.comand: unknown key",
        ),
        (
            '{"mcpServers": {"x": {"type": "websocket", "url": "ws://a"}}}',
            'mcpServers.x.type: expected one of "stdio", "http", "sse"',
        ),
        (
            '{"mcpServers": {"x": {"type": "http", "command": "a"}}}',
            "mcpServers.x.type: type: http needs url:",
        ),
        ('{"mcpServers": {"x": {"args": ["a"]}}}', "mcpServers.x: neither url nor command"),
        ('{"mcpServers": {"bad name": {"command": "a"}}}', "not a server name"),
        ('{"mcpServers": {"x": {"command": "a"}, "x": {"command": "b"}}}', 'the key "x" is given twice'),
        ('\t{"mcpServers": {\n\t\t"x": {"url": 7}}}', ".mcp.json:2: mcpServers.x.url: expected a URL"),
        (
            '{"mcpServers": {"x": {"url": "https://a/mcp", "headers": {"Authorization": "Bearer abc"}}}}',
            "credentials never go in the file",
        ),
        ("[" * 100 + "]" * 100, "nested too deep"),
    ],
)
def test_a_hostile_or_malformed_file_is_an_error_with_file_line_and_field(tmp_path, text, expected):
    assert expected in error(tmp_path / ".mcp.json", text)


def test_a_file_past_the_size_limit_or_not_a_file_is_refused(tmp_path):
    assert "the limit is 1,048,576 bytes" in error(tmp_path / ".mcp.json", " " * (1024 * 1024 + 1) + "{}")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / ".mcp.json").mkdir()
    with pytest.raises(ConfigError, match="not a regular file"):
        read_servers(tmp_path / "dir" / ".mcp.json", run_dir=tmp_path)


def test_precedence_local_then_agent_file_then_mcp_json_then_config_yaml_then_user_json(tmp_path):
    project, config_dir = tmp_path / "project", tmp_path / "config"
    mark = {n: {"command": n} for n in ("a", "b", "c", "d", "e")}

    def servers(*names: str) -> dict[str, Any]:
        return {"mcpServers": {n: mark[n] for n in names}}

    write(config_dir / "mcp.json", servers("a", "b", "c", "d", "e"))
    write(config_dir / "config.yaml", "mcp:\n  b: {command: yaml-b}\n  c: {command: yaml-c}\n")
    write(project / ".mcp.json", {"mcpServers": {"c": {"command": "json-c"}, "d": {"command": "json-d"}}})
    write(project / "mm.yaml", "mcp:\n  d: {command: agent-d}\n  e: {command: agent-e}\n")
    local = {"projects": {str(project): {"mcpServers": {"e": {"command": "local-e"}}}, "/else": servers("a")}}
    write(config_dir / "mcp-local.json", local)
    config = load_user_config(config_dir / "config.yaml")
    agent, config = add_mcp_files(load_agent_file(project / "mm.yaml"), config, project, everything())
    chosen = {e.name: (e.spec.command, Path(e.origin).name) for e in servers_for(agent, config)}
    assert chosen == {
        "a": ("a", "mcp.json"),
        "b": ("yaml-b", "config.yaml"),
        "c": ("json-c", ".mcp.json"),
        "d": ("agent-d", "mm.yaml"),
        "e": ("local-e", "mcp-local.json"),
    }


def test_scope_files(tmp_path):
    assert scope_file("project", tmp_path / "p", tmp_path / "c") == tmp_path / "p" / ".mcp.json"
    assert scope_file("local", tmp_path / "p", tmp_path / "c") == tmp_path / "c" / "mcp-local.json"
    assert scope_file("user", tmp_path / "p", tmp_path / "c") == tmp_path / "c" / "mcp.json"


def test_the_client_names_the_same_files():
    from mm import mcp_cmd

    from mmd.config import mcp_json

    assert (mcp_cmd.PROJECT_FILE, mcp_cmd.LOCAL_FILE, mcp_cmd.USER_FILE, mcp_cmd.SCOPES) == (
        mcp_json.PROJECT_FILE,
        mcp_json.LOCAL_FILE,
        mcp_json.USER_FILE,
        mcp_json.SCOPES,
    )


# --- Claude's keys in mm's own mcp: --------------------------------------------------------------


def test_mm_yaml_accepts_type_and_checks_it(tmp_path):
    path = write(tmp_path / "mm.yaml", "mcp:\n  api:\n    type: sse\n    url: http://127.0.0.1:1/sse\n")
    assert load_agent_file(path).mcp["api"].transport == "sse"
    write(path, "mcp:\n  api:\n    type: stdio\n    url: http://127.0.0.1:1/sse\n")
    with pytest.raises(ConfigError, match=r"mm.yaml:3: mcp.api.type: type: stdio needs command:"):
        load_agent_file(path)


@pytest.mark.parametrize(
    "text",
    [
        "mcpServers:\n  files: {command: npx}\n",
        "mcp:\n  mcpServers:\n    files: {command: npx}\n",
    ],
)
def test_mcpservers_in_mm_files_points_at_mcp_json(tmp_path, text):
    path = write(tmp_path / "mm.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_agent_file(path)
    assert "unknown key" in str(info.value)
    assert "that is the shape of Claude Code's .mcp.json: mm reads .mcp.json at the project's root" in str(
        info.value
    )
    write(tmp_path / "config.yaml", text)
    with pytest.raises(ConfigError, match=re.escape("Claude Code's .mcp.json")):
        load_user_config(tmp_path / "config.yaml")


def test_claude_only_keys_under_mcp_get_a_hint(tmp_path):
    path = write(tmp_path / "mm.yaml", "mcp:\n  files:\n    command: npx\n    disabled: true\n")
    with pytest.raises(
        ConfigError, match=r"mm\.yaml:4: mcp\.files\.disabled: unknown key.*write enabled: false"
    ):
        load_agent_file(path)


def test_references_are_read_in_linear_time_however_a_cloned_file_repeats_them(tmp_path) -> None:
    # Read before its trust is checked: "${a:-" repeated once cost 5 s at 64 KiB (quadratic).
    path = tmp_path / ".mcp.json"
    path.write_text(json.dumps({"mcpServers": {"s": {"command": "x", "args": ["${a:-" * 150_000]}}}))
    with pytest.raises(ConfigError, match="a malformed"):
        read_servers(path, run_dir=tmp_path)
    path.write_text(json.dumps({"mcpServers": {"s": {"command": "x", "args": ["${a:-" * 150_000 + "}"]}}}))
    assert list(read_servers(path, run_dir=tmp_path)) == ["s"]


def test_a_file_read_again_unchanged_is_not_built_again_and_is_still_trusted_or_not_each_time(tmp_path):
    # A prompt reads the JSON files every time: the same text at the same path, for the same folder,
    # gives the same checked specs, built once; whether a project's file may be used is asked every time.
    path = write(tmp_path / ".mcp.json", {"mcpServers": {"files": STDIO}})
    first = read_servers(path, run_dir=tmp_path)
    again = read_servers(path, run_dir=tmp_path)
    assert again == first and again["files"] is first["files"]
    again.pop("files")  # a caller's map is its own: the kept one is not changed
    assert list(read_servers(path, run_dir=tmp_path)) == ["files"]
    assert read_servers(path, run_dir=tmp_path / "elsewhere")["files"].run_dir == str(tmp_path / "elsewhere")
    nobody = Trust({})  # trusts no file
    assert read_servers(path, run_dir=tmp_path, shipped=True, trust=nobody) == {}
    assert [u.path for u in nobody.untrusted] == [str(path)]
    digest = nobody.untrusted[0].digest
    assert list(read_servers(path, run_dir=tmp_path, shipped=True, trust=Trust({str(path): digest}))) == [
        "files"
    ]
    write(path, {"mcpServers": {"web": {"type": "http", "url": "https://mcp.example.com/mcp"}}})  # an edit
    assert list(read_servers(path, run_dir=tmp_path)) == ["web"]
