"""mmd/turn/phases.py: which tools a phase's ``tools:`` globs let the model call."""

from __future__ import annotations

from mmd.turn.phases import matches


def test_tools_globs_match_tool_names() -> None:
    assert matches("read_file", ["read_*"])
    assert matches("bash", ["read_*", "ba[sz]h"])
    assert not matches("write_file", ["read_*", "bash"])


def test_a_glob_of_unclosed_brackets_is_read_in_linear_time() -> None:
    # An agent file's phase: fnmatch scanned to the end of this 400 KB glob once for each of its
    # 200,000 "[", for hours. Past 10,000 characters a glob matches nothing; the others still match.
    hostile = "[a" * 200_000
    assert not matches("bash", [hostile])
    assert matches("read_file", [hostile, "read_*"])
