"""Another local user prepares mm's socket, its folder, its lock or its state folder: mm refuses, tells how.

On a shared machine ``/tmp`` belongs to everyone. A squatter of another uid that creates the socket's
folder first, binds a socket there and records what it receives must get nothing: the client refuses
before it sends a byte, and says what is wrong and what to do. The daemon refuses to start there, at
once, naming MM_SOCKET. A symbolic link planted as ``mmd.sock.lock`` or ``mmd.log`` is not followed.

A squatter of another uid needs root (``setuid`` to nobody) and an interpreter nobody may run; those
cases are skipped otherwise, and the faked-owner cases check the same functions with an injected uid
anywhere. A sticky world-writable folder stands in for ``/tmp`` (``XDG_RUNTIME_DIR`` points at it), so
the real ``/tmp/mm-<uid>`` of whoever else uses this machine is left alone.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from mmd.rpc import trust

from ..conftest import environ_with, needs_nvim, nvim_request, stop_daemon, wait_for_socket
from .serves import assert_daemon_serves

# The squatter's identity: nobody.
OTHER_UID = OTHER_GID = 65534

# Runs a command as the squatter (setpriv: a preexec_fn's setuid then exec is refused here).
AS_OTHER = ["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_GID}", "--clear-groups"]


def _other_uid_runs_python() -> bool:
    """Whether the squatter can run this interpreter: it needs root, setpriv, and an interpreter uid 65534
    may load (a pyenv build under /root, mode 0700, keeps its libpython from other users: the squatter
    would die at start, and every case fail for want of it, not for anything mm did)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return False
    probe = subprocess.run([*AS_OTHER, sys.executable, "-I", "-c", "pass"], capture_output=True, cwd="/")
    return probe.returncode == 0


needs_other_uid = pytest.mark.skipif(
    not _other_uid_runs_python(),
    reason="a squatter of another uid needs root, setpriv and an interpreter uid 65534 can run; "
    "the faked-owner cases cover the checks",
)


def _wait_ready(proc: subprocess.Popen[str]) -> None:
    """Wait for a squatter's "ready"; one that did not start is ended here, not left to a later test."""
    assert proc.stdout is not None
    if (said := proc.stdout.readline().strip()) != "ready":
        proc.kill()
        proc.wait(15)
        proc.stdout.close()
        raise AssertionError(f"the squatter did not start: {said!r}, exit {proc.returncode}")


# Creates FOLDER (mode MODE), binds FOLDER/mmd.sock that anyone may connect to, then for each
# connection, one after the other, appends to FOLDER/received "<bytes read> <first bytes>".
SQUATTER = r"""
import os, socket, sys
folder, mode = sys.argv[1], int(sys.argv[2], 8)
os.makedirs(folder, exist_ok=True)
os.chmod(folder, mode)
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(os.path.join(folder, "mmd.sock"))
os.chmod(os.path.join(folder, "mmd.sock"), 0o777)
srv.listen(16)
if sys.argv[3:] == ["fork"]:  # the process that listened exits; its child serves, its pid in FOLDER/pid
    if os.fork():
        os._exit(0)
    with open(os.path.join(folder, "pid"), "w") as f:
        f.write(str(os.getpid()))
print("ready", flush=True)
while True:
    conn, _ = srv.accept()
    got = b""
    while chunk := conn.recv(65536):
        got += chunk
    conn.close()
    with open(os.path.join(folder, "received"), "a") as f:
        f.write(f"{len(got)} {got[:80]!r}\n")
"""


class Squatter:
    """A process of another uid listening on ``folder/mmd.sock`` and recording what it receives."""

    def __init__(self, folder: Path, mode: int) -> None:
        self.folder = folder
        self.socket = folder / "mmd.sock"  # where it bound; a test may move the socket file
        self.proc = subprocess.Popen(
            [*AS_OTHER, sys.executable, "-I", "-c", SQUATTER, str(folder), f"{mode:o}"],
            stdout=subprocess.PIPE,
            text=True,
            cwd="/",
        )
        _wait_ready(self.proc)

    def received(self, reachable_at: Path | None = None) -> list[str]:
        """Every connection's record so far, the probe's last: connects itself and sends ``probe``."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.connect(str(reachable_at or self.socket))
            probe.sendall(b"probe")
        record = self.folder / "received"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            lines = record.read_text().splitlines() if record.exists() else []
            if lines and lines[-1] == "5 b'probe'":
                return lines[:-1]
            time.sleep(0.02)
        raise AssertionError("the squatter did not record the probe within 30 s")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(15)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def shared() -> Iterator[Path]:
    """A sticky, world-writable folder: this test's /tmp, where anyone may create entries."""
    path = Path(tempfile.mkdtemp(prefix="mm-sh-", dir="/tmp"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def squat() -> Iterator[Callable[..., Squatter]]:
    squatters: list[Squatter] = []

    def start(folder: Path, mode: int = 0o755) -> Squatter:
        squatters.append(Squatter(folder, mode))
        return squatters[-1]

    yield start
    for squatter in squatters:
        squatter.stop()


def mm(*args: str, env: dict[str, str | None], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real ``mm`` CLI with *env* changed (None removes a variable)."""
    return subprocess.run(
        [sys.executable, "-m", "mm.cli", *args],
        cwd=cwd,
        env=environ_with(env),
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )


def mmd(socket_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """The real daemon started in the foreground on *socket_path*; it must give up by itself."""
    return subprocess.run(
        [sys.executable, "-m", "mmd", "--socket", str(socket_path), *extra],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def no_daemon_on(path: Path) -> bool:
    return not [p for p in psutil.process_iter(["cmdline"]) if str(path) in (p.info["cmdline"] or [])]


# -- a squatter of another uid ---------------------------------------------------------------------


@needs_other_uid
def test_a_squatted_runtime_folder_receives_nothing(mm_home, daemon, shared, squat):
    squatter = squat(shared / "mm")  # XDG_RUNTIME_DIR=shared: the client's socket is shared/mm/mmd.sock
    env = {"XDG_RUNTIME_DIR": str(shared), "MM_SOCKET": None}
    me = os.getuid()
    result = mm("-p", "the secret plan", env=env, cwd=mm_home / "work")
    assert result.returncode == 1
    assert (
        f"{shared / 'mm'} belongs to uid {OTHER_UID}, not you ({me}): someone else created it"
        in result.stderr
    )
    assert "remove it, or set MM_SOCKET" in result.stderr
    assert result.stdout == ""
    # Neither status nor stop says "not running" or talks to it.
    for args in (["daemon", "status"], ["daemon", "stop"], ["daemon", "start"]):
        other = mm(*args, env=env, cwd=mm_home / "work")
        assert other.returncode == 1, args
        assert "MM_SOCKET" in other.stderr, args
    assert squatter.received() == []
    assert no_daemon_on(squatter.socket)
    assert_daemon_serves(mm_home)


needs_setpriv = pytest.mark.skipif(
    shutil.which("setpriv") is None, reason="setpriv (util-linux) is not installed"
)


class Impostor(Squatter):
    """A process of *your* uid, run with no_new_privs as every command of a sandboxed turn is, that put a
    socket where the client looks for the daemon's: the temp dir, which a sandboxed turn may write, holds the
    socket's folder when XDG_RUNTIME_DIR is not set."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.socket = folder, folder / "mmd.sock"
        self.proc = subprocess.Popen(
            ["setpriv", "--no-new-privs", sys.executable, "-I", "-c", SQUATTER, str(folder), "700"],
            stdout=subprocess.PIPE,
            text=True,
            cwd="/",
        )
        _wait_ready(self.proc)


class ForkedImpostor(Impostor):
    """An impostor whose listening process forked and exited: its child serves, and SO_PEERCRED names a pid
    that is gone. Asked of that pid, "with no_new_privs?" read "no"."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.socket = folder, folder / "mmd.sock"
        self.proc = subprocess.Popen(
            ["setpriv", "--no-new-privs", sys.executable, "-I", "-c", SQUATTER, str(folder), "700", "fork"],
            stdout=subprocess.PIPE,
            text=True,
            cwd="/",
        )
        _wait_ready(self.proc)
        self.proc.wait(15)  # the listener is gone, and reaped
        self.server = psutil.Process(int((folder / "pid").read_text()))

    def stop(self) -> None:
        self.server.terminate()
        self.server.wait(15)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@needs_setpriv
@pytest.mark.parametrize("client", ["mm", pytest.param("nvim", marks=needs_nvim)])
def test_a_socket_whose_listener_is_gone_receives_nothing(mm_home, daemon, client):
    # A sandboxed command's socket in the daemon's place, whose listening process forked and exited: the
    # clients asked that gone pid whether it ran with no_new_privs, read "no", and sent the prompt to its
    # child. A listener that cannot be told is refused like one with no_new_privs.
    folder = Path(tempfile.mkdtemp(prefix="mm-imp-", dir="/tmp")) / "mm"
    impostor = ForkedImpostor(folder)
    try:
        pid = impostor.proc.pid
        told = (
            f"the process that listens on {impostor.socket} (pid {pid}) is gone or cannot be read, so it cannot "
            f"be told from a command of a sandboxed turn: it is not your mmd, so nothing was sent to it; remove "
            f"{impostor.socket}, or set MM_SOCKET"
        )
        if client == "mm":
            result = mm(
                "-p", "the secret plan", env={"MM_SOCKET": str(impostor.socket)}, cwd=mm_home / "work"
            )
            assert result.returncode == 1 and result.stdout == ""
            assert told in result.stderr
        else:
            got = nvim_request({"MM_SOCKET": str(impostor.socket)}, mm_home / "work")
            assert not got["answered"]
            assert told in got["err"]
        assert impostor.received() == ["0 b''"]  # it connected, to learn who answers: no byte sent
    finally:
        impostor.stop()
        shutil.rmtree(folder.parent, ignore_errors=True)
    assert_daemon_serves(mm_home)


@needs_setpriv
def test_a_socket_a_sandboxed_command_put_in_the_daemons_place_receives_nothing(mm_home, daemon):
    folder = Path(tempfile.mkdtemp(prefix="mm-imp-", dir="/tmp")) / "mm"
    impostor = Impostor(folder)
    try:
        env = {"MM_SOCKET": str(impostor.socket)}
        result = mm("-p", "the secret plan", env=env, cwd=mm_home / "work")
        assert result.returncode == 1 and result.stdout == ""
        pid = impostor.proc.pid
        assert (
            f"the process answering on {impostor.socket} (pid {pid}) runs with no_new_privs, as a command of a "
            f"sandboxed turn does, and you do not: it is not your mmd, so nothing was sent to it; stop it "
            f"(kill {pid}) and remove {impostor.socket}, or set MM_SOCKET" in result.stderr
        )
        for args in (["daemon", "status"], ["daemon", "stop"]):
            other = mm(*args, env=env, cwd=mm_home / "work")
            assert other.returncode == 1 and "runs with no_new_privs" in other.stderr, args
        assert (
            impostor.received() == ["0 b''"] * 3
        )  # each client connected, to learn who answers: no byte sent
    finally:
        impostor.stop()
        shutil.rmtree(folder.parent, ignore_errors=True)
    assert_daemon_serves(mm_home)


def test_only_a_socket_in_the_temp_dir_is_checked_for_no_new_privs(tmp_path, monkeypatch):
    # Elsewhere (XDG_RUNTIME_DIR, a systemd socket) no sandboxed turn can write the socket's folder, and a
    # daemon hardened with NoNewPrivileges= is yours.
    monkeypatch.setenv("TMPDIR", str(tmp_path / "t"))
    (tmp_path / "t").mkdir()
    assert trust.in_temp_dir(Path("/tmp/mm-1000/mmd.sock"))
    assert trust.in_temp_dir(tmp_path / "t" / "mm" / "mmd.sock")
    assert not trust.in_temp_dir(Path("/run/user/1000/mm/mmd.sock"))
    assert not trust.in_temp_dir(Path("/tmpfoo/mmd.sock"))


@needs_other_uid
def test_a_world_writable_squatted_folder_is_refused_too(mm_home, daemon, shared, squat):
    squatter = squat(shared / "mm", 0o777)
    result = mm("-p", "the secret plan", env={"XDG_RUNTIME_DIR": str(shared)}, cwd=mm_home / "work")
    assert result.returncode == 1
    assert f"belongs to uid {OTHER_UID}" in result.stderr
    assert squatter.received() == []
    assert_daemon_serves(mm_home)


@needs_other_uid
def test_a_socket_file_of_another_uid_in_a_private_folder_is_refused(mm_home, daemon, shared, squat):
    squatter = squat(shared / "sq")
    private = mm_home / "private"
    private.mkdir(mode=0o700)
    moved = private / "mmd.sock"
    os.rename(squatter.socket, moved)  # still the squatter's file, still listening
    result = mm("-p", "the secret plan", env={"MM_SOCKET": str(moved)}, cwd=mm_home / "work")
    assert result.returncode == 1
    assert f"{moved} belongs to uid {OTHER_UID}, not you ({os.getuid()})" in result.stderr
    assert f"`rm {moved}`" in result.stderr
    # The daemon does not remove it nor talk to it either: it refuses, naming MM_SOCKET.
    started = mmd(moved)
    assert started.returncode == 1
    assert "MM_SOCKET" in started.stderr and f"belongs to uid {OTHER_UID}" in started.stderr
    assert moved.exists()
    assert squatter.received(reachable_at=moved) == []
    assert_daemon_serves(mm_home)


@needs_other_uid
def test_a_peer_of_another_uid_behind_a_socket_file_of_yours_gets_nothing(mm_home, daemon, shared, squat):
    squatter = squat(shared / "sq")
    private = mm_home / "private"
    private.mkdir(mode=0o700)
    moved = private / "mmd.sock"
    os.rename(squatter.socket, moved)
    os.chown(moved, os.getuid(), os.getgid())  # folder and file look right: only SO_PEERCRED tells
    result = mm("-p", "the secret plan", env={"MM_SOCKET": str(moved)}, cwd=mm_home / "work")
    assert result.returncode == 1
    assert f"runs as uid {OTHER_UID}, not you ({os.getuid()})" in result.stderr
    assert "nothing was sent" in result.stderr
    started = mmd(moved)
    assert started.returncode == 1
    assert f"runs as uid {OTHER_UID}" in started.stderr and "MM_SOCKET" in started.stderr
    # The client and the daemon each connected, read the peer's uid and closed: zero bytes.
    assert squatter.received(reachable_at=moved) == ["0 b''", "0 b''"]
    assert_daemon_serves(mm_home)


@needs_other_uid
def test_a_daemon_started_in_a_squatted_folder_exits_naming_mm_socket(mm_home, daemon, shared, squat):
    squatter = squat(shared / "mm")
    started = mmd(squatter.socket)
    assert started.returncode == 1
    assert f"belongs to uid {OTHER_UID}" in started.stderr
    assert "MM_SOCKET" in started.stderr
    assert not (squatter.folder / "mmd.sock.lock").exists()
    assert squatter.received() == []
    assert_daemon_serves(mm_home)


@needs_other_uid
def test_a_state_folder_of_another_uid_is_refused_and_its_log_link_not_followed(mm_home, daemon, shared):
    state = shared / "mm"
    state.mkdir(mode=0o755)
    precious = mm_home / "precious.txt"
    precious.write_text("keep me\n")
    (state / "mmd.log").symlink_to(precious)
    os.lchown(state / "mmd.log", OTHER_UID, OTHER_GID)
    os.chown(state, OTHER_UID, OTHER_GID)
    env = {"XDG_STATE_HOME": str(shared), "MM_SOCKET": str(mm_home / "fresh" / "mmd.sock")}
    result = mm("-p", "hi", env=env, cwd=mm_home / "work")
    assert result.returncode == 1
    assert f"{state} belongs to uid {OTHER_UID}" in result.stderr
    assert "XDG_STATE_HOME" in result.stderr
    started = mmd(mm_home / "fresh" / "mmd.sock", "--state-dir", str(state))
    assert started.returncode == 1 and "XDG_STATE_HOME" in started.stderr
    assert precious.read_text() == "keep me\n"
    assert_daemon_serves(mm_home)


# -- your own places, too open or booby-trapped (any uid) -----------------------------------------


@pytest.mark.parametrize("mode", [0o770, 0o777, 0o1777])
def test_a_folder_others_can_write_is_refused(mm_home, daemon, mode):
    folder = mm_home / "open"
    folder.mkdir()
    folder.chmod(mode)
    result = mm("-p", "hi", env={"MM_SOCKET": str(folder / "mmd.sock")}, cwd=mm_home / "work")
    assert result.returncode == 1
    assert f"{folder} can be written by other users (mode {mode:04o})" in result.stderr
    assert f"`chmod 700 {folder}`" in result.stderr
    started = mmd(folder / "mmd.sock")
    assert started.returncode == 1 and "MM_SOCKET" in started.stderr
    assert sorted(folder.iterdir()) == []  # no lock, no socket: nothing was started there
    assert_daemon_serves(mm_home)


@pytest.mark.parametrize("target_exists", [True, False])
def test_a_lock_symlink_is_not_followed_and_the_client_says_why(mm_home, daemon, target_exists):
    runtime = mm_home / "trap"
    (runtime / "mm").mkdir(parents=True, mode=0o700)
    precious = mm_home / "precious.txt"
    if target_exists:
        precious.write_text("keep me\n")
        precious.chmod(0o644)
    lock = runtime / "mm" / "mmd.sock.lock"
    lock.symlink_to(precious)
    # The client finds no daemon and starts one; it reports the daemon's reason, not a timeout.
    result = mm("-p", "hi", env={"XDG_RUNTIME_DIR": str(runtime), "MM_SOCKET": None}, cwd=mm_home / "work")
    assert result.returncode == 1
    assert "mmd failed to start (exit code 1)" in result.stderr
    assert f"{lock} is a symbolic link: mm does not follow it" in result.stderr
    assert f"`rm {lock}`" in result.stderr
    assert "did not answer" not in result.stderr
    assert lock.is_symlink()
    if target_exists:
        assert precious.read_text() == "keep me\n"
        assert precious.stat().st_mode & 0o777 == 0o644
    else:
        assert not precious.exists()
    assert not (runtime / "mm" / "mmd.sock").exists()
    assert_daemon_serves(mm_home)


def test_a_state_folder_others_can_write_is_refused(mm_home, daemon):
    state = mm_home / "st" / "mm"
    state.mkdir(parents=True)
    state.chmod(0o777)
    env = {"XDG_STATE_HOME": str(state.parent), "MM_SOCKET": str(mm_home / "fresh" / "mmd.sock")}
    result = mm("-p", "hi", env=env, cwd=mm_home / "work")
    assert result.returncode == 1
    assert f"{state} can be written by other users" in result.stderr and "XDG_STATE_HOME" in result.stderr
    assert not (state / "mmd.log").exists()
    assert_daemon_serves(mm_home)


def test_a_private_folder_of_yours_that_others_may_read_is_tightened(mm_home, daemon):
    folder = mm_home / "readable"
    folder.mkdir()
    folder.chmod(0o755)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mmd", "--socket", str(folder / "mmd.sock")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_socket(folder / "mmd.sock", proc)
        assert folder.stat().st_mode & 0o777 == 0o700
        result = mm("daemon", "status", env={"MM_SOCKET": str(folder / "mmd.sock")}, cwd=mm_home / "work")
        assert result.returncode == 0, result.stderr
    finally:
        stop_daemon(proc)
    assert_daemon_serves(mm_home)


# -- the same checks with a faked owner (any uid) --------------------------------------------------


def test_faked_owner_folder_is_refused_with_the_fix(mm_home, daemon, monkeypatch):
    monkeypatch.setattr(trust, "ROOT_UID", -1)  # so a test running as root is not trusted as root
    me = os.getuid()
    folder = mm_home / "mine"
    folder.mkdir(mode=0o700)
    with pytest.raises(trust.UnsafePath) as err:
        trust.check_dir(folder, uid=me + 1)
    assert str(err.value) == (
        f"{folder} belongs to uid {me}, not you ({me + 1}): someone else created it; "
        "remove it, or set MM_SOCKET (or XDG_RUNTIME_DIR) to a path in a folder only you can write"
    )
    link = mm_home / "link"
    link.symlink_to(folder)
    with pytest.raises(trust.UnsafePath, match=f"symbolic link made by uid {me}, not you"):
        trust.check_dir(link, uid=me + 1)
    trust.check_dir(folder, uid=me)  # the owner passes
    assert_daemon_serves(mm_home)


def test_faked_owner_socket_and_peer_are_refused(mm_home, daemon, monkeypatch):
    monkeypatch.setattr(trust, "ROOT_UID", -1)
    me = os.getuid()
    real = mm_home / "run" / "mm" / "mmd.sock"
    with pytest.raises(trust.UnsafePath, match=f"belongs to uid {me}, not you \\({me + 1}\\)"):
        trust.check_socket_file(real, uid=me + 1)
    assert trust.check_socket_file(real, uid=me)
    assert not trust.check_socket_file(mm_home / "nothing.sock", uid=me + 1)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(real))
        with pytest.raises(trust.UnsafePath, match=f"runs as uid {me}, not you \\({me + 1}\\)"):
            trust.check_peer(sock, real, uid=me + 1)
        trust.check_peer(sock, real, uid=me)
    assert_daemon_serves(mm_home)


def test_faked_owner_lock_is_refused(mm_home, daemon, monkeypatch):
    me = os.getuid()
    lock = mm_home / "some.lock"
    lock.write_text("")
    with pytest.raises(trust.UnsafePath, match=f"belongs to uid {me}, not you \\({me + 1}\\)"):
        trust.open_lock(lock, uid=me + 1)
    os.close(trust.open_lock(lock, uid=me))
    fifo = mm_home / "fifo.lock"
    os.mkfifo(fifo)
    with pytest.raises(trust.UnsafePath, match="not a regular file"):
        trust.open_lock(fifo)  # and it did not block on the FIFO
    assert_daemon_serves(mm_home)


# -- the Neovim plugin makes the same checks ------------------------------------------------------------


@needs_nvim
@needs_other_uid
def test_neovim_sends_nothing_to_a_squatted_folder_or_another_uids_peer(mm_home, daemon, shared, squat):
    squatter = squat(shared / "mm")
    work = mm_home / "work"
    got = nvim_request({"XDG_RUNTIME_DIR": str(shared), "MM_SOCKET": None}, work)
    assert not got["answered"]
    assert f"{shared / 'mm'} belongs to uid {OTHER_UID}, not you ({os.getuid()})" in got["err"]
    assert "set MM_SOCKET" in got["err"]
    # Folder and file look right: only the kernel's word on the peer tells.
    private = mm_home / "private"
    private.mkdir(mode=0o700)
    moved = private / "mmd.sock"
    os.rename(squatter.socket, moved)
    os.chown(moved, os.getuid(), os.getgid())
    got = nvim_request({"MM_SOCKET": str(moved)}, work)
    assert f"runs as uid {OTHER_UID}, not you ({os.getuid()})" in got["err"]
    assert "nothing was sent" in got["err"]
    # The first Neovim did not connect; the second connected to learn who answers, and sent no byte.
    assert squatter.received(reachable_at=moved) == ["0 b''"]
    assert nvim_request({}, work)["answered"]  # and the user's own daemon is reached as before


@needs_nvim
@needs_setpriv
def test_neovim_sends_nothing_to_a_socket_a_sandboxed_command_put_in_the_daemons_place(mm_home, daemon):
    folder = Path(tempfile.mkdtemp(prefix="mm-imp-", dir="/tmp")) / "mm"
    impostor = Impostor(folder)
    try:
        got = nvim_request({"MM_SOCKET": str(impostor.socket)}, mm_home / "work")
        pid = impostor.proc.pid
        assert not got["answered"]
        assert (
            f"the process answering on {impostor.socket} (pid {pid}) runs with no_new_privs, as a command of a "
            f"sandboxed turn does, and you do not: it is not your mmd, so nothing was sent to it"
            in got["err"]
        )
        assert impostor.received() == ["0 b''"]
    finally:
        impostor.stop()
        shutil.rmtree(folder.parent, ignore_errors=True)
    assert nvim_request({}, mm_home / "work")["answered"]
