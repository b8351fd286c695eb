"""The parts of MCP support that need no server: config checks, names, schemas, tiers, answers.

The end-to-end behaviour against real servers is in tests/e2e/test_mcp.py.
"""

from __future__ import annotations

import errno
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mmd import contract
from mmd.config import ConfigError, UserConfig, load_agent_file, load_user_config
from mmd.config.mcp import ExpansionError, expand, resolve, servers_for
from mmd.mcp import pool as mcp_pool
from mmd.mcp.errors import McpCallError
from mmd.mcp.tool import (
    McpTool,
    admit,
    estimate_tokens,
    exposed_name,
    normalize_schema,
    render_blocks,
    taken_names,
    tier_of,
)
from mmd.models.base import ToolSpec
from mmd.tools.base import ToolError

# --- configuration ------------------------------------------------------------------------------


def load(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    return load_agent_file(path)


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("mcp:\n  s:\n    url: http://x/mcp\n    command: x\n", 2, "mcp.s: both url and command"),
        ("mcp:\n  s:\n    enabled: true\n", 2, "mcp.s: neither url nor command"),
        ("mcp:\n  s:\n    url: ftp://x\n", 3, "mcp.s.url: expected an http:// or https:// URL"),
        ("mcp:\n  s:\n    command: x\n    tool: {}\n", 4, "mcp.s.tool: unknown key; expected one of args,"),
        (
            "mcp:\n  s:\n    url: http://x/mcp\n    args: [a]\n",
            4,
            "mcp.s.args: args applies to a stdio server",
        ),
        (
            "mcp:\n  s:\n    command: x\n    headers: {A: b}\n",
            4,
            "mcp.s.headers: headers apply to a url server",
        ),
        ("mcp:\n  s:\n    command: x\n    env: {T: '${T'}\n", 4, "mcp.s.env.T: a malformed ${...} reference"),
        ("mcp:\n  s:\n    command: x\n    prefix: 'a b'\n", 4, "mcp.s.prefix: not a tool-name prefix"),
        (
            "mcp:\n  s:\n    command: x\n    effects: {t: delete}\n",
            4,
            'mcp.s.effects.t: expected one of "read"',
        ),
        (
            "mcp:\n  s:\n    command: x\n    tools: {include: [a], exclude: [a]}\n",
            4,
            "a is both included and excluded",
        ),
        ("mcp:\n  9s:\n    command: x\n", 2, "mcp.9s: not a server name"),
        ("mcp:\n  s:\n    command: x\n    timeout: 0\n", 4, "mcp.s.timeout: expected a number, more than 0"),
    ],
)
def test_bad_server_entries_are_errors_with_file_line_and_field(tmp_path, text, line, message):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    assert str(info.value).startswith(f"{tmp_path / 'agent.yaml'}:{line}: ")
    assert message in str(info.value)


def test_a_literal_credential_header_is_refused_without_quoting_it(tmp_path):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, "mcp:\n  gh:\n    url: https://x/mcp\n    headers: {Authorization: Bearer abc123}\n")
    text = str(info.value)
    assert text.startswith(f"{tmp_path / 'agent.yaml'}:4: mcp.gh.headers.Authorization: credentials never go")
    assert 'Authorization: "Bearer ${GH_TOKEN}"' in text
    assert "abc123" not in text
    agent = load(
        tmp_path, "mcp:\n  gh:\n    url: https://x/mcp\n    headers: {Authorization: 'Bearer ${GH_TOKEN}'}\n"
    )
    assert agent.mcp["gh"].headers == {"Authorization": "Bearer ${GH_TOKEN}"}


def test_the_user_config_takes_servers_too(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("mcp:\n  s:\n    command: x\n    bogus: 1\n")
    with pytest.raises(ConfigError, match=r"config.yaml:4: mcp.s.bogus: unknown key"):
        load_user_config(path)
    path.write_text("mcp:\n  s:\n    command: x\n")
    assert load_user_config(path).mcp["s"].command == "x"


def test_defaults_resources_and_prompts_off_every_tool_no_prefix(tmp_path):
    spec = load(tmp_path, "mcp:\n  s:\n    command: x\n").mcp["s"]
    assert (spec.tools.include, spec.tools.exclude, spec.tools.resources, spec.tools.prompts) == (
        None,
        [],
        False,
        False,
    )
    assert (spec.prefix, spec.enabled, spec.timeout, spec.connect_timeout) == (False, True, None, 30.0)


def test_references_expand_from_the_environment_with_defaults():
    env = {"TOKEN": "t0k"}
    assert expand("Bearer ${TOKEN}", "h", env) == "Bearer t0k"
    assert expand("${PORT:-8080}/${TOKEN}", "h", env) == "8080/t0k"
    with pytest.raises(ExpansionError, match=r"MISSING \(in mcp.s.headers.A\) is not set"):
        expand("${MISSING}", "mcp.s.headers.A", env)


def test_mm_python_is_the_daemons_interpreter_unless_the_environment_sets_it():
    assert expand("${MM_PYTHON}", "command", {}) == sys.executable
    assert expand("${MM_PYTHON}", "command", {"MM_PYTHON": "/opt/py"}) == "/opt/py"


def test_agent_servers_replace_user_servers_by_name_and_keys_ignore_filters(tmp_path):
    config_path = tmp_path / "config.yaml"
    config_path.write_text("mcp:\n  a: {command: srv}\n  b: {url: 'http://h/mcp'}\n")
    config = load_user_config(config_path)
    agent = load(tmp_path, "mcp:\n  a: {command: srv, enabled: false}\n  c: {command: other}\n")
    entries = servers_for(agent, config)
    assert [(e.name, e.spec.enabled, e.origin) for e in entries] == [
        ("a", False, str(tmp_path / "agent.yaml")),
        ("b", True, str(config_path)),
        ("c", True, str(tmp_path / "agent.yaml")),
    ]
    # The connection key: what makes the connection, not which tools are offered.
    one = load(tmp_path, "mcp:\n  x: {command: srv, tools: {include: [a]}}\n")
    two = load(tmp_path, "mcp:\n  y: {command: srv, prefix: true}\n")
    key = resolve(servers_for(one, UserConfig())[0], {"PATH": "/bin"}).key
    assert resolve(servers_for(two, UserConfig())[0], {"PATH": "/bin"}).key == key
    three = load(tmp_path, "mcp:\n  x: {command: srv, args: [--debug]}\n")
    assert resolve(servers_for(three, UserConfig())[0], {"PATH": "/bin"}).key != key


def test_a_stdio_server_gets_a_small_environment_and_relative_paths_from_the_file(tmp_path):
    agent = load(tmp_path, "mcp:\n  s:\n    command: ./srv\n    env: {TOKEN: '${TOKEN}'}\n    cwd: sub\n")
    env = {"PATH": "/bin", "HOME": "/home/u", "ANTHROPIC_API_KEY": "sk-x", "TOKEN": "t"}
    server = resolve(servers_for(agent, UserConfig())[0], env)
    assert server.argv == [str((tmp_path / "srv").resolve())]
    assert server.env == {"PATH": "/bin", "HOME": "/home/u", "TOKEN": "t"}
    assert server.cwd == tmp_path / "sub"


# --- names, schemas, tiers --------------------------------------------------------------------------


def test_names_have_no_prefix_by_default_and_long_ones_are_shortened_deterministically():
    assert exposed_name("seed", "release", False) == "release"
    assert exposed_name("seed", "release", True) == "seed_release"
    assert exposed_name("seed", "release", "rt_") == "rt_release"
    assert exposed_name("seed", "files/read.v2", False) == "files_read_v2"
    long_a, long_b = "x" * 60 + "_alpha", "x" * 60 + "_beta"
    short_a = exposed_name("s", long_a, False)
    assert len(short_a) == 64 and short_a.startswith("x" * 55 + "_")
    assert short_a == exposed_name("s", long_a, False)
    assert short_a != exposed_name("s", long_b, False)


def test_schemas_from_sdks_are_normalised_for_the_contract():
    schema = {
        "type": "object",
        "title": "releaseArguments",
        "$defs": {"Channel": {"type": "string", "enum": ["stable", "beta"], "title": "Channel"}},
        "properties": {
            "channel": {"$ref": "#/$defs/Channel"},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Note"},
            "count": {"type": ["integer", "null"], "minimum": 1},
            "mode": {"const": "fast"},
            "title": {"type": "string", "title": "Title"},
            "tags": {"type": "array", "items": {"type": ["string", "null"]}},
        },
        "required": ["channel"],
    }
    out = normalize_schema(schema)
    assert out == {
        "type": "object",
        "properties": {
            "channel": {"type": "string", "enum": ["stable", "beta"]},
            "note": {"type": "string"},
            "count": {"type": "integer", "minimum": 1},
            "mode": {"enum": ["fast"]},
            "title": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["channel"],
    }
    assert contract.validate(out, {"channel": "beta", "count": "3", "title": "t"}) == {
        "channel": "beta",
        "count": 3,
        "title": "t",
    }
    with pytest.raises(contract.InvalidArguments) as info:
        contract.validate(out, {"channel": "nightly", "extra": 1})
    assert [p.code for p in info.value.problems] == ["unknown_field", "not_in_enum"]
    recursive = {
        "$defs": {"N": {"type": "object", "properties": {"next": {"$ref": "#/$defs/N"}}}},
        "properties": {"n": {"$ref": "#/$defs/N"}},
    }
    assert normalize_schema(recursive)["properties"]["n"]["type"] == "object"
    assert normalize_schema(None) == {"type": "object", "properties": {}}


def test_tiers_come_from_annotations_unless_overridden():
    hints = SimpleNamespace
    assert tier_of(None, None) == "write"
    assert tier_of(hints(read_only_hint=True, destructive_hint=None), None) == "read"
    assert tier_of(hints(read_only_hint=False, destructive_hint=True), None) == "destructive"
    assert tier_of(hints(read_only_hint=None, destructive_hint=None), None) == "write"  # no spec default
    assert tier_of(hints(read_only_hint=True, destructive_hint=None), "destructive") == "destructive"


def tool(name: str, server: str = "seed", remote: str | None = None) -> McpTool:
    return McpTool(
        name=name,
        remote_name=remote or name,
        server=server,
        description="Do it.",
        parameters={"type": "object", "properties": {}},
        tier="write",
        conn=None,  # type: ignore[arg-type]  # these tests never send
        timeout=None,
        connect_timeout=1,
    )


def test_clashes_skip_the_mcp_tool_with_a_warning(tmp_path):
    declared = SimpleNamespace(name="release", source="declared")
    taken = taken_names([SimpleNamespace(name="bash", source="builtin"), declared])
    kept, warnings = admit(
        [tool("read_file"), tool("release"), tool("status"), tool("status", server="other")], taken
    )
    assert [t.name for t in kept] == ["status"]
    assert warnings == [
        "MCP server seed: tool read_file is skipped: its name read_file is taken by the built-in tool read_file "
        "(reserved even when it is off) (set prefix: true on the server to offer it as seed_read_file, "
        "or leave it out with tools.exclude)",
        "MCP server seed: tool release is skipped: its name release is taken by the declared tool release "
        "(set prefix: true on the server to offer it as seed_release, or leave it out with tools.exclude)",
        "MCP server other: tool status is skipped: its name status is taken by the tool of MCP server seed "
        "(set prefix: true on the server to offer it as other_status, or leave it out with tools.exclude)",
    ]


def test_a_servers_own_tools_that_clash_are_not_told_to_take_a_prefix():
    """Two tools of one server offered under one name (a.b and a_b are both a_b; a name listed twice) were
    told "set prefix: true", which gives both the same prefix: the advice is the allowlist's."""
    kept, warnings = admit([tool("a_b", remote="a.b"), tool("a_b"), tool("go"), tool("go")], taken_names([]))
    assert [t.remote_name for t in kept] == ["a.b", "go"]
    assert warnings == [
        "MCP server seed: tool a_b is skipped: it is offered as a_b, as is its tool a.b (a name keeps letters, "
        "digits, _ and -); name the one you want in tools.include, or leave the other out with tools.exclude",
        "MCP server seed lists tool go twice: the first is kept",
    ]


# --- answers ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "code", "cls"),
    [
        (McpCallError("lost", "the server exited"), "connection_lost", "retry_after"),
        (McpCallError("timeout", "no answer"), "timeout", "retry_after"),
        (McpCallError("remote", "bad args", code=-32602), "invalid_params", "fix_and_retry"),
        (McpCallError("remote", "no such tool", code=-32601), "server_refused", "terminal"),
        (McpCallError("remote", "oops", code=-32603), "server_error", "retry_after"),
        (McpCallError("invalid", "garbage"), "bad_answer", "terminal"),
    ],
)
def test_server_errors_are_answered_with_their_class(error, code, cls):
    err = tool("release")._call_error(error, 5)
    assert isinstance(err, ToolError)
    assert (err.code, err.cls) == (code, cls)
    answered = contract.answer("release", "{}", err)
    assert json.loads(answered.content.splitlines()[-1])["error"]["class"] == cls


def test_content_blocks_are_text_and_summaries():
    blocks = [
        SimpleNamespace(type="text", text="hello"),
        SimpleNamespace(type="image", data="iVBORw0KGgo=", mime_type="image/png"),
        SimpleNamespace(type="audio", data="AAAA", mime_type="audio/wav"),
        SimpleNamespace(
            type="resource", resource=SimpleNamespace(uri="file:///a", mime_type="text/plain", text="A")
        ),
        SimpleNamespace(
            type="resource", resource=SimpleNamespace(uri="file:///b", mime_type=None, blob="AAAA")
        ),
        SimpleNamespace(type="resource_link", name="c", uri="file:///c", mime_type=None, description="the c"),
    ]
    assert render_blocks(blocks) == (
        "hello\n[image: image/png, 8 bytes; not shown]\n[audio: audio/wav, 3 bytes; not shown]\n"
        "[resource file:///a (text/plain)]\nA\n[resource file:///b: unknown type, 3 bytes; not shown]\n"
        "[resource link: c at file:///c: the c]"
    )


def test_the_token_estimate_is_the_request_entry_over_four():
    spec = ToolSpec(name="status", description="Report.", parameters={"type": "object", "properties": {}})
    text = '{"type":"function","function":{"name":"status","description":"Report.","parameters":{"type":"object","properties":{}}}}'
    assert estimate_tokens(spec) == -(-len(text) // 4)


def test_the_client_imports_no_mcp_sdk():
    import subprocess

    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import mm.cli, sys; print(sorted(m for m, v in sys.modules.items() if v is not None and m.split('.')[0] in ('mcp', 'mcp_types', 'trio', 'httpx', 'httpx2', 'anyio')))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "[]"


class _Lister:
    """A client whose listing is *pages* of (count, description length) tools; it records the cursors asked."""

    def __init__(self, *pages: tuple[int, int]) -> None:
        self.pages, self.asked = pages, []

    async def list_tools(self, cursor: str | None = None) -> Any:
        page = int(cursor or 0)
        self.asked.append(page)
        count, chars = self.pages[page]
        tools = [
            SimpleNamespace(name=f"t{page}_{k}", description="d" * chars, input_schema={"type": "object"})
            for k in range(count)
        ]
        more = str(page + 1) if page + 1 < len(self.pages) else None
        return SimpleNamespace(tools=tools, next_cursor=more)


@pytest.mark.parametrize(
    ("pages", "kept", "asked"),
    [
        (((3, 10), (3, 10)), 6, [0, 1]),  # within the bounds: all of it
        (((400, 10), (400, 10), (400, 10)), 500, [0, 1]),  # the count: the third page is not asked for
        (
            ((100, 60_000), (100, 60_000)),
            139,
            [0, 1],
        ),  # the characters, as listed (before a description's cut)
    ],
    ids=["all", "count", "characters"],
)
async def test_a_listing_is_read_within_its_bounds(pages, kept, asked):
    client = _Lister(*pages)
    tools, cut = await mcp_pool._list_tools(client)
    assert len(tools) == kept and client.asked == asked
    assert (cut is None) == (kept == sum(n for n, _ in pages))
    assert all(len(t.description) <= mcp_pool.MAX_DESCRIPTION_CHARS + len(" [cut]") for t in tools)


async def test_idle_connections_past_the_bound_are_forgotten_and_a_tool_still_held_gets_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every configuration met kept its connection (and its tool listing, up to 8 MiB) for the daemon's life,
    a server's env: naming a rotating token a new one at each rotation. Past CONNECTIONS_KEPT, those closed
    for being idle go: their tasks end. One in use is kept; a tool still held gets its key's connection."""
    import trio

    monkeypatch.setattr(mcp_pool, "CONNECTIONS_KEPT", 3)
    pool = mcp_pool.McpPool(log_dir=tmp_path)

    def server(n: int) -> Any:
        return SimpleNamespace(key=f"key{n:05d}", name=f"s{n}", transport="stdio")

    async with trio.open_nursery() as nursery:
        await nursery.start(pool.run)
        conns = [pool.connection(server(n)) for n in range(3)]
        long_ago = trio.current_time() - mcp_pool.IDLE_CLOSE - 10
        for n, conn in enumerate(conns):
            conn.last_used, conn.tools = long_ago + n, ["a tool"]
            pool._start(conn)  # unwanted: it parks idle
        await trio.testing.wait_all_tasks_blocked()
        assert [c.state for c in conns] == ["idle"] * 3
        conns[0].in_flight = 1  # a call under way: kept, whatever its age
        pool.connection(server(7))
        await trio.testing.wait_all_tasks_blocked()
        assert list(pool.connections) == ["key00000", "key00002", "key00007"]
        assert (conns[1]._forgotten, conns[1].tools, conns[1]._running) == (True, [], False)  # its task ended
        assert pool.adopt(conns[1]) is conns[1] and not conns[1]._forgotten  # its key free again: itself
        again = pool.connection(server(1))
        assert again is conns[1]
        # Forgotten while a turn holds one of its tools, and its key connected anew since: the pool's answers.
        conns[2]._forgotten = True
        del pool.connections["key00002"]
        anew = pool.connection(server(2))
        assert anew is not conns[2] and pool.adopt(conns[2]) is anew and conns[2]._forgotten
        nursery.cancel_scope.cancel()


async def test_an_sdk_that_cannot_be_imported_fails_the_connect_not_the_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK is imported at the first connect, in a worker thread: out of descriptors or threads then, the
    import's error was raised before the connect's guard, out of the connection's task into the pool's nursery,
    and the daemon stopped. It is a failed connect now, told as one."""

    async def no_descriptors() -> None:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(mcp_pool, "load_sdk", no_descriptors)
    server = SimpleNamespace(
        key="k", name="s", transport="stdio", argv=["srv"], cwd=None, spec=SimpleNamespace(connect_timeout=5)
    )
    conn = mcp_pool.McpConnection(mcp_pool.McpPool(log_dir=tmp_path), server)  # type: ignore[arg-type]
    assert await conn._session() is False  # returns: the task goes on to its backoff
    assert conn.state == "failed" and "Too many open files" in (conn.error or "")
