"""The console script's fast path and the lazily imported commands (clients/mm/entry.py, PromptGroup.lazy)."""

from __future__ import annotations

import importlib
import json
import os
import socket
import subprocess
import sys
import threading
import time

import click
import pytest
from click.testing import CliRunner
from mm import cli, spawn
from mm.connection import Client
from mm.spawn import DaemonError

from mmd import __version__
from mmd.rpc.messages import decode_message, response


def _run_entry(*args: str) -> tuple[str, list[str]]:
    """Run mm.entry.main as the console script does; its stdout and the modules it imported."""
    code = (
        "import json, sys\n"
        f"sys.argv = ['mm', *{list(args)!r}]\n"
        "from mm.entry import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stderr.write(json.dumps(sorted(m for m, v in sys.modules.items() if v is not None)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout, json.loads(done.stderr)


def test_version_is_clicks_text_without_importing_click() -> None:
    fast, modules = _run_entry("--version")
    slow = CliRunner().invoke(cli.main, ["--version"]).output
    assert fast == slow
    assert "click" not in modules
    assert not [m for m in modules if m.startswith("mm.") and m != "mm.entry"]
    assert _run_entry("-V")[0] == slow


def test_other_words_go_to_click() -> None:
    out, modules = _run_entry("--help")
    assert "Commands:" in out and "click" in modules
    # --version among other words is click's to read (and to refuse, here).
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.argv = ['mm', '--version', '--nope']; from mm.entry import main; main()",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "--nope" in done.stderr


def test_help_lists_lazy_commands_without_importing_them() -> None:
    out, modules = _run_entry("--help")
    for name, (module, _, line) in cli.LAZY_COMMANDS.items():
        assert f"{name}" in out and line in out
        assert module not in modules


def test_each_lazy_line_is_its_commands_own_help() -> None:
    for name, (module, attr, line) in cli.LAZY_COMMANDS.items():
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command)
        assert command.get_short_help_str(200) == line, name


def test_a_lazy_command_runs_and_its_typo_is_caught() -> None:
    result = CliRunner().invoke(cli.main, ["skills", "--help"])
    assert result.exit_code == 0 and "list" in result.output
    typo = CliRunner().invoke(cli.main, ["skils", "list"])
    assert typo.exit_code == 2 and "Did you mean 'skills'" in typo.output


def test_a_prompts_early_look_for_the_daemon_is_the_connection_it_then_uses(tmp_path, monkeypatch) -> None:
    # `mm -p` looks for a daemon before its imports (spawn.prestart); when one answers, that connection is
    # the one the prompt goes on with: the daemon accepts, sets up and ends one connection a prompt, not two.
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    path = run / "mmd.sock"
    monkeypatch.setenv("MM_SOCKET", str(path))
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    accepted: list[socket.socket] = []

    def serve() -> None:  # a daemon as far as a handshake goes
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(conn)
            if frame := conn.recv(65536):
                msgid = decode_message(frame).msgid  # type: ignore[union-attr]
                conn.sendall(response(msgid, None, {"daemon_version": __version__, "pid": os.getpid()}))

    threading.Thread(target=serve, daemon=True).start()
    try:
        spawn.prestart()
        client = Client.connect(autostart=False)
        assert client.daemon["daemon_version"] == __version__
        assert len(accepted) == 1
        assert spawn.preconnected(path) is None  # taken once
        client.close()
        # A daemon that hung up between the look and the prompt (stopped while stdin was read): a new one.
        spawn.prestart()
        deadline = time.monotonic() + 5
        while len(accepted) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        accepted[1].shutdown(socket.SHUT_RDWR)  # the daemon hangs up
        client = Client.connect(autostart=False)
        assert client.daemon["daemon_version"] == __version__ and len(accepted) == 3
        client.close()
    finally:
        server.close()
        for conn in accepted:
            conn.close()


def test_a_request_holding_a_name_that_is_not_utf8_says_so() -> None:
    """A path whose bytes are not UTF-8 (the current folder, a file named on the command line): said, with its
    bytes shown as escapes, not a UnicodeEncodeError."""
    ours, theirs = socket.socketpair()
    try:
        client = Client(ours, "/tmp/x.sock")  # type: ignore[arg-type]
        with pytest.raises(DaemonError) as err:
            client.send("consent.list", {"cwd": os.fsdecode(b"/srv/caf\xe9")})
    finally:
        ours.close()
        theirs.close()
    assert "/srv/caf\\xe9 is not UTF-8 text" in str(err.value)
    assert "rename the file or folder" in str(err.value)


def test_standard_streams_reopens_a_closed_stdout_on_dev_null() -> None:
    code = (
        "import os, sys; os.close(1); sys.stdout = None; from mm.entry import standard_streams; "
        "standard_streams(); print('lost'); sys.stderr.write(os.readlink('/proc/self/fd/1'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stderr == os.devnull
