"""The sandbox with real processes: what a confined child may write, reach and link, and what the model reads.

Each test gives its Sandbox a temp dir of its own (pytest's tmp_path lies under the system's
temp dir, which every sandbox may write): the folders outside it are then truly outside.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import trio

from mmd import paths as mmd_paths
from mmd.config import ConfigError, load_agent_file
from mmd.config.declared import DeclaredToolSpec
from mmd.config.sandbox import SandboxSpec
from mmd.procs import run_tool_process
from mmd.rpc import trust as rpc_trust
from mmd.rpc.trust import no_new_privs
from mmd.sandbox import Sandbox, support
from mmd.sandbox.explain import refusal_note
from mmd.sandbox.links import HardLinkRefused, check_links
from mmd.tools.base import Limits, ToolContext
from mmd.tools.declared import DeclaredTool
from mmd.turn.plan import turn_sandbox

needs_landlock = pytest.mark.skipif(not support().available, reason="the kernel offers no Landlock")


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(project, outside, temp) and the sandbox's temp dir made."""
    project, outside, temp = tmp_path / "project", tmp_path / "outside", tmp_path / "temp"
    for d in (project, outside, temp):
        d.mkdir()
    return project, outside, temp


def box_for(project: Path, temp: Path, **kw: object) -> Sandbox:
    return Sandbox(roots=(str(project),), temp=str(temp), **kw)  # type: ignore[arg-type]


def sh(command: str, project: Path, box: Sandbox | None) -> object:
    async def main() -> object:
        return await run_tool_process(
            ["bash", "-c", command], cwd=project, env={}, spill_path=project.parent / "spill.log", sandbox=box
        )

    return trio.run(main)


# --- the kernel's part -------------------------------------------------------------------


@needs_landlock
def test_a_confined_child_writes_its_folders_and_devices_only_and_reads_everything(dirs) -> None:
    project, outside, temp = dirs
    (outside / "secret.txt").write_text("readable\n")
    command = (
        "echo in > in.txt; echo t > $T/t.txt; echo x > /dev/null && echo devnull-ok; "
        "cat ../outside/secret.txt; echo out > ../outside/out.txt"
    )
    result = sh(command.replace("$T", str(temp)), project, box_for(project, temp))
    assert (project / "in.txt").read_text() == "in\n"
    assert (temp / "t.txt").read_text() == "t\n"
    assert not (outside / "out.txt").exists()
    assert "devnull-ok" in result.output and "readable" in result.output
    assert "../outside/out.txt: Permission denied" in result.output


@needs_landlock
def test_the_daemons_own_threads_are_never_confined(dirs) -> None:
    project, outside, temp = dirs
    sh("true", project, box_for(project, temp))
    (outside / "after.txt").write_text("the daemon still writes\n")  # this thread
    done: list[bool] = []
    thread = threading.Thread(target=lambda: done.append(bool((outside / "t.txt").write_text("x"))))
    thread.start()
    thread.join()
    assert done == [True]


@needs_landlock
def test_read_only_writes_the_temp_dir_only(dirs) -> None:
    project, _, temp = dirs
    box = Sandbox(mode="read-only", temp=str(temp))
    sh(f"echo x > in.txt; echo y > {temp}/t.txt", project, box)
    assert not (project / "in.txt").exists()
    assert (temp / "t.txt").exists()


@needs_landlock
def test_network_off_refuses_tcp_to_a_listening_loopback_server(dirs) -> None:
    project, _, temp = dirs
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        connect = f"{sys.executable} -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}))'"
        refused = sh(connect, project, box_for(project, temp, network=False))
        allowed = sh(connect, project, box_for(project, temp))
    assert "Permission denied" in refused.output and refused.exit_code == 1
    assert allowed.exit_code == 0


UDP_AND_LOCAL = """
import ctypes, socket, sys
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"leak", ("127.0.0.1", int(sys.argv[1])))
    print("udp sent")
except OSError as e:
    print("udp", e.errno)
try:
    socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    print("udp6 made")
except OSError as e:
    print("udp6", e.errno)
a, b = socket.socketpair()
a.send(b"x")
print("pair", b.recv(1).decode(), "unix", socket.socket(socket.AF_UNIX).family == socket.AF_UNIX)
libc = ctypes.CDLL(None, use_errno=True)
print("io_uring", libc.syscall(425, 8, ctypes.create_string_buffer(120)), ctypes.get_errno())
"""


@needs_landlock
def test_network_off_makes_no_internet_socket_udp_included_but_local_ones_stay(dirs) -> None:
    """Landlock refuses TCP only: a datagram would carry what a command read to any resolver or host."""
    project, _, temp = dirs
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver:
        receiver.bind(("127.0.0.1", 0))
        receiver.settimeout(0.5)
        port = receiver.getsockname()[1]
        script = project / "udp.py"
        script.write_text(UDP_AND_LOCAL)
        refused = sh(f"{sys.executable} {script} {port}", project, box_for(project, temp, network=False))
        assert refused.output.splitlines() == [
            "udp 13",  # EACCES, as Landlock's TCP refusal: the model's note reads it the same way
            "udp6 13",
            "pair x unix True",
            "io_uring -1 38",  # ENOSYS: its socket operation would make one without socket()
        ], refused.output
        with pytest.raises(socket.timeout):
            receiver.recvfrom(16)
        allowed = sh(f"{sys.executable} {script} {port}", project, box_for(project, temp))
        assert allowed.output.splitlines()[0] == "udp sent"
        assert receiver.recvfrom(16)[0] == b"leak"


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x32's numbers are x86-64's")
@needs_landlock
def test_network_off_refuses_a_system_call_of_another_abi(dirs) -> None:
    # The filter reads the native numbers: x32's socket (41 | 0x40000000) must not get past it.
    project, _, temp = dirs
    x32 = "import ctypes; c = ctypes.CDLL(None, use_errno=True); print(c.syscall(0x40000029, 2, 2, 0), ctypes.get_errno())"
    refused = sh(f"{sys.executable} -c '{x32}'", project, box_for(project, temp, network=False))
    assert refused.output.strip() == "-1 13"


needs_scopes = pytest.mark.skipif(
    support().abi < 6, reason="the kernel's Landlock has no scopes (ABI 6, Linux 6.12)"
)


@needs_scopes
def test_a_confined_child_signals_only_what_it_started(dirs) -> None:
    # Before scopes a confined command could kill the daemon, your shell or editor, another session's tools.
    project, _, temp = dirs
    outside = subprocess.Popen(["sleep", "60"])
    try:
        command = f"kill -0 {outside.pid} && echo reached; sleep 60 & kill $! && echo own-child-ok"
        confined = sh(command, project, box_for(project, temp))
        assert "Operation not permitted" in confined.output and "reached" not in confined.output
        assert "own-child-ok" in confined.output
        assert "reached" in sh(command, project, None).output  # unconfined, as before
        assert outside.poll() is None
    finally:
        outside.kill()
        outside.wait()


@needs_scopes
def test_a_confined_child_reaches_no_abstract_socket_made_outside(dirs) -> None:
    # An X server listens on an abstract socket too: through it keystrokes can be typed into your terminal.
    project, _, temp = dirs
    name = f"mm-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind("\0" + name)
        listener.listen()
        connect = (
            f"{sys.executable} -c 'import socket; s = socket.socket(socket.AF_UNIX); "
            f's.connect("\\0{name}"); print("connected")\''
        )
        refused = sh(connect, project, box_for(project, temp))
        allowed = sh(connect, project, None)
    # A line of its own: Python 3.13's traceback quotes the -c source, print("connected") with it.
    assert "connected" not in refused.output.splitlines() and "Operation not permitted" in refused.output
    assert "connected" in allowed.output.splitlines()


@needs_landlock
def test_a_hard_link_made_beforehand_refuses_the_spawn(dirs) -> None:
    project, outside, temp = dirs
    (outside / "victim").write_text("untouched\n")
    os.link(outside / "victim", project / "link")
    result = sh("echo pwned >> link", project, box_for(project, temp))
    assert result.exit_code is None
    assert result.spawn_error.startswith(
        f"bash was not started: the sandbox cannot confine writes through {project}/link"
    )
    assert (outside / "victim").read_text() == "untouched\n"


@pytest.mark.parametrize("refusal", [errno.ENOSYS, errno.EPERM], ids=["ENOSYS", "EPERM"])
def test_a_peer_is_judged_by_its_status_where_pidfd_send_signal_is_refused(monkeypatch, refusal) -> None:
    # An old container's seccomp profile (EPERM) or valgrind (ENOSYS) refuses pidfd_send_signal: only ESRCH
    # says the peer is gone. Taken for "gone", every client there counted as confined: read-only turns.
    def refused(pidfd: int, sig: int) -> None:
        raise OSError(refusal, os.strerror(refusal))

    monkeypatch.setattr(rpc_trust.signal, "pidfd_send_signal", refused)
    one, other = socket.socketpair(socket.AF_UNIX)
    with one, other:
        pid = rpc_trust.peer_credentials(one)[0]
        assert rpc_trust.peer_no_new_privs(one, pid) is no_new_privs(os.getpid())


def test_a_fifo_where_a_virtual_environments_pyvenv_cfg_would_be_does_not_hold_the_refusal(
    tmp_path: Path,
) -> None:
    # The refusal names the package manager whose link farm a refused file lies in, and read each folder's
    # pyvenv.cfg on the way up with a blocking open(): a project's FIFO there held the sandbox's spawner
    # thread, every confined call after, and the daemon's stop.
    project, outside = tmp_path / "project", tmp_path / "outside"
    (project / "src").mkdir(parents=True)
    outside.mkdir()
    (outside / "main.c").write_text("int x;\n")
    os.link(outside / "main.c", project / "src" / "main.c")
    os.mkfifo(project / "src" / "pyvenv.cfg")
    raised: list[BaseException] = []

    def walk() -> None:
        try:
            check_links([str(project)])
        except BaseException as exc:
            raised.append(exc)

    walker = threading.Thread(target=walk)
    walker.start()
    walker.join(10)
    held = walker.is_alive()
    if held:  # let it go: a writer opens the FIFO
        with open(project / "src" / "pyvenv.cfg", "wb"):
            pass
        walker.join(10)
    assert not held, "the refusal waited on a FIFO"
    [refused] = raised
    assert isinstance(refused, HardLinkRefused) and "src/main.c" in str(refused)


def test_hard_links_whose_names_are_all_inside_are_fine(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("x")
    (tmp_path / "sub").mkdir()
    os.link(tmp_path / "a", tmp_path / "sub" / "b")
    check_links([str(tmp_path)])
    os.link(tmp_path / "a", tmp_path.parent / f"{tmp_path.name}-outside")
    try:
        with pytest.raises(HardLinkRefused, match="3 names, 2 of them"):
            check_links([str(tmp_path)])
    finally:
        os.unlink(tmp_path.parent / f"{tmp_path.name}-outside")


@needs_landlock
def test_a_declared_tools_dry_run_is_confined_too(dirs) -> None:
    project, outside, temp = dirs
    spec = DeclaredToolSpec(
        name="ship",
        description="Ship it.",
        command=["true"],
        dry_run=["touch", f"{outside}/dry.txt"],
    )
    ctx = ToolContext(
        session_id="s",
        call_id="c",
        cwd=project,
        session_dir=project.parent / "session",
        limits=Limits(),
        sandbox=box_for(project, temp),
    )
    result = trio.run(DeclaredTool(spec, project).dry_run, {}, ctx)
    assert not result.ok
    assert not (outside / "dry.txt").exists()
    assert f"[mm: the sandbox refused writing {outside}/dry.txt" in result.content


def test_trio_still_lets_a_process_be_made_from_a_popen() -> None:
    # mmd/procs/supervisor.py starts a confined child itself and wraps it with this private constructor.
    assert callable(getattr(trio.Process, "_create", None))


# --- what the model reads ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "refused"),
    [
        ("bash: line 1: /etc/x: Permission denied", ["/etc/x"]),
        ("touch: cannot touch '/etc/y': Permission denied", ["/etc/y"]),
        ("PermissionError: [Errno 13] Permission denied: '/root/z'", ["/root/z"]),
        ("bash: line 1: inside.txt: Permission denied", []),  # inside the project: not named
        # Go (lower case), Rust, Node and npm, whose own advice (`sudo chown -R`) a model would follow.
        ("open /root/go/pkg/mod/cache/lock: permission denied", ["/root/go/pkg/mod/cache/lock"]),
        ("error: failed to open `/root/.cargo/registry/x` (os error 13)", ["/root/.cargo/registry/x"]),
        ('Error: Permission denied (os error 13) at path "/root/.cache/uv/.tmpX"', ["/root/.cache/uv/.tmpX"]),
        ("Error: EACCES: permission denied, mkdir '/root/.npm/_cacache'", ["/root/.npm/_cacache"]),
        (
            "npm error code EACCES\nnpm error syscall open\nnpm error path /root/.npm/_cacache/tmp/x\n"
            'npm error   sudo chown -R 0:0 "/root/.npm"',
            ["/root/.npm/_cacache/tmp/x"],
        ),
        ("all good", None),
    ],
)
def test_refusals_are_read_from_the_output_with_their_paths(output: str, refused: list[str] | None) -> None:
    box = Sandbox(roots=("/p",), temp="/t")
    note = refusal_note(output, box, "/p", "/p/mm.yaml")
    if refused is None:
        assert note is None
        return
    assert note is not None
    text, paths = note
    assert paths == refused
    assert "sandbox.writable: in /p/mm.yaml (this project) or in " in text and "--sandbox off" in text
    assert "config.yaml (every project" in text


@pytest.mark.parametrize(
    "line",
    [
        "Permission denied '" + "/a" * 12_000,  # a quote that never closes, and slashes
        "Permission denied " + "-a." * 8_000,
        "x" * 24_000 + " Permission denied",
        "x: Permission denied " * 1_200,
        "Permission denied " + "\u2018" * 24_000,  # opening quotes that no closing one follows
    ],
)
def test_a_commands_output_shaped_against_the_reader_is_read_whole_and_still_answered(line: str) -> None:
    # A pattern of three alternatives once took 3.7 s of the event loop on the second line (quadratic in it).
    box = Sandbox(roots=("/p",), temp="/t")
    note = refusal_note(line + "\ntouch: cannot touch '/etc/x': Permission denied", box, "/p", None)
    assert note is not None
    assert "/etc/x" in note[1]


def test_the_note_names_the_daemons_own_config_yaml(tmp_path: Path) -> None:
    # mmd --config elsewhere: the file to add a folder to is that one, not the default's.
    agent = load(tmp_path, "model: a/b\n")
    box = turn_sandbox(agent, tmp_path, config_file="/srv/mm/config.yaml")
    note = refusal_note("touch: cannot touch '/etc/x': Permission denied", box, str(tmp_path), None)
    assert note is not None and "or in /srv/mm/config.yaml (every project" in note[0]
    default = refusal_note(
        "touch: cannot touch '/etc/x': Permission denied", turn_sandbox(agent, tmp_path), "/", None
    )
    assert (
        default is not None and f"or in {mmd_paths.config_dir() / 'config.yaml'} (every project" in default[0]
    )


# --- the agent file ---------------------------------------------------------------------


def load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "mm.yaml"
    path.write_text(text)
    return load_agent_file(path)


def error(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    return str(info.value)


def test_the_short_and_the_long_form_and_yamls_bare_off(tmp_path: Path) -> None:
    assert load(tmp_path, "sandbox: read-only\n").sandbox.mode == "read-only"
    assert load(tmp_path, "sandbox: off\n").sandbox.mode == "off"  # YAML reads a bare off as false
    agent = load(tmp_path, "sandbox:\n  mode: off\n  writable: [../shared, ~/cache]\n  network: off\n")
    assert agent.sandbox.mode == "off" and agent.sandbox.network is False
    assert agent.sandbox.writable == [str(tmp_path.parent / "shared"), os.path.expanduser("~/cache")]
    assert load(tmp_path, "model: x/y\n").sandbox.mode is None  # the default: workspace, chosen by the plan
    server = "mcp:\n  w:\n    command: ./w.py\n    sandbox: workspace\n"
    assert load(tmp_path, server).mcp["w"].sandbox.mode == "workspace"


def test_errors_name_the_file_line_and_field(tmp_path: Path) -> None:
    file = tmp_path / "mm.yaml"
    assert error(tmp_path, "model: x/y\nsandbox: wrkspace\n") == (
        f'{file}:2: sandbox: expected "workspace", "read-only" or "off" (or a map with mode:, writable:, '
        'network:), found a string ("wrkspace") — did you mean "workspace"?'
    )
    assert error(tmp_path, "sandbox: true\n").startswith(f"{file}:1: sandbox: expected")
    assert error(tmp_path, "sandbox:\n  netwrok: off\n").startswith(f"{file}:2: sandbox.netwrok: unknown key")
    assert error(tmp_path, "sandbox:\n  writable: /x\n").startswith(
        f"{file}:2: sandbox.writable: expected a list"
    )


def test_the_command_line_wins_over_the_agent_file(tmp_path: Path) -> None:
    agent = load(tmp_path, "sandbox:\n  mode: read-only\n  writable: [shared]\n")
    assert turn_sandbox(agent, tmp_path).mode == "read-only"
    assert turn_sandbox(agent, tmp_path).roots == ()
    box = turn_sandbox(agent, tmp_path, "workspace")
    assert box.roots == (os.path.realpath(tmp_path), os.path.realpath(tmp_path / "shared"))
    assert turn_sandbox(agent, tmp_path, "off").label == "off"


def test_config_yaml_adds_folders_and_a_default_mode_and_can_only_turn_the_network_off(
    tmp_path: Path,
) -> None:
    user = SandboxSpec(mode="read-only", writable=["/cache/uv"], network=True)
    plain = load(tmp_path, "model: a/b\n")
    assert turn_sandbox(plain, tmp_path, user=user).mode == "read-only"  # no mode in the agent file
    box = turn_sandbox(plain, tmp_path, "workspace", user)
    assert box.roots == (os.path.realpath(tmp_path), "/cache/uv")
    agent = load(tmp_path, "sandbox:\n  mode: workspace\n  writable: [shared]\n  network: on\n")
    box = turn_sandbox(agent, tmp_path, user=user)  # the agent file's mode wins over config.yaml's
    assert box.roots == (os.path.realpath(tmp_path), os.path.realpath(tmp_path / "shared"), "/cache/uv")
    assert box.network
    off = SandboxSpec(network=False)
    assert not turn_sandbox(agent, tmp_path, user=off).network  # a cloned repo's file cannot turn it on
    assert turn_sandbox(agent, tmp_path, user=None).roots[-1] == os.path.realpath(tmp_path / "shared")


def test_a_link_made_into_a_folder_walked_before_is_found(tmp_path: Path) -> None:
    project, outside = tmp_path / "project", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    (outside / "victim").write_text("x")
    check_links([str(project)])  # walked and kept: nothing linked
    os.link(outside / "victim", project / "link")  # the folder's mtime changes
    with pytest.raises(HardLinkRefused, match="2 names, 1 of them"):
        check_links([str(project)])


def test_a_local_git_clone_whose_objects_are_hard_links_is_not_refused(tmp_path: Path) -> None:
    # `git clone /path` hard-links .git/objects; every such clone would be refused otherwise.
    import subprocess

    origin, clone = tmp_path / "origin", tmp_path / "clone"
    origin.mkdir()
    (origin / "f").write_text("x\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    for argv in (["init", "-q"], ["add", "f"], ["commit", "-q", "-m", "f"]):
        subprocess.run([*git, *argv], cwd=origin, check=True)
    subprocess.run([*git, "clone", "-q", str(origin), str(clone)], check=True)
    linked = [p for p in (clone / ".git" / "objects").rglob("*") if p.is_file() and p.stat().st_nlink > 1]
    assert linked  # the clone's objects are the origin's files
    check_links([str(clone)])
    os.link(origin / "f", clone / "f-link")  # a hard link elsewhere in the clone is still refused
    with pytest.raises(HardLinkRefused, match="f-link"):
        check_links([str(clone)])


def test_no_new_privs_is_read_from_the_process_status() -> None:
    # Asked of every prompt's client: a confined command's `mm -p` gets a read-only turn.
    code = (
        "import ctypes, sys, time; ctypes.CDLL(None).prctl(38, 1, 0, 0, 0); "  # PR_SET_NO_NEW_PRIVS
        "print('set', flush=True); time.sleep(30)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "set\n"
        assert no_new_privs(child.pid)
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    mine = b"NoNewPrivs:\t1\n" in Path(f"/proc/{os.getpid()}/status").read_bytes()
    assert no_new_privs(os.getpid()) == mine
    assert not no_new_privs(child.pid)  # gone


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "no pidfd"])
def test_a_peer_that_is_gone_cannot_be_told_not_to_be_confined(tmp_path, monkeypatch, pidfd) -> None:
    # Asked as a client connects (the daemon) or is answered (the client): a process that connected and is
    # gone, its pid free for another, must not read as "no no_new_privs". Without SO_PEERPIDFD (a kernel
    # before 6.5), the gone pid is all there is.
    if not pidfd:
        monkeypatch.setattr(rpc_trust, "SO_PEERPIDFD", None)
    path = str(tmp_path / "s")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(path)
        listener.listen()
        with socket.socket(socket.AF_UNIX) as mine:
            mine.connect(path)
            accepted, _ = listener.accept()
            with accepted:
                pid = rpc_trust.peer_credentials(accepted)[0]
                assert pid == os.getpid()
                assert rpc_trust.peer_no_new_privs(accepted, pid) is no_new_privs(os.getpid())
        code = "import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])"
        child = subprocess.run([sys.executable, "-c", code, path], check=True)
        assert child.returncode == 0
        accepted, _ = listener.accept()
        with accepted:
            pid = rpc_trust.peer_credentials(accepted)[0]
            assert pid != os.getpid()
            assert rpc_trust.peer_no_new_privs(accepted, pid) is None
