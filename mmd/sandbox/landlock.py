"""Landlock through its three system calls, with ctypes: no dependency, no build step.

Landlock (Linux 5.13+, unprivileged) lets a thread give up rights for good: a
*ruleset* names the access rights it handles and, per file hierarchy, which of
those stay allowed; :func:`restrict_thread` enforces it on the calling thread,
and every process that thread starts inherits it, across ``execve``, ``setsid``
and double forks, with no way back. mm handles only the rights that change the
file system (write, truncate, create, remove, link and rename across folders)
and, for ``network: off``, TCP bind and connect: reads and execution are never
restricted.

The numbers below are the kernel's uapi (include/uapi/linux/landlock.h); the
system call numbers are the generic table's, the same on x86_64 and aarch64.

Errors: :class:`Unavailable` when the kernel (or its configuration) offers no
Landlock, or not the ABI a rule needs; OSError from the system calls.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
from collections.abc import Iterable

SYS_CREATE_RULESET = 444
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446
PR_SET_NO_NEW_PRIVS = 38
CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1
# Architectures whose system call table has Landlock at 444-446.
_ARCHES = frozenset({"x86_64", "aarch64", "arm64", "riscv64"})

# File system access rights (ABI 1 unless said).
FS_WRITE_FILE = 1 << 1
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2: link or rename into another folder
FS_TRUNCATE = 1 << 14  # ABI 3
# Network access rights (ABI 4).
NET_BIND_TCP = 1 << 0
NET_CONNECT_TCP = 1 << 1
# Scopes (ABI 6, Linux 6.12): what a confined process may not reach outside its own domain (the processes
# confined with it: its spawner's children and theirs).
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # connect to an abstract Unix socket made outside (X11's, a bus's)
SCOPE_SIGNAL = 1 << 1  # signal a process outside: the daemon, your shell and editor, another session's tools
SCOPES_ABI = 6

# The rights a rule on a regular file (not a folder) may grant.
FILE_RIGHTS = FS_WRITE_FILE | FS_TRUNCATE


class Unavailable(OSError):
    """The kernel cannot enforce what was asked; ``str()`` says why.

    An OSError, so every caller that handles a child that cannot start handles it too.
    """


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),  # ABI 6: the struct is given to an older kernel without it
    ]


# The size of the ruleset's attributes an ABI before SCOPES_ABI knows (fs and net: the kernel refuses a
# larger struct whose extra bytes are not zero, and an older one may refuse any larger struct).
_ATTR_SIZE_BEFORE_SCOPES = 16


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the uapi header: 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
prctl = _libc.prctl  # the C library's prctl(2), seccomp.py's too
prctl.restype = ctypes.c_int


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


def abi() -> int:
    """The Landlock ABI version this kernel offers; 0 when it offers none.

    0 also when Landlock is built but not enabled at boot (``lsm=`` without
    landlock: EOPNOTSUPP), or when a seccomp filter of a container refuses the
    system call (ENOSYS/EPERM). Errors: none.
    """
    if platform.machine() not in _ARCHES:
        return 0
    version = _syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    return int(version) if version > 0 else 0


def write_rights(version: int) -> int:
    """Every right that changes the file system, as far as ABI *version* knows them."""
    rights = (
        FS_WRITE_FILE
        | FS_REMOVE_DIR
        | FS_REMOVE_FILE
        | FS_MAKE_CHAR
        | FS_MAKE_DIR
        | FS_MAKE_REG
        | FS_MAKE_SOCK
        | FS_MAKE_FIFO
        | FS_MAKE_BLOCK
        | FS_MAKE_SYM
    )
    if version >= 2:
        rights |= FS_REFER
    if version >= 3:
        rights |= FS_TRUNCATE
    return rights


def restrict_thread(version: int, folders: Iterable[str], files: Iterable[str], *, network: bool) -> None:
    """Confine the calling thread, and all it starts from now on, for good.

    Writes are allowed beneath each of *folders* and to each of *files* (device
    files such as /dev/null), nowhere else; a path that does not exist is
    skipped. ``network=False`` refuses TCP bind and connect (ABI 4). From ABI 6 the thread and all it starts
    may not signal a process outside (the daemon, your shell, another session's tools) nor connect to an
    abstract Unix socket made outside (an X server's, where keystrokes can be sent to your terminal). Sets
    ``no_new_privs`` first, as Landlock requires of an unprivileged thread: a
    set-user-ID program started from here runs without its privileges.

    Call it only in a thread of its own, made for one spawn: the daemon's other
    threads are not affected (both Landlock and no_new_privs are per thread).

    Errors: Unavailable (no Landlock, or ``network=False`` before ABI 4);
    OSError from the system calls.
    """
    if version < 1:
        raise Unavailable("this kernel offers no Landlock")
    if not network and version < 4:
        raise Unavailable(f"network: off needs Landlock ABI 4 (Linux 6.7); this kernel offers ABI {version}")
    handled = write_rights(version)
    scoped = version >= SCOPES_ABI
    attr = _RulesetAttr(
        handled_access_fs=handled,
        handled_access_net=0 if network else NET_BIND_TCP | NET_CONNECT_TCP,
        scoped=SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if scoped else 0,
    )
    size = ctypes.sizeof(attr) if scoped else _ATTR_SIZE_BEFORE_SCOPES
    ruleset = _check(
        _syscall(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)),
        "landlock_create_ruleset",
    )
    try:
        for path in folders:
            _allow(ruleset, path, handled)
        for path in files:
            _allow(ruleset, path, handled & FILE_RIGHTS)
        _check(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
        _check(
            _syscall(SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)), "landlock_restrict_self"
        )
    finally:
        os.close(ruleset)


def _allow(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= FILE_RIGHTS  # the kernel refuses folder rights on a file (EINVAL)
        rule = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
        result = _syscall(
            SYS_ADD_RULE,
            ctypes.c_int(ruleset),
            ctypes.c_int(RULE_PATH_BENEATH),
            ctypes.byref(rule),
            ctypes.c_uint32(0),
        )
        if result < 0 and ctypes.get_errno() != errno.ENOMSG:  # ENOMSG: no right left to grant
            _check(result, f"landlock_add_rule({path})")
    finally:
        os.close(fd)
