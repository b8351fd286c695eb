"""The ``consent.*`` methods: answer an ask, list and revoke ledger rules."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from ..rpc import RPCError
from ..rpc.methods import ConsentAnswer, ConsentList, ConsentRevoke
from ..rpc.results import ConsentRule, ConsentRules, Done, Revoked

if TYPE_CHECKING:
    from ..server.connection import Connection
    from ..server.daemon import Daemon


async def answer(daemon: Daemon, conn: Connection, p: ConsentAnswer) -> Done:
    session = daemon.session(p.session_id)
    # Never the ask a person's turn put, the one of the turn that runs the answering command included.
    daemon.refuse_confined(conn, session.id, "answer an ask of this session")
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
