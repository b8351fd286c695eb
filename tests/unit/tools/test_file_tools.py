"""The built-in file tools on real files: each answered error, and the happy paths."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mmd import patterns
from mmd.contract import validate
from mmd.tools.base import ToolContext, ToolError, ToolResult
from mmd.tools.builtin import _fs, make_builtins, search
from mmd.tools.builtin import files as file_tools

from ...budget import examples
from ...folders import DEEP, chain

FILE_TOOLS = {
    t.name: t for t in make_builtins(["read_file", "write_file", "edit_file", "list_files", "grep"])
}


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    work = tmp_path / "work"
    work.mkdir()
    return ToolContext(session_id="s1", call_id="c1", cwd=work, session_dir=tmp_path / "session")


def files(root: Path, tree: dict[str, str | bytes]) -> None:
    for rel, content in tree.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


async def call(name: str, ctx: ToolContext, **args: Any) -> ToolResult:
    """Run a tool the way the turn loop does: arguments validated first."""
    tool = FILE_TOOLS[name]
    return await tool.run(validate(tool.parameters, args, example=tool.example), ctx)


@contextlib.contextmanager
def writer_after(fifo: Path, seconds: float) -> Iterator[list[bool]]:
    """After *seconds*, open *fifo* for writing again and again until the block ends: a reader that a
    regression left waiting in open() is let go (and then reads an end of file), and the list yielded
    records that one was waiting, so that its test fails rather than hangs. A non-blocking open for
    writing succeeds only while the FIFO has a reader."""
    stop, waiting = threading.Event(), []

    def unblock() -> None:
        stop.wait(seconds)
        while not stop.is_set():
            with contextlib.suppress(OSError):  # ENXIO: nobody reads it now
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                waiting.append(True)
            stop.wait(0.05)

    thread = threading.Thread(target=unblock, daemon=True)
    thread.start()
    try:
        yield waiting
    finally:
        stop.set()
        thread.join()


async def refused(name: str, ctx: ToolContext, **args: Any) -> ToolError:
    with pytest.raises(ToolError) as info:
        await call(name, ctx, **args)
    return info.value


def test_every_tool_has_the_protocol_fields() -> None:
    tiers = {name: tool.tier for name, tool in FILE_TOOLS.items()}
    assert tiers == {
        "read_file": "read",
        "write_file": "write",
        "edit_file": "write",
        "list_files": "read",
        "grep": "read",
    }
    for tool in FILE_TOOLS.values():
        assert tool.source == "builtin"
        assert validate(tool.parameters, tool.example) is not None  # the example is a valid call


ECHOES = [
    ("read_file", {"path": "src/x.py", "offset": 1, "limit": 2000}, "read_file src/x.py"),
    ("read_file", {"path": "src/x.py", "offset": 10, "limit": 31}, "read_file src/x.py:10-40"),
    ("write_file", {"path": "a.txt", "content": "héllo"}, "write_file a.txt (6 bytes)"),
    (
        "edit_file",
        {"path": "a.py", "old_text": "a", "new_text": "b", "replace_all": True},
        "edit_file a.py (every match)",
    ),
    ("list_files", {"pattern": "**/*.py", "path": "src"}, "list_files **/*.py in src"),
    ("list_files", {"pattern": "**/*", "path": "."}, "list_files **/*"),
    (
        "grep",
        {"pattern": "def main", "path": "src", "glob": "*.py", "ignore_case": True},
        "grep 'def main' src --glob '*.py' -i",
    ),
]


@pytest.mark.parametrize(("name", "args", "line"), ECHOES)
def test_echo(name: str, args: dict[str, Any], line: str) -> None:
    assert FILE_TOOLS[name].echo(args) == line


# --- read_file ----------------------------------------------------------------


async def test_read_file_numbers_lines_and_says_it_is_the_end(ctx: ToolContext) -> None:
    files(ctx.cwd, {"a.py": "one\ntwo\nthree\n"})
    result = await call("read_file", ctx, path="a.py")
    assert result.content == "    1\tone\n    2\ttwo\n    3\tthree\n(Lines 1-3 of 3: the end of the file.)"
    assert result.data == {"path": str(ctx.cwd / "a.py"), "total_lines": 3, "lines": [1, 3]}


async def test_read_file_says_how_to_read_more(ctx: ToolContext) -> None:
    files(ctx.cwd, {"a.txt": "".join(f"line {n}\n" for n in range(1, 11))})
    result = await call("read_file", ctx, path="a.txt", offset="3", limit=2)
    assert result.content == (
        "    3\tline 3\n    4\tline 4\n(Lines 3-4 of 10. To read more, call read_file with offset 5.)"
    )


async def test_read_file_cuts_long_lines_and_reads_crlf(ctx: ToolContext) -> None:
    files(ctx.cwd, {"a.txt": b"x" * 2500 + b"\r\nend"})
    lines = (await call("read_file", ctx, path="a.txt")).content.split("\n")
    assert lines[0] == "    1\t" + "x" * 2000 + " [line cut: 2500 characters]"
    assert lines[1:] == ["    2\tend", "(Lines 1-2 of 2: the end of the file.)"]


async def test_read_file_reads_an_endless_line_in_bounded_memory(ctx: ToolContext) -> None:
    # One line of 12 MB (a minified bundle, a log without newlines): shown cut, its length counted,
    # read a few kilobytes at a time; a line after it keeps its number. Lines end at LF only, as
    # edit_file counts them: a lone CR stays inside its line.
    files(ctx.cwd, {"big.js": "é" * 6_000_000 + "\nnext\rsame line\n"})
    lines = (await call("read_file", ctx, path="big.js")).content.split("\n")
    assert lines[0] == "    1\t" + "é" * 2000 + " [line cut: 6000000 characters]"
    assert lines[1:] == ["    2\tnext\rsame line", "(Lines 1-2 of 2: the end of the file.)"]


async def test_the_file_tools_refuse_a_fifo_or_a_device_without_waiting_on_it(ctx: ToolContext) -> None:
    # A named pipe where a file was expected (made by a command) would hang open() until a writer came,
    # in a worker thread no cancellation reaches; a link to a device would read forever. Each tool
    # answers at once. If open() blocked, a writer opened after 20 s would let this test fail, not hang.
    os.mkfifo(ctx.cwd / "pipe")
    (ctx.cwd / "zero").symlink_to("/dev/zero")
    with writer_after(ctx.cwd / "pipe", 20) as waited:
        for name, args in [
            ("read_file", {"path": "pipe"}),
            ("edit_file", {"path": "pipe", "old_text": "a", "new_text": "b"}),
            ("read_file", {"path": "zero"}),
        ]:
            err = await refused(name, ctx, **args)
            assert (err.code, err.reason) == (
                "os_error",
                f"{args['path']}: not a regular file but a "
                + ("named pipe." if args["path"] == "pipe" else "character device."),
            )
    assert not waited


async def test_edit_file_refuses_a_file_larger_than_it_edits(ctx: ToolContext, monkeypatch) -> None:
    monkeypatch.setattr(file_tools, "MAX_EDIT_BYTES", 100)
    files(ctx.cwd, {"log.txt": "a line\n" * 20})
    err = await refused("edit_file", ctx, path="log.txt", old_text="a line", new_text="b")
    assert (err.code, err.reason, err.fix) == (
        "file_too_large",
        "log.txt is 140 bytes; edit_file edits files up to 100 bytes.",
        "Change it with bash (sed, or a short script) instead.",
    )
    assert (ctx.cwd / "log.txt").read_text() == "a line\n" * 20


async def test_read_file_reads_a_spill_file_by_absolute_path(ctx: ToolContext) -> None:
    spill = ctx.session_dir / "spill" / "c0.out"
    files(spill.parent, {spill.name: "whole output\n"})
    result = await call("read_file", ctx, path=str(spill))
    assert result.content.startswith("    1\twhole output\n")


async def test_read_file_empty_file(ctx: ToolContext) -> None:
    files(ctx.cwd, {"empty.txt": ""})
    assert (await call("read_file", ctx, path="empty.txt")).content == "(empty.txt is empty.)"


async def test_read_file_offset_past_the_end(ctx: ToolContext) -> None:
    files(ctx.cwd, {"a.txt": "a\nb\n"})
    err = await refused("read_file", ctx, path="a.txt", offset=5)
    assert (err.code, err.field, err.reason, err.fix) == (
        "offset_past_end",
        "offset",
        "offset 5 is past the end: a.txt has 2 lines.",
        "Use an offset from 1 to 2.",
    )


async def test_read_file_missing_file_suggests_near_names(ctx: ToolContext) -> None:
    files(ctx.cwd, {"src/main.py": "", "src/mains.py": "", "src/other.txt": ""})
    err = await refused("read_file", ctx, path="src/mian.py")
    assert (err.code, err.field, err.cls, err.reason, err.fix) == (
        "not_found",
        "path",
        "fix_and_retry",
        "src/mian.py does not exist.",
        "Did you mean src/main.py or src/mains.py? Use list_files to see what exists.",
    )


async def test_a_missing_file_s_near_names_come_from_the_first_entries_of_a_large_folder(
    ctx: ToolContext, monkeypatch
) -> None:
    """A project's folder of a million entries was listed whole and sorted, on the event loop, for three
    names: the did-you-mean reads the first MAX_SIBLINGS the file system lists."""
    monkeypatch.setattr(_fs, "MAX_SIBLINGS", 10, raising=False)
    files(ctx.cwd, {f"big/file{i:03}.txt": "" for i in range(300)})
    with os.scandir(ctx.cwd / "big") as listing:
        first = [e.name for e in listing][:10]
    wanted = next(f"file{i:03}.txt" for i in range(300) if f"file{i:03}.txt" not in first)
    err = await refused("read_file", ctx, path=f"big/{wanted}x")
    named = re.findall(r"big/(\S+?)(?: or |\?)", err.fix)
    assert named and set(named) <= set(first)  # never the exact near name past the first ten


async def test_read_file_missing_folder_is_named(ctx: ToolContext) -> None:
    files(ctx.cwd, {"src/main.py": ""})
    err = await refused("read_file", ctx, path="scr/main.py")
    assert (err.reason, err.fix) == (
        "scr/main.py does not exist: there is no scr.",
        "Did you mean src? Use list_files to see what exists.",
    )


async def test_read_file_on_a_folder(ctx: ToolContext) -> None:
    (ctx.cwd / "src").mkdir()
    err = await refused("read_file", ctx, path="src")
    assert (err.code, err.reason, err.fix) == (
        "is_directory",
        "src is a folder, not a file.",
        'Use list_files with path "src".',
    )


BINARIES = [
    (
        b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR",
        "logo.png",
        "logo.png is a binary file (16 bytes, PNG image); only text files can be read.",
    ),
    (
        b"\xff\xfe\xfa bad utf-8",
        "blob",
        "blob is a binary file (13 bytes, type unknown); only text files can be read.",
    ),
    (
        b"text\0more",
        "notes.txt",
        "notes.txt is a binary file (9 bytes, text/plain); only text files can be read.",
    ),
]


@pytest.mark.parametrize(("content", "name", "reason"), BINARIES)
async def test_read_file_refuses_binary_files(
    ctx: ToolContext, content: bytes, name: str, reason: str
) -> None:
    files(ctx.cwd, {name: content})
    err = await refused("read_file", ctx, path=name)
    assert (err.code, err.cls, err.reason) == ("binary_file", "terminal", reason)


async def test_read_file_reads_utf8_cut_by_the_sniff_window(ctx: ToolContext) -> None:
    files(ctx.cwd, {"a.txt": ("x" * 99 + "\n") * 81 + "y" * 91 + "é\n"})  # é straddles byte 8192
    lines = (await call("read_file", ctx, path="a.txt")).content.split("\n")
    assert lines[-2:] == ["   82\t" + "y" * 91 + "é", "(Lines 1-82 of 82: the end of the file.)"]


# --- write_file ---------------------------------------------------------------


async def test_write_file_creates_parents(ctx: ToolContext) -> None:
    result = await call("write_file", ctx, path="a/b/c.txt", content="one\ntwo")
    assert result.content == "Created a/b/c.txt (7 bytes, 2 lines)."
    assert (ctx.cwd / "a/b/c.txt").read_text() == "one\ntwo"


async def test_write_file_overwrites_atomically_and_keeps_the_mode(ctx: ToolContext) -> None:
    files(ctx.cwd, {"run.sh": "echo old\n"})
    (ctx.cwd / "run.sh").chmod(0o755)
    result = await call("write_file", ctx, path="run.sh", content="echo new\n")
    assert result.content == "Overwrote run.sh (9 bytes, 1 lines; it had 9 bytes)."
    assert (ctx.cwd / "run.sh").read_text() == "echo new\n"
    assert stat.S_IMODE((ctx.cwd / "run.sh").stat().st_mode) == 0o755
    assert sorted(os.listdir(ctx.cwd)) == ["run.sh"]  # no temporary file left


async def test_write_file_through_a_symlink_writes_the_target(ctx: ToolContext) -> None:
    files(ctx.cwd, {"real.txt": "old"})
    (ctx.cwd / "link.txt").symlink_to("real.txt")
    await call("write_file", ctx, path="link.txt", content="new")
    assert (ctx.cwd / "link.txt").is_symlink()
    assert (ctx.cwd / "real.txt").read_text() == "new"


async def test_write_file_on_a_folder(ctx: ToolContext) -> None:
    (ctx.cwd / "src").mkdir()
    err = await refused("write_file", ctx, path="src", content="x")
    assert (err.code, err.reason) == ("is_directory", "src is a folder; write_file writes a file.")


async def test_write_file_under_a_file_is_an_os_error(ctx: ToolContext) -> None:
    files(ctx.cwd, {"a.txt": "x"})
    err = await refused("write_file", ctx, path="a.txt/b.txt", content="x")
    assert (err.code, err.cls) == ("os_error", "terminal")
    assert err.reason.startswith("a.txt/b.txt: ")


# --- edit_file ----------------------------------------------------------------

SOURCE = "".join(f"line {n}\n" for n in range(1, 8)).replace("line 4", "timeout = 30")


async def test_edit_file_replaces_one_match_and_shows_context(ctx: ToolContext) -> None:
    files(ctx.cwd, {"app.py": SOURCE})
    result = await call(
        "edit_file", ctx, path="app.py", old_text="timeout = 30", new_text="timeout = 60\nretries = 2"
    )
    assert result.content == (
        "Edited app.py: replaced 1 occurrence at lines 4-5.\n"
        "    2\tline 2\n    3\tline 3\n    4\ttimeout = 60\n    5\tretries = 2\n    6\tline 5\n    7\tline 6"
    )
    assert (ctx.cwd / "app.py").read_text() == SOURCE.replace("timeout = 30", "timeout = 60\nretries = 2")


async def test_edit_file_replace_all(ctx: ToolContext) -> None:
    files(ctx.cwd, {"a.txt": "x = 1\ny = 2\nx = 1\n"})
    result = await call(
        "edit_file", ctx, path="a.txt", old_text="x = 1", new_text="x = 3", replace_all="true"
    )
    assert result.content.split("\n")[0] == "Edited a.txt: replaced 2 occurrences at lines 1, 3."
    assert (ctx.cwd / "a.txt").read_text() == "x = 3\ny = 2\nx = 3\n"


async def test_edit_file_several_matches_gives_their_lines(ctx: ToolContext) -> None:
    files(ctx.cwd, {"a.txt": "x = 1\ny = 2\nx = 1\nx = 1\n"})
    err = await refused("edit_file", ctx, path="a.txt", old_text="x = 1", new_text="x = 3")
    assert (err.code, err.field, err.reason, err.fix) == (
        "several_matches",
        "old_text",
        "old_text appears 3 times in a.txt, at lines 1, 3, 4.",
        "Add surrounding lines to make old_text unique, or set replace_all to true.",
    )
    assert (ctx.cwd / "a.txt").read_text() == "x = 1\ny = 2\nx = 1\nx = 1\n"


async def test_edit_file_no_match_shows_the_closest_lines(ctx: ToolContext) -> None:
    files(ctx.cwd, {"app.py": SOURCE})
    err = await refused("edit_file", ctx, path="app.py", old_text="line 3\n  timeout = 30", new_text="x")
    assert (err.code, err.field) == ("no_match", "old_text")
    assert err.reason == (
        "old_text was not found in app.py. The closest text is at lines 3-4:\n    3\tline 3\n    4\ttimeout = 30"
    )
    assert err.fix == (
        "old_text must match the file exactly, spaces and indentation included. Copy old_text from the lines above."
    )


async def test_edit_file_no_match_with_line_numbers_copied(ctx: ToolContext) -> None:
    files(ctx.cwd, {"app.py": SOURCE})
    err = await refused("edit_file", ctx, path="app.py", old_text="    4\ttimeout = 30", new_text="x")
    assert err.reason.endswith("The closest text is at line 4:\n    4\ttimeout = 30")
    assert "leave the numbers and the tab out" in err.fix


async def test_edit_file_no_match_and_nothing_alike(ctx: ToolContext) -> None:
    files(ctx.cwd, {"app.py": SOURCE})
    err = await refused("edit_file", ctx, path="app.py", old_text="completely different", new_text="x")
    assert err.reason == "old_text was not found in app.py, and nothing there looks like it."


async def test_edit_file_same_text(ctx: ToolContext) -> None:
    files(ctx.cwd, {"a.txt": "x"})
    err = await refused("edit_file", ctx, path="a.txt", old_text="x", new_text="x")
    assert (err.code, err.field) == ("no_change", "new_text")


async def test_edit_file_keeps_crlf_endings(ctx: ToolContext) -> None:
    files(ctx.cwd, {"a.txt": b"one\r\ntwo\r\nthree\r\n"})
    await call("edit_file", ctx, path="a.txt", old_text="one\ntwo", new_text="1\n2")
    assert (ctx.cwd / "a.txt").read_bytes() == b"1\r\n2\r\nthree\r\n"


EDIT_REFUSALS = [
    ({}, "missing.py", "not_found"),
    ({"bin.dat": b"\0\1\2"}, "bin.dat", "binary_file"),
    ({"late.txt": b"a" * 9000 + b"\xff"}, "late.txt", "binary_file"),  # not UTF-8 past the sniff window
    ({"src/a.py": "x"}, "src", "is_directory"),
]


@pytest.mark.parametrize(("tree", "path", "code"), EDIT_REFUSALS)
async def test_edit_file_refuses(ctx: ToolContext, tree: dict[str, Any], path: str, code: str) -> None:
    files(ctx.cwd, tree)
    err = await refused("edit_file", ctx, path=path, old_text="a", new_text="b")
    assert err.code == code


# --- list_files ---------------------------------------------------------------

TREE = {
    "README.md": "",
    "setup.py": "",
    "src/app.py": "",
    "src/util/io.py": "",
    "src/util/data.json": "",
    ".github/ci.yml": "",
    ".git/HEAD": "",
    "node_modules/x/index.js": "",
}

LISTINGS = [
    (
        {},
        ".github/\n.github/ci.yml\nREADME.md\nsetup.py\nsrc/\nsrc/app.py\nsrc/util/\nsrc/util/data.json\nsrc/util/io.py\n"
        "(Not searched: .git/, node_modules/; give one as path to list inside it.)",
    ),
    (
        {"pattern": "*.py"},
        "setup.py\n(Not searched: .git/, node_modules/; give one as path to list inside it.)",
    ),
    ({"pattern": "**/*.py", "path": "src"}, "src/app.py\nsrc/util/io.py"),
    ({"pattern": "util/*", "path": "src/"}, "src/util/data.json\nsrc/util/io.py"),
    ({"pattern": "**/*.[jy]s*", "path": "src"}, "src/util/data.json"),
    ({"pattern": "*", "path": "node_modules"}, "node_modules/x/"),
    (
        {"pattern": "*.rs", "path": "src"},
        "No files or folders match *.rs in src.\nTo look in every subfolder, use the pattern **/*.rs.",
    ),
]


@pytest.mark.parametrize(("args", "expected"), LISTINGS)
async def test_list_files(ctx: ToolContext, args: dict[str, Any], expected: str) -> None:
    files(ctx.cwd, TREE)
    assert (await call("list_files", ctx, **args)).content == expected


async def test_list_files_caps_the_listing(ctx: ToolContext) -> None:
    files(ctx.cwd, {f"f{n:03}.txt": "" for n in range(510)})
    lines = (await call("list_files", ctx)).content.split("\n")
    assert len(lines) == 501
    assert lines[-2:] == [
        "f499.txt",
        "(500 of 510 entries shown; narrow the pattern or the path to see the rest.)",
    ]


LIST_REFUSALS = [
    ({"path": "nowhere"}, "not_found", "nowhere does not exist."),
    ({"path": "README.md"}, "not_a_directory", "README.md is a file, not a folder."),
    ({"pattern": "/etc/*"}, "invalid_pattern", "pattern is relative to path; it cannot start with /."),
]


@pytest.mark.parametrize(("args", "code", "reason"), LIST_REFUSALS)
async def test_list_files_refuses(ctx: ToolContext, args: dict[str, Any], code: str, reason: str) -> None:
    files(ctx.cwd, TREE)
    err = await refused("list_files", ctx, **args)
    assert (err.code, err.reason) == (code, reason)


# Globs and paths: whether the glob matches the whole path, as list_files has always read it.
GLOB_CASES = [
    ("*.py", "a.py", True),
    ("*.py", "src/a.py", False),  # * does not cross folders
    ("**/*.py", "a.py", True),
    ("**/*.py", "src/util/a.py", True),
    ("src/**", "src/a/b", True),
    ("src/**", "src", False),
    ("**", "a/b/c", True),
    ("?.py", "a.py", True),
    ("?.py", "ab.py", False),
    ("?", "/", False),  # ? is one character other than /
    ("*?*?", "ab", True),
    ("*?*?", "a", False),
    ("a*?*?b", "a/xb", False),
    ("***", "a/b", True),  # ** then *
    ("**?**", "/", False),  # at least one character other than /
    ("**?**", "a/", True),
    ("**?*?**", "a/b", False),  # two in a row
    ("**?*?**", "/ab/", True),
    ("?**", "a/", True),
    ("**?", "a/", False),
    ("**/**/x", "x", True),
    ("**/**/x", "a/b/x", True),
    ("x/**/**", "x/a", True),
    ("[ab]*", "b.txt", True),
    ("[!ab]*", "b.txt", False),
    ("[]]", "]", True),
    ("[", "[", True),  # no closing bracket: a literal
    ("a.b", "axb", False),  # . is a dot
    ("[\\]", "\\", True),
]


@pytest.mark.parametrize(("glob", "path", "expected"), GLOB_CASES)
def test_glob_regex_matches_as_globs_do(glob: str, path: str, expected: bool) -> None:
    assert search.glob_regex(glob).match(path, patterns.Deadline()) is expected


def _glob_as_before(glob: str) -> re.Pattern[str]:
    """list_files' glob regex as it was: one quantifier per wildcard (it backtracked exponentially)."""
    out, i = [], 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] in "*?":
            out.append("[^/]*" if glob[i] == "*" else "[^/]")
            i += 1
        elif glob[i] == "[" and "]" in glob[i + 2 :]:
            end = glob.index("]", i + 2)
            body = glob[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)


@settings(max_examples=examples(2000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    glob=st.lists(
        st.sampled_from(["*", "?", "**", "**/", "/", "a", "b", ".", "[ab]", "[!a]", "[", "]"]), max_size=7
    ),
    paths=st.lists(st.text("ab/.[]", max_size=8), min_size=1, max_size=10),
)
def test_glob_regex_matches_what_it_matched_before(glob: list[str], paths: list[str]) -> None:
    # Small globs and paths, where the old regex ends quickly: the same answer for each.
    text = "".join(glob)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # re's "possible nested set" for "[[", then as now
        try:
            before = _glob_as_before(text)
        except re.error:
            with pytest.raises(re.error):
                search.glob_regex(text)
            return
        now = search.glob_regex(text)
    for path in paths:
        assert now.match(path, patterns.Deadline()) == (before.match(path) is not None), (text, path)


@pytest.mark.parametrize("pattern", ["*?" * 20 + "!", "*a" * 20 + "!", "**/" * 20 + "!", "?**" * 20 + "!"])
async def test_list_files_answers_a_glob_of_many_wildcards(ctx: ToolContext, pattern: str) -> None:
    # The fuzzing report's t6: the model alone (a read, no consent asked). In re, the first hung the daemon
    # on this name ([^/]*[^/] twenty times), the second takes C(40, 20) steps on the folder's name, the
    # third about as many on the deep path, the last more.
    deep = "/".join(["d"] * 40) + "/x"
    files(
        ctx.cwd,
        {"a_fairly_ordinary_but_long_file_name.txt": "", "a" * 40 + "/" + "a" * 20 + "/x": "", deep: ""},
    )
    result = await call("list_files", ctx, pattern=pattern)
    assert result.content.startswith(f"No files or folders match {pattern} in .")


async def test_list_files_answers_a_pattern_too_slow_to_match(ctx: ToolContext, monkeypatch) -> None:
    files(ctx.cwd, TREE)
    monkeypatch.setattr(patterns, "SECONDS", 0)  # every path's deadline has passed before it is matched
    err = await refused("list_files", ctx, pattern="**/*.py")
    assert (err.code, err.field, err.reason) == (
        "slow_pattern",
        "pattern",
        "pattern is too slow to match: one path took longer than 0 s.",
    )
    assert err.fix == "Use a simpler glob, with fewer * and ? in a row, such as **/*.py."


async def test_list_files_and_grep_walk_a_tree_deeper_than_the_recursion_limit(
    ctx: ToolContext, monkeypatch
) -> None:
    """A project's chain of folders deeper than Python's recursion limit (os.walk recursed: RecursionError
    out of the tool, an internal error that ended the turn) is walked to its end."""
    with chain(ctx.cwd) as bottom:
        (bottom / "deep.py").write_text("secret = 1\n")
        shown = "d/" * DEEP + "deep.py"
        assert (await call("list_files", ctx, pattern="**/*.py")).content == shown
        monkeypatch.setattr(search.shutil, "which", lambda name: None)  # grep's own walk, without ripgrep
        assert (await call("grep", ctx, pattern="secret")).content == f"{shown}:1:secret = 1"


async def test_list_files_stops_at_the_timeout(ctx: ToolContext) -> None:
    files(ctx.cwd, TREE)
    ctx.limits.timeout = 0
    err = await refused("list_files", ctx)
    assert (err.code, err.reason) == ("timeout", "list_files took longer than 0 seconds.")


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("[z-a]*", "pattern is not a glob mm can run: bad character range z-a at position 1."),
        ("a" * 10_001, "pattern is not a glob mm can run: too long: 10,001 characters; the limit is 10,000."),
    ],
)
async def test_list_files_refuses_a_glob_it_cannot_run(ctx: ToolContext, pattern: str, reason: str) -> None:
    err = await refused("list_files", ctx, pattern=pattern)
    assert (err.code, err.field, err.reason) == ("invalid_pattern", "pattern", reason)


# --- grep ---------------------------------------------------------------------

GREP_TREE: dict[str, str | bytes] = {
    "src/app.py": "import os\n\ndef main():\n    return Main()\n",
    "src/util.py": "def helper():\n    pass\n",
    "notes.md": "call main() here\n",
    ".hidden/secret.py": "def main(): pass\n",
    "logo.png": b"\x89PNG\0\0def main",
}


@pytest.fixture(params=["rg", "python"])
def grep_impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each grep test runs with ripgrep and with the Python fallback."""
    if request.param == "rg" and shutil.which("rg") is None:
        pytest.skip("ripgrep is not installed")
    if request.param == "python":
        monkeypatch.setattr(shutil, "which", lambda name: None)
    return request.param


GREPS = [
    ({"pattern": "def main"}, "src/app.py:3:def main():"),
    ({"pattern": "main", "path": "src"}, "src/app.py:3:def main():"),
    (
        {"pattern": "main", "ignore_case": True},
        "notes.md:1:call main() here\nsrc/app.py:3:def main():\nsrc/app.py:4:    return Main()",
    ),
    ({"pattern": r"def \w+", "glob": "*.py"}, "src/app.py:3:def main():\nsrc/util.py:1:def helper():"),
    ({"pattern": "main", "path": "notes.md"}, "notes.md:1:call main() here"),
    (
        {"pattern": "def", "max_results": 1},
        "src/app.py:3:def main():\n(Stopped after 1 matching lines; there are more. Narrow the pattern, path or glob.)",
    ),
    ({"pattern": "nothing here"}, "No matches for nothing here in .."),
    ({"pattern": "import", "glob": "*.md"}, "No matches for import in . (files matching *.md)."),
]


@pytest.mark.parametrize(("args", "expected"), GREPS)
async def test_grep(ctx: ToolContext, grep_impl: str, args: dict[str, Any], expected: str) -> None:
    files(ctx.cwd, GREP_TREE)
    result = await call("grep", ctx, **args)
    assert (result.ok, result.content) == (True, expected)


async def test_grep_cuts_long_lines(ctx: ToolContext, grep_impl: str) -> None:
    files(ctx.cwd, {"min.js": "x" * 600 + "needle\n"})
    result = await call("grep", ctx, pattern="needle")
    assert result.content == "min.js:1:" + "x" * 500 + " [... omitted end of long line]"


async def test_edit_file_never_cuts_a_file_that_grew_past_the_limit_after_its_size_was_read(
    ctx: ToolContext, monkeypatch
) -> None:
    # A log that grows between the look at its size and the read: read up to the limit, it would be
    # written back cut. It is refused whole instead.
    monkeypatch.setattr(file_tools, "MAX_EDIT_BYTES", 100)
    files(ctx.cwd, {"log.txt": "a line\n" * 10})
    real_open = file_tools.open_regular

    class GrowsBeforeTheRead:
        def __init__(self, path: Path) -> None:
            self.file = real_open(path)

        def __enter__(self) -> GrowsBeforeTheRead:
            return self

        def __exit__(self, *_: object) -> None:
            self.file.close()

        def fileno(self) -> int:
            return self.file.fileno()

        grown = False

        def read(self, most: int) -> bytes:
            if not self.grown:  # another process appends meanwhile
                self.grown = True
                with open(ctx.cwd / "log.txt", "a") as writer:
                    writer.write("more\n" * 20)
            return self.file.read(most)

    monkeypatch.setattr(file_tools, "open_regular", GrowsBeforeTheRead)
    err = await refused("edit_file", ctx, path="log.txt", old_text="a line", new_text="b", replace_all=True)
    assert (err.code, err.reason) == (
        "file_too_large",
        "log.txt is 101 bytes; edit_file edits files up to 100 bytes.",
    )
    assert (ctx.cwd / "log.txt").read_text() == "a line\n" * 10 + "more\n" * 20


async def test_grep_skips_a_fifo_and_searches_an_endless_line_in_bounded_memory(
    ctx: ToolContext, grep_impl: str
) -> None:
    # ripgrep skips what is not a file; so does the fallback, which would have hung in open() on the
    # pipe, and read a line of any length whole.
    files(ctx.cwd, {"a.txt": "needle\n", "long.txt": "x" * 3_000_000 + "needle\nneedle too\n"})
    os.mkfifo(ctx.cwd / "b.pipe")
    with writer_after(ctx.cwd / "b.pipe", 20) as waited:
        result = await call("grep", ctx, pattern="needle")
    assert not waited
    expected = ["a.txt:1:needle", "long.txt:2:needle too"]
    if grep_impl == "rg":  # ripgrep searches the whole line
        expected.insert(1, "long.txt:1:" + "x" * 500 + " [... omitted end of long line]")
    assert result.content.splitlines() == expected


async def test_grep_invalid_pattern(ctx: ToolContext, grep_impl: str) -> None:
    files(ctx.cwd, GREP_TREE)
    err = await refused("grep", ctx, pattern="main(")
    assert (err.code, err.field, err.cls) == ("invalid_pattern", "pattern", "fix_and_retry")
    assert err.reason.startswith("pattern is not a valid regular expression: ")
    assert "unclosed" in err.reason or "missing )" in err.reason


async def test_grep_answers_a_pattern_that_backtracks(ctx: ToolContext, grep_impl: str) -> None:
    # The model's pattern over a file's lines: 2**40 ways to fail on this line, which Python's re tried
    # all of, holding the GIL. ripgrep's engine is linear; the fallback stops at the line's deadline.
    files(ctx.cwd, {"a.txt": "a" * 40 + "!\n"})
    if grep_impl == "rg":
        assert (await call("grep", ctx, pattern="^(a|a)+$")).content == "No matches for ^(a|a)+$ in .."
        return
    err = await refused("grep", ctx, pattern="^(a|a)+$")
    assert (err.code, err.field) == ("slow_pattern", "pattern")
    assert err.reason == "pattern is too slow: searching one line took longer than 0.2 s."
    assert err.fix.startswith("Use a simpler regular expression: a repeat inside a repeat")


async def test_grep_without_rg_refuses_a_pattern_too_complex(ctx: ToolContext, monkeypatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    files(ctx.cwd, GREP_TREE)
    err = await refused("grep", ctx, pattern="(?:a{1000}){1000}")
    assert (err.code, err.field) == ("invalid_pattern", "pattern")
    assert err.reason.startswith("pattern is not a valid regular expression: too complex:")


async def test_grep_without_rg_reads_a_glob_of_unclosed_brackets_in_linear_time(
    ctx: ToolContext, monkeypatch
) -> None:
    # fnmatch scanned to the end of this 400 KB glob once for each of its 200,000 "[": hours.
    monkeypatch.setattr(shutil, "which", lambda name: None)
    files(ctx.cwd, GREP_TREE)
    result = await call("grep", ctx, pattern="main", glob="[a" * 200_000)
    assert result.content.startswith("No matches for main in . (files matching [a[a")


async def test_grep_without_rg_stops_at_the_timeout(ctx: ToolContext, monkeypatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    files(ctx.cwd, GREP_TREE)
    ctx.limits.timeout = 0
    err = await refused("grep", ctx, pattern="main")
    assert (err.code, err.reason) == ("timeout", "grep took longer than 0 seconds.")


async def test_grep_missing_path(ctx: ToolContext, grep_impl: str) -> None:
    files(ctx.cwd, GREP_TREE)
    err = await refused("grep", ctx, pattern="x", path="scr")
    assert (err.code, err.reason, err.fix) == (
        "not_found",
        "scr does not exist.",
        "Did you mean src? Use list_files to see what exists.",
    )


async def test_grep_with_rg_reads_no_more_of_its_output_than_it_shows(ctx: ToolContext, monkeypatch) -> None:
    # rg's --max-count bounds each file only: a pattern such as "." over a large tree printed gigabytes
    # into the daemon's memory before the timeout. The reading stops once the lines shown and one more
    # came: here 6 of the 9,000 lines (3.7 MB) rg would print, in reads of at most a pipe's 1 MiB.
    if shutil.which("rg") is None:
        pytest.skip("ripgrep is not installed")
    for i in range(3000):
        (ctx.cwd / f"f{i:04}.txt").write_text(("x" * 400 + "\n") * 3)
    read: list[int] = []

    async def counted(*args: Any, **kwargs: Any) -> tuple[bytes, bytes, int | None]:
        out = await real(*args, **kwargs)
        read.append(len(out[0]))
        return out

    real = search.communicate
    monkeypatch.setattr(search, "communicate", counted)
    result = await call("grep", ctx, pattern="x", max_results=5)
    lines = result.content.splitlines()
    assert lines[0] == "f0000.txt:1:" + "x" * 400 and lines[5].startswith("(Stopped after 5 matching lines")
    assert read and read[0] <= 2 * 1024 * 1024


async def test_grep_with_rg_stops_at_the_timeout(ctx: ToolContext) -> None:
    if shutil.which("rg") is None:
        pytest.skip("ripgrep is not installed")
    files(ctx.cwd, GREP_TREE)
    ctx.limits.timeout = 0
    err = await refused("grep", ctx, pattern="main")
    assert (err.code, err.reason, err.fix) == (
        "timeout",
        "grep took longer than 0 seconds.",
        "Search a smaller path, or add a glob.",
    )
