"""The end-to-end tier's fixtures: a private mm home per test, real daemons, real scripted model servers.

The check that no test leaves a process behind (``no_orphans``) is in tests/conftest.py, for both tiers.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from ..paths import ROOT


@pytest.fixture
def mm_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private XDG tree and socket for one test, set in os.environ.

    Unix socket paths are limited to 108 bytes, so this lives in a short
    folder under /tmp rather than in pytest's tmp_path.
    """
    home = Path(tempfile.mkdtemp(prefix="mm-", dir="/tmp"))
    for var, sub in (
        ("XDG_RUNTIME_DIR", "run"),
        ("XDG_STATE_HOME", "state"),
        ("XDG_CONFIG_HOME", "config"),
        ("XDG_DATA_HOME", "data"),
    ):
        (home / sub).mkdir(mode=0o700)
        monkeypatch.setenv(var, str(home / sub))
    monkeypatch.delenv("MM_SOCKET", raising=False)
    (home / "work").mkdir()
    # HOME too: the daemon reads ~/.claude/skills, and a developer's own skills must not enter the tests.
    (home / "home").mkdir()
    monkeypatch.setenv("HOME", str(home / "home"))
    yield home
    # Daemons that a client started detached are not our children: stop them by socket.
    leftovers = [psutil.Process(pid) for pid in daemon_pids(home)]
    for proc in leftovers:
        proc.terminate()
    _, alive = psutil.wait_procs(leftovers, timeout=15)
    for proc in alive:
        proc.kill()
    shutil.rmtree(home, ignore_errors=True)
    assert not alive, "a daemon did not stop within 15 s of SIGTERM"


def socket_of(home: Path) -> Path:
    return home / "run" / "mm" / "mmd.sock"


def write_config(home: Path, config: dict[str, Any]) -> Path:
    path = home / "config" / "mm" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return path


class ScriptedServer:
    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc = proc
        self.url = url

    def requests(self) -> list[dict[str, Any]]:
        import httpx

        return httpx.get(f"{self.url}/_mm/requests", timeout=5).json()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def scripted(mm_home: Path) -> Iterator[Any]:
    """``scripted(steps)`` starts a scripted model server process and makes it the default model.

    ``context_window=N`` makes it stand in for a llama-server with that window (/props, /tokenize, and
    HTTP 400 for a request over it: mmd/models/scripted.py).
    """
    servers: list[ScriptedServer] = []

    def start(
        steps: list[dict[str, Any]], *, default: bool = True, context_window: int | None = None
    ) -> ScriptedServer:
        script = mm_home / f"script-{len(servers)}.json"
        window = {"context_window": context_window} if context_window else {}
        script.write_text(json.dumps({"responses": steps, **window}))
        proc = subprocess.Popen(
            [sys.executable, "-m", "mmd.models.scripted", str(script)],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("listening "), line
        server = ScriptedServer(proc, line.split(" ", 1)[1])
        servers.append(server)
        if default:
            write_config(
                mm_home,
                {
                    "providers": {
                        "script": {"kind": "openai", "base_url": f"{server.url}/v1", "max_retries": 3}
                    },
                    "default_model": "script/scripted",
                },
            )
        return server

    yield start
    for server in servers:
        server.stop()


def run_mm(
    *args: str, cwd: Path | None = None, input: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the real ``mm`` CLI as a child process (its stdin is not a TTY)."""
    return subprocess.run(
        [sys.executable, "-m", "mm", *args],
        cwd=cwd,
        input=input if input is not None else "",
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def trust_here(cwd: Path) -> None:
    """``mm trust --yes`` in *cwd*: the project's files that name commands are trusted as they are now, as a
    person does once after reading them (docs/security.md#project-trust)."""
    trusted = run_mm("trust", "--yes", cwd=cwd)
    assert trusted.returncode == 0, trusted.stderr


def spawn_mm(*args: str, cwd: Path) -> subprocess.Popen[str]:
    """Start the real ``mm`` CLI without waiting for it (to signal it, or to race two of them).

    Ctrl-C reaches it as in a terminal even when the test run itself ignores SIGINT (a suite started
    in the background by a non-interactive shell inherits SIGINT ignored, and so would mm).
    """
    return subprocess.Popen(
        [sys.executable, "-m", "mm", *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def cmdline_of(proc: psutil.Process) -> list[str]:
    """*proc*'s command line; [] for a zombie or a process gone meanwhile (a list of children holds both)."""
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


def name_of(proc: psutil.Process) -> str:
    """*proc*'s name; "" for a process gone meanwhile."""
    try:
        return proc.name()
    except psutil.Error:
        return ""


def daemon_pids(home: Path) -> list[int]:
    sock = str(socket_of(home))
    pids = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "mmd" in cmd and sock in cmd:
            pids.append(proc.pid)
    return pids


def start_mmd(home: Path, prefix: Sequence[str] = ()) -> subprocess.Popen[bytes]:
    """A real mmd process on the test's private socket, once it answers (*prefix*: a command that execs it,
    such as ``prlimit --nofile=N``)."""
    sock = socket_of(home)
    proc = subprocess.Popen(
        [*prefix, sys.executable, "-m", "mmd", "--socket", str(sock)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_for_socket(sock, proc)
    return proc


@pytest.fixture
def daemon(mm_home: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real mmd process on the test's private socket, stopped (and checked) at teardown."""
    proc = start_mmd(mm_home)
    yield proc
    stop_daemon(proc)


def wait_for_socket(sock: Path, proc: subprocess.Popen[Any] | None = None, timeout: float = 20) -> None:
    import socket as socket_mod

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"mmd exited with {proc.returncode}")
        with contextlib.closing(socket_mod.socket(socket_mod.AF_UNIX)) as s:
            try:
                s.connect(str(sock))
                return
            except OSError:
                time.sleep(0.02)
    raise AssertionError(f"no daemon answered on {sock}")


def stop_daemon(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError("mmd did not stop within 15 s of SIGTERM") from None


def wait_for_file(path: Path, timeout: float = 30) -> None:
    """Wait until a process under test has written *path* (a pid file, an argv record)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return
        time.sleep(0.02)
    raise AssertionError(f"{path} was not written within {timeout} s")


def environ_with(changes: dict[str, str | None]) -> dict[str, str]:
    """This process's environment with *changes* made (None removes a variable)."""
    full = dict(os.environ)
    for key, value in changes.items():
        if value is None:
            full.pop(key, None)
        else:
            full[key] = value
    return full


needs_nvim = pytest.mark.skipif(
    shutil.which("nvim") is None, reason="Neovim is not installed (Debian: neovim)"
)


def nvim_request(env: dict[str, str | None], cwd: Path) -> dict[str, Any]:
    """One ``daemon.status`` through the Neovim plugin in a real headless Neovim, no daemon started on demand
    (tests/e2e/nvim/plugin_request.lua): what it answered, or the error. *env* changes the environment (None
    removes a variable)."""
    full = environ_with(env)
    out = cwd / "nvim-out.json"
    out.unlink(missing_ok=True)
    full.update(HOME=str(cwd), MM_TEST_OUT=str(out))
    script = ROOT / "tests" / "e2e" / "nvim" / "plugin_request.lua"
    rtp = ROOT / "clients" / "nvim"
    subprocess.run(
        [
            "nvim",
            "--headless",
            "--clean",
            "-i",
            "NONE",
            "-n",
            "--cmd",
            f"set rtp^={rtp}",
            "-c",
            f"luafile {script}",
        ],
        env=full,
        cwd=cwd,
        timeout=120,
        check=True,
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )
    result: dict[str, Any] = json.loads(out.read_text())
    assert result["ok"] and result["ended"], result
    return result
