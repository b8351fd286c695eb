"""allowed-tools: Claude's names mapped to mm's, the patterns of bash commands and paths, unknown entries warned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mmd.mcp.tool import McpTool
from mmd.tools.allowed import limit_of
from mmd.tools.base import Tool, ToolContext
from mmd.tools.builtin import make_builtins
from mmd.tools.builtin.skill import ReadSkill
from mmd.tools.skills import Catalogue


def mcp_tool(name: str, server: str, remote: str) -> McpTool:
    """A real McpTool's identity; never called here, so it needs no connection."""
    return McpTool(
        name=name,
        remote_name=remote,
        server=server,
        description="",
        parameters={"type": "object"},
        tier="write",
        conn=None,  # type: ignore[arg-type]
        timeout=None,
        connect_timeout=1,
    )


def offered() -> dict[str, Tool]:
    tools = [*make_builtins(None, Catalogue()), mcp_tool("create_issue", "github", "create_issue")]
    return {t.name: t for t in tools}


def refusal(entries: list[str], name: str, args: dict[str, Any], cwd: Path) -> str | None:
    tools = offered()
    limit = limit_of("demo", entries, tools)
    ctx = ToolContext(session_id="s", call_id="c", cwd=cwd, session_dir=cwd)
    return limit.refusal(tools[name], args, cwd, tools[name].paths(args, ctx))


def test_claude_names_map_to_mm_builtins_and_unknown_entries_are_warned() -> None:
    limit = limit_of(
        "demo",
        [
            "Read",
            "Grep",
            "Glob",
            "Edit",
            "Write",
            "WebFetch",
            "Bash(git:*)",
            "mcp__github__create_issue",
            "bash",
        ],
        offered(),
    )
    assert limit.tools == {
        "read_file": (),
        "grep": (),
        "list_files": (),
        "edit_file": (),
        "write_file": (),
        "bash": (),  # the bare "bash" allows any command, so the git pattern narrows nothing
        "create_issue": (),
    }
    [warning] = limit.warnings
    assert warning.startswith(
        "skill demo: allowed-tools entry 'WebFetch' names no tool of this turn (tools: bash,"
    )
    assert warning.endswith("; it allows nothing")


def test_a_whole_mcp_server_and_an_empty_list() -> None:
    assert limit_of("demo", ["mcp__github"], offered()).names() == ["create_issue"]
    assert limit_of("demo", ["mcp__gitlab"], offered()).names() == []
    assert limit_of("demo", [], offered()).names() == []


def test_a_tool_outside_the_limit_is_refused_saying_what_is_allowed(tmp_path: Path) -> None:
    why = refusal(["Read", "Bash(git:*)"], "write_file", {"path": "x", "content": "y"}, tmp_path)
    assert why == (
        "The skill demo is in use and its allowed-tools do not include write_file: it allows read_file, "
        "bash(git:*). Do the task with those, or read another skill with read_skill."
    )
    # read_skill stays: reading another skill is how the model leaves this one's limit
    assert limit_of("demo", ["Read"], offered()).refusal(ReadSkill(), {"name": "x"}, tmp_path, []) is None


@pytest.mark.parametrize(
    ("command", "allowed"),
    [
        ("git status", True),
        ("git", True),
        ("  git   log  --oneline", True),
        ("gitk", False),
        ("git status && git diff", True),
        ("git status; rm -rf /", False),
        ("git log | sh", False),
        ("npm test", True),
        ("npm test --watch", False),
        ("ls -la", True),
        ("ls", False),  # "ls *" needs an argument, as a glob does
        ("git log $(rm -rf ~)", False),
        ("git log `id`", False),
    ],
)
def test_bash_patterns(tmp_path: Path, command: str, allowed: bool) -> None:
    why = refusal(["Bash(git:*)", "Bash(npm test)", "Bash(ls *)"], "bash", {"command": command}, tmp_path)
    assert (why is None) == allowed, why


def test_the_refusal_of_a_command_names_the_part_and_the_patterns(tmp_path: Path) -> None:
    assert refusal(["Bash(git:*)"], "bash", {"command": "git add . && rm -rf build"}, tmp_path) == (
        "The skill demo allows only the commands Bash(git:*); 'rm -rf build' is not one of them."
    )


def test_a_command_pattern_of_unclosed_brackets_is_read_in_linear_time(tmp_path: Path) -> None:
    # fnmatch scanned to the end of this 400 KB pattern once for each of its 200,000 "[", for hours, at
    # the model's first bash call. Past 10,000 characters a pattern matches nothing: the command is refused.
    entries = ["Bash(git " + "[a" * 200_000 + "*)", "Bash(ls *)"]
    assert refusal(entries, "bash", {"command": "git x"}, tmp_path) is not None
    assert refusal(entries, "bash", {"command": "ls -la"}, tmp_path) is None


def test_path_patterns_of_file_tools(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    entries = ["Read(docs/**)", "Grep"]
    assert refusal(entries, "read_file", {"path": "docs/a.md"}, tmp_path) is None
    assert refusal(entries, "read_file", {"path": "./docs/sub/b.md"}, tmp_path) is None
    why = refusal(entries, "read_file", {"path": "secrets.env"}, tmp_path)
    assert why == (
        f"The skill demo allows read_file only on docs/**; {tmp_path / 'secrets.env'} is not among them."
    )
    assert refusal(entries, "read_file", {"path": "docs/../secrets.env"}, tmp_path) is not None


def test_a_pattern_on_a_tool_that_names_no_path_is_warned_and_allows_every_call() -> None:
    limit = limit_of("demo", ["mcp__github__create_issue(repo:*)"], offered())
    assert limit.tools == {"create_issue": ()}
    assert limit.warnings == [
        "skill demo: allowed-tools entry 'mcp__github__create_issue(repo:*)': create_issue names no path to "
        "match 'repo:*' against; every call of create_issue is allowed"
    ]
