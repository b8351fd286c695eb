"""``handshake`` and the ``daemon.*`` methods."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from .. import __version__, sandbox
from ..rpc import PROTOCOL_VERSION, RPCError
from ..rpc.methods import Empty, Handshake
from ..rpc.results import DaemonStatus, HandshakeResult, Stopping

if TYPE_CHECKING:
    from ..server.connection import Connection
    from ..server.daemon import Daemon

# What this daemon can do beyond the protocol version, for clients to test.
CAPABILITIES = ["events", "consent", "replay"]


async def handshake(daemon: Daemon, conn: Connection, p: Handshake) -> HandshakeResult:
    """Check the client's protocol version. The connection is handshaken once this answer is sent."""
    if p.protocol != PROTOCOL_VERSION:
        raise RPCError(
            "protocol_mismatch",
            f"this client speaks protocol {p.protocol} but the running daemon (mm {__version__}, pid {os.getpid()}) "
            f"speaks {PROTOCOL_VERSION}: restart the daemon with `mm daemon stop`, then run your command again",
        )
    conn.client = f"{p.client} {p.version}".strip()
    return HandshakeResult(
        protocol=PROTOCOL_VERSION, daemon_version=__version__, pid=os.getpid(), capabilities=CAPABILITIES
    )


async def status(daemon: Daemon, conn: Connection, p: Empty) -> DaemonStatus:
    return DaemonStatus(
        pid=os.getpid(),
        version=__version__,
        protocol=PROTOCOL_VERSION,
        socket=str(daemon.socket_path),
        store=str(daemon.store_path),
        log=str(daemon.log_path),
        uptime=round(time.monotonic() - daemon.started, 3),
        clients=len(daemon.connections),
        sessions_loaded=len(daemon.sessions),
        turns_running=sum(1 for s in daemon.sessions.values() if s.running),
        sandbox=sandbox.support().label,
    )


async def stop(daemon: Daemon, conn: Connection, p: Empty) -> Stopping:
    daemon.refuse_confined(conn, None, "stop the daemon")
    daemon.request_stop(f"asked by {conn.client} (pid {conn.peer_pid})")
    return Stopping(stopping=True, pid=os.getpid())


METHODS = {
    "handshake": (Handshake, handshake),
    "daemon.status": (Empty, status),
    "daemon.stop": (Empty, stop),
}
