"""``mm mcp test``'s table: columns as wide as their longest cell, whatever the names' prefixes; a server's
names and descriptions shown inert on a terminal (``mm tools list``'s table too)."""

from __future__ import annotations

from mm import terminal
from mm.mcp_cmd import tool_lines
from mm.render import tool_table

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


EVIL = {
    "name": "srv_ok\r\n\u202eevil\tx",
    "remote_name": "ok\r\n\u202eevil\tx",
    "tier": "read",
    "tokens": 5,
    "description": "fine\r\x1b[2Kgone\nnext line\u2066.",
}


def test_a_servers_names_and_descriptions_stay_on_their_row_on_a_terminal(monkeypatch):
    # A tool named ok\r\n\u202eevil reached the terminal as it was: a row of its own, written backwards.
    monkeypatch.setattr(terminal, "is_terminal", lambda stream: True)
    lines = tool_lines([*TOOLS, EVIL], 200)
    assert len(lines) == 4
    assert all(not set(line) & set("\r\n\t\x1b\u202e\u2066") for line in lines)
    assert "srv_ok\\x0d\\x0a\\u202eevil\\x09x (ok\\x0d\\x0a\\u202eevil\\x09x)" in lines[3]
    assert lines[3].endswith("fine\\x0d\\x1b[2Kgone\\x0anext line\\u2066")
    tiers = {line.index(tool["tier"]) for line, tool in zip(lines, [*TOOLS, EVIL], strict=True)}
    assert len(tiers) == 1  # measured as shown: the escapes push no row out of its columns
    tables = [tool_table([{**EVIL, "source": "mcp: srv\n"}]), tool_table([{**TOOLS[0], "source": "builtin"}])]
    assert all(not set(line) & set("\r\n\t\x1b\u202e\u2066") for table in tables for line in table)


def test_a_pipe_gets_the_names_as_they_are(monkeypatch):
    monkeypatch.setattr(terminal, "is_terminal", lambda stream: False)
    assert "\u202e" in tool_lines([EVIL], 200)[0]
