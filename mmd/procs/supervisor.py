"""Run a child as a supervised process tree, and stop the whole tree.

A child gets its own session and process group. While it runs, a watcher
thread records its descendants every POLL_INTERVAL (backing off to POLL_IDLE
while the tree does not change), keyed by (pid, create_time) so a reused pid
is never mistaken for one of them; a descendant
that calls setsid and leaves the group is still known. A descendant that also
lost its parent before a poll saw it (``setsid -f``, a double fork) is found by
TAG_VAR, a value unique to the spawn that every child inherits in its
environment.

Stopping is always the same, whatever the reason (exit, timeout, cancel):
record once more, SIGTERM to the group and to every recorded descendant, up to
``grace`` seconds for all of them to go, SIGKILL to the group and to whatever
is left, reap the child, and wait until every recorded descendant is gone. The
group is signalled only while the child is unreaped (or a recorded member is
alive), so a recycled group id is never hit.

Not used: PR_SET_CHILD_SUBREAPER. It is process-wide: every orphan of the
daemon (MCP servers, llama-server, other calls) would become our child and
need reaping, and reaping them without ``waitpid(-1)`` means knowing each pid,
while ``waitpid(-1)`` would steal the statuses trio waits for. The tag finds
the same orphans without changing the daemon. A process that drops the tag
(``env -i``) *and* escapes between two polls is not found; a cgroup would be.

Linux only: pidfd_open, waitid(WNOWAIT) and /proc (through psutil).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable, Collection
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
import psutil
import trio

from mmd.procs.environ import child_environment
from mmd.procs.output import OutputCapture

log = logging.getLogger(__name__)

# Seconds between two records of a running child's descendants while they change.
POLL_INTERVAL = 0.05
# Longest seconds between two records once they stop changing: each record reads all of
# /proc (a few ms), too much to repeat 20 times a second for an idle server that runs for hours.
POLL_IDLE = 1.0
# Longest wait between two checks that a signalled tree is gone.
GONE_POLL = 0.01
# Seconds to wait for SIGKILLed processes to vanish (one in uninterruptible sleep may not).
KILL_WAIT = 5.0
# Seconds to read what is left in the pipes once the tree is stopped; an untracked
# process that still holds them open is not waited for longer.
DRAIN_WAIT = 1.0
# Capacity asked for each output pipe (best effort; Linux caps it at fs.pipe-max-size),
# and bytes asked per read: 16 times fewer wakeups than the 64 KiB default when a
# command floods its output.
PIPE_SIZE = 1 << 20
# Environment variable set to a value unique to each spawn, to find escaped descendants.
TAG_VAR = "MM_PROC_TAG"


class ProcResult(msgspec.Struct, kw_only=True, frozen=True):
    """How a tool's process ended and what the model reads of its output."""

    exit_code: int | None  # None when killed by a signal or never started
    signal: int | None  # the signal that ended the child: 15 (SIGTERM), 9 (SIGKILL)...
    timed_out: bool  # the timeout expired and the tree was stopped
    duration: float  # seconds from spawn until the tree is gone and the pipes drained
    output: str  # stdout and stderr in arrival order; head, marker line, tail if truncated
    total_bytes: int  # bytes the child wrote, both streams
    total_lines: int  # lines the child wrote, an unterminated last line included
    truncated: bool  # the output outgrew max_bytes or max_lines
    spill_path: str | None  # file with every byte; kept only when truncated
    spawn_error: str | None = None  # why the command could not start


async def run_tool_process(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    spill_path: Path,
    on_output: Callable[[str, str], None] | None = None,
    timeout: float = 120.0,
    grace: float = 3.0,
    max_bytes: int = 30_000,
    max_lines: int = 400,
    pass_env: Collection[str] = (),
) -> ProcResult:
    """Run ``argv`` for one tool call and return how it ended and its output.

    The child runs in ``cwd`` with the daemon's environment less its secrets
    (see :mod:`mmd.procs.environ`; the names in ``pass_env`` are kept) updated
    by ``env`` (the caller passes MM_SESSION_ID and MM_TOOL_CALL_ID) and TAG_VAR, stdin from
    /dev/null, in a new session and process group. Its stdout and stderr are
    read concurrently; each read, decoded as UTF-8 (invalid bytes as U+FFFD, NUL
    as ``\\0``), is passed to ``on_output(stream, text)`` and its raw bytes are
    written to ``spill_path`` in arrival order.

    ``output`` is the whole text if it fits both ``max_bytes`` and ``max_lines``,
    else the head and the tail (half of each budget each) around a marker line
    that says what was cut and names the spill file. The spill file is kept
    when the output was truncated and deleted otherwise (the model has it all).

    When the child exits, or ``timeout`` seconds pass, the whole tree is
    stopped (see the module docstring): processes the command left running in
    the background do not outlive the call. Use :func:`supervised_process` for
    a child meant to keep running.

    Errors: a command that cannot start is a result, not an exception:
    ``spawn_error`` says why (command not found, working directory gone,
    permission denied) and ``exit_code`` is None. OSError if the spill file
    cannot be created. An error writing it, or whatever ``on_output`` raises,
    comes out inside an ExceptionGroup (as trio nurseries raise them) once
    the tree is stopped.

    Cancellation: the whole tree is stopped in a shielded scope, which may take
    up to ``grace`` seconds, the spill file is deleted, then Cancelled goes on.
    """
    started = time.monotonic()
    keep = False
    with _open_spill(spill_path) as spill:
        try:
            capture = OutputCapture(spill, max_bytes=max_bytes, max_lines=max_lines, on_output=on_output)
            try:
                tree = await _spawn(argv, cwd=cwd, env=env, pass_env=pass_env, stdin=subprocess.DEVNULL)
            except (OSError, ValueError) as exc:
                return _unstarted(_spawn_error(exc, argv, cwd), started)
            timed_out = await _collect(tree, capture, timeout, grace)
            keep = capture.truncated
            return _result(tree.proc, capture, timed_out, started, str(spill_path) if keep else None)
        finally:
            if not keep:
                spill_path.unlink(missing_ok=True)


@contextlib.asynccontextmanager
async def supervised_process(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    stdin: Any = subprocess.PIPE,
    stdout: Any = subprocess.PIPE,
    stderr: Any = None,
    grace: float = 3.0,
    inherit_env: bool = True,
    pass_env: Collection[str] = (),
) -> AsyncIterator[trio.Process]:
    """Run a long-lived child (MCP stdio server, llama-server, hook) for the block.

    Yields the :class:`trio.Process`, started like :func:`run_tool_process`
    starts one (new session and group, the daemon's environment less its
    secrets updated by ``env``, in ``cwd``) with the given ``stdin``,
    ``stdout`` and ``stderr`` (PIPE, DEVNULL, a file descriptor, or None to
    inherit the daemon's). Its descendants are recorded while the block runs;
    when the block is left, the whole tree is stopped and the pipes closed. The
    child may exit, and be waited for, before that. With ``inherit_env=False``
    the child's environment is ``env`` alone (plus TAG_VAR and the ``pass_env``
    names): a third-party server never sees the daemon's API keys.

    Errors: OSError (or ValueError for a NUL in ``argv``) if the child cannot
    start; :func:`spawn_error_message` turns it into a sentence.

    Cancellation: leaving the block by Cancelled stops the tree in a shielded
    scope (up to ``grace`` seconds), then Cancelled goes on.
    """
    tree = await _spawn(
        argv,
        cwd=cwd,
        env=env,
        inherit_env=inherit_env,
        pass_env=pass_env,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
    )
    try:
        yield tree.proc
    finally:
        await _stop(tree, grace)
        await _close(tree)


def spawn_error_message(exc: OSError | ValueError, argv: list[str], cwd: Path) -> str:
    """One sentence that says why ``argv`` could not start in ``cwd``.

    ``exc`` is what :func:`supervised_process` raised. Errors: none.
    """
    return _spawn_error(exc, argv, cwd)


class _Tree:
    """A spawned child and every descendant seen alive, to stop them all."""

    def __init__(self, proc: trio.Process, tag: str) -> None:
        self.proc = proc
        self.tag = tag
        self.leader = psutil.Process(proc.pid)
        self.since = _start_ticks(proc.pid) or 0  # clock ticks after boot
        self.seen: dict[tuple[int, float], psutil.Process] = {}
        self.stopped = False
        self._pidfd = _pidfd_open(proc.pid)
        self._halt = threading.Event()
        self._lock = threading.Lock()  # the watcher thread and the stop both update `seen`
        self._watcher = threading.Thread(target=self._watch, name=f"mm-watch-{proc.pid}", daemon=True)
        self._watcher.start()

    async def wait_exit(self) -> None:
        """Return when the child has exited; it stays unreaped, so its pid is still ours."""
        if self._pidfd is not None:
            await trio.lowlevel.wait_readable(self._pidfd)
            return
        while not self.exited():
            await trio.sleep(GONE_POLL)

    def exited(self) -> bool:
        try:
            flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
            return os.waitid(os.P_PID, self.proc.pid, flags) is not None
        except ChildProcessError:  # already reaped
            return True

    def stop_watching(self) -> None:
        # Not joined: a record under way ends under the lock, then the thread sees the flag.
        self._halt.set()

    def _watch(self) -> None:
        interval = POLL_INTERVAL
        while not self._halt.wait(interval) and not self.exited():
            changed = self.record()
            interval = POLL_INTERVAL if changed else min(interval * 2, POLL_IDLE)

    def record(self) -> bool:
        """Forget the dead, add the child's current descendants; whether that changed anything."""
        with self._lock:
            before = set(self.seen)
            self.seen = {key: p for key, p in self.seen.items() if _alive(p)}
        if not self.exited():  # else its children were reparented as it exited: none to find
            with contextlib.suppress(psutil.Error):
                for p in self.leader.children(recursive=True):
                    self._add(p)
        with self._lock:
            return set(self.seen) != before

    def record_tagged(self) -> None:
        """Add every process started since the child that carries its tag."""
        # /proc is read directly: psutil.Process() costs ~75 µs a pid, and
        # process_iter's cache keeps the start time of a recycled pid's previous owner.
        needle = f"{TAG_VAR}={self.tag}".encode()
        for pid in psutil.pids():
            if pid == self.proc.pid or (_start_ticks(pid) or -1) < self.since:
                continue
            if needle in _read_proc(pid, "environ").split(b"\0"):
                with contextlib.suppress(psutil.Error):
                    self._add(psutil.Process(pid))

    def _add(self, p: psutil.Process) -> None:
        with contextlib.suppress(psutil.Error), self._lock:
            self.seen.setdefault((p.pid, p.create_time()), p)

    def alive(self) -> list[psutil.Process]:
        with self._lock:
            recorded = list(self.seen.values())
        return [p for p in recorded if _alive(p)]

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the group (when it is surely ours) and to every live descendant."""
        if self._group_is_ours():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)
        for p in self.alive():
            with contextlib.suppress(psutil.Error):
                p.send_signal(sig)

    def _group_is_ours(self) -> bool:
        # An unreaped child keeps its pid, hence the group id, from being recycled.
        try:
            os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            return True
        except ChildProcessError:
            return any(_pgid(p) == self.proc.pid for p in self.alive())

    def close(self) -> None:
        if self._pidfd is not None:
            trio.lowlevel.notify_closing(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None


async def _spawn(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    inherit_env: bool = True,
    pass_env: Collection[str] = (),
    **stdio: Any,
) -> _Tree:
    # The one place a child's environment is built: every child, present or future,
    # goes without the daemon's secrets unless its caller passes one on by name.
    if not argv:
        raise ValueError("empty command")
    tag = f"{_owner}.{secrets.token_hex(8)}"
    proc = await trio.lowlevel.open_process(
        argv,
        cwd=cwd,
        env=child_environment({**env, TAG_VAR: tag}, inherit=inherit_env, pass_env=pass_env),
        start_new_session=True,
        **{"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **stdio},
    )
    try:
        return _Tree(proc, tag)
    except BaseException:  # e.g. no thread left for the watcher: leave no child behind
        os.killpg(proc.pid, signal.SIGKILL)
        os.waitpid(proc.pid, 0)
        raise


async def _collect(tree: _Tree, capture: OutputCapture, timeout: float, grace: float) -> bool:
    """Pump the output until the child exits or time is up, stop the tree; True on timeout."""
    try:
        async with trio.open_nursery() as nursery:
            drained = trio.Event()
            nursery.start_soon(_pump_both, tree.proc, capture, drained)
            with trio.move_on_after(timeout) as timer:
                await tree.wait_exit()
            await _stop(tree, grace)
            with trio.move_on_after(DRAIN_WAIT):
                await drained.wait()
            nursery.cancel_scope.cancel()
        capture.finish()
        return timer.cancelled_caught
    finally:
        await _stop(tree, grace)
        await _close(tree)


async def _pump_both(proc: trio.Process, capture: OutputCapture, drained: trio.Event) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_pump, proc.stdout, "stdout", capture)
        nursery.start_soon(_pump, proc.stderr, "stderr", capture)
    drained.set()


async def _pump(stream: Any, name: str, capture: OutputCapture) -> None:
    with contextlib.suppress(OSError):
        fcntl.fcntl(stream.fileno(), fcntl.F_SETPIPE_SZ, PIPE_SIZE)
    while chunk := await stream.receive_some(PIPE_SIZE):
        capture.feed(name, chunk)
    capture.end(name)


async def _stop(tree: _Tree, grace: float) -> None:
    """SIGTERM, grace, SIGKILL, reap, sweep: the recorded tree is gone on return."""
    if tree.stopped:
        return
    tree.stopped = True
    with trio.CancelScope(shield=True):
        tree.stop_watching()
        await trio.to_thread.run_sync(_record_all, tree)
        running = not tree.exited() or bool(tree.alive())
        tree.signal(signal.SIGTERM)
        if running:
            await _wait_gone(tree, grace)
            # Catch what the TERM handlers started.
            await trio.to_thread.run_sync(tree.record_tagged)
        tree.signal(signal.SIGKILL)
        await tree.proc.wait()
        if not await _wait_gone(tree, KILL_WAIT):
            log.warning("processes of %s survived SIGKILL: %s", tree.proc.pid, tree.alive())


def _record_all(tree: _Tree) -> None:
    tree.record()
    tree.record_tagged()


async def _wait_gone(tree: _Tree, timeout: float) -> bool:
    # Most processes die within a millisecond of a signal: look early, then back off.
    delay = GONE_POLL / 16
    with trio.move_on_after(timeout):
        while not tree.exited() or tree.alive():
            await trio.sleep(delay)
            delay = min(delay * 2, GONE_POLL)
        return True
    return False


async def _close(tree: _Tree) -> None:
    with trio.CancelScope(shield=True):
        for stream in (tree.proc.stdin, tree.proc.stdout, tree.proc.stderr):
            if stream is not None:
                await stream.aclose()
    tree.close()


def _open_spill(path: Path) -> BinaryIO:
    """Create (or empty) the spill file at *path*, and its folder."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # 0600: a spill file holds whatever the command printed (tokens, file contents).
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    return os.fdopen(fd, "wb")


def _result(
    proc: trio.Process, capture: OutputCapture, timed_out: bool, started: float, spill: str | None
) -> ProcResult:
    code = proc.returncode
    assert code is not None  # _stop reaped the child
    return ProcResult(
        exit_code=code if code >= 0 else None,
        signal=-code if code < 0 else None,
        timed_out=timed_out,
        duration=time.monotonic() - started,
        output=capture.render(spill),
        total_bytes=capture.total_bytes,
        total_lines=capture.total_lines,
        truncated=capture.truncated,
        spill_path=spill,
    )


def _unstarted(reason: str, started: float) -> ProcResult:
    return ProcResult(
        exit_code=None,
        signal=None,
        timed_out=False,
        duration=time.monotonic() - started,
        output="",
        total_bytes=0,
        total_lines=0,
        truncated=False,
        spill_path=None,
        spawn_error=reason,
    )


def _spawn_error(exc: OSError | ValueError, argv: list[str], cwd: Path) -> str:
    if isinstance(exc, ValueError):
        return f"cannot start the command: {exc}"
    if exc.filename is not None and os.fsdecode(exc.filename) == os.fsdecode(cwd):
        return _cwd_error(exc, cwd)
    name = argv[0]
    match exc.errno:
        case errno.ENOENT if "/" in name and os.path.exists(os.path.join(cwd, name)):
            return f"cannot run {name}: the interpreter named on its #! line was not found"
        case errno.ENOENT:
            return f"command not found: {name}"
        case errno.EACCES | errno.EPERM:
            return f"permission denied: {name} cannot be executed (is it executable?)"
        case errno.ENOEXEC:
            return f"cannot run {name}: not a program this system can execute"
    return f"cannot start {name}: {exc.strerror}"


def _cwd_error(exc: OSError, cwd: Path) -> str:
    match exc.errno:
        case errno.ENOENT:
            return f"working directory {cwd} no longer exists"
        case errno.ENOTDIR:
            return f"working directory {cwd} is not a directory"
        case errno.EACCES | errno.EPERM:
            return f"permission denied: cannot enter working directory {cwd}"
    return f"cannot enter working directory {cwd}: {exc.strerror}"


def _alive(p: psutil.Process) -> bool:
    # A zombie has exited: only its parent's wait is missing, and that may never come
    # (a container's PID 1 that does not reap), so it counts as gone.
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _pgid(p: psutil.Process) -> int | None:
    try:
        return os.getpgid(p.pid)
    except OSError:
        return None


# The first part of every tag: a daemon sets it to a value of its own (from its
# socket path), so that after a kill -9 the next daemon on that socket can find
# the children its previous life left behind. One daemon per process.
_owner = "mm"


def set_owner(owner: str) -> None:
    """Tag every child spawned from now on as *owner*'s (see :func:`sweep_orphans`)."""
    global _owner
    _owner = owner


def sweep_orphans(owner: str, grace: float = 1.0) -> list[int]:
    """Stop every process still tagged as *owner*'s: children of a daemon that died without stopping them.

    Call it before spawning anything as *owner*. Returns the pids stopped.

    Errors: none; processes that vanish meanwhile are skipped.
    """
    prefix = f"{TAG_VAR}={owner}.".encode()
    victims = []
    for pid in psutil.pids():
        if pid != os.getpid() and any(e.startswith(prefix) for e in _read_proc(pid, "environ").split(b"\0")):
            with contextlib.suppress(psutil.Error):
                victims.append(psutil.Process(pid))
    for p in victims:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(victims, timeout=grace)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=grace)
    return [p.pid for p in victims]


def _read_proc(pid: int, name: str) -> bytes:
    # os.open/os.read: a third of the cost of open() when every pid is read.
    try:
        fd = os.open(f"/proc/{pid}/{name}", os.O_RDONLY)
    except OSError:  # gone, or not ours to read
        return b""
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return b""
    finally:
        os.close(fd)


def _start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks after boot (field 22 of /proc/pid/stat)."""
    stat = _read_proc(pid, "stat")
    # The command name (field 2) may hold spaces and parentheses: count after the last ")".
    fields = stat[stat.rfind(b")") + 2 :].split()
    return int(fields[19]) if len(fields) > 19 else None


def _pidfd_open(pid: int) -> int | None:
    # Without a pidfd (old kernel, some sandboxes), exit is polled with waitid(WNOWAIT).
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None
