"""mmd's command line (mmd/main.py): the usual one read without argparse, every other one by argparse."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mmd import main

USUAL = [
    [],
    ["--socket", "/run/user/1000/mm/mmd.sock"],
    ["--socket=/tmp/a b/mmd.sock", "--log-level", "DEBUG"],
    ["--state-dir", "/tmp/state", "--config", "/tmp/c.yaml", "--log-level=ERROR", "--socket", "s"],
    ["--socket=x=y"],
    ["--config="],
]


@pytest.mark.parametrize("argv", USUAL)
def test_the_usual_command_lines_read_as_argparse_reads_them(argv: list[str]) -> None:
    plain = main._plain(argv)
    assert plain is not None
    assert plain == main._Args(**vars(main._argparse(argv)))


@pytest.mark.parametrize(
    "argv",
    [
        ["--sock", "x"],  # an abbreviation: argparse's
        ["--socket", "a", "--socket", "b"],  # twice: argparse takes the last
        ["--socket"],
        ["--socket", "--config", "c"],
        ["--log-level", "LOUD"],
        ["--help"],
        ["--version"],
        ["extra"],
        ["--", "--socket", "x"],
    ],
)
def test_any_other_command_line_is_left_to_argparse(argv: list[str]) -> None:
    assert main._plain(argv) is None


def test_argparse_still_answers_what_it_answered(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main._parse(["--log-level", "LOUD"])
    assert exit_.value.code == 2
    assert "invalid choice: 'LOUD'" in capsys.readouterr().err
    assert main._parse(["--socket", "a", "--socket", "b"]).socket == Path("b")
    assert main._parse(["--sock", "x"]).socket == Path("x")


def test_the_daemons_start_imports_neither_argparse_nor_difflib() -> None:
    """Both cost memory and start time for what only a mistake needs (a hint, argparse's message)."""
    code = (
        "import sys, mmd.boot, mmd.main\n"
        "mmd.main._parse(['--socket', '/tmp/x.sock'])\n"
        "print(sorted(m for m in ('argparse', 'difflib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_an_error_that_ends_the_daemon_is_in_its_log_not_only_on_stderr(tmp_path: Path) -> None:
    # Under systemd, or started by a client, stderr is seen by no one: the daemon once ended (EMFILE in its
    # accept) with a traceback on stderr and nothing in mmd.log after "listening".
    state = tmp_path / "state"
    code = (
        "import sys\n"
        "from mmd import main\n"
        "from mmd.server.daemon import Daemon\n"
        "async def broken(self, **kwargs):\n"
        "    raise OSError(24, 'Too many open files')\n"
        "Daemon.serve = broken\n"
        f"sys.exit(main.main(['--socket', {str(tmp_path / 's.sock')!r}, '--state-dir', {str(state)!r}]))\n"
    )
    ended = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert ended.returncode != 0 and "OSError: [Errno 24] Too many open files" in ended.stderr
    log = (state / "mmd.log").read_text()
    assert (
        "CRITICAL mmd: mmd stopped on an error it did not expect (a bug: please report it with this log)"
        in log
    )
    assert "OSError: [Errno 24] Too many open files" in log


def test_the_log_is_private_and_bounded_past_log_bytes_it_starts_again_keeping_one_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A process that made the daemon warn in a loop (a client dropped or refused again and again) filled the
    # disk: the log grew without end. Now mmd.log and mmd.log.1 hold LOG_BYTES each at most, both 0600.
    monkeypatch.setattr(main, "LOG_BYTES", 10_000)
    (tmp_path / "mmd.log").write_text("an older mm's log\n")
    (tmp_path / "mmd.log").chmod(0o644)
    log_path = main._logging(tmp_path, "INFO")
    try:
        assert (log_path.stat().st_mode & 0o777) == 0o600  # tightened at once
        log = logging.getLogger("mmd")
        for i in range(2_000):  # ~200 KB of lines
            log.warning("a client too slow to read, dropped: %d", i)
    finally:
        logging.getLogger().handlers[0].close()
        logging.basicConfig(force=True, handlers=[logging.NullHandler()])
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == ["mmd.log", "mmd.log.1"]
    for path in (tmp_path / "mmd.log", tmp_path / "mmd.log.1"):
        assert path.stat().st_size <= 10_000 + 200 and (path.stat().st_mode & 0o777) == 0o600
    assert "dropped: 1999" in (tmp_path / "mmd.log").read_text()
    assert (
        "an older mm's log" not in (tmp_path / "mmd.log").read_text() + (tmp_path / "mmd.log.1").read_text()
    )


def test_a_log_on_a_full_disk_drops_its_lines_and_never_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # /dev/full: every write fails with ENOSPC, as the log's disk once full. The first failed flush left the
    # line buffered; the next record's tell() flushed it again and raised out of `log.error`: a daemon that
    # logged on a full disk stopped (tests/e2e/adversarial/test_full_disk.py).
    handler = main._Log("/dev/full", encoding="utf-8")
    log = logging.getLogger("mmd.test_full_log")
    log.addHandler(handler)
    log.propagate = False
    try:
        for i in range(3):
            log.error("the store could not be written: %d", i)  # returns
        monkeypatch.setattr(main, "LOG_BYTES", 0)  # the rotation's close flushes too
        log.error("past the bound")
    finally:
        log.removeHandler(handler)
        with contextlib.suppress(OSError):
            handler.close()
    assert "No space left on device" in capsys.readouterr().err  # logging's own report of the lost lines


@pytest.mark.parametrize(("dumpable", "expected"), [(None, "0"), ("1", "1")])
def test_the_daemon_is_not_dumpable_so_no_child_reads_its_keys_in_proc(
    dumpable: str | None, expected: str
) -> None:
    # A child runs as the person, confined or not: `cat /proc/$PPID/environ` in a bash call read every key
    # of the daemon. Not dumpable, the daemon's /proc/PID/environ, mem and fd are root's alone. Checked in a
    # process of its own (the flag is the whole process's), by prctl(PR_GET_DUMPABLE).
    code = (
        "import ctypes, os\n"
        "from mmd import main\n"
        "main._undumpable()\n"
        "print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "MM_DUMPABLE"}
    if dumpable is not None:
        env["MM_DUMPABLE"] = dumpable
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.strip() == expected
