"""systemd integration: socket activation, readiness notification, the user units.

The activation test does what systemd does: it binds and listens on the socket
itself, starts mmd with that socket as file descriptor 3, ``LISTEN_FDS=1`` and
``LISTEN_PID`` set to mmd's own pid, and listens for ``READY=1`` on a
``NOTIFY_SOCKET`` datagram socket of its own. The activation variables and the notifier alone are
in tests/unit/server/test_sdnotify.py, the rendered units in tests/unit/mm/test_service.py.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from .conftest import cmdline_of, daemon_pids, run_mm, socket_of, stop_daemon

# Puts the passed socket on fd 3 and sets LISTEN_PID to its own pid, then execs mmd
# (exec keeps the pid): the part of systemd's job a test can do.
TRAMPOLINE = """
import os, sys
fd = int(sys.argv[1])
if fd != 3:
    os.dup2(fd, 3)
    os.close(fd)
os.environ["LISTEN_PID"] = str(os.getpid())
os.execv(sys.executable, [sys.executable, "-m", "mmd", *sys.argv[2:]])
"""

# Long enough for a slow CI machine to start Python; a guard against a hang, not a measurement.
RECV_TIMEOUT = 30


def _listening_socket(path: Path) -> socket.socket:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    os.chmod(path, 0o600)
    sock.listen(16)
    return sock


def _notify_socket(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(RECV_TIMEOUT)
    return sock


def _spawn_activated(fd_sock: socket.socket, notify_path: Path | None, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "LISTEN_FDS": "1", "LISTEN_FDNAMES": "mmd.socket"}
    if notify_path is not None:
        env["NOTIFY_SOCKET"] = str(notify_path)
    fd = fd_sock.fileno()
    return subprocess.Popen(
        [sys.executable, "-c", TRAMPOLINE, str(fd), *args],
        pass_fds=(fd,),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _messages(data: bytes) -> dict[str, str]:
    return dict(line.split("=", 1) for line in data.decode().splitlines())


@pytest.fixture
def activated(mm_home: Path) -> Iterator[tuple[subprocess.Popen[str], socket.socket, Path]]:
    """mmd started the way systemd starts it: (process, notify socket, socket path)."""
    path = socket_of(mm_home)
    notify_path = mm_home / "notify.sock"
    with _listening_socket(path) as listener, _notify_socket(notify_path) as notify:
        proc = _spawn_activated(listener, notify_path)
        try:
            yield proc, notify, path
        finally:
            stop_daemon(proc)
            assert proc.stderr is not None
            proc.stderr.close()


def test_socket_activation_ready_round_trip_and_no_second_daemon(mm_home, scripted, activated):
    proc, notify, path = activated
    inode = path.stat().st_ino
    ready = _messages(notify.recv(4096))
    assert ready["READY"] == "1" and ready["MAINPID"] == str(proc.pid)

    status = run_mm("daemon", "status", "--json")
    assert status.returncode == 0, status.stderr
    info = json.loads(status.stdout)
    assert info["pid"] == proc.pid and info["socket"] == str(path)

    # A prompt connects with autostart on: it must use the activated daemon, not start another.
    scripted(
        [
            {
                "tool_calls": [
                    {
                        "name": "bash",
                        "arguments": {
                            "command": "env | grep -E '^(LISTEN|NOTIFY)_' > leaked.txt; echo checked"
                        },
                    }
                ]
            },
            {"text": "Served by the activated daemon."},
        ]
    )
    work = mm_home / "work"
    answer = run_mm("--yolo", "-p", "hello", cwd=work)
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout == "Served by the activated daemon.\n"
    assert daemon_pids(mm_home) == []  # no daemon started by a client (they carry --socket)
    # Zombies among them (a worker made a subreaper by other tests inherits orphans) have no command line.
    mmds = [p for p in psutil.Process().children(recursive=True) if "mmd" in cmdline_of(p)]
    assert [p.pid for p in mmds] == [proc.pid]
    assert path.stat().st_ino == inode  # nobody re-bound the socket
    assert "nothing to do" not in (mm_home / "state" / "mm" / "mmd.log").read_text()
    # The tools mmd runs do not inherit systemd's variables.
    assert (work / "leaked.txt").read_text() == ""

    stop = run_mm("daemon", "stop")
    assert stop.returncode == 0, stop.stderr
    assert f"pid {proc.pid}" in stop.stdout
    assert _messages(notify.recv(4096)) == {"STOPPING": "1"}
    assert proc.wait(15) == 0
    # systemd owns the socket file: mmd leaves it in place for the next activation.
    assert path.exists() and path.stat().st_ino == inode


def test_a_client_waits_for_the_activated_daemon_instead_of_starting_one(mm_home):
    """As under systemd: the client connects before mmd runs; it must wait, not start a daemon."""
    path = socket_of(mm_home)
    notify_path = mm_home / "notify.sock"
    with _listening_socket(path) as listener, _notify_socket(notify_path) as notify:
        client = subprocess.Popen(
            [sys.executable, "-m", "mm.cli", "daemon", "start"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # The listening socket turns readable once the client's connection waits in its backlog.
        readable, _, _ = select.select([listener], [], [], RECV_TIMEOUT)
        assert readable, "the client never connected"
        proc = _spawn_activated(listener, notify_path)
        try:
            out, err = client.communicate(timeout=60)
            assert client.returncode == 0, err
            assert f"pid {proc.pid}" in out
            assert _messages(notify.recv(4096))["READY"] == "1"
        finally:
            stop_daemon(proc)
            assert proc.stderr is not None
            proc.stderr.close()
    assert daemon_pids(mm_home) == []
    log = (mm_home / "state" / "mm" / "mmd.log").read_text()
    assert log.count("socket activated by systemd") == 1
    assert "nothing to do" not in log  # no second daemon was started and gave up


def test_activation_with_a_socket_that_does_not_listen_fails_clearly(mm_home):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unbound:
        proc = _spawn_activated(unbound, None)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "not a listening Unix stream socket" in err


# -- the units ---------------------------------------------------------------------


def test_install_service_writes_both_units_for_the_installed_mmd(mm_home):
    result = run_mm("daemon", "install-service")
    assert result.returncode == 0, result.stderr
    unit_dir = mm_home / "config" / "systemd" / "user"
    socket_unit = (unit_dir / "mmd.socket").read_text()
    service_unit = (unit_dir / "mmd.service").read_text()
    assert "ListenStream=%t/mm/mmd.sock" in socket_unit
    assert "SocketMode=0600" in socket_unit and "DirectoryMode=0700" in socket_unit
    assert "Type=notify" in service_unit and "Restart=on-failure" in service_unit
    exec_line = next(line for line in service_unit.splitlines() if line.startswith("ExecStart="))
    mmd = Path(exec_line.removeprefix("ExecStart="))
    assert mmd == Path(sys.executable).parent / "mmd"
    assert os.access(mmd, os.X_OK) and "mmd.boot" in mmd.read_text()
    assert "systemctl --user enable --now mmd.socket" in result.stdout
    assert "systemctl --user daemon-reload" in result.stdout
    # Run again: the units are rewritten in place, nothing else appears.
    assert run_mm("daemon", "install-service").returncode == 0
    assert sorted(p.name for p in unit_dir.iterdir()) == ["mmd.service", "mmd.socket"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verifies_the_units(mm_home):
    assert run_mm("daemon", "install-service").returncode == 0
    unit_dir = mm_home / "config" / "systemd" / "user"
    result = subprocess.run(
        ["systemd-analyze", "verify", "--user", str(unit_dir / "mmd.socket"), str(unit_dir / "mmd.service")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # Lines about other units of this machine are not ours to judge.
    ours = [line for line in (result.stdout + result.stderr).splitlines() if "mmd." in line]
    assert result.returncode == 0, result.stderr
    assert ours == []


def test_clients_starting_at_once_all_use_the_activated_daemon(mm_home, activated):
    """`mm daemon start` from several clients at once: each finds the activated daemon, none starts one."""
    proc, notify, _ = activated
    assert _messages(notify.recv(4096))["READY"] == "1"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "mm.cli", "daemon", "start"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        outs.append(out)
    assert all(f"pid {proc.pid}" in out for out in outs)
    assert daemon_pids(mm_home) == []
