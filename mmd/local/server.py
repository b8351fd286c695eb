"""llama-server as a daemon-owned child: started on first use, restarted when it dies, stopped when idle.

One server per local model, shared by every session. It listens on 127.0.0.1 on a free port, with as many
threads as the machine has cores; its output goes to ``$XDG_STATE_HOME/mm/llama-server-<model>.log``, which the
daemon writes, 8 MiB a file (mmd/procs/logfile.py).
"""

from __future__ import annotations

import logging
import os
import shlex
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import trio

from ..models import transport
from ..procs.logfile import BoundedLog, Drains
from ..procs.supervisor import spawn_error_message, supervised_process
from . import catalog, selftest

log = logging.getLogger("mmd.local")

HEALTH_TIMEOUT = 180.0  # seconds for a model to load
IDLE_TIMEOUT = float(os.environ.get("MM_LOCAL_IDLE_TIMEOUT", 600))  # seconds without a turn before stopping
# Seconds between looks at a server while a turn runs: idle counts from at most this long before its end.
BUSY_POLL = 1.0


# A server that dies by itself is started again after RESTART_DELAY, doubled for each death
# within CRASH_WINDOW; after MAX_RESTARTS such deaths it waits for the next turn instead.
RESTART_DELAY = 0.5
# Seconds a server that died gets for its last lines to reach its log before they are quoted.
DRAIN_WAIT = 2.0
CRASH_WINDOW = 300.0
MAX_RESTARTS = 3


class LocalServerError(Exception):
    pass


class _Running(msgspec.Struct):
    url: str
    key: str  # the API key the server asks of every request but /health (another local user has none)
    last_used: float
    stop: trio.Event = msgspec.field(default_factory=trio.Event)
    dead: bool = False


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        # As llama-server binds: connections of the dead server in TIME_WAIT do not hold the port.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _check_servable(name: str) -> None:
    """Errors: LocalServerError if llama-server or local/*name* is not set up, or this CPU cannot run it."""
    binary, gguf = catalog.server_binary(), catalog.model_path(name)
    if not catalog.server_ready():
        raise LocalServerError(f"llama-server is not built ({binary}): run `mm local setup`")
    if not catalog.model_ready(name):
        raise LocalServerError(
            f"local/{name} is not set up (model at {gguf}): run `{catalog.setup_hint(name)}`"
        )
    problem = selftest.cpu_problem()
    if problem:
        raise LocalServerError(problem)


def _as_raised(group: BaseExceptionGroup[Any], argv: list[str], folder: Path) -> BaseException:
    """A server's failure as its callers catch it: the LocalServerError (or OSError, made one) a nursery
    wrapped; a group of anything else, or of more, as it is. A restart caught only LocalServerError, and the
    group of one left its task: the daemon stopped."""
    if len(group.exceptions) == 1:
        lone = group.exceptions[0]
        if isinstance(lone, BaseExceptionGroup):
            return _as_raised(lone, argv, folder)
        if isinstance(lone, LocalServerError):
            return lone
        if isinstance(lone, OSError):
            return LocalServerError(spawn_error_message(lone, argv, folder))
    return group


class LocalServers:
    def __init__(
        self,
        nursery: trio.Nursery,
        log_dir: Path,
        idle_timeout: float = IDLE_TIMEOUT,
        busy: Callable[[], bool] = lambda: False,
    ) -> None:
        self.nursery = nursery
        self.busy = busy  # true while a turn runs: a server is never stopped under a running turn
        self.log_dir = log_dir
        self.idle_timeout = idle_timeout
        self.running: dict[str, _Running] = {}
        self.crashes: dict[str, list[float]] = {}  # monotonic times a server died by itself
        self._lock = trio.Lock()

    async def url(self, name: str) -> tuple[str, str]:
        """The base URL (…/v1) of the model's server, started (or restarted) if it is not running, and the API
        key its requests must carry.

        Errors: LocalServerError (not set up, failed to start, or not healthy in time).
        """
        async with self._lock:
            run = self.running.get(name)
            if run is None or run.dead:
                run = await self.nursery.start(self._serve, name)
                self.running[name] = run
            run.last_used = time.monotonic()
            return run.url, run.key

    async def _serve(
        self,
        name: str,
        port: int | None = None,
        key: str | None = None,
        *,
        task_status: trio.TaskStatus[_Running],
    ) -> None:
        _check_servable(name)
        # A restart takes the old port when it is still free, and the old key (in its environment, not its
        # argv, which every user may read: the port is any local user's to reach, and the slot's prompt cache
        # would tell a guesser how much of a text matches), so a request retried after a crash reaches it.
        port = port if port is not None and _port_free(port) else selftest.free_port()
        crashed = False
        argv = selftest.server_argv(name, port)
        logfile = self.log_dir / f"llama-server-{name}.log"
        run = _Running(f"http://127.0.0.1:{port}/v1", key or selftest.new_key(), last_used=time.monotonic())
        # Appended (the lines of a server that died stay readable), by the daemon: the server's lines of every
        # request once grew the file for as long as mm was used (mmd/procs/logfile.py).
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            opened = BoundedLog(logfile, f"--- mmd starts {shlex.join(argv)}\n")
        except OSError as exc:
            # A full disk, say: this server's error (a restart logs it), not the daemon's.
            raise LocalServerError(f"cannot write the log {logfile}: {exc.strerror or exc}") from None
        with opened as err:
            try:
                cm = supervised_process(
                    argv,
                    cwd=self.log_dir,
                    env={selftest.KEY_VAR: run.key},
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
                async with cm as proc, trio.open_nursery() as pumps:
                    drains = Drains(pumps, err.write, proc.stdout, proc.stderr)
                    try:
                        await self._wait_healthy(proc, port, logfile, name, drains)
                        log.info("llama-server for %s ready on port %d (pid %d)", name, port, proc.pid)
                        # Idle from now, not from its start: a load that took longer than the idle timeout (a
                        # restart on a busy machine took 13 s against the tests' 10) had it stopped as it came up.
                        run.last_used = time.monotonic()
                        task_status.started(run)
                        crashed = await self._until_exit(proc, run, name)
                        if crashed:  # its last lines (why it died) into the log before the drains stop
                            await drains.wait(DRAIN_WAIT)
                    finally:
                        pumps.cancel_scope.cancel()
            except OSError as exc:
                raise LocalServerError(spawn_error_message(exc, argv, self.log_dir)) from None
            except BaseExceptionGroup as group:  # trio wraps what the pumps' nursery raised: unwrapped here
                raise _as_raised(group, argv, self.log_dir) from None
            finally:
                run.dead = True
                if self.running.get(name) is run:
                    del self.running[name]
        if crashed:
            self.nursery.start_soon(self._restart, name, port, run.key)

    async def _until_exit(self, proc: trio.Process, run: _Running, name: str) -> bool:
        """Wait for the server to exit, or stop it once idle; whether it died by itself."""
        async with trio.open_nursery() as watch:
            watch.start_soon(self._idle, run, watch.cancel_scope)
            await proc.wait()
            watch.cancel_scope.cancel()
        crashed = not run.dead  # else stopped for being idle
        if crashed:
            how, _ = selftest.describe_exit(proc.returncode)
            log.warning("llama-server for %s exited with %s: %s", name, proc.returncode, how)
        return crashed

    async def _restart(self, name: str, port: int, key: str) -> None:
        """Start a server that died again at once, unless it keeps dying (then the next turn tries)."""
        now = time.monotonic()
        recent = [t for t in self.crashes.get(name, []) if now - t < CRASH_WINDOW]
        self.crashes[name] = [*recent, now]
        if len(recent) >= MAX_RESTARTS:
            log.error(
                "llama-server for %s died %d times in %.0f s; not restarted until the next turn needs it",
                name,
                len(recent) + 1,
                CRASH_WINDOW,
            )
            return
        await trio.sleep(RESTART_DELAY * 2 ** len(recent))
        async with self._lock:
            if name in self.running:  # a turn started one meanwhile
                return
            try:
                run = await self.nursery.start(self._serve, name, port, key)
            except LocalServerError as exc:
                log.error("could not restart llama-server for %s: %s", name, exc)
                return
            except Exception:  # a task of the daemon's nursery: whatever failed, the daemon goes on
                log.exception("could not restart llama-server for %s", name)
                return
            self.running[name] = run
        log.info("llama-server for %s restarted: %s", name, run.url)

    async def _idle(self, run: _Running, scope: trio.CancelScope) -> None:
        while True:
            if self.busy():
                # A turn runs: look again soon, so that idle counts from about its end. Looked at only every
                # idle_timeout, a turn that ended just before the next look left the server stopped at once.
                run.last_used = time.monotonic()
                await trio.sleep(min(self.idle_timeout, BUSY_POLL))
                continue
            left = run.last_used + self.idle_timeout - time.monotonic()
            if left <= 0:
                log.info("stopping idle llama-server %s", run.url)
                run.dead = True
                scope.cancel()  # leaves proc.wait(): the supervised block stops the server
                return
            await trio.sleep(left)

    async def _wait_healthy(
        self, proc: trio.Process, port: int, logfile: Path, name: str, drains: Drains
    ) -> None:
        deadline = time.monotonic() + HEALTH_TIMEOUT
        http = transport.LoopbackClient(timeout=5)
        try:
            while time.monotonic() < deadline:
                if proc.returncode is not None or proc.poll() is not None:
                    how, sig = selftest.describe_exit(proc.returncode)
                    detail = (
                        f"llama-server for local/{name} {how} while loading; {selftest.crash_advice(sig)}"
                    )
                    await drains.wait(DRAIN_WAIT)  # its last lines into the log, to be quoted
                    # What a self-test would have seen: `mm local status` must not say ready.
                    catalog.write_selftest(
                        name,
                        selftest.Result("crashed", detail, signal=sig, log=str(logfile)).record()
                        | {"source": "mmd"},
                    )
                    raise LocalServerError(f"{detail}\nits last lines ({logfile}):\n{selftest.tail(logfile)}")
                try:
                    healthy = (await transport.fetch(http, "GET", f"http://127.0.0.1:{port}/health"))[
                        0
                    ] == 200
                except transport.TransportError:
                    healthy = False
                if healthy:
                    if selftest.listens_on(proc.pid, port) is False:
                        raise LocalServerError(
                            f"something else answers on 127.0.0.1:{port}, not the llama-server mmd started "
                            f"for local/{name} (another user took the port?); nothing was sent to it: "
                            "run the prompt again for a new port"
                        )
                    return
                await trio.sleep(0.25)
        finally:
            await http.aclose()
        raise LocalServerError(
            f"llama-server for local/{name} was not healthy after {HEALTH_TIMEOUT:.0f} s; "
            f"its last lines ({logfile}):\n{selftest.tail(logfile)}"
        )
