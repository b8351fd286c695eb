"""The ``session.*`` methods: prompt, cancel, subscribe (replay), list, show, diff, undo."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import msgspec

from .. import undo as checkpoints
from ..rpc import RPCError
from ..rpc.methods import Compact, Diff, ListSessions, Prompt, SessionRef, ShowSession, Subscribe, Undo
from ..rpc.results import (
    Cancelled,
    ChatMessage,
    Checkpoint,
    Compacted,
    Done,
    Prompted,
    SessionDiff,
    SessionInfo,
    SessionList,
    SessionShow,
    Subscribed,
    TurnEnding,
    Undone,
)
from ..turn.session import UNDO

if TYPE_CHECKING:
    from ..server.connection import Connection
    from ..server.daemon import Daemon


async def prompt(daemon: Daemon, conn: Connection, p: Prompt) -> Prompted:
    session = await daemon.prompt(conn, p)
    # The turn was only scheduled: none of its events is stored yet.
    return Prompted(session_id=session.id, after_seq=daemon.store.last_seq(session.id))


async def cancel(daemon: Daemon, conn: Connection, p: SessionRef) -> Cancelled:
    session = daemon.session(p.session_id)
    daemon.refuse_confined(conn, session.id, "cancel this session's turn")
    return Cancelled(cancelled=session.cancel())


async def compact(daemon: Daemon, conn: Connection, p: Compact) -> Compacted:
    """Summarise the session's conversation into one note with its model (between turns)."""
    session_id, done = await daemon.compact(conn, p.session_id, p.model)
    return Compacted(session_id=session_id, **{k: done[k] for k in Compacted.__struct_fields__[1:]})


# Sessions one client may follow at once: each it follows stays loaded (its messages in memory) until it
# lets go, so a client that subscribed to every session held the whole store.
MAX_SUBSCRIPTIONS = 64


async def subscribe(daemon: Daemon, conn: Connection, p: Subscribe) -> Subscribed:
    """Attach to a session: the stored events after ``after_seq`` come back, new ones follow as notifications."""
    row, _ = daemon.find_session(p.session_id)
    if row.id not in conn.subscriptions and len(conn.subscriptions) >= MAX_SUBSCRIPTIONS:
        raise RPCError(
            "too_many_subscriptions",
            f"this client follows {len(conn.subscriptions)} sessions, the most one client may: let go of one "
            "(session.unsubscribe) first, or open another connection",
        )
    session = daemon.session(row.id)
    # A sandboxed command that attaches to your session is not one that can answer its asks (consent.answer
    # refuses it): a headless turn's ask then goes to a client that can, or is refused at once.
    interactive = p.interactive and not daemon.confined_out_of(conn, session.id)
    session.subscribe(conn, interactive=interactive)
    events = daemon.store.events_after(session.id, p.after_seq)
    pending = [
        e.data for e in events if e.kind == "consent_needed" and e.data["request_id"] in session.asks.pending
    ]
    return Subscribed(session_id=session.id, events=events, running=session.running, pending_consent=pending)


async def unsubscribe(daemon: Daemon, conn: Connection, p: SessionRef) -> Done:
    _, loaded = daemon.find_session(p.session_id)
    if loaded is not None:  # not loaded: no client follows it
        loaded.unsubscribe(conn)
    return Done()


async def list_(daemon: Daemon, conn: Connection, p: ListSessions) -> SessionList:
    rows = daemon.store.list_sessions(limit=p.limit, cwd=p.cwd)
    return SessionList(sessions=[_info(r, _running(daemon, r.id), _last_status(daemon, r.id)) for r in rows])


async def show(daemon: Daemon, conn: Connection, p: ShowSession) -> SessionShow:
    row, loaded = daemon.find_session(p.session_id)  # read from the store: not loaded for this
    turns = [
        TurnEnding(status=t.get("status"), error=t.get("error")) for t in daemon.store.turn_endings(row.id)
    ]
    out = SessionShow(
        session=_info(row, loaded is not None and loaded.running, turns[-1].status if turns else None),
        messages=msgspec.convert(daemon.store.messages(row.id), list[ChatMessage], from_attributes=True),
        turns=turns,
    )
    if p.events:  # a page: a long session's events pass the 16 MiB a client reads in one frame
        out.events, out.more = daemon.store.events_page(row.id, p.after_seq)
    return out


async def diff(daemon: Daemon, conn: Connection, p: Diff) -> SessionDiff:
    """What the session's steps (or one of them) changed in its working tree."""
    row, _ = daemon.find_session(p.session_id)
    with _answered():
        done = await checkpoints.diff(daemon.store, daemon.state_dir / "snapshots", row.id, p.step)
    steps = [
        Checkpoint(**{k: getattr(s, k) for k in Checkpoint.__struct_fields__}) for s in done.pop("steps")
    ]
    return SessionDiff(session_id=row.id, steps=steps, **done)


async def undo(daemon: Daemon, conn: Connection, p: Undo) -> Undone:
    """Restore the files of the session's steps from ``to_step`` on; no turn may run meanwhile."""
    session = daemon.session(p.session_id)
    daemon.refuse_confined(conn, session.id, "undo this session's steps")
    if session.running:
        raise session.busy_error("undo")
    session.start(UNDO)
    try:
        with _answered():
            row, first = await checkpoints.undo(
                daemon.store, daemon.state_dir / "snapshots", session.id, p.to_step, p.force
            )
    finally:
        session.abort_start()
    if row is None:
        return Undone(session_id=session.id, step=None, undone=first, files=[])
    return Undone(session_id=session.id, step=row.step, undone=first, files=row.files)


@contextlib.contextmanager
def _answered() -> Iterator[None]:
    """An undo or diff that cannot be done is an answer with its code, not a daemon error."""
    try:
        yield
    except checkpoints.UndoError as exc:
        raise RPCError(exc.code, str(exc)) from None
    except (checkpoints.SnapshotError, OSError) as exc:
        raise RPCError(
            "snapshot_failed", f"{exc}; nothing more was changed: fix that and try again"
        ) from None


def _info(row: Any, running: bool, last_status: str | None) -> SessionInfo:
    """A stored session row (mmd.store.SessionRow) with what only the daemon knows."""
    return SessionInfo(**msgspec.structs.asdict(row), running=running, last_status=last_status)


def _last_status(daemon: Daemon, session_id: str) -> str | None:
    # How the newest turn that ended ended: "interrupted" when the daemon died in it.
    ended = daemon.store.turn_endings(session_id, last=True)
    return ended[0].get("status") if ended else None


def _running(daemon: Daemon, session_id: str) -> bool:
    session = daemon.sessions.get(session_id)
    return bool(session and session.running)


METHODS = {
    "session.prompt": (Prompt, prompt),
    "session.cancel": (SessionRef, cancel),
    "session.compact": (Compact, compact),
    "session.subscribe": (Subscribe, subscribe),
    "session.unsubscribe": (SessionRef, unsubscribe),
    "session.list": (ListSessions, list_),
    "session.show": (ShowSession, show),
    "session.diff": (Diff, diff),
    "session.undo": (Undo, undo),
}
