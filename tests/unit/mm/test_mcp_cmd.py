"""``mm mcp test``'s table: columns as wide as their longest cell, whatever the names' prefixes."""

from __future__ import annotations

from mm.mcp_cmd import tool_lines

TOOLS = [
    {
        "name": "echo",
        "remote_name": "echo",
        "tier": "read",
        "tokens": 31,
        "description": "Echo a message. More.",
    },
    {
        "name": "filesystem_read_multiple_files",
        "remote_name": "read_multiple_files",
        "tier": "destructive",
        "tokens": 1234,
        "description": "Read the contents of multiple files simultaneously.",
    },
    {
        "name": "gh_search_code",
        "remote_name": "search_code",
        "tier": "write",
        "tokens": 7,
        "description": "Search.",
    },
]


def test_columns_line_up_with_long_prefixed_names():
    lines = tool_lines(TOOLS, 200)
    assert lines[1].startswith(
        "  filesystem_read_multiple_files (read_multiple_files)  destructive  ~1234 tokens"
    )
    tiers = {line.index(tool["tier"]) for line, tool in zip(lines, TOOLS, strict=True)}
    tokens = {line.index(" tokens") for line in lines}
    assert len(tiers) == 1 and len(tokens) == 1  # every row's tier and count in the same column
    assert lines[0].endswith("~  31 tokens  Echo a message")
    assert [line.split()[0] for line in lines] == ["echo", "filesystem_read_multiple_files", "gh_search_code"]


def test_the_description_is_cut_to_the_terminal():
    lines = tool_lines(TOOLS, 100)
    assert all(len(line) <= 100 for line in lines)
    assert lines[1].endswith("…")
    assert tool_lines([], 80) == []
