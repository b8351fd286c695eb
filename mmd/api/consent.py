"""The ``consent.*`` methods: answer an ask, list and revoke ledger rules."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from ..rpc import RPCError
from ..rpc.methods import ConsentAnswer, ConsentList, ConsentRevoke

if TYPE_CHECKING:
    from ..server.connection import Connection
    from ..server.daemon import Daemon


async def answer(daemon: Daemon, conn: Connection, p: ConsentAnswer) -> dict[str, Any]:
    daemon.session(p.session_id).answer_consent(conn, p)
    return {}


async def list_(daemon: Daemon, conn: Connection, p: ConsentList) -> dict[str, Any]:
    return {"rules": [msgspec.structs.asdict(r) for r in daemon.store.list_consents(project=p.cwd)]}


async def revoke(daemon: Daemon, conn: Connection, p: ConsentRevoke) -> dict[str, Any]:
    if not daemon.store.revoke_consent(p.id):
        raise RPCError("no_rule", f"no consent rule {p.id}; `mm consent list` shows the rules and their ids")
    return {"revoked": p.id}


METHODS = {
    "consent.answer": (ConsentAnswer, answer),
    "consent.list": (ConsentList, list_),
    "consent.revoke": (ConsentRevoke, revoke),
}
