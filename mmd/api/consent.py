"""The ``consent.*`` methods: answer an ask, list and revoke ledger rules."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from .. import sandbox
from ..rpc import RPCError
from ..rpc.methods import ConsentAnswer, ConsentList, ConsentRevoke
from ..rpc.results import ConsentRule, ConsentRules, Done, Revoked

if TYPE_CHECKING:
    from ..server.connection import Connection
    from ..server.daemon import Daemon


async def answer(daemon: Daemon, conn: Connection, p: ConsentAnswer) -> Done:
    session = daemon.session(p.session_id)
    # A sandboxed command answers only the asks of a turn it started itself (read-only, no network, as
    # every turn of such a client is): never one that a person's client started, its own turn's included.
    if not session.confined_turn and sandbox.no_new_privs(conn.peer_pid):
        raise RPCError("confined_client", sandbox.CONFINED_CLIENT_ANSWER)
    session.answer_consent(conn, p)
    return Done()


async def list_(daemon: Daemon, conn: Connection, p: ConsentList) -> ConsentRules:
    rows = daemon.store.list_consents(project=p.cwd)
    return ConsentRules(rules=msgspec.convert(rows, list[ConsentRule], from_attributes=True))


async def revoke(daemon: Daemon, conn: Connection, p: ConsentRevoke) -> Revoked:
    if not daemon.store.revoke_consent(p.id):
        raise RPCError("no_rule", f"no consent rule {p.id}; `mm consent list` shows the rules and their ids")
    return Revoked(revoked=p.id)


METHODS = {
    "consent.answer": (ConsentAnswer, answer),
    "consent.list": (ConsentList, list_),
    "consent.revoke": (ConsentRevoke, revoke),
}
