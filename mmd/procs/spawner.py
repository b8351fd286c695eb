"""Threads that start children: one per sandbox, confined once, kept for the next spawn, and one unconfined.

No child is started by the event loop's thread. A spawn waits until the child has exec'd, and an exec
can wait on a file system (a project on NFS, a program read cold from a slow disk, a hung mount): the
loop would stop with it, every session and client of the daemon too. A spawner thread waits instead,
with the GIL released (mmd/procs/cspawn.py), while the task that asked waits as any task waits.

Landlock and no_new_privs belong to a thread, and a child inherits its creator thread's. A thread made,
confined and ended for every spawn cost more CPU than the rest of a short tool call's supervision
(a thread's start and join alone is 0.25–0.4 ms on a small VM, the ruleset as much again). So a
*spawner* is a thread confined to one sandbox that stays, blocked on its queue, and runs every spawn of
that sandbox: :func:`run_spawner` hands it a job and the task waits until the thread wakes it. The
children of no sandbox have a spawner of their own, confined to nothing.

Which spawner runs a job is decided by what its confinement was made of: the sandbox's writable
folders, its mode and its network switch. Landlock binds a rule to the inode a path named when the
thread was confined, so before each job the spawner looks again at the identity (device, inode) of each
of its folders and the device folders: a folder deleted and made again, or moved away, is another inode,
and the spawner then ends, its job and those queued behind it going to a new spawner confined to what
the paths name now, never run under a rule that follows the old folder. The look is the spawner's, not
the event loop's: a stat of a folder on a hung mount waits. The device files (/dev/null, ...) are left
out of the identity: a rule on one grants writes to that file only.

At most MAX_SPAWNERS are kept; the least recently used one ends after its queued jobs when one more
is needed. A spawner that cannot confine itself answers its jobs with the error and ends; the next job
makes a new one. Spawner threads are daemon threads: the process ends with them blocked.

Each spawner also gives itself a working directory of its own (``unshare(CLONE_FS)``) before it confines
itself: a job may then ``chdir`` to its child's folder and start the child with posix_spawn, which
has no working-directory action before glibc 2.29, without moving the daemon's other threads
(:func:`own_cwd` says whether it could; where the kernel or a seccomp filter refuses, the job starts the
child with ``subprocess.Popen`` as before). The thread's umask is copied at that moment too.
"""

from __future__ import annotations

import collections
import ctypes
import logging
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import trio

from mmd.sandbox import DEVICE_FOLDERS, Sandbox, confine_thread, unavailable_reason
from mmd.sandbox.landlock import Unavailable

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_SPAWNERS = 8
THREAD_NAME = "mm-sandbox-spawn"
THREAD_NAME_UNCONFINED = "mm-spawn"
# Seconds the event loop's thread waits, blocked, for a spawner to answer before it lets other tasks run
# meanwhile. A spawn is answered well within it (vfork returns once the child has exec'd), and waiting
# there costs less than being woken through trio (a wake-up socket, the run_sync_soon task and two passes
# of the loop a call); a spawner still busy (a first hard-link walk, a queue of spawns, an exec that
# waits on a slow file system) is waited for as any other task waits: the spawn releases the GIL
# (mmd/procs/cspawn.py; Popen does too), so the loop runs on meanwhile.
SYNC_WAIT = 0.002

Key = tuple[Any, ...]
UNCONFINED: Key = ("unconfined",)  # the key of the spawner that confines itself to nothing
CLONE_FS = 0x200  # unshare(2): this thread's working directory, root and umask become its own
_thread = threading.local()  # own_cwd: whether this spawner thread's working directory is its own


def own_cwd() -> bool:
    """Whether the calling thread is a spawner whose working directory is its own: it may chdir."""
    return getattr(_thread, "own_cwd", False)


def _unshare_cwd() -> bool:
    # os.unshare is Python 3.12's; libc's unshare before. Refused (EPERM under some seccomp filters, as in
    # a container's default profile): the spawner still serves, its jobs start children with Popen.
    unshare = getattr(os, "unshare", None)
    try:
        if unshare is not None:
            unshare(CLONE_FS)
        elif ctypes.CDLL(None, use_errno=True).unshare(CLONE_FS) != 0:
            return False
    except OSError:
        return False
    return True


class _Job:
    """One call to run in a spawner, and how to hand its outcome back to the waiting trio task: by
    releasing ``done`` while the task's thread waits on it (SYNC_WAIT), else by rescheduling the task."""

    __slots__ = ("_handing", "args", "done", "fn", "outcome", "parked", "task", "token")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn, self.args = fn, args
        self.task = trio.lowlevel.current_task()
        self.token = trio.lowlevel.current_trio_token()
        self.outcome: tuple[bool, Any] | None = None
        self.done = threading.Lock()
        self.done.acquire()  # released by the spawner when the task's thread waits on it
        self.parked = False  # the task stopped waiting on `done` and waits to be rescheduled; under _handing
        self._handing = threading.Lock()

    def run(self) -> None:
        try:
            self.answer(True, self.fn(*self.args))
        except BaseException as exc:  # handed to the task
            self.answer(False, exc)

    def answer(self, ok: bool, value: Any) -> None:
        self.outcome = (ok, value)
        with self._handing:
            if not self.parked:
                self.done.release()
                return
        self.token.run_sync_soon(trio.lowlevel.reschedule, self.task)

    def park(self) -> bool:
        """The task gives up waiting on ``done``; False when the outcome came meanwhile (take it)."""
        with self._handing:
            if self.outcome is not None:
                return False
            self.parked = True
            return True


class _Spawner:
    """A thread confined to one sandbox (or to none) that runs the jobs put on its queue, in order."""

    def __init__(self, box: Sandbox | None, first: _Job) -> None:
        self.box = box
        self.retired = False  # takes no more jobs; under _lock
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._jobs.put(first)  # before the thread starts: a thread that fails at once still answers it
        name = THREAD_NAME if box is not None else THREAD_NAME_UNCONFINED
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self.thread.start()

    def take(self, job: _Job) -> bool:
        """Queue *job*; False when this spawner has ended or is ending (make another)."""
        with self._lock:
            if self.retired:
                return False
            self._jobs.put(job)
            return True

    def retire(self) -> None:
        """End after the jobs already queued."""
        with self._lock:
            if not self.retired:
                self.retired = True
                self._jobs.put(None)

    def _serve(self) -> None:
        box, confined_to = self.box, None
        try:
            if box is not None and (missing := unavailable_reason(box)) is not None:
                raise Unavailable(missing)
            _thread.own_cwd = _unshare_cwd()
            if box is not None:
                confined_to = identities(box)
                confine_thread(box)
        except BaseException as exc:
            self._fail(exc)
            return
        job: _Job | None = None
        try:
            while (job := self._jobs.get()) is not None:
                # Looked at here, not in the loop's thread: a stat of a folder on a hung mount waits.
                if box is not None and identities(box) != confined_to:
                    self._fail(_Stale())  # this job and the queued ones go to a spawner confined anew
                    job.answer(False, _Stale())
                    return
                job.run()
        except BaseException as exc:  # not expected (job.run answers every error): if the thread ends
            if job is not None and job.outcome is None:  # anyway, no job is left unanswered, and the
                job.answer(False, exc)  # next one makes another spawner
            self._fail(exc)
            log.exception("a sandbox spawner thread failed; the next spawn starts another")

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            self.retired = True
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                job.answer(False, exc)


_spawners: collections.OrderedDict[Key, _Spawner] = collections.OrderedDict()
_registry_lock = threading.Lock()  # trio runs in other threads (tests) may spawn too


async def run_spawner(box: Sandbox | None, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a spawner thread confined to *box* (confined already, or confined first), or in the
    unconfined one for None; the task waits, uncancellable, for its outcome: *fn* starts a child, which
    must not be left unknown.

    Errors: whatever *fn* raises; landlock.Unavailable and OSError when the thread cannot be confined.
    """
    while True:
        job = _Job(fn, args)
        _hand_over(box, job)
        # Answered while this thread waited (most spawns): no yield.
        if not job.done.acquire(timeout=SYNC_WAIT) and job.park():
            await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)
        assert job.outcome is not None
        ok, value = job.outcome
        if ok:
            return value  # type: ignore[no-any-return]
        if not isinstance(value, _Stale):  # a stale spawner ended without running it: to a new one
            raise value


def _hand_over(box: Sandbox | None, job: _Job) -> None:
    key = UNCONFINED if box is None else (box.network, box.mode, *box.writable())
    with _registry_lock:
        spawner = _spawners.get(key)
        if spawner is not None and spawner.take(job):
            _spawners.move_to_end(key)
            return
        _spawners[key] = _Spawner(box, job)
        _spawners.move_to_end(key)
        while len(_spawners) > MAX_SPAWNERS:
            _spawners.popitem(last=False)[1].retire()


class _Stale(Exception):
    """A spawner's folders are not the ones their paths name now: it ended, and the job goes to a new one."""


def identities(box: Sandbox) -> tuple[tuple[int, int] | None, ...]:
    """The (device, inode) of each folder a confinement to *box* names: its writable ones and the devices'."""
    return tuple(_identity(path) for path in (*box.writable(), *DEVICE_FOLDERS))


def _identity(path: str) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except OSError:  # missing (the rule is skipped) or unreadable: a key of its own
        return None
    return found.st_dev, found.st_ino


def forget() -> None:
    """End every spawner (after its queued jobs): the tests start from none."""
    with _registry_lock:
        while _spawners:
            _spawners.popitem()[1].retire()


def alive() -> list[_Spawner]:
    """The spawners kept now, least recently used first."""
    with _registry_lock:
        return list(_spawners.values())
