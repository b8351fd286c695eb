"""The supervisor, with real processes: results, spawn errors, and no survivor ever.

Its stress tests (a hundred cancelled trees, a gigabyte of output) are in tests/e2e/test_supervisor_stress.py.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

import mmd.procs
from mmd.procs import ProcResult, cspawn, environ, supervised_process, supervisor
from mmd.sandbox import Sandbox, support

from ... import process_trees
from ...process_trees import GRACE, cancel_tree_once, gone, run, tree_command, tree_pids


@pytest.fixture(autouse=True, params=["scan", "subreaper", "confined"])
def mode(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Every test runs three ways: descendants found by a watcher and a /proc scan, as a subreaper, and
    as a subreaper whose run_tool_process calls are confined to a sandbox (as the daemon's default prompt
    runs them: the child is started by a confined spawner thread; the other two by the unconfined one).

    As a subreaper the test process inherits the orphans: the check below then also fails on
    one the supervisor left unreaped (a zombie is still a child).
    """
    if request.param == "confined":
        if not support().available:
            pytest.skip("the kernel offers no Landlock")
        monkeypatch.setattr(process_trees, "confine_to", Sandbox(roots=(str(tmp_path),)))
    if request.param != "scan":
        assert mmd.procs.become_subreaper()
    try:
        yield "subreaper" if request.param == "confined" else request.param
        assert psutil.Process().children(recursive=True) == []
    finally:
        mmd.procs.become_subreaper(False)


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_public_surface() -> None:
    assert set(mmd.procs.__all__) == {
        "NUL_SHOWN",
        "TAG_VAR",
        "OutputCapture",
        "ProcResult",
        "become_subreaper",
        "communicate",
        "guard",
        "reap_orphans",
        "run_tool_process",
        "set_owner",
        "spawn_error_message",
        "stop_orphans",
        "supervised_process",
        "sweep_orphans",
    }


def test_sweep_orphans_stops_only_the_owners_processes() -> None:
    import subprocess

    def start(tag: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, mmd.procs.TAG_VAR: tag}
        return subprocess.Popen(["sleep", "1000"], env=env, start_new_session=True)

    # Owners of this test alone: the test runs twice (both modes), maybe at once in two workers.
    a, b = f"owner-a{os.getpid()}", f"owner-b{os.getpid()}"
    mine, other = start(f"{a}.1234"), start(f"{b}.1234")
    try:
        swept = mmd.procs.sweep_orphans(a)
        assert swept == [mine.pid]
        mine.wait(5)  # returns: the sweep stopped it (and reaped it, so no status is left)
        assert other.poll() is None
    finally:
        for proc in (mine, other):
            proc.kill()
            proc.wait()


def test_a_process_held_long_in_the_middle_of_its_exec_is_still_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # On a loaded machine a child can sit for milliseconds between the exec's swap of memory and its new
    # stack, environment and command line both empty: the sweep looks on (5 ms was once too short in CI).
    owner = f"owner-held{os.getpid()}"
    env = {**os.environ, mmd.procs.TAG_VAR: f"{owner}.1"}
    proc = subprocess.Popen(["sleep", "1000"], env=env, start_new_session=True)
    real = supervisor._read_proc
    held_until = time.monotonic() + 0.05  # 50 ms of an exec that has not set up the new stack yet

    def in_exec(pid: int, name: str) -> bytes:
        if pid == proc.pid and name in ("environ", "cmdline") and time.monotonic() < held_until:
            return b""
        return real(pid, name)

    monkeypatch.setattr(supervisor, "_read_proc", in_exec)
    try:
        assert mmd.procs.sweep_orphans(owner, grace=0.5) == [proc.pid]
    finally:
        proc.kill()
        proc.wait()


def test_a_tagged_process_swept_in_the_middle_of_its_exec_is_found() -> None:
    import subprocess

    # Popen returns once the child's exec has begun, and for a moment after that its environment reads
    # empty (about 3 spawns in 100 here): the sweep looks again at a process that young.
    missed = 0
    for i in range(150):
        owner = f"owner-young{os.getpid()}-{i}"
        env = {**os.environ, mmd.procs.TAG_VAR: f"{owner}.1"}
        proc = subprocess.Popen(["sleep", "1000"], env=env, start_new_session=True)
        try:
            missed += mmd.procs.sweep_orphans(owner, grace=0.5) != [proc.pid]
        finally:
            proc.kill()
            proc.wait()
    assert missed == 0


async def test_exit_code_and_output(tmp_path: Path) -> None:
    events: list[tuple[str, str]] = []
    result = await run(
        ["bash", "-c", "echo out; sleep 0.1; echo err >&2; exit 3"],
        tmp_path,
        on_output=lambda s, t: events.append((s, t)),
    )
    assert (result.exit_code, result.signal, result.timed_out) == (3, None, False)
    assert result.output == "out\nerr\n"
    assert (result.total_bytes, result.total_lines, result.truncated) == (8, 2, False)
    assert events == [("stdout", "out\n"), ("stderr", "err\n")]
    assert result.spill_path is None and not (tmp_path / "spill.log").exists()
    assert result.spawn_error is None and result.duration > 0


async def test_signal_is_reported(tmp_path: Path) -> None:
    result = await run(py("import os, signal; os.kill(os.getpid(), signal.SIGTERM)"), tmp_path)
    assert (result.exit_code, result.signal) == (None, 15)
    result = await run(["bash", "-c", "kill -9 $$"], tmp_path)
    assert (result.exit_code, result.signal) == (None, 9)


async def test_env_cwd_and_stdin(tmp_path: Path) -> None:
    code = (
        "import os; e = os.environ;"
        "print(e['MM_SESSION_ID'], e['MM_TOOL_CALL_ID'], 'PATH' in e, 'MM_PROC_TAG' in e);"
        "print(os.getcwd()); print(os.path.realpath('/proc/self/fd/0'))"
    )
    env = {"MM_SESSION_ID": "s-1", "MM_TOOL_CALL_ID": "c-7"}
    result = await run(py(code), tmp_path, env=env)
    assert result.output.splitlines() == ["s-1 c-7 True True", str(tmp_path.resolve()), "/dev/null"]


@pytest.mark.parametrize("closing", ["closefrom", "close_range", "one-by-one"])
async def test_a_child_gets_its_three_descriptors_a_session_and_the_default_signals(
    tmp_path: Path, closing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What Popen gives a child (close_fds, start_new_session, restore_signals) a child started by
    # posix_spawn gets too: no descriptor of the daemon but its stdio, even one left inheritable (as
    # one inherited at the daemon's start is), its own session and group, SIGPIPE and SIGXFSZ not ignored
    # (Python ignores them), and the daemon's working directory left where it was. Each way of closing
    # the rest: glibc 2.34's close-from action, close_range (Linux 5.11), a close action for each.
    if closing == "closefrom" and not cspawn.CLOSEFROM:
        pytest.skip("this C library has no posix_spawn_file_actions_addclosefrom_np")
    monkeypatch.setattr(cspawn, "CLOSEFROM", closing == "closefrom")
    monkeypatch.setattr(cspawn, "_close_range_works", closing == "close_range")
    r, w = os.pipe()
    os.set_inheritable(r, True)
    os.set_inheritable(w, True)
    code = (
        "import os, json; fds = [os.readlink(f'/proc/self/fd/{f}') for f in range(64) if os.path.lexists("
        "f'/proc/self/fd/{f}')];"
        "print(json.dumps([fds, os.getsid(0) == os.getpid() == os.getpgid(0)]))"
    )
    cwd, before = tmp_path / "sub", os.getcwd()
    cwd.mkdir()
    try:
        result = await run(py(code), tmp_path, cwd=cwd)
    finally:
        os.close(r)
        os.close(w)
    fds, leader = json.loads(result.output)
    assert fds[0] == "/dev/null" and len(fds) == 3 and leader is True  # stdin, stdout, stderr
    assert os.getcwd() == before
    # Python ignores both at its own start: a program that is not Python shows what it was given.
    status = await run(["grep", "SigIgn", "/proc/self/status"], tmp_path)
    assert int(status.output.split()[1], 16) & (1 << (signal.SIGPIPE - 1) | 1 << (signal.SIGXFSZ - 1)) == 0


async def test_the_event_loop_runs_on_while_a_child_is_being_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A spawn lasts until the child has exec'd, and an exec can wait on a slow or hung file system (a
    # project on NFS): no session of the daemon may stop with it. Here the child's start is made slow
    # without one: the C library tries each of 60,000 missing folders of PATH (a relative "x") in the child
    # before the real one, tens of ms, while a task of the same trio run looks at this process's children.
    # It must see the child before its exec (the program it runs is still this Python): os.posix_spawn held
    # the GIL until the exec, and Popen ran in the loop's thread, so no task ran while a child was starting.
    monkeypatch.setenv("PATH", ":".join(["x"] * 60_000) + ":" + os.environ["PATH"])  # under 128 KiB
    me = psutil.Process()
    python, seen = me.exe(), []

    async def look() -> None:
        while True:
            for child in me.children():
                with contextlib.suppress(psutil.Error):
                    if child.exe() == python:
                        seen.append(child.pid)
            await trio.sleep(0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(look)
        result = await run(["true"], tmp_path)
        nursery.cancel_scope.cancel()
    assert result.exit_code == 0 and result.spawn_error is None
    assert seen


async def test_a_relative_working_directory_is_the_callers_whatever_the_last_spawn_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A spawner thread chdirs to each child's folder: a relative one must still name the daemon's.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path)
    assert (await run(["pwd"], tmp_path, cwd=tmp_path / "a")).output == f"{tmp_path / 'a'}\n"
    assert (await run(["pwd"], tmp_path, cwd=Path("b"))).output == f"{tmp_path / 'b'}\n"


async def test_a_child_given_another_path_finds_its_program_there(tmp_path: Path) -> None:
    # posix_spawnp searches this process's PATH: a child given another one is started by Popen, which
    # searches the child's, as every spawn did before.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "mm-test-own-tool"
    tool.write_text("#!/bin/sh\necho own tool\n")
    tool.chmod(0o755)
    result = await run(["mm-test-own-tool"], tmp_path, env={"PATH": f"{bindir}:{os.environ['PATH']}"})
    assert (result.exit_code, result.output) == (0, "own tool\n")
    assert (await run(["mm-test-own-tool"], tmp_path)).spawn_error == "command not found: mm-test-own-tool"
    # A program named by a relative path is found from the child's working directory.
    assert (await run(["./mm-test-own-tool"], tmp_path, cwd=bindir)).output == "own tool\n"
    assert (
        await run(["./mm-test-own-tool"], tmp_path)
    ).spawn_error == "command not found: ./mm-test-own-tool"


# What the children print of a few variables: present or not, and the value when present.
SHOW_ENV = "import os, json; print(json.dumps({k: os.environ.get(k) for k in %r}))"


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("OPENAI_API_KEY", True),
        ("GITHUB_TOKEN", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("AWS_SESSION_TOKEN", True),
        ("PGPASSWORD", True),
        ("MY_APIKEY", True),
        ("DB_PASSWD", True),
        ("GH_PAT", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("anthropic_api_key", True),
        ("ANTHROPIC_AUTH", True),
        ("NPM_CONFIG__AUTH", True),
        ("npm_config_//registry.npmjs.org/:_authToken", True),
        ("NGROK_AUTHTOKEN", True),
        ("DOCKER_AUTH_CONFIG", True),
        ("SENTRY_DSN", True),
        ("MYSQL_PWD", True),
        ("OLDPWD", False),
        ("PATH", False),
        ("HOME", False),
        ("KEYTIMEOUT", False),
        ("TOKENIZERS_PARALLELISM", False),
        ("SSH_AUTH_SOCK", False),
        ("PWD", False),
        ("XKB_DEFAULT_KEYMAP", False),
    ],
)
def test_secret_looking_names(name: str, secret: bool) -> None:
    assert environ.looks_secret(name) is secret


def test_the_names_judged_are_kept_within_a_bound() -> None:
    # Names come from the daemon's environment and every config it read (MCP env: entries): kept all,
    # a daemon that read many configs kept every name for its life.
    for n in range(5000):
        environ.looks_secret(f"SOME_NAME_{n}")
    assert environ.looks_secret.cache_info().currsize <= 1024
    assert environ.looks_secret("GITHUB_TOKEN") and not environ.looks_secret("PATH")


def test_child_environment_withholds_secrets_and_passes_what_is_named() -> None:
    source = {"PATH": "/bin", "OPENAI_API_KEY": "k", "MY_LLM": "v", "PLAIN": "p"}
    environ.withhold(["MY_LLM", "PATH"])  # PATH is essential: never withheld
    got = environ.child_environment({"MM_IDEMPOTENCY_KEY": "mm-1"}, environ=source)
    assert got == {"PATH": "/bin", "PLAIN": "p", "MM_IDEMPOTENCY_KEY": "mm-1"}  # mm's own key stays
    passed = environ.child_environment({}, environ=source, pass_env=["OPENAI_API_KEY"])
    assert passed == {"PATH": "/bin", "PLAIN": "p", "OPENAI_API_KEY": "k"}
    bare = environ.child_environment({"X": "1"}, inherit=False, environ=source, pass_env=["MY_LLM", "NOPE"])
    assert bare == {"MY_LLM": "v", "X": "1"}


async def test_children_never_inherit_a_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MMTEST_SUPERVISOR_TOKEN", "tok-1")
    monkeypatch.setenv("MMTEST_SUPERVISOR_PLAIN", "plain")
    names = ["MMTEST_SUPERVISOR_TOKEN", "MMTEST_SUPERVISOR_PLAIN"]
    result = await run(py(SHOW_ENV % names), tmp_path)
    assert json.loads(result.output) == {names[0]: None, names[1]: "plain"}
    result = await run(py(SHOW_ENV % names), tmp_path, pass_env=[names[0]])
    assert json.loads(result.output) == {names[0]: "tok-1", names[1]: "plain"}
    argv = py(SHOW_ENV % names)
    async with supervised_process(argv, cwd=tmp_path, env={}, stdin=None, grace=GRACE) as proc:
        out = await proc.stdout.receive_some(4096)
        await proc.wait()
    assert json.loads(out) == {names[0]: None, names[1]: "plain"}


def test_the_daemons_kept_environment_follows_every_change(monkeypatch: pytest.MonkeyPatch) -> None:
    # child_environment keeps the filtered os.environ between spawns: a variable set, changed or
    # removed since, or a name withheld since, must show in the very next child's environment.
    name = "MMTEST_KEPT_PLAIN"
    monkeypatch.setattr(environ, "_withheld", set())  # withhold() lasts the process's life
    monkeypatch.delenv(name, raising=False)
    assert name not in environ.child_environment({})
    monkeypatch.setenv(name, "one")
    assert environ.child_environment({})[name] == "one"
    monkeypatch.setenv(name, "two")  # same names, another value
    assert environ.child_environment({})[name] == "two"
    environ.withhold([name])
    assert name not in environ.child_environment({})
    assert environ.child_environment({}, pass_env=[name])[name] == "two"
    monkeypatch.setenv("MMTEST_KEPT_OTHER", "x")
    monkeypatch.delenv(name)
    got = environ.child_environment({"X": "1"})
    assert name not in got and got["MMTEST_KEPT_OTHER"] == "x" and got["X"] == "1"
    got["MMTEST_KEPT_OTHER"] = "changed"  # a child's dict is its own: the cache is not touched
    assert environ.child_environment({})["MMTEST_KEPT_OTHER"] == "x"


async def test_invalid_utf8_and_nul(tmp_path: Path) -> None:
    code = (
        "import sys, time; out = sys.stdout.buffer;"
        "out.write(b'bad \\xff nul \\0 euro \\xe2'); out.flush(); time.sleep(0.1);"
        "out.write(b'\\x82\\xac end\\n')"
    )
    events: list[str] = []
    result = await run(py(code), tmp_path, on_output=lambda s, t: events.append(t))
    assert result.output == "bad \ufffd nul \\0 euro € end\n"
    assert "".join(events) == result.output
    assert result.total_bytes == len(b"bad \xff nul \0 euro \xe2\x82\xac end\n")


async def test_truncation_keeps_spill_file_with_every_byte(tmp_path: Path) -> None:
    result = await run(["seq", "1", "5000"], tmp_path, max_bytes=200, max_lines=20)
    data = b"".join(b"%d\n" % i for i in range(1, 5001))
    assert result.truncated and result.spill_path == str(tmp_path / "spill.log")
    assert Path(result.spill_path).read_bytes() == data
    assert (result.total_bytes, result.total_lines) == (len(data), 5000)
    lines = result.output.splitlines()
    assert lines[:10] == [str(i) for i in range(1, 11)]
    assert lines[11:] == [str(i) for i in range(4991, 5001)]
    m = re.fullmatch(r"\[\.\.\. ([\d,]+) bytes / ([\d,]+) lines cut \(lines 11–4,990\); .*\]", lines[10])
    assert m, lines[10]
    shown = b"".join(b"%d\n" % i for i in [*range(1, 11), *range(4991, 5001)])
    assert int(m.group(1).replace(",", "")) + len(shown) == len(data)
    assert int(m.group(2).replace(",", "")) == 4980
    assert result.spill_path in lines[10]


async def test_a_pipe_is_made_larger_only_once_a_command_fills_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A few lines leave both pipes at the kernel's default size (no fcntl a call); a flood makes the pipe it
    # fills larger once, at the first read that finds it full, and every byte still arrives.
    asked: list[tuple[int, int]] = []
    real_fcntl = supervisor.fcntl.fcntl

    def fcntl(fd: int, cmd: int, arg: int = 0) -> Any:
        if cmd == supervisor.fcntl.F_SETPIPE_SZ:
            asked.append((fd, arg))
        return real_fcntl(fd, cmd, arg)

    monkeypatch.setattr(supervisor.fcntl, "fcntl", fcntl)
    small = await run(["bash", "-c", "echo out; echo err >&2"], tmp_path)
    assert sorted(small.output.splitlines()) == ["err", "out"] and asked == []
    flood = await run(["bash", "-c", "head -c 3000000 /dev/zero; echo err >&2"], tmp_path, max_bytes=100)
    assert flood.total_bytes == 3_000_004
    assert [size for _fd, size in asked] == [supervisor.PIPE_SIZE]  # stdout's, once; stderr's stays small


async def test_timeout_stops_the_group(tmp_path: Path) -> None:
    result = await run(["bash", "-c", "echo started; sleep 1000"], tmp_path, timeout=0.5)
    assert result.timed_out and result.exit_code is None and result.signal == 15
    assert result.output == "started\n"


async def test_a_flood_of_output_neither_starves_the_loop_nor_escapes_the_timeout_or_a_cancel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The read loop reads on without yielding while bytes are there. Here they always are: the child
    # floods its pipe and every read of a pipe returns 64 KiB at once without taking any, so the pipe
    # stays readable and only the loop's own checkpoints can let another task run. A task that counts
    # its turns must get one at least every 4 MiB read, and the timeout and a cancel must still land.
    real_read, real_init = os.read, supervisor._Outputs.__init__
    reads_since_turn = [0]
    output_fds: set[int] = set()

    def init(self: Any, tree: Any, capture: Any) -> None:
        real_init(self, tree, capture)
        output_fds.clear()
        output_fds.update(self.names)

    def endless(fd: int, n: int) -> bytes:
        if fd not in output_fds:
            return real_read(fd, n)
        reads_since_turn[0] += 1
        if reads_since_turn[0] > 64:
            raise AssertionError("4 MiB read without letting another task run")
        return b"y\n" * (32 * 1024)

    async def other_task() -> None:
        while True:
            await trio.sleep(0)
            reads_since_turn[0] = 0

    flood = ["bash", "-c", "exec yes flood"]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(other_task)
        monkeypatch.setattr(supervisor._Outputs, "__init__", init)
        monkeypatch.setattr(supervisor.os, "read", endless)
        result = await run(flood, tmp_path, timeout=0.5)
        assert result.timed_out and result.truncated and result.total_bytes > 4 * 1024 * 1024
        with trio.move_on_after(0.5) as scope:
            await run(flood, tmp_path, timeout=60)
        assert scope.cancelled_caught
        monkeypatch.undo()
        nursery.cancel_scope.cancel()


async def test_without_a_pidfd_the_exit_is_polled_and_nothing_else_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where pidfd_open is missing (an old kernel, some sandboxes) the one task reading the output looks
    # at the exit every GONE_POLL instead: output, exit code, timeout and the background job's end hold.
    monkeypatch.setattr(supervisor, "_pidfd_open", lambda pid: None)
    result = await run(["bash", "-c", "echo out; echo err >&2; exit 3"], tmp_path)
    assert (result.exit_code, result.timed_out) == (3, False)
    assert sorted(result.output.splitlines()) == ["err", "out"]
    silent = await run(["bash", "-c", "sleep 0.3; exit 4"], tmp_path)  # no output while it runs
    assert silent.exit_code == 4 and silent.duration >= 0.3
    timed = await run(["bash", "-c", "echo started; sleep 1000"], tmp_path, timeout=0.5)
    assert timed.timed_out and timed.signal == 15 and timed.output == "started\n"
    background = await run(["bash", "-c", "sleep 1000 & echo bg"], tmp_path)
    assert background.exit_code == 0 and background.output == "bg\n" and background.duration < 5


async def test_a_descriptor_refused_after_the_spawn_still_stops_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The read loop's epoll set is made after the child started: when the process is out of descriptors
    # there, the call fails with the error and the child is stopped (the fixture checks none is left).
    def refused() -> object:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(supervisor, "_kept_sets", [])  # none kept: the call makes one
    monkeypatch.setattr(supervisor.select, "epoll", refused)
    with pytest.raises(OSError, match="Too many open files"):
        await run(["sleep", "1000"], tmp_path)


async def test_no_way_a_call_ends_leaves_a_descriptor_open(tmp_path: Path, monkeypatch) -> None:
    # The output pipes are bare descriptors (no trio stream closes them): an exit, a flood, a timeout, a
    # cancel, a spawn error and a refused epoll set must each close both, and the pidfd and the set.
    def fds() -> set[str]:
        return set(os.listdir("/proc/self/fd"))

    await run(["true"], tmp_path)  # trio's own descriptors, opened on first use
    before = fds()
    await run(["bash", "-c", "echo out; echo err >&2"], tmp_path)
    await run(["bash", "-c", "head -c 3000000 /dev/zero"], tmp_path, max_bytes=100)
    assert (await run(["sleep", "1000"], tmp_path, timeout=0.2)).timed_out
    with trio.move_on_after(0.2):
        await run(["sleep", "1000"], tmp_path)
    assert (await run(["/nonexistent/tool"], tmp_path)).spawn_error
    monkeypatch.setattr(supervisor, "_kept_sets", [])
    monkeypatch.setattr(supervisor.select, "epoll", lambda: (_ for _ in ()).throw(OSError(errno.EMFILE, "")))
    with pytest.raises(OSError):
        await run(["sleep", "1000"], tmp_path)
    after = fds()
    # None more; a descriptor of another number may only be an epoll set of the kept pool, one closed and one
    # made meanwhile (which a cancel's timing on a loaded machine decides: CI saw 23 go and 21 come).
    assert len(after) <= len(before)
    assert all(os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[eventpoll]" for fd in after - before)


async def test_background_job_does_not_outlive_the_call(tmp_path: Path) -> None:
    result = await run(["bash", "-c", "(trap '' TERM; exec sleep 1000) & echo $!"], tmp_path)
    assert result.exit_code == 0
    assert not psutil.pid_exists(int(result.output)) or gone(psutil.Process(int(result.output)))


async def test_double_forked_daemon_does_not_outlive_the_call(tmp_path: Path) -> None:
    # setsid -f leaves the group and the tree at once: only the environment tag finds it.
    script = (
        """setsid -f bash -c 'echo $$ > "$0"; exec sleep 1000' daemon.pid;"""
        " while [ ! -s daemon.pid ]; do sleep 0.01; done; cat daemon.pid"
    )
    result = await run(["bash", "-c", script], tmp_path)
    assert result.exit_code == 0
    assert not psutil.pid_exists(int(result.output)) or gone(psutil.Process(int(result.output)))


async def test_an_orphan_that_exits_before_the_stop_is_reaped(tmp_path: Path, mode: str) -> None:
    # The subshell exits at once, so `true` is orphaned (re-parented to the test process as a
    # subreaper) and exits while the call still runs: a zombie child the fixture would find.
    script = "(true &); (true &); sleep 0.3; echo done"
    result = await run(["bash", "-c", script], tmp_path)
    assert result.output == "done\n"
    if mode == "subreaper":
        assert mmd.procs.reap_orphans() == []  # the stop already reaped them


async def test_a_subreaper_walks_twice_only_when_the_first_walk_started_somewhere(
    tmp_path: Path, mode: str, monkeypatch
) -> None:
    # The second walk finds the children a member left to the daemon by exiting during the first. A child
    # that exited and left no orphan gives the first walk nowhere to start: one look at the daemon's children.
    if mode != "subreaper":
        pytest.skip("without a subreaper the second look is the scan of /proc, always made")
    looks: list[str] = []
    real = supervisor._tagged_orphans
    monkeypatch.setattr(
        supervisor, "_tagged_orphans", lambda tag, exclude: looks.append(tag) or real(tag, exclude)
    )
    assert (await run(["true"], tmp_path)).exit_code == 0
    assert len(looks) == 1
    looks.clear()
    result = await run(["bash", "-c", "(trap '' TERM; exec sleep 1000) & echo $!"], tmp_path)
    assert len(looks) >= 2  # the orphaned sleep was a root: walked again
    assert not psutil.pid_exists(int(result.output)) or gone(psutil.Process(int(result.output)))


def test_an_orphan_comes_back_to_the_main_thread_whichever_thread_started_its_parent(mode: str) -> None:
    # A call's orphans are looked for in the main thread's children list alone: the kernel gives an orphan
    # to the first live thread of the subreaper's group. Its parent is started by another thread here, as
    # the spawner threads start every child; the orphan is there while that thread lives, and after.
    if mode != "subreaper":
        pytest.skip("only a subreaper inherits orphans")
    orphans: list[int] = []
    hold = threading.Event()

    def start_and_leave_an_orphan() -> None:
        shell = ["bash", "-c", "sleep 1000 >/dev/null 2>&1 & echo $!"]
        orphans.append(int(subprocess.run(shell, capture_output=True, text=True, check=True).stdout))
        hold.wait(30)

    starter = threading.Thread(target=start_and_leave_an_orphan)
    starter.start()
    try:
        while not orphans and starter.is_alive():
            time.sleep(0.005)
        assert supervisor._orphans() == orphans
        hold.set()
        starter.join()
        assert supervisor._orphans() == orphans
    finally:
        hold.set()
        starter.join()
        for pid in orphans:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def test_the_reap_reads_the_children_only_once_one_has_exited(mode: str, monkeypatch) -> None:
    # A child not spawned by the supervisor stands for an orphan here. While none of the test process's
    # children has exited, reap_orphans makes one system call and reads no children list; once one has,
    # the look (WNOWAIT) leaves its status to the reap.
    if mode != "subreaper":
        pytest.skip("only a subreaper reaps orphans")
    scans: list[int] = []
    real = supervisor._children
    monkeypatch.setattr(supervisor, "_children", lambda pid: scans.append(pid) or real(pid))
    assert mmd.procs.reap_orphans() == [] and scans == []
    live = subprocess.Popen(["sleep", "1000"])
    done = subprocess.Popen(["true"])
    try:
        while psutil.Process(done.pid).status() != psutil.STATUS_ZOMBIE:
            time.sleep(0.005)
        assert supervisor._a_child_exited()
        assert psutil.Process(done.pid).status() == psutil.STATUS_ZOMBIE  # looked at, not reaped
        assert mmd.procs.reap_orphans() == [done.pid] and scans
        scans.clear()
        assert not supervisor._a_child_exited()
        assert mmd.procs.reap_orphans() == [] and scans == []
    finally:
        live.kill()
        live.wait()
        done.poll()  # reaped above: Popen learns it (ECHILD), or reaps it if a check failed first


async def test_an_untagged_orphan_is_stopped_with_the_daemon(tmp_path: Path, mode: str) -> None:
    # setsid leaves the group and env -i drops the tag: no tree claims the orphan, but as a subreaper it is still our
    # child, and stop_orphans (what the daemon runs as it stops) ends and reaps it.
    if mode != "subreaper":
        pytest.skip("without a subreaper the orphan goes to init: the limit the module docstring names")
    # Until the orphan has exec'd sleep, its environment is setsid's, tag included: wait for that.
    script = (
        "(setsid env -i sleep 1000 & echo $! > orphan.pid);"
        ' while [ "$(cat /proc/$(cat orphan.pid)/comm)" != sleep ]; do sleep 0.01; done'
    )
    result = await run(["bash", "-c", script], tmp_path)
    assert result.exit_code == 0
    orphan = psutil.Process(int((tmp_path / "orphan.pid").read_text()))
    assert orphan.ppid() == os.getpid() and not gone(orphan)
    assert mmd.procs.stop_orphans(grace=GRACE) == [orphan.pid]
    assert gone(orphan)


async def test_timeout_leaves_no_process_of_the_tree(tmp_path: Path) -> None:
    argv, pid_file = tree_command(tmp_path)
    procs: list[psutil.Process] = []
    results: list[ProcResult] = []

    async def call() -> None:
        results.append(await run(argv, tmp_path, timeout=3.0))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        procs = await tree_pids(pid_file)
        assert not any(gone(p) for p in procs)
    assert results[0].timed_out
    assert [p.pid for p in procs if not gone(p)] == []


async def test_cancel_leaves_no_process_of_the_tree(tmp_path: Path) -> None:
    assert await cancel_tree_once(tmp_path) == []
    assert not (tmp_path / "spill.log").exists()


async def test_command_not_found(tmp_path: Path) -> None:
    result = await run(["mm-no-such-command-xyz", "arg"], tmp_path)
    assert result.spawn_error == "command not found: mm-no-such-command-xyz"
    assert result.exit_code is None and result.signal is None and result.output == ""
    assert not (tmp_path / "spill.log").exists()


async def test_cwd_vanished(tmp_path: Path) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    cwd.rmdir()
    result = await run(["true"], tmp_path, cwd=cwd)
    assert result.spawn_error == f"working directory {cwd} no longer exists"
    assert result.exit_code is None


async def test_permission_denied(tmp_path: Path) -> None:
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    result = await run([str(script)], tmp_path)
    assert result.spawn_error is not None and result.spawn_error.startswith("permission denied")
    assert result.exit_code is None


async def test_empty_command(tmp_path: Path) -> None:
    result = await run([], tmp_path)
    assert result.spawn_error == "cannot start the command: empty command"


async def test_supervised_process_stops_tree_on_exit(tmp_path: Path) -> None:
    argv, pid_file = tree_command(tmp_path)
    async with supervised_process(argv, cwd=tmp_path, env={}, stdout=None, grace=GRACE) as proc:
        procs = await tree_pids(pid_file)
        assert proc.pid == procs[0].pid
    assert [p.pid for p in procs if not gone(p)] == []
    assert proc.returncode is not None


async def test_supervised_process_stops_tree_on_cancel(tmp_path: Path) -> None:
    argv, pid_file = tree_command(tmp_path)
    with trio.CancelScope() as scope:
        async with supervised_process(argv, cwd=tmp_path, env={}, stdout=None, grace=GRACE):
            procs = await tree_pids(pid_file)
            scope.cancel()
            await trio.sleep_forever()
    assert [p.pid for p in procs if not gone(p)] == []


async def test_supervised_process_pipes_and_early_reap(tmp_path: Path) -> None:
    # The child reads a line, starts a TERM-ignoring job, reports it and exits.
    script = "read line; echo got $line; (trap '' TERM; exec sleep 1000) & echo $!"
    async with supervised_process(["bash", "-c", script], cwd=tmp_path, env={}, grace=GRACE) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        await proc.stdin.send_all(b"hello\n")
        assert await proc.wait() == 0  # reaped by the caller before the block ends
        lines = b""
        while lines.count(b"\n") < 2:
            lines += await proc.stdout.receive_some(100)
    got, pid = lines.decode().split("\n")[:2]
    assert got == "got hello"
    assert not psutil.pid_exists(int(pid)) or gone(psutil.Process(int(pid)))


async def test_supervised_process_spawn_error_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        async with supervised_process(["mm-no-such-command-xyz"], cwd=tmp_path, env={}):
            pass  # pragma: no cover


def test_no_tag_leaks_into_the_test_process() -> None:
    assert "MM_PROC_TAG" not in os.environ


def test_an_environment_that_reads_empty_is_looked_at_again_before_it_counts_as_untagged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A process in the middle of an exec shows an empty environment for a moment (mmd.procs.supervisor:
    _carries). A tagged one is found; one whose environment stays empty (``env -i``), or a zombie, is not,
    and the re-looks stop there."""
    needle = f"{supervisor.TAG_VAR}=t-1".encode()
    tagged = psutil.Popen(["sleep", "30"], env={supervisor.TAG_VAR: "t-1", "PATH": os.environ["PATH"]})
    bare = psutil.Popen(["env", "-i", "sleep", "30"])
    zombie = psutil.Popen(["true"])
    try:
        while zombie.status() != psutil.STATUS_ZOMBIE:
            pass
        trio.run(trio.sleep, 0.05)  # env has exec'd sleep with no environment
        assert supervisor._read_proc(bare.pid, "environ") == b""
        assert supervisor._carries(tagged.pid, needle)
        assert not supervisor._carries(tagged.pid, f"{supervisor.TAG_VAR}=t-2".encode())
        looks: list[int] = []
        real = supervisor._read_proc

        def counted(pid: int, name: str) -> bytes:
            if name == "environ":
                looks.append(pid)
            return real(pid, name)

        monkeypatch.setattr(supervisor, "_read_proc", counted)
        assert not supervisor._carries(bare.pid, needle)
        # Its command line shows: cleared, not in an exec; a few looks more, not the whole ~100 ms.
        assert looks.count(bare.pid) == supervisor.SETTLE_LOOKS + 1
        looks.clear()
        assert not supervisor._carries(zombie.pid, needle)
        assert looks == [zombie.pid]  # a zombie's environment is empty for good: one look
    finally:
        for p in (tagged, bare, zombie):
            p.kill()
            p.wait()


async def test_output_within_the_budgets_never_touches_the_disk(tmp_path: Path) -> None:
    # The spill file's folder cannot be made (a file stands where it would be): a call whose output
    # fits runs as if nothing were wrong, since its spill file is never needed.
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    spill = blocker / "spill.log"
    result = await run(["echo", "small"], tmp_path, spill_path=spill, max_bytes=200, max_lines=20)
    assert result.exit_code == 0 and result.output == "small\n" and result.spill_path is None
    # A call whose output is cut needs it: that call still ends as the command did, and the model is told
    # that the whole was not kept, and why (mmd/procs/spill.py).
    cut = await run(["seq", "1", "5000"], tmp_path, spill_path=spill, max_bytes=200, max_lines=20)
    assert cut.exit_code == 0 and cut.truncated and cut.spill_path is None
    assert "the whole output was not kept (file exists)" in cut.output  # mkdir of its folder
    assert cut.output.startswith("1\n2\n") and cut.output.endswith("4999\n5000\n")


async def test_a_cut_output_cancelled_leaves_no_spill_file(tmp_path: Path) -> None:
    spill = tmp_path / "spill.log"
    with trio.move_on_after(30) as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                functools.partial(run, spill_path=spill, max_bytes=200, max_lines=20),
                ["bash", "-c", "seq 1 5000; sleep 60"],
                tmp_path,
            )
            while not spill.exists():  # made when the output was first cut
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    assert not scope.cancelled_caught, "no spill file was made"
    assert not spill.exists()


def test_only_absolute_folders_stay_in_the_daemons_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # A relative entry is a folder of the project a child starts in: its ./bash ran for a bash call.
    assert environ.absolute_path("/usr/bin:.::bin:/bin:./node_modules/.bin") == (
        "/usr/bin:/bin",
        [".", "", "bin", "./node_modules/.bin"],
    )
    assert environ.absolute_path(":.") == ("/usr/bin:/bin", ["", "."])  # never empty: that is "." again
    monkeypatch.setenv("PATH", "/usr/bin:")
    assert environ.keep_absolute_path() == [""] and os.environ["PATH"] == "/usr/bin"
    assert environ.keep_absolute_path() == [] and os.environ["PATH"] == "/usr/bin"
