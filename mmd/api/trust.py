"""The ``trust.*`` methods: which of a project's files that name commands you trust (mmd/config/trust.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from ..config.loader import MAX_FILE_BYTES, text_digest
from ..rpc import RPCError
from ..rpc.methods import Empty, TrustAdd, TrustCheck, TrustForget
from ..rpc.results import Done, Forgotten, TrustChecked, TrustEntry, TrustListed, UntrustedFile
from ..turn import plan
from ..untrusted import open_regular, read_at_most

# Why a client with no_new_privs (a sandboxed command, most likely) may not trust a file.
CONFINED_TRUST = (
    "this client runs with no_new_privs, as every process of a sandboxed turn does, and may not trust a "
    "project's files: a sandboxed command may write them, and trusting what it wrote would undo the trust. "
    "Run `mm trust` from your own terminal"
)

if TYPE_CHECKING:
    from ..server.connection import Connection
    from ..server.daemon import Daemon


async def check(daemon: Daemon, conn: Connection, p: TrustCheck) -> TrustChecked:
    """The files a prompt with the same params would go without (in a continued session's folder, with its
    agent file, as ``Daemon.prompt`` reads them), with what each names and the digest to trust."""
    session = daemon.resumed(p)
    cwd = Path(session.row.cwd if session else p.cwd)
    agent = p.agent or (session.row.agent if session else None)
    trust = daemon.project_trust(conn, cwd, p.agent)
    found = await trio.to_thread.run_sync(plan.untrusted_files, cwd, agent, daemon.config_path, trust)
    return TrustChecked(
        files=[
            UntrustedFile(
                path=u.path, digest=u.digest, powers=u.powers, changed=u.changed, too_long=u.too_long
            )
            for u in found
        ]
    )


async def add(daemon: Daemon, conn: Connection, p: TrustAdd) -> Done:
    """Trust each file as the digest says its text was. A file changed meanwhile stays untrusted: the
    digest is of the text the person was shown."""
    if conn.confined:
        raise RPCError("confined_client", CONFINED_TRUST)
    daemon.store.trust_files([(f.path, f.digest) for f in p.files])
    return Done()


async def list_(daemon: Daemon, conn: Connection, p: Empty) -> TrustListed:
    """Every trusted file, and whether its text is still the one trusted."""
    rows = daemon.store.trusted_rows()
    states = await trio.to_thread.run_sync(lambda: [_state(path, digest) for path, digest, _ in rows])
    return TrustListed(
        files=[
            TrustEntry(path=path, digest=digest, trusted=when, state=state)
            for (path, digest, when), state in zip(rows, states, strict=True)
        ]
    )


async def forget(daemon: Daemon, conn: Connection, p: TrustForget) -> Forgotten:
    """Trust no longer the files named (every file when none is)."""
    return Forgotten(forgotten=daemon.store.forget_trusted(p.paths))


def _state(path: str, digest: str) -> str:
    try:
        with open_regular(Path(path)) as f:
            raw = read_at_most(f, MAX_FILE_BYTES)
    except FileNotFoundError:
        return "gone"
    except OSError:  # a folder, a FIFO, no permission: nothing mm would read as the file trusted
        return "changed" if os.path.lexists(path) else "gone"
    return "as trusted" if text_digest(raw.decode("utf-8", errors="replace")) == digest else "changed"


METHODS = {
    "trust.check": (TrustCheck, check),
    "trust.add": (TrustAdd, add),
    "trust.list": (Empty, list_),
    "trust.forget": (TrustForget, forget),
}
