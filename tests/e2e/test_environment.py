"""mm on an odd but ordinary machine: long paths, unusual locales, odd XDG settings, closed streams.

Each test runs the real ``mm`` (and where it matters the real ``mmd`` and Neovim) in an environment a
newcomer may well have, and asserts that it works, or that what the person reads says what to do next:
never a Python traceback, never "see the log" where the log holds only a traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .conftest import environ_with, needs_nvim, nvim_request, run_mm


def _stop(cwd) -> None:
    stopped = run_mm("daemon", "stop", cwd=cwd)
    assert stopped.returncode == 0, stopped.stderr


def test_a_runtime_dir_past_the_unix_socket_limit_works(mm_home, scripted, monkeypatch):
    """XDG_RUNTIME_DIR so long its socket path is past 107 bytes: the daemon binds, `mm` and Neovim connect,
    each through the folder's /proc/self/fd/N (mmd/rpc/unix.py)."""
    runtime = mm_home / ("r" * 100)
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert len(str(runtime / "mm" / "mmd.sock")) > 107
    scripted([{"text": "Hello from a long path."}])
    try:
        result = run_mm("-p", "hello", cwd=mm_home / "work")
        assert result.returncode == 0, result.stderr
        assert result.stdout == "Hello from a long path.\n"
        assert (runtime / "mm" / "mmd.sock").is_socket()
        status = run_mm("daemon", "status", cwd=mm_home / "work")
        assert status.returncode == 0 and str(runtime / "mm" / "mmd.sock") in status.stdout
    finally:
        _stop(mm_home / "work")
    assert not (runtime / "mm" / "mmd.sock").exists()


@needs_nvim
def test_neovim_reaches_a_daemon_on_a_socket_path_past_the_limit(mm_home, monkeypatch):
    runtime = mm_home / ("r" * 100)
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    started = run_mm("daemon", "start", cwd=mm_home / "work")
    assert started.returncode == 0, started.stderr
    try:
        got = nvim_request({}, mm_home / "work")
    finally:
        _stop(mm_home / "work")
    assert got["answered"], got


def test_a_socket_file_name_past_the_limit_says_what_to_do(mm_home, monkeypatch):
    """A name no folder can make short enough: the message names the path, its length, the limit and
    MM_SOCKET, and the log holds the same line, not a traceback."""
    sock = mm_home / "run" / ("s" * 110)
    monkeypatch.setenv("MM_SOCKET", str(sock))
    result = run_mm("-p", "hello", cwd=mm_home / "work")
    assert result.returncode == 1
    length = len(str(sock))
    assert f"the socket path {sock} is {length} bytes, past the 107" in result.stderr
    assert "set MM_SOCKET to a shorter path" in result.stderr
    assert "Traceback" not in result.stderr
    log = (mm_home / "state" / "mm" / "mmd.log").read_text()
    assert "Traceback" not in log


@pytest.mark.parametrize("command", [("daemon", "status"), ("sessions", "list")])
def test_a_socket_file_name_past_the_limit_for_other_commands(mm_home, monkeypatch, command):
    monkeypatch.setenv("MM_SOCKET", str(mm_home / "run" / ("s" * 110)))
    (mm_home / "run" / ("s" * 110)).touch(mode=0o600)  # a file there: the connect is tried, and refused so
    result = run_mm(*command, cwd=mm_home / "work")
    assert result.returncode == 1
    assert "past the 107" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("variable", ["XDG_STATE_HOME", "XDG_RUNTIME_DIR"])
def test_an_xdg_folder_that_is_a_file_says_what_to_do(mm_home, monkeypatch, variable):
    """XDG_STATE_HOME or XDG_RUNTIME_DIR naming a file (a typo, a leftover): a message naming the file and the
    variable, from the client or quoted from the daemon; no traceback, in the terminal or the log."""
    in_the_way = mm_home / "a-file"
    in_the_way.write_text("")
    monkeypatch.setenv(variable, str(in_the_way))
    result = run_mm("-p", "hello", cwd=mm_home / "work")
    assert result.returncode == 1
    assert f"cannot make the folder {in_the_way}/mm: {in_the_way} is a file, not a folder" in result.stderr
    assert variable in result.stderr
    assert "Traceback" not in result.stderr
    log = mm_home / "state" / "mm" / "mmd.log"
    assert not log.exists() or "Traceback" not in log.read_text()


# -- names, words and locales that are not UTF-8 ------------------------------------------------------------


def _mm(*args: str | bytes, cwd, env: dict[str, str | None] | None = None, **streams):
    """The real ``mm`` with argv as bytes where given, *env* changes made; *streams* as subprocess takes them."""
    streams.setdefault("stdin", subprocess.DEVNULL)
    streams.setdefault("stdout", subprocess.PIPE)
    streams.setdefault("stderr", subprocess.PIPE)
    return subprocess.run(
        [sys.executable, "-m", "mm", *args], cwd=cwd, env=environ_with(env or {}), timeout=60, **streams
    )


def test_file_names_that_are_not_utf8_are_listed_with_their_bytes_escaped(mm_home, scripted):
    """A Latin-1 file name in the project (an old archive): list_files lists it, as escapes the model reads,
    where the whole call was an internal error (the store and the wire carry UTF-8 only)."""
    work = mm_home / "work"
    (work / os.fsdecode(b"caf\xe9.txt")).write_text("")
    (work / "plain.txt").write_text("")
    server = scripted(
        [
            {"text": "", "tool_calls": [{"name": "list_files", "arguments": {"pattern": "*"}}]},
            {"text": "Listed."},
        ]
    )
    try:
        result = _mm("-p", "list", cwd=work)
    finally:
        _stop(work)
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"Listed.\n"
    told = server.requests()[1]["body"]["messages"][-1]["content"]
    assert "caf\\xe9.txt" in told and "plain.txt" in told


def test_a_current_folder_that_is_not_utf8_says_what_to_do(mm_home):
    folder = mm_home / "work" / os.fsdecode(b"d\xe9j\xe0")
    folder.mkdir()
    result = _mm("-p", "hello", cwd=folder)
    assert result.returncode == 1
    said = result.stderr.decode()
    assert "the current directory's path is not UTF-8 (" in said and "d\\xe9j\\xe0)" in said
    assert "rename the folder" in said and "Traceback" not in said


def test_a_prompt_word_that_is_not_utf8_is_replaced(mm_home, scripted):
    """A Latin-1 é typed under LANG=C reaches mm as a byte that is no UTF-8: replaced, as on stdin."""
    server = scripted([{"text": "Fine."}])
    try:
        result = _mm("-p", b"caf\xe9 ok", cwd=mm_home / "work")
    finally:
        _stop(mm_home / "work")
    assert result.returncode == 0, result.stderr
    assert server.requests()[0]["body"]["messages"][-1]["content"] == "caf\ufffd ok"


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_an_answer_the_locale_cannot_encode_is_written_with_escapes(mm_home, scripted, encoding):
    """Under a locale whose encoding has no ✓ (PYTHONIOENCODING stands in for LANG=de_DE.ISO-8859-1): the
    answer is written with escapes, as Python writes stderr, not lost to a UnicodeEncodeError."""
    scripted([{"text": "Done \u2713 caf\u00e9"}])
    try:
        result = _mm("-p", "hello", cwd=mm_home / "work", env={"PYTHONIOENCODING": encoding})
    finally:
        _stop(mm_home / "work")
    assert result.returncode == 0, result.stderr
    expected = "Done \\u2713 caf\u00e9\n" if encoding == "latin-1" else "Done \\u2713 caf\\xe9\n"
    assert result.stdout == expected.encode(encoding)


# -- closed standard streams -----------------------------------------------------------------------------

CLOSING = (
    "import os, sys; os.close({fd}); os.execv(sys.executable, [sys.executable, '-m', 'mm', *sys.argv[1:]])"
)


@pytest.mark.parametrize("fd", [0, 1, 2])
def test_mm_runs_with_a_standard_stream_closed(mm_home, scripted, fd):
    """`mm -p ... <&-` (or >&-, 2>&-), as a launcher that closes them starts it: the turn runs and ends
    with its exit status; a closed stream reads or writes nothing (it is /dev/null)."""
    scripted(
        [
            {"text": "Looking.", "tool_calls": [{"name": "list_files", "arguments": {"pattern": "*"}}]},
            {"text": "Answered."},
        ]
    )  # a tool call: its echo goes to stderr
    code = CLOSING.format(fd=fd)
    try:
        result = subprocess.run(
            [sys.executable, "-c", code, "-p", "hello"],
            cwd=mm_home / "work",
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
        )
    finally:
        _stop(mm_home / "work")
    assert result.returncode == 0, result.stderr
    assert b"Traceback" not in result.stderr
    assert result.stdout == (b"" if fd == 1 else b"Answered.\n")


def test_a_folder_where_the_socket_goes_says_what_to_do(mm_home):
    sock = mm_home / "run" / "mm" / "mmd.sock"
    sock.mkdir(parents=True)
    sock.parent.chmod(0o700)
    result = run_mm("-p", "hello", cwd=mm_home / "work")
    assert result.returncode == 1
    assert f"{sock} is a folder, where mmd's socket goes: remove it (`rmdir {sock}`)" in result.stderr
    assert "Traceback" not in (mm_home / "state" / "mm" / "mmd.log").read_text()


def test_a_relative_mm_socket_is_taken_from_the_current_folder(mm_home, monkeypatch):
    """MM_SOCKET=run/mmd.sock: the daemon a client starts (in /) binds it where the client looks, not under /."""
    work = mm_home / "work"
    (work / "sockets").mkdir(mode=0o700)
    monkeypatch.setenv("MM_SOCKET", "sockets/mmd.sock")
    started = run_mm("daemon", "start", cwd=work)
    try:
        assert started.returncode == 0, started.stderr
        assert (work / "sockets" / "mmd.sock").is_socket()
        status = run_mm("daemon", "status", cwd=work)
        assert f"socket: {work}/sockets/mmd.sock" in status.stdout
    finally:
        _stop(work)


def test_skill_folders_whose_names_are_not_utf8_are_listed_read_and_warned_of(mm_home, scripted):
    """Names the daemon finds itself (a skills folder's entries) reach the store, the wire and the model
    escaped: `mm skills list` lost its connection to the daemon, whose answer could not be encoded, and a
    warning naming such a folder could not be stored (every encoder of the daemon's output: messages.packed)."""
    work = mm_home / "work"
    skills = work / ".claude" / "skills"
    good, bad = skills / os.fsdecode(b"caf\xe9"), skills / os.fsdecode(b"b\xe9d")
    good.mkdir(parents=True)
    bad.mkdir()
    (good / "SKILL.md").write_text("---\nname: cafe\ndescription: Brews coffee.\n---\nGrind, then brew.\n")
    (bad / "SKILL.md").write_bytes(
        b"---\nname: bad\ndescription: caf\xe9\n---\n"
    )  # not UTF-8: skipped, warned
    server = scripted(
        [
            {"text": "", "tool_calls": [{"name": "read_skill", "arguments": {"name": "cafe"}}]},
            {"text": "Read."},
        ]
    )
    try:
        listed = run_mm("skills", "list", cwd=work)
        result = run_mm("-p", "coffee", cwd=work)
    finally:
        _stop(work)
    assert listed.returncode == 0, listed.stderr
    assert "cafe" in listed.stdout and ".claude/skills/caf\\xe9" in listed.stdout
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Read.\n"
    assert "b\\xe9d/SKILL.md: cannot be read" in result.stderr
    assert "Grind, then brew." in server.requests()[1]["body"]["messages"][-1]["content"]
