"""The sandbox of what a turn runs: which folders its processes may write, and whether they reach the network.

- :class:`Sandbox` is a policy: a mode (``workspace``, ``read-only``, ``off``),
  the folders it may write besides the temp dir, and ``network``. The turn's
  plan makes one (mmd/turn/plan.py); the supervisor applies it to every child
  it starts with one (mmd/procs/supervisor.py).
- :func:`support` says once per daemon whether this kernel can enforce one.
- :mod:`.landlock` enforces it; :mod:`.links` refuses a spawn whose writable
  folders hold a hard link Landlock could not confine; :mod:`.explain` turns a
  refused write in a tool's output into what the model reads.

Imports nothing else of mmd: the supervisor, the config and the policy all use it.
"""

from __future__ import annotations

import functools
import os
import platform
import tempfile
from typing import Literal

import msgspec

from mmd import paths

from . import landlock, seccomp

Mode = Literal["workspace", "read-only", "off"]
MODES: tuple[Mode, ...] = ("workspace", "read-only", "off")
DEFAULT_MODE: Mode = "workspace"
# Set (to anything but "" or 0) in the daemon's environment: behave as if the kernel had no
# Landlock. The tests use it; so can a person who wants to see what mm does on such a machine.
PRETEND_VAR = "MM_SANDBOX_UNAVAILABLE"
# Device files every confined process may write: ordinary commands need them.
DEVICE_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/ptmx", "/dev/random", "/dev/urandom")
# Folders of devices and shared memory that stay writable: terminals, POSIX semaphores.
DEVICE_FOLDERS = ("/dev/pts", "/dev/shm")


class Sandbox(msgspec.Struct, frozen=True):
    """What the processes of one call may do: write beneath ``roots`` and the temp dir, reach the network.

    ``roots`` are absolute: the session's directory and ``sandbox.writable:`` in
    ``workspace`` mode, none in ``read-only``. ``off`` confines nothing.
    """

    mode: Mode = DEFAULT_MODE
    roots: tuple[str, ...] = ()
    network: bool = True
    # Where the policy was set, for the answer that says how to allow a path: the agent file, or "".
    source: str = ""
    temp: str = msgspec.field(default_factory=tempfile.gettempdir)
    # The daemon's config.yaml (mmd --config), named by that answer too; "": the default one.
    config: str = ""

    @property
    def confined(self) -> bool:
        return self.mode != "off"

    def config_file(self) -> str:
        """The config.yaml whose ``sandbox.writable:`` allows a folder in every project."""
        return self.config or str(paths.config_dir() / "config.yaml")

    @property
    def label(self) -> str:
        """How the ask and ``mm tools list`` show it: ``workspace``, ``read-only, network off``, ``off``."""
        if not self.confined:
            return "off"
        return self.mode if self.network else f"{self.mode}, network off"

    def writable(self) -> tuple[str, ...]:
        """Every folder a confined process may write beneath: ``roots``, then the temp dir."""
        return (*self.roots, self.temp) if self.confined else ()

    def allows(self, path: str) -> bool:
        """Whether a confined process may write *path* (absolute, links resolved)."""
        if not self.confined:
            return True
        return (
            any(_inside(path, root) for root in (*self.writable(), *DEVICE_FOLDERS)) or path in DEVICE_FILES
        )

    def summary(self) -> str:
        """One line for the model and the person: where this sandbox lets processes write."""
        if not self.confined:
            return "the sandbox is off"
        where = ", ".join(self.writable()) if self.roots else f"the temp dir {self.temp}"
        net = "" if self.network else "; no network (no internet socket, TCP or UDP; Unix sockets only)"
        return f"sandbox {self.mode}: processes may write only under {where}{net}"


class Support(msgspec.Struct, frozen=True):
    """Whether this kernel can enforce a sandbox, and why not."""

    abi: int
    reason: str = ""  # empty when available

    @property
    def available(self) -> bool:
        return self.abi > 0

    @property
    def label(self) -> str:
        """What ``mm daemon status`` prints."""
        if self.available:
            return (
                f"Landlock ABI {self.abi} (network rules: {'yes' if self.abi >= 4 else 'no, ABI 4 needed'})"
            )
        return f"unavailable: {self.reason}"


@functools.cache
def support() -> Support:
    """What this kernel offers, probed once per daemon (a system call). Errors: none."""
    if os.environ.get(PRETEND_VAR, "") not in ("", "0"):
        return Support(abi=0, reason=f"{PRETEND_VAR} is set in the daemon's environment")
    version = landlock.abi()
    if version < 1:
        return Support(
            abi=0,
            reason="this kernel offers no Landlock (Linux 5.13+ with landlock in its lsm= list is needed)",
        )
    return Support(abi=version)


def unavailable_reason(box: Sandbox) -> str | None:
    """Why *box* cannot be enforced here, or None when it can (or is off)."""
    if not box.confined:
        return None
    found = support()
    if not found.available:
        return found.reason
    if not box.network and found.abi < 4:
        return f"network: off needs Landlock ABI 4 (Linux 6.7); this kernel offers ABI {found.abi}"
    if not box.network and platform.machine() not in seccomp.ARCHES:
        return f"network: off has no socket filter for this architecture ({platform.machine()})"
    return None


def confine_thread(box: Sandbox) -> None:
    """Confine the calling thread (one made for this spawn) to *box*; see :func:`landlock.restrict_thread`,
    and under ``network: off`` :func:`seccomp.restrict_thread` (no internet socket, UDP included).

    Errors: landlock.Unavailable, OSError.
    """
    folders = (*box.writable(), *DEVICE_FOLDERS)
    landlock.restrict_thread(support().abi, folders, DEVICE_FILES, network=box.network)
    if not box.network:  # Landlock refuses TCP only: UDP and the rest of the internet families too
        seccomp.restrict_thread()


# What a prompt from a client with no_new_privs gets: writes to the temp dir only, no network.
CONFINED_CLIENT_WARNING = (
    "this prompt comes from a process that runs with no_new_privs, as every process of a sandboxed turn "
    "does: its turn runs read-only with no network, so that a sandboxed command cannot start a turn with "
    "more rights than its own. Run mm from your own terminal for the agent file's sandbox"
)


# What else such a client is not given: no process the agent file names is started for it unconfined.
CONFINED_CLIENT_MCP = (
    "MCP servers are not started for a process that runs with no_new_privs, as every process of a sandboxed "
    "turn does: a stdio server runs with its own sandbox (off by default), so a sandboxed command that wrote "
    "one into mm.yaml would start it unconfined. Run mm from your own terminal for the MCP tools"
)


def confined_refusal(doing: str) -> str:
    """Why a client with no_new_privs may not do *doing* ("answer this ask", "stop the daemon") to a session
    such a client did not start, or to the daemon (mmd.server.daemon.Daemon.refuse_confined)."""
    return (
        f"this client runs with no_new_privs, as every process of a sandboxed turn does, and may not {doing}: "
        "a sandboxed command acts only on the sessions such a command started, never on yours or the daemon "
        "(else it could allow what its own turn asks of you). Do it from your own terminal"
    )


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


__all__ = [
    "CONFINED_CLIENT_MCP",
    "CONFINED_CLIENT_WARNING",
    "DEFAULT_MODE",
    "MODES",
    "PRETEND_VAR",
    "Mode",
    "Sandbox",
    "Support",
    "confine_thread",
    "confined_refusal",
    "support",
    "unavailable_reason",
]
