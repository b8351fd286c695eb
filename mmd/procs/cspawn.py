"""posix_spawn(3) called through ctypes: the child starts while the daemon's other threads run on.

``os.posix_spawn`` holds the GIL from its vfork until the child has exec'd. An exec that waits on a file
system (a project on NFS, a program read cold from a slow disk, a hung mount) then stops every thread of
the daemon, the event loop's with it: no session, no client, no cancellation moves until the kernel
answers. CPython releases the GIL around ``subprocess``'s own vfork (since 3.11.5), not around
``os.posix_spawn``. A foreign function called through a ``ctypes.CDLL`` releases it for the call's
duration, and the C library's posix_spawn costs the calling thread what ``os.posix_spawn`` does, plus
the arguments' conversion: ~35 µs for 50 variables made anew, ~15 µs with what a thread keeps between
its spawns (:func:`spawnp`); Popen's Python half costs about 100 µs more.

What a child gets is what Popen gives it: its three standard descriptors, a new session
(``POSIX_SPAWN_SETSID``, glibc 2.26, musl 1.1.24), SIGPIPE and SIGXFSZ back to their defaults (Python
ignores both), and no other descriptor (:func:`inherit_nothing`). The program is searched for in this
process's PATH (posix_spawnp reads the caller's, not the child's), from the working directory of the
calling thread. :data:`AVAILABLE` is False where the C library lacks one of these, and the caller starts
the child another way.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from collections.abc import Mapping, Sequence

LIBC = ctypes.CDLL(None, use_errno=True)  # the supervisor's too (prctl)

# posix_spawnattr_t is 336 bytes and posix_spawn_file_actions_t 80 on glibc and musl (x86-64, arm64),
# sigset_t 128: room to spare for any other layout. The C library initialises and frees them.
_ATTR_BYTES, _ACTIONS_BYTES, _SIGSET_BYTES = 1024, 512, 512
POSIX_SPAWN_SETSIGDEF, POSIX_SPAWN_SETSID = 0x04, 0x80
DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ)

# close_range(2) (Linux 5.9; the same number on every architecture) and its flag that marks the range
# close-on-exec instead of closing it (Linux 5.11).
SYS_CLOSE_RANGE = 436
CLOSE_RANGE_CLOEXEC = 4
_CLOEXEC_FROM_3 = (
    SYS_CLOSE_RANGE,
    ctypes.c_uint(3),
    ctypes.c_uint(0xFFFFFFFF),
    ctypes.c_uint(CLOSE_RANGE_CLOEXEC),
)

_P = ctypes.c_void_p
_FS_ENCODING = sys.getfilesystemencoding()


def _bind(name: str, *argtypes: type) -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    function = getattr(LIBC, name, None)
    if function is not None:
        function.argtypes = argtypes
        function.restype = ctypes.c_int
    return function


_spawnp = _bind("posix_spawnp", ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, _P, _P, _P, _P)
_actions_init = _bind("posix_spawn_file_actions_init", _P)
_actions_destroy = _bind("posix_spawn_file_actions_destroy", _P)
_add_dup2 = _bind("posix_spawn_file_actions_adddup2", _P, ctypes.c_int, ctypes.c_int)
_add_close = _bind("posix_spawn_file_actions_addclose", _P, ctypes.c_int)
# glibc 2.34: closes every descriptor from a number on, in the child (close_range, or one by one).
_add_closefrom = _bind("posix_spawn_file_actions_addclosefrom_np", _P, ctypes.c_int)


def _attributes() -> ctypes.Array[ctypes.c_char] | None:
    """The spawn attributes every child shares (made once, only read by posix_spawn); None if unsupported."""
    functions = [
        _bind("posix_spawnattr_init", _P),
        _bind("posix_spawnattr_setflags", _P, ctypes.c_short),
        _bind("posix_spawnattr_setsigdefault", _P, _P),
        _bind("sigemptyset", _P),
        _bind("sigaddset", _P, ctypes.c_int),
    ]
    if None in functions or None in (_spawnp, _actions_init, _actions_destroy, _add_dup2, _add_close):
        return None
    init, setflags, setsigdefault, sigemptyset, sigaddset = functions
    attributes, signals = ctypes.create_string_buffer(_ATTR_BYTES), ctypes.create_string_buffer(_SIGSET_BYTES)
    steps = [init(attributes), sigemptyset(signals)]
    steps += [sigaddset(signals, int(number)) for number in DEFAULT_SIGNALS]
    steps += [setsigdefault(attributes, signals)]
    # EINVAL from a C library that does not know POSIX_SPAWN_SETSID (glibc before 2.26).
    steps += [setflags(attributes, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGDEF)]
    return attributes if not any(steps) else None


_ATTRIBUTES = _attributes()
AVAILABLE = _ATTRIBUTES is not None and sys.platform == "linux"
CLOSEFROM = _add_closefrom is not None  # tests turn it off to take the other ways

_close_range_works = True  # False once the kernel refused CLOSE_RANGE_CLOEXEC


def inherit_nothing() -> list[int]:
    """Keep every descriptor from 3 on out of the next child; the ones it must close itself (often none).

    Python opens every descriptor close-on-exec; one inherited at the daemon's start (a systemd socket, a
    careless parent's) or made inheritable since is not. With glibc 2.34's close-from action
    (:data:`CLOSEFROM`) the child closes them. Else one close_range call marks them all close-on-exec in
    this process, which inherits nothing on purpose (Popen's pass_fds makes a descriptor inheritable in its
    child only). Before Linux 5.11, each descriptor open now is closed in the child (the C library skips
    one that another thread closed meanwhile).
    """
    global _close_range_works
    if CLOSEFROM:
        return []
    if _close_range_works:
        if LIBC.syscall(*_CLOEXEC_FROM_3) == 0:
            return []
        _close_range_works = False
    return [fd for fd in map(int, os.listdir("/proc/self/fd")) if fd > 2]


def spawnp(
    argv: Sequence[str],
    env: Mapping[str, str],
    stdio: Sequence[int],
    close: Sequence[int] = (),
    *,
    varying: Sequence[str] = (),
) -> int:
    """Start *argv* with *stdio* as its descriptors 0, 1, 2, closing *close* (and, with :data:`CLOSEFROM`,
    every descriptor from 3) in the child; its pid. The GIL is released while the child starts.

    *varying*: the names of *env* whose values change from spawn to spawn (the supervisor's tag, a call's
    id). While the rest of the environment is what it was at this thread's last spawn with the same
    names, its converted form is kept and only those are converted again (about 20 µs of 50 variables).

    Errors: ValueError for a NUL in an argument or the environment, or a variable name that is empty or
    holds ``=`` (as ``os.posix_spawn`` refuses them); OSError (its filename the program) when the child
    cannot start; RuntimeError when :data:`AVAILABLE` is False.
    """
    if _ATTRIBUTES is None or _spawnp is None:
        raise RuntimeError("this C library's posix_spawn cannot start a child in a new session")
    if "\0" in "".join(argv):
        raise ValueError("a NUL in an argument")
    encoded = [s.encode(_FS_ENCODING, "surrogateescape") for s in argv]
    args = (ctypes.c_char_p * (len(encoded) + 1))(*encoded)
    envp = _environment(env, varying)
    key = (CLOSEFROM, *stdio, -1, *close)  # the actions of one way of closing the rest are not another's
    actions = _kept.actions.get(key)
    if actions is None:
        if len(_kept.actions) >= _KEPT_ACTIONS:
            _kept.actions.clear()
        actions = _kept.actions[key] = _Actions(stdio, close)
    pid = ctypes.c_int()
    error = _spawnp(ctypes.byref(pid), encoded[0], actions.buffer, _ATTRIBUTES, args, envp)
    if error:
        raise OSError(error, os.strerror(error), argv[0])
    return pid.value


# Sets of file actions a thread keeps: the descriptors of a call's pipes are the lowest free ones, so
# the same few sets come again and again.
_KEPT_ACTIONS = 8
# Environments a thread keeps, one per set of varying names present (a write call has one more).
_KEPT_ENVIRONMENTS = 4


class _Kept(threading.local):
    """What a thread keeps between its spawns: never shared, as the GIL is released while one is read."""

    def __init__(self) -> None:
        self.actions: dict[tuple[int, ...], _Actions] = {}
        # By the varying names present: the rest of the environment, and its converted form.
        self.envs: dict[tuple[str, ...], tuple[dict[str, str], ctypes.Array[ctypes.c_char_p]]] = {}


_kept = _Kept()


class _Actions:
    """A posix_spawn_file_actions_t for one set of descriptors, made once and kept (posix_spawn only reads
    it); freed by the C library when dropped."""

    __slots__ = ("buffer",)
    # Held by the class: a thread's kept actions may be dropped as the interpreter ends, once this module's
    # globals are gone ("NoneType object is not callable", printed by every process that spawned).
    _destroy = _actions_destroy

    def __init__(self, stdio: Sequence[int], close: Sequence[int]) -> None:
        self.buffer: ctypes.Array[ctypes.c_char] | None = None
        buffer = ctypes.create_string_buffer(_ACTIONS_BYTES)
        if _actions_init(buffer) != 0:  # type: ignore[misc]
            raise MemoryError("posix_spawn_file_actions_init failed")
        self.buffer = buffer
        failed = [_add_dup2(buffer, fd, target) for target, fd in enumerate(stdio)]  # type: ignore[misc]
        failed += [_add_close(buffer, fd) for fd in close]  # type: ignore[misc]
        if CLOSEFROM:
            failed.append(_add_closefrom(buffer, 3))  # type: ignore[misc]
        if error := next((e for e in failed if e), 0):
            raise OSError(error, os.strerror(error))

    def __del__(self) -> None:
        if self.buffer is not None:
            self._destroy(self.buffer)  # type: ignore[misc]


def _environment(env: Mapping[str, str], varying: Sequence[str]) -> ctypes.Array[ctypes.c_char_p]:
    """*env* as the C library takes it: "NAME=value" strings, then a NULL. The strings of the names not in
    *varying* are kept from this thread's last spawn with the same varying names while they are unchanged."""
    names = tuple(name for name in varying if name in env)
    base = dict(env)
    for name in names:
        del base[name]
    lasts = [f"{name}={env[name]}" for name in names]
    if "\0" in "".join(lasts):
        raise ValueError("a NUL in the environment")
    kept = _kept.envs.get(names)
    if kept is not None and kept[0] == base:
        array, first = kept[1], len(base)
        for i, text in enumerate(lasts):
            array[first + i] = text.encode(_FS_ENCODING, "surrogateescape")
        return array
    entries = [f"{name}={text}" for name, text in base.items()]
    if "\0" in "".join(entries) or "" in env or "=" in "".join(env):
        raise ValueError("a NUL in the environment, or an illegal environment variable name")
    entries += lasts
    array = (ctypes.c_char_p * (len(entries) + 1))(
        *[e.encode(_FS_ENCODING, "surrogateescape") for e in entries]
    )
    if len(_kept.envs) >= _KEPT_ENVIRONMENTS:
        _kept.envs.clear()
    _kept.envs[names] = (base, array)
    return array
