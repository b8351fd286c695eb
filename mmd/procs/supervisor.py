"""Run a child as a supervised process tree, and stop the whole tree.

A child gets its own session and process group, and TAG_VAR in its environment: a value
unique to the spawn that every descendant inherits. How its descendants are found depends
on whether this process is a *subreaper* (:func:`become_subreaper`, which the daemon calls
at start):

- **Subreaper** (the daemon): an orphaned descendant (its parent exited: ``setsid -f``, a
  double fork, a background job of a shell that finished) is re-parented to this process
  rather than to init. So every descendant of a child is either still below the child, or
  below one of this process's own children that carries the child's tag, and the tree is
  found by following the kernel's children links (``/proc/PID/task/TID/children``) from
  those roots: a few small reads per stop, whatever else runs on the machine, and no thread.
  The orphans this process inherits are reaped by pid (never ``waitpid(-1)``, which would
  steal the statuses trio waits for): a zombie child that is not one of the children
  spawned here is an orphan, because every child of the daemon is spawned here.
- **Otherwise** (a library caller, the tests of the other mode): a watcher thread records
  the child's descendants every POLL_INTERVAL (backing off to POLL_IDLE while the tree does
  not change), and the tag finds, in a scan of all of /proc, a descendant that lost its
  parent before a poll saw it.

Processes are held by (pid, start time), so a reused pid is never mistaken for one of them.

Stopping is always the same, whatever the reason (exit, timeout, cancel):
record once more, SIGTERM to the group and to every recorded descendant, up to
``grace`` seconds for all of them to go, SIGKILL to the group and to whatever
is left, reap the child, and wait until every recorded descendant is gone. The
group is signalled only while the child is unreaped (or a recorded member is
alive), so a recycled group id is never hit.

Not found in either mode: a descendant that drops the tag (``env -i``) *and* is orphaned
(as a subreaper, it stays this process's child and is stopped with the daemon; otherwise
only if a poll saw it first). A cgroup would find it.

Linux only: pidfd_open, waitid(WNOWAIT), prctl and /proc.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import secrets
import select
import signal
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable, Collection
from pathlib import Path
from typing import Any, Protocol

import msgspec
import trio

from mmd.procs import cspawn
from mmd.procs.environ import child_environment
from mmd.procs.output import OutputCapture
from mmd.procs.spawner import own_cwd, run_spawner
from mmd.procs.spill import Spill
from mmd.sandbox import Sandbox, gitguard
from mmd.sandbox.landlock import Unavailable
from mmd.sandbox.links import HardLinkRefused, check_links, repositories, settled_repositories

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
# command floods its output. Asked once a read finds a pipe full at its first size (FULL_PIPE: Linux's
# default, 16 pages): most commands write a few lines, and asking for every pipe cost two fcntl calls a
# tool call (each a formatted TypeError raised and cleared inside fcntl.fcntl, which tries an int as a
# buffer first: ~4,000 instructions) and the kernel a reallocation of each pipe's ring.
PIPE_SIZE = 1 << 20
FULL_PIPE = 1 << 16
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
    spill_error: str | None = None  # why the output, truncated, has no spill file (a full disk: spill.py)
    # What a confined call changed of git's own files and mm put back, one line each (mmd/sandbox/gitguard.py).
    git_put_back: tuple[str, ...] = ()


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
    sandbox: Sandbox | None = None,
) -> ProcResult:
    """Run ``argv`` for one tool call and return how it ended and its output.

    The child runs in ``cwd`` with the daemon's environment less its secrets
    (see :mod:`mmd.procs.environ`; the names in ``pass_env`` are kept) updated
    by ``env`` (the caller passes MM_SESSION_ID and MM_TOOL_CALL_ID) and TAG_VAR, stdin from
    /dev/null, in a new session and process group, confined to ``sandbox`` (if
    given and not off) from before exec on. Its stdout and stderr are
    read concurrently; each read, decoded as UTF-8 (invalid bytes as U+FFFD, NUL
    as ``\\0``), is passed to ``on_output(stream, text)`` and its raw bytes are
    written to ``spill_path`` in arrival order (the file is made when the output is
    first cut, with the bytes before it: output within the budgets is never written).

    ``output`` is the whole text if it fits both ``max_bytes`` and ``max_lines``, else the head and the tail
    (half of each budget each) around a marker line that says what was cut and names the spill file, kept
    then (deleted otherwise: the model has it all). A spill file that cannot be made or written (a full disk,
    the disk's reserve: mmd/procs/spill.py) is given up, and the marker says why.

    When the child exits, or ``timeout`` seconds pass, the whole tree is stopped (see the module docstring):
    processes the command left running in the background do not outlive the call (:func:`supervised_process`
    is for a child meant to keep running). Confined, what the call changed of git's own files is then put
    back and named in ``git_put_back`` (mmd/sandbox/gitguard.py).

    Errors: a command that cannot start is a result, not an exception:
    ``spawn_error`` says why (command not found, working directory gone,
    permission denied) and ``exit_code`` is None. Whatever ``on_output`` raises
    comes out as it was raised, once the tree is stopped.

    Cancellation: the whole tree is stopped in a shielded scope, which may take up to ``grace`` seconds, the
    spill file is deleted, then Cancelled goes on.
    """
    started = time.monotonic()
    spill = Spill(spill_path)
    try:
        capture = OutputCapture(spill.open, max_bytes=max_bytes, max_lines=max_lines, on_output=on_output)
        try:
            tree = await _spawn(
                argv, cwd=cwd, env=env, pass_env=pass_env, sandbox=sandbox, raw_outputs=True, stdin=_devnull()
            )
        except (OSError, ValueError) as exc:
            return _unstarted(_spawn_error(exc, argv, cwd), started)
        timed_out, put_back = await _collect_guarded(tree, capture, timeout, grace, sandbox)
        spill.keep = capture.truncated and capture.spill_error is None
        kept = str(spill_path) if spill.keep else None
        return _result(tree.proc, capture, timed_out, started, kept, put_back)
    finally:
        spill.close()


async def _collect_guarded(
    tree: _Tree, capture: OutputCapture, timeout: float, grace: float, box: Sandbox | None
) -> tuple[bool, list[str]]:
    """:func:`_collect`, then (even if it failed) the git guard's look at what the call changed."""
    try:
        timed_out = await _collect(tree, capture, timeout, grace)
    finally:
        put_back = await _git_after(box, tree.guarded) if tree.guarded is not None else []
    return timed_out, put_back


async def _git_after(box: Sandbox | None, guarded: tuple[str, ...]) -> list[str]:
    """What the confined call whose spawn took *guarded* changed of git's files, put back
    (mmd/sandbox/gitguard.py).

    Where the hard-link walk's watches say no name changed beneath the writable folders (on a local file
    system, the usual call), in this thread: a few lstats of .git, its config and hooks, about 10 µs,
    where handing the look to the sandbox's spawner costs some 50 µs of CPU. Else (or while another
    thread walks or guards) in the spawner, as the spawn's own walk: the repositories are walked for
    again, and a folder of a slow or hung file system makes that thread wait, not the event loop.
    """
    assert box is not None
    found = settled_repositories(box.roots)
    put_back = None
    if found is not None:
        put_back = gitguard.after(guarded, found, base=box.roots[0] if box.roots else "", wait=False)
    if put_back is None:
        put_back = await run_spawner(box, _git_compare, box, guarded)
    if put_back:
        log.warning("a confined call changed git's own files; put back: %s", "; ".join(put_back))
    return put_back


def _git_compare(box: Sandbox, guarded: tuple[str, ...]) -> list[str]:
    return gitguard.after(guarded, repositories(box.roots), base=box.roots[0] if box.roots else "") or []


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
    sandbox: Sandbox | None = None,
    max_data: int | None = None,
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
    names): a third-party server never sees the daemon's API keys. A
    ``sandbox`` that is not off confines the child as :func:`run_tool_process` does. ``max_data``
    bounds the child's heap (RLIMIT_DATA, in bytes: its writable private memory; mapped files do not count):
    a git of mm's own that a project's file would feed without end (a ref linked to /dev/zero) fails for
    want of memory, not the machine. The child is started by ``/bin/sh``, which sets the limit and execs it
    (same pid): neither posix_spawn nor a Popen without preexec_fn sets a limit before the exec, and one
    set from outside after it came too late for a child that reads at once (a test caught ``sh`` doing so).

    Errors: OSError (or ValueError for a NUL in ``argv``) if the child cannot
    start (landlock.Unavailable, an OSError, if the sandbox cannot be
    enforced); :func:`spawn_error_message` turns it into a sentence.

    Cancellation: leaving the block by Cancelled stops the tree in a shielded
    scope (up to ``grace`` seconds), then Cancelled goes on.
    """
    if max_data is not None:
        argv = [*_LIMITED, str(max_data >> 10), *argv]
    tree = await _spawn(
        argv,
        cwd=cwd,
        env=env,
        inherit_env=inherit_env,
        pass_env=pass_env,
        sandbox=sandbox,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
    )
    assert isinstance(tree.proc, trio.Process)  # raw_outputs (run_tool_process) alone starts other kinds
    try:
        yield tree.proc
    finally:
        await _stop(tree, grace)
        _close(tree)


async def communicate(
    proc: trio.Process,
    stdin: bytes | None = None,
    *,
    stop: Callable[[bytes], bool] | None = None,
    max_stderr: int | None = None,
) -> tuple[bytes, bytes, int | None]:
    """Feed *stdin* to a child of :func:`supervised_process`, read its stdout and stderr at once, wait for
    its exit: (stdout, stderr, exit code).

    ``stop(chunk)`` may end the reading early: the exit code is then None (the child is stopped with
    its group as the block is left). ``max_stderr`` keeps that many bytes of stderr at most.
    """
    out, err = bytearray(), bytearray()
    assert proc.stdout is not None and proc.stderr is not None
    async with trio.open_nursery() as nursery:
        if stdin is not None:
            nursery.start_soon(_feed, proc, stdin)
        nursery.start_soon(_read_all, proc.stderr, err, max_stderr, None)
        if await _read_all(proc.stdout, out, None, stop):
            nursery.cancel_scope.cancel()
            return bytes(out), bytes(err), None
    return bytes(out), bytes(err), await proc.wait()


async def _feed(proc: trio.Process, stdin: bytes) -> None:
    assert proc.stdin is not None
    async with proc.stdin:
        with contextlib.suppress(trio.BrokenResourceError):  # the child stopped reading: its exit says why
            await proc.stdin.send_all(stdin)


async def _read_all(
    stream: trio.abc.ReceiveStream, into: bytearray, keep: int | None, stop: Callable[[bytes], bool] | None
) -> bool:
    """Read *stream* to its end, keeping at most *keep* bytes; True when *stop* ended it first."""
    while chunk := await stream.receive_some(PIPE_SIZE):
        if keep is None or len(into) < keep:
            into += chunk
        if stop is not None and stop(chunk):
            return True
    return False


def spawn_error_message(exc: OSError | ValueError, argv: list[str], cwd: Path) -> str:
    """One sentence that says why ``argv`` could not start in ``cwd``.

    ``exc`` is what :func:`supervised_process` raised. Errors: none.
    """
    return _spawn_error(exc, argv, cwd)


# A process as the supervisor holds it: its pid and its start time (clock ticks after boot),
# so that a recycled pid is never taken for it.
Member = tuple[int, int]


class _Child(Protocol):
    """What the supervisor reads of the child it started: a trio.Process (supervised_process), a Popen or
    a _Spawned (run_tool_process, whose pipes are bare descriptors). ``poll`` reaps it once it has exited."""

    pid: int
    stdin: Any
    stdout: Any
    stderr: Any

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...


class _Spawned:
    """A child started by posix_spawn (:func:`_posix_spawn`): its pid, and its exit once reaped."""

    __slots__ = ("pid", "returncode")
    stdin = stdout = stderr = None  # its pipes are the caller's bare descriptors

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit code (minus the signal that ended it), reaping the child; None while it runs."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere, which nothing here does: as Popen answers then
                self.returncode = 0
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


class _Tree:
    """A spawned child and every descendant seen alive, to stop them all."""

    def __init__(self, proc: _Child, tag: str, outputs: dict[int, str] | None = None) -> None:
        self.proc = proc
        self.tag = tag
        # The parent's ends of the output pipes that no trio stream wraps (run_tool_process), by fd.
        self.outputs = outputs or {}
        self.reaped = _subreaper  # orphans come back to this process: no watcher, no scan
        # The child's start: the scan of /proc (not as a subreaper) looks at processes started since.
        self.since = 0 if self.reaped else (_start_ticks(proc.pid) or 0)
        self.seen: set[Member] = set()
        self.rooted = True  # whether the last record started from any process (the child, an orphan)
        self.stopped = False
        self.guarded: tuple[str, ...] | None = None  # what the git guard took before the spawn (_open)
        self.pidfd = _pidfd_open(proc.pid)  # readable once the child has exited (None: poll exited())
        self.pidfd_waited = False  # trio waited on the pidfd: it must hear of its closing
        self._lock = threading.Lock()  # the watcher thread and the stop both update `seen`
        self._halt: threading.Event | None = None
        if not self.reaped:
            self._halt = threading.Event()
            self._watcher = threading.Thread(target=self._watch, name=f"mm-watch-{proc.pid}", daemon=True)
            self._watcher.start()

    def exited(self) -> bool:
        try:
            flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
            return os.waitid(os.P_PID, self.proc.pid, flags) is not None
        except ChildProcessError:  # already reaped
            return True

    def stop_watching(self) -> None:
        # Not joined: a record under way ends under the lock, then the thread sees the flag.
        if self._halt is not None:
            self._halt.set()

    def _watch(self) -> None:
        assert self._halt is not None
        interval = POLL_INTERVAL
        while not self._halt.wait(interval) and not self.exited():
            changed = self.record()
            interval = POLL_INTERVAL if changed else min(interval * 2, POLL_IDLE)

    def record(self) -> bool:
        """Forget the dead, add the child's current descendants; whether that changed anything."""
        roots = [] if self.exited() else [self.proc.pid]  # an exited child's were re-parented
        if self.reaped:
            roots += _tagged_orphans(self.tag, exclude=self.proc.pid)
        self.rooted = bool(roots)
        found = [m for m in _descendants(roots) if m[0] != self.proc.pid]
        with self._lock:
            before = set(self.seen)
            self.seen = {m for m in self.seen if _alive(m)} | set(found)
            return self.seen != before

    def record_tagged(self) -> None:
        """Add every process started since the child that carries its tag (as a subreaper: :meth:`record`)."""
        if self.reaped:
            self.record()
            return
        needle = f"{TAG_VAR}={self.tag}".encode()
        found = set()
        for pid in _pids():
            if pid == self.proc.pid or (ticks := _start_ticks(pid) or -1) < self.since:
                continue
            if _carries(pid, needle):
                found.add((pid, ticks))
        with self._lock:
            self.seen |= found

    def alive(self) -> list[Member]:
        with self._lock:
            recorded = list(self.seen)
        return [m for m in recorded if _alive(m)]

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the group (when it is surely ours) and to every live descendant."""
        if self._group_is_ours():
            _kill(os.killpg, self.proc.pid, sig)
        for pid, ticks in self.alive():
            if _start_ticks(pid) == ticks:  # still the process recorded, not a recycled pid
                _kill(os.kill, pid, sig)

    def _group_is_ours(self) -> bool:
        # An unreaped child keeps its pid, hence the group id, from being recycled.
        try:
            os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            return True
        except ChildProcessError:
            return any(_pgid(pid) == self.proc.pid for pid, _ in self.alive())

    async def reap(self) -> None:
        """Wait for the child's exit (it has been sent SIGKILL) and reap it."""
        while self.proc.poll() is None:
            if self.pidfd is not None:
                self.pidfd_waited = True
                await trio.lowlevel.wait_readable(self.pidfd)
            else:
                await trio.sleep(GONE_POLL)

    def close(self) -> None:
        if self.pidfd is not None:
            if self.pidfd_waited:  # else trio never knew of it: no registration to drop (a failed DEL)
                trio.lowlevel.notify_closing(self.pidfd)
            os.close(self.pidfd)
            self.pidfd = None
        # Never registered with trio (an epoll set of the call's own waits on them): no notify_closing.
        outputs, self.outputs = self.outputs, {}
        for fd in outputs:
            os.close(fd)


def _kill(send: Callable[[int, int], None], pid: int, sig: int) -> None:
    # Not contextlib.suppress: three Python calls more, twice a call.
    try:
        send(pid, sig)
    except (ProcessLookupError, PermissionError):  # gone, or not ours (a recycled pid)
        return


async def _spawn(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    inherit_env: bool = True,
    pass_env: Collection[str] = (),
    sandbox: Sandbox | None = None,
    raw_outputs: bool = False,
    **stdio: Any,
) -> _Tree:
    # The one place a child's environment is built: every child, present or future,
    # goes without the daemon's secrets unless its caller passes one on by name.
    # And the one place a child is confined: every child given a sandbox is.
    if not argv:
        raise ValueError("empty command")
    if not os.path.isabs(cwd):  # this thread's: a spawner thread's working directory is its own
        cwd = Path(os.path.abspath(cwd))
    global _spawning
    tag = f"{_owner}.{secrets.token_hex(8)}"
    child_env = child_environment({**env, TAG_VAR: tag}, inherit=inherit_env, pass_env=pass_env)
    stdio = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **stdio}
    _spawning += 1  # until the new child is in _leaders, no zombie child is taken for an orphan
    try:
        varying = (*env, TAG_VAR)  # the caller's variables (a call's id...) and the tag change every spawn
        proc, outputs, guarded = await _open(
            argv, sandbox, raw_outputs, varying, cwd=cwd, env=child_env, **stdio
        )
        _leaders.add(proc.pid)
    finally:
        _spawning -= 1
    try:
        tree = _Tree(proc, tag, outputs)
        tree.guarded = guarded
        return tree
    except BaseException:  # e.g. no thread left for the watcher: leave no child behind
        if guarded is not None:
            gitguard.release(guarded)
        os.killpg(proc.pid, signal.SIGKILL)
        os.waitpid(proc.pid, 0)
        _leaders.discard(proc.pid)
        for fd in outputs:
            os.close(fd)
        raise


async def _open(
    argv: list[str], sandbox: Sandbox | None, raw_outputs: bool, varying: tuple[str, ...], **options: Any
) -> tuple[_Child, dict[int, str], tuple[str, ...] | None]:
    """Start the child in a new session as ``trio.lowlevel.open_process`` would, confined to *sandbox* if
    it is not off.

    A spawner thread starts it (mmd/procs/spawner.py), never the event loop's: a spawn lasts until the
    child has exec'd, and an exec can wait on a slow or hung file system. Confined, it is the sandbox's
    spawner: Landlock and no_new_privs belong to a thread, and a process inherits its creator thread's,
    so a thread confined to the sandbox, and kept for its next spawns, checks the project's hard links
    and starts the child (no Python code runs in the child); the daemon's other threads are never
    confined. Unconfined, the one spawner confined to nothing. The pipes are made here as trio makes them.

    With *raw_outputs* (run_tool_process: stdin is a descriptor, stdout and stderr pipes), the parent's
    ends of the output pipes are left bare (non-blocking) and returned by fd (run_tool_process reads them
    through an epoll set of its own: a trio stream each cost a dozen Python calls and four system calls
    more, to make and to close, and is never read), and the child is returned as started, a Popen or, from
    a spawner, a _Spawned (:func:`_posix_spawn`), with no trio.Process around it: the tree's own pidfd
    tells its exit. Otherwise it is a trio.Process. Such a confined child is a tool call's, whose changes
    to git's own files are put back when it ends (mmd/sandbox/gitguard.py): the third value is what the
    guard took before the spawn, None for a child the guard does not look at.

    Errors: HardLinkRefused (see mmd/sandbox/links.py), landlock.Unavailable, OSError, ValueError.
    """
    parent_ends: list[trio.lowlevel.FdStream | None] = [None, None, None]
    bare: dict[int, str] = {}
    child_ends: list[int] = []
    try:
        for i, name in enumerate(("stdin", "stdout", "stderr")):
            if options.get(name) == subprocess.PIPE:
                r, w = os.pipe()
                mine, theirs = (w, r) if i == 0 else (r, w)
                child_ends.append(theirs)
                if raw_outputs and i:
                    bare[mine] = name
                    os.set_blocking(mine, False)
                else:
                    parent_ends[i] = trio.lowlevel.FdStream(mine)
                options[name] = theirs
        box = sandbox if sandbox is not None and sandbox.confined else None
        proc, guarded = await run_spawner(box, _start, argv, box, options, raw_outputs, varying)
    except BaseException:
        for stream in parent_ends:
            if stream is not None:
                stream.close()
        for fd in bare:
            os.close(fd)
        raise
    finally:
        for fd in child_ends:
            os.close(fd)
    if raw_outputs:
        assert parent_ends == [None, None, None]
        return proc, bare, guarded
    # trio.Process has no public constructor for a Popen started elsewhere; tests/unit/sandbox
    # checks this one, so a trio that drops it fails there rather than here.
    return trio.Process._create(proc, *parent_ends), bare, guarded  # type: ignore[attr-defined]


def _start(
    argv: list[str], box: Sandbox | None, options: dict[str, Any], raw: bool, varying: tuple[str, ...]
) -> tuple[_Child, tuple[str, ...] | None]:
    # Runs in a spawner thread (mmd/procs/spawner.py), confined to *box* unless None: the child inherits it.
    guarded = None
    if box is not None:
        # box.config: None names the default config.yaml, which only a refusal's words need (config_file()
        # joined its path for every spawn: 6 us of the spawner thread's).
        found = check_links(box.roots, config=box.config)
        if raw:  # a tool call's process (run_tool_process): its changes to git's files are put back
            guarded = gitguard.before(found)
    try:
        if raw and (child := _posix_spawn(argv, options, varying)) is not None:
            return child, guarded
        return subprocess.Popen(argv, start_new_session=True, **options), guarded
    except BaseException:
        if guarded is not None:
            gitguard.release(guarded)
        raise


# How a child with ``max_data`` starts: the limit in KiB is $0, the command "$@"; a shell whose ulimit
# cannot set it ends with 125 rather than run the command unbounded.
_LIMITED = ["/bin/sh", "-c", 'ulimit -d "$0" || exit 125; exec "$@"']

_cspawn_works = cspawn.AVAILABLE  # False once this C library's posix_spawn turned out to lack a feature


def _posix_spawn(argv: list[str], options: dict[str, Any], varying: tuple[str, ...]) -> _Spawned | None:
    """Start *argv* as Popen would (new session, stdio from descriptors, cwd, env, no other descriptor, the
    signals Python ignores reset) with the C library's posix_spawn (mmd/procs/cspawn.py: the GIL released
    until the child has exec'd), from a spawner thread whose working directory is its own; None where it
    cannot, and Popen starts it.

    Popen costs twice the CPU: its Python half encodes the environment one variable at a time and builds a
    path for every folder of PATH. posix_spawn searches PATH in C, and the search is the C library's,
    which reads this process's PATH: a child given another PATH is left to Popen.

    Errors: OSError from the chdir (its filename the folder) or the spawn (its filename the program),
    ValueError for a NUL in an argument or the environment.
    """
    global _cspawn_works
    env, program = options["env"], argv[0]
    if not (_cspawn_works and own_cwd()):
        return None
    if "/" not in program and (env.get("PATH") is None or env.get("PATH") != os.environ.get("PATH")):
        return None
    stdio = [options.get(name) for name in ("stdin", "stdout", "stderr")]
    if not all(isinstance(fd, int) and fd > 2 for fd in stdio):  # a low one could be overwritten by a dup2
        return None
    os.chdir(options["cwd"])  # this thread's own working directory (spawner.own_cwd)
    try:
        pid = cspawn.spawnp(argv, env, stdio, cspawn.inherit_nothing(), varying=varying)
    except RuntimeError:  # not expected where AVAILABLE held
        _cspawn_works = False
        return None
    return _Spawned(pid)


_null: int | None = None


def _devnull() -> int:
    """A descriptor of /dev/null for the children's stdin, opened once (close-on-exec: a child gets it by dup2)."""
    global _null
    if _null is None:
        _null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    return _null


async def _collect(tree: _Tree, capture: OutputCapture, timeout: float, grace: float) -> bool:
    """Read the output until the child exits or time is up, stop the tree, read what is left; True on timeout."""
    outputs: _Outputs | None = None
    try:
        outputs = _Outputs(
            tree, capture
        )  # inside the try: no descriptor left means the tree is still stopped
        with trio.move_on_after(timeout) as timer:
            while not outputs.exited:
                await outputs.step()
        await _stop(tree, grace)
        # What the tree wrote before it was stopped; a process no record found may hold a pipe open:
        # it is not waited for longer. Usually both pipes ended with the exit: no scope to set up.
        if outputs.names:
            with trio.move_on_after(DRAIN_WAIT):
                while outputs.names:
                    await outputs.step()
        capture.finish()
        return timer.cancelled_caught
    finally:
        if outputs is not None:
            outputs.close()
        await _stop(tree, grace)
        _close(tree)


class _Outputs:
    """A child's two output pipes and its exit, read by one task: the pipes and the pidfd are in an epoll
    set of their own, and trio waits on the set's descriptor, which is readable while any of them is.

    Two pump tasks in a nursery, each waiting on its pipe, made a short command cost four or five
    passes of the event loop, a nursery and a task switch for each wake; here each wake is one pass.
    The set is emptied and kept for the next call (:data:`_kept_sets`).
    """

    def __init__(self, tree: _Tree, capture: OutputCapture) -> None:
        self.tree, self.capture = tree, capture
        self.exited = False
        self.names: dict[int, str] = {}  # pipes not at their end yet, by fd
        self._set = _kept_sets.pop() if _kept_sets else select.epoll()
        self._watching_exit = False  # the pidfd is in the set
        self._unyielded = 0  # bytes read since the task last yielded
        self._grown: set[int] = set()  # pipes asked for PIPE_SIZE already
        try:
            for fd, name in tree.outputs.items():
                self._set.register(fd, select.EPOLLIN)
                self.names[fd] = name
            if tree.pidfd is not None:
                self._set.register(tree.pidfd, select.EPOLLIN)
                self._watching_exit = True
        except BaseException:
            self.close()
            raise

    async def step(self) -> None:
        """Read one chunk from each pipe that has bytes (and learn of the exit), or wait until one does.

        A flood of output yields to the scheduler (and to a cancel) once PIPE_SIZE bytes came without a
        wait: FdStream yielded as often, since a read takes PIPE_SIZE at most.
        """
        if self._read_ready():
            if self._unyielded >= PIPE_SIZE:
                self._unyielded = 0
                await trio.lowlevel.checkpoint()
            return
        self._unyielded = 0
        if self.tree.pidfd is None and not self.exited:  # no pidfd (an old kernel): look at the exit often
            with trio.move_on_after(GONE_POLL):
                await trio.lowlevel.wait_readable(self._set.fileno())
        else:
            await trio.lowlevel.wait_readable(self._set.fileno())

    def _read_ready(self) -> bool:
        ready = self._set.poll(0)
        for fd, _events in ready:
            if fd == self.tree.pidfd:
                self.exited = True
                self._set.unregister(fd)
                self._watching_exit = False
            elif fd in self.names:
                self._read(fd)
        if self.tree.pidfd is None and not self.exited and self.tree.exited():
            self.exited = True
            return True
        return bool(ready)

    def _read(self, fd: int) -> None:
        try:
            chunk = os.read(fd, PIPE_SIZE)
        except BlockingIOError:
            return
        if chunk:
            if len(chunk) >= FULL_PIPE and fd not in self._grown:  # a flood: a larger pipe, fewer wakes
                self._grown.add(fd)
                try:  # noqa: SIM105 (suppress costs three Python calls)
                    fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
                except OSError:  # best effort: above the user's pipe limit, the default size
                    pass
            self._unyielded += len(chunk)
            self.capture.feed(self.names[fd], chunk)
        else:
            self._set.unregister(fd)
            self.capture.end(self.names.pop(fd))

    def close(self) -> None:
        """Empty the set and keep it, or close it (a set that cannot be emptied, or enough kept)."""
        try:
            for fd in self.names:
                self._set.unregister(fd)
            if self._watching_exit:
                self._set.unregister(self.tree.pidfd)
        except (OSError, ValueError):
            pass
        else:
            if len(_kept_sets) < MAX_KEPT_SETS:
                _kept_sets.append(self._set)  # trio's registration of it stays too (disarmed): no DEL
                return
        trio.lowlevel.notify_closing(self._set.fileno())
        self._set.close()


# Epoll sets of calls that ended, emptied, for the next calls to take: one made and closed for every call
# cost five system calls more, one of them failing in trio (the first wait on a new descriptor tries
# EPOLL_CTL_MOD, then ADD), and a raised exception. MAX_KEPT_SETS at most: as many calls at once as run
# in parallel on a busy daemon; more make sets of their own.
_kept_sets: list[select.epoll] = []
MAX_KEPT_SETS = 4


async def _stop(tree: _Tree, grace: float) -> None:
    """SIGTERM, grace, SIGKILL, reap, sweep: the recorded tree is gone on return."""
    if tree.stopped:
        return
    tree.stopped = True
    tree.stop_watching()
    if tree.reaped:  # a few small reads: no thread
        _record_all(tree)
        if _gone_at_once(tree):
            return
    with trio.CancelScope(shield=True):
        if not tree.reaped:
            await trio.to_thread.run_sync(_record_all, tree)
        running = not tree.exited() or bool(tree.alive())
        tree.signal(signal.SIGTERM)
        if running:
            await _wait_gone(tree, grace)
            # Catch what the TERM handlers started.
            await _off_thread(tree, tree.record_tagged)
        tree.signal(signal.SIGKILL)
        await tree.reap()
        _leaders.discard(tree.proc.pid)
        if not await _wait_gone(tree, KILL_WAIT):
            log.warning("processes of %s survived SIGKILL: %s", tree.proc.pid, tree.alive())
        reap_orphans()


def _gone_at_once(tree: _Tree) -> bool:
    """The usual stop, when there is nothing to wait for: the child has exited and no recorded descendant
    lives. The group still gets both signals (for a member no record found); nothing is awaited, so no
    shielded scope is set up. False, having done nothing, when the stop must wait."""
    if not tree.exited() or tree.alive():
        return False
    tree.signal(signal.SIGTERM)
    tree.signal(signal.SIGKILL)
    tree.proc.poll()  # reaps the child, whose exit waitid saw
    _leaders.discard(tree.proc.pid)
    reap_orphans()
    return True


async def _off_thread(tree: _Tree, fn: Callable[..., None], *args: Any) -> None:
    # A scan of all of /proc takes milliseconds: a thread, so the daemon answers meanwhile. As a
    # subreaper there is no scan, only a few small reads: a thread would cost more than them.
    if tree.reaped:
        fn(*args)
    else:
        await trio.to_thread.run_sync(fn, *args)


def _record_all(tree: _Tree) -> None:
    # The tree by its links (record), then by its tag (record_tagged; for a subreaper, record again: a
    # member that exited during the first walk left its children to the daemon, found by their tag). A
    # subreaper whose first walk had nowhere to start has no second walk: the child has exited, so every
    # descendant of it is orphaned, a tagged child of the daemon (a child's orphans are the daemon's before
    # its exit is seen), and there was none. An environment that reads empty in the middle of an exec is
    # looked at again (_carries), not taken for an untagged one.
    tree.record()
    if tree.rooted or not tree.reaped:
        tree.record_tagged()


async def _wait_gone(tree: _Tree, timeout: float) -> bool:
    # Most processes die within a millisecond of a signal: look early, then back off.
    delay = GONE_POLL / 16
    if tree.exited() and not tree.alive():  # the usual case: no scope to set up
        return True
    with trio.move_on_after(timeout):
        while not tree.exited() or tree.alive():
            await trio.sleep(delay)
            delay = min(delay * 2, GONE_POLL)
        return True
    return False


def _close(tree: _Tree) -> None:
    # Synchronous (FdStream.close): nothing to wait for, and a call may close twice (its finally).
    for stream in (tree.proc.stdin, tree.proc.stdout, tree.proc.stderr):
        if stream is not None:
            stream.close()
    tree.close()


def _result(
    proc: _Child,
    capture: OutputCapture,
    timed_out: bool,
    started: float,
    spill: str | None,
    git_put_back: list[str] | None = None,
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
        spill_error=capture.spill_error if capture.truncated else None,
        git_put_back=tuple(git_put_back or ()),
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
    if isinstance(exc, HardLinkRefused):
        return f"{argv[0]} was not started: {exc}"
    if isinstance(exc, Unavailable):
        return f"{argv[0]} was not started: the sandbox cannot be enforced: {exc}"
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


def _alive(member: Member) -> bool:
    # A zombie has exited: only its parent's wait is missing, and that may never come
    # (a container's PID 1 that does not reap), so it counts as gone.
    pid, ticks = member
    stat = _stat(pid)
    return stat is not None and stat[3] == ticks and stat[0] not in "ZX"


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
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
    # A process started within the last second may be in the middle of its exec, its environment empty
    # for a moment: that one is looked at again (_environ), the others once (kernel threads, processes
    # of other users and those that cleared their environment read empty too).
    recent = _now_ticks() - _CLK_TCK
    victims = []
    for pid in _pids():
        if pid == os.getpid() or (ticks := _start_ticks(pid)) is None:
            continue
        env = _read_proc(pid, "environ").split(b"\0")
        if env == [b""] and ticks >= recent:
            env = _environ(pid)
        if any(e.startswith(prefix) for e in env):
            victims.append((pid, ticks))
    _terminate(victims, grace)
    return [pid for pid, _ in victims]


def _terminate(victims: list[Member], grace: float) -> None:
    """SIGTERM to each, up to ``grace`` seconds for them to go, then SIGKILL and as long again."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid, ticks in victims:
            if _start_ticks(pid) == ticks:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while any(_alive(m) for m in victims) and time.monotonic() < deadline:
            time.sleep(GONE_POLL)


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


def _carries(pid: int, needle: bytes) -> bool:
    """Whether process *pid*'s environment holds the entry *needle* (``MM_TOOL_TAG=...``).

    A process in the middle of an exec shows an empty environment for a moment, so one look could take a
    tagged process for an untagged one (the supervisor's test of a reaped child's background job left its
    ``sleep`` behind about one run in three). An empty environment of a live process is therefore undecided
    and looked at again (see :func:`_environ`); a zombie's is empty for good, and so is that of a process
    that cleared its own (``env -i``): after the last look it counts as untagged.
    """
    return needle in _environ(pid)


def _environ(pid: int) -> list[bytes]:
    """The entries of *pid*'s environment, looked at again while it reads empty and *pid* lives (_carries).

    Between the exec's swap of memory (the point where Popen returns) and the new program's stack, both
    the environment and the command line read empty: a process is looked at again, up to about 100 ms
    (a loaded machine can hold a child there for milliseconds: the fixed 5 ms this waited before missed
    one tagged process in 150 under a test run on 2 cores), while its command line is empty too. Once the
    command line shows, an environment still empty after SETTLE_LOOKS more looks was cleared (``env -i``).
    A zombie or a kernel thread (a child of kthreadd) is not looked at again.
    """
    shown = 0  # looks since the command line showed
    for pause in _RELOOK:
        env = _read_proc(pid, "environ")
        if env:
            return env.split(b"\0")
        stat = _stat(pid)
        if stat is None or stat[0] in "ZX" or stat[1] == _KTHREADD or pid == _KTHREADD:
            return []
        if _read_proc(pid, "cmdline"):
            shown += 1
            if shown > SETTLE_LOOKS:
                return []
        time.sleep(pause)
    return _read_proc(pid, "environ").split(b"\0")


# Clock ticks a second, the unit of a process's start time in /proc.
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _now_ticks() -> float:
    """Clock ticks since boot now, as a process's start time counts them."""
    try:
        with open("/proc/uptime", "rb") as f:
            return float(f.read().split()[0]) * _CLK_TCK
    except (OSError, ValueError, IndexError):
        return 0.0  # every process counts as recent: looked at again if it reads empty


# The pauses between looks at an environment that reads empty (_environ): about 100 ms in all.
_RELOOK = (0.0002, 0.0005, 0.001, 0.0015, 0.002) + (0.005,) * 18
# Looks at an empty environment once the command line shows, before it counts as cleared.
SETTLE_LOOKS = 2
# The kernel's thread creator: its children are kernel threads, whose environment is always empty.
_KTHREADD = 2


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """State, parent pid, process group and start time (ticks after boot) of ``pid``; None if gone."""
    stat = _read_proc(pid, "stat")
    # The command name (field 2) may hold spaces and parentheses: count after the last ")".
    fields = stat[stat.rfind(b")") + 2 :].split()
    if len(fields) < 20:
        return None
    return fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[19])


def _start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks after boot (field 22 of /proc/pid/stat)."""
    stat = _stat(pid)
    return stat[3] if stat is not None else None


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _children(pid: int) -> list[int]:
    """The children of ``pid``, from the kernel's list of each of its threads (none once it is gone)."""
    if not _CHILDREN_LISTS:
        return [other for other in _pids() if (stat := _stat(other)) is not None and stat[1] == pid]
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    return [int(c) for tid in tids for c in _read_proc(pid, f"task/{tid}/children").split()]


def _descendants(roots: list[int]) -> list[Member]:
    """``roots`` and every process below them, as (pid, start ticks); those gone meanwhile left out."""
    found: list[Member] = []
    todo, visited = list(roots), set()
    while todo:
        pid = todo.pop()
        if pid in visited:
            continue
        visited.add(pid)
        ticks = _start_ticks(pid)
        if ticks is not None:
            found.append((pid, ticks))
            todo += _children(pid)
    return found


# -- this process as a subreaper ----------------------------------------------------------

PR_SET_CHILD_SUBREAPER = 36
# Whether the kernel lists each task's children in /proc (CONFIG_PROC_CHILDREN); else /proc is scanned.
_CHILDREN_LISTS = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")
# Whether orphaned descendants come back to this process (become_subreaper).
_subreaper = False
# Pids of the children spawned here and not yet reaped by trio; and spawns under way.
_leaders: set[int] = set()
_spawning = 0


def become_subreaper(on: bool = True) -> bool:
    """Make this process the reaper of its orphaned descendants; whether it now is (see the module docstring).

    Only for a process whose every child is spawned by this module (the daemon): orphans it
    inherits are reaped here, by pid. ``on=False`` stops it (the tests of both modes).

    Errors: none; False where the kernel refuses (then the watcher and the /proc scan are used).
    """
    global _subreaper
    if not _CHILDREN_LISTS:  # the links cannot be followed: a scan per stop would cost more
        _subreaper = False
        return False
    if cspawn.LIBC.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
        _subreaper = False
        return False
    _subreaper = on
    return on


def _tagged_orphans(tag: str, exclude: int) -> list[int]:
    """This process's children that carry ``tag`` and were not spawned here: a tree's orphans."""
    needle = f"{TAG_VAR}={tag}".encode()
    return [pid for pid in _orphans() if pid != exclude and pid not in _leaders and _carries(pid, needle)]


def _orphans() -> list[int]:
    """The children of this process's main thread: every orphan it inherited as a subreaper.

    The kernel gives an orphan to the first live thread of the subreaper's group, walked from its leader
    (find_new_reaper, find_alive_thread): the main thread, which runs while this process does. So does it a
    child of a thread that ended. One small read, where every thread's list took one each, the listing of
    the threads five system calls more, and the spawner threads' lists hold only children spawned here.
    """
    pid = os.getpid()
    return [int(child) for child in _read_proc(pid, f"task/{pid}/children").split()]


def stop_orphans(grace: float = 1.0) -> list[int]:
    """SIGTERM, then SIGKILL after ``grace`` seconds, every orphan this process inherited, and reap them; their pids.

    For a daemon that stops: its trees are stopped, so what is left among its children are
    orphans no tree claimed (descendants that dropped their tag). Errors: none.
    """
    if not _subreaper:
        return []
    victims = [(pid, t) for pid in _children(os.getpid()) if pid not in _leaders and (t := _start_ticks(pid))]
    _terminate(victims, grace)
    reap_orphans()
    return [pid for pid, _ in victims]


def reap_orphans() -> list[int]:
    """Reap the orphans this process inherited as a subreaper that have exited; their pids.

    A zombie child not spawned here is an orphan (every child is spawned here), so reaping it
    by pid takes no status anyone waits for. Nothing is reaped while a spawn is under way (its
    child may not be in the list yet) or when this process is no subreaper.

    Errors: none.
    """
    if not _subreaper or _spawning or not _a_child_exited():
        return []
    reaped = []
    for pid in _children(os.getpid()):
        stat = _stat(pid)
        if pid not in _leaders and stat is not None and stat[0] in "ZX":
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    reaped.append(pid)
    return reaped


def _a_child_exited() -> bool:
    # One system call instead of reading every thread's children: no exited child, nothing to reap.
    # WNOWAIT leaves the status to whoever waits for it (trio, or the loop below).
    try:
        return os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # no children at all
        return False


def _pidfd_open(pid: int) -> int | None:
    # Without a pidfd (old kernel, some sandboxes), exit is polled with waitid(WNOWAIT).
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None
