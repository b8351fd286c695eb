"""systemd's two daemon protocols, spoken without libsystemd.

Socket activation: systemd binds ``mmd.socket`` itself and starts ``mmd`` on
the first connection, passing the listening socket as file descriptor 3 with
``LISTEN_FDS=1`` and ``LISTEN_PID`` set to the daemon's pid (sd_listen_fds(3)).

Readiness: a ``Type=notify`` service tells systemd it is ready by sending the
datagram ``READY=1`` to the Unix socket named by ``NOTIFY_SOCKET`` (a path, or
an abstract address when it starts with ``@``), and ``STOPPING=1`` when it
begins to shut down (sd_notify(3)).

Both read their variables once and remove them from ``os.environ``, so the
tools mmd runs do not inherit them. Standard library only.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import MutableMapping

log = logging.getLogger("mmd.sdnotify")

# The first file descriptor systemd passes (SD_LISTEN_FDS_START).
LISTEN_FDS_START = 3
_LISTEN_VARS = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")


class ActivationError(Exception):
    """systemd passed something mmd cannot listen on; the message says what to fix."""


def activated_socket(environ: MutableMapping[str, str] | None = None) -> socket.socket | None:
    """The listening socket systemd passed to this process, or None.

    None unless ``LISTEN_PID`` is this process and ``LISTEN_FDS`` is at least 1.
    The ``LISTEN_*`` variables are removed either way. The descriptor is made
    close-on-exec so that child processes do not hold the socket open.

    Errors:
        ActivationError: more than one socket, or not a listening Unix stream socket.
    """
    env = os.environ if environ is None else environ
    pid, count = env.get("LISTEN_PID", ""), env.get("LISTEN_FDS", "")
    for var in _LISTEN_VARS:
        env.pop(var, None)
    if not (pid.isdigit() and count.isdigit()) or int(pid) != os.getpid() or int(count) < 1:
        return None
    if int(count) > 1:
        raise ActivationError(
            f"systemd passed {count} sockets but mmd listens on one: "
            "give mmd.socket a single ListenStream= line"
        )
    try:
        sock = socket.socket(fileno=LISTEN_FDS_START)
    except OSError as exc:
        raise ActivationError(f"LISTEN_FDS=1 but file descriptor 3 is not a socket ({exc})") from None
    listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM or not listening:
        sock.detach()
        raise ActivationError(
            "the socket systemd passed is not a listening Unix stream socket: "
            "use ListenStream=%t/mm/mmd.sock in mmd.socket"
        )
    sock.set_inheritable(False)
    return sock


def socket_address(sock: socket.socket) -> str | None:
    """The filesystem path a Unix socket is bound to, or None (abstract or unbound)."""
    name = sock.getsockname()
    if isinstance(name, str) and name and not name.startswith("\0"):
        return name
    return None


class Notifier:
    """Sends state changes to systemd, or does nothing when not run by systemd."""

    def __init__(self, address: str | None) -> None:
        self.address = address

    @classmethod
    def from_environ(cls, environ: MutableMapping[str, str] | None = None) -> Notifier:
        """Take ``NOTIFY_SOCKET`` out of the environment (children must not notify for mmd)."""
        env = os.environ if environ is None else environ
        address = env.pop("NOTIFY_SOCKET", None)
        return cls(address or None)

    def notify(self, *assignments: str) -> bool:
        """Send ``VAR=value`` lines as one datagram; True when it was sent.

        A failure is logged, never raised: systemd's bookkeeping must not stop the daemon.
        """
        if not self.address:
            return False
        address = self.address
        if address.startswith("@"):
            address = "\0" + address[1:]
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.connect(address)
                sock.sendall("\n".join(assignments).encode())
        except OSError as exc:
            log.warning("could not notify systemd at %s: %s", self.address, exc)
            return False
        return True
